"""Fine-tuning task readers: GLUE, SQuAD v1.1/v2.0 (and CMRC2018), CoNLL NER, generic classification.

The entry point is the registry (see registry.py for the full contract):

    from bert_jax.finetune.tasks import get_task
    task = get_task("mnli").prepare(data_dir)
    train = task.read("train", data_dir)                     # or use_tfds=True, tfds_data_dir=...
    features = task.featurize(train, tokenizer, max_seq_length=128, is_training=True)

Modules: common (errors, skip reports, tokenisation with char offsets, packing), classification, glue, squad,
ner, registry. TensorFlow/TFDS are imported only inside the TFDS readers.
"""

from bert_jax.finetune.tasks.common import ExampleSet, IGNORE_INDEX, SkipReport, TaskDataError
from bert_jax.finetune.tasks.registry import TASK_NAMES, Task, get_task

__all__ = ["ExampleSet", "IGNORE_INDEX", "SkipReport", "TaskDataError", "TASK_NAMES", "Task", "get_task"]
