"""Fine-tuning task kinds: GLUE, SQuAD v1.1/v2.0 (and CMRC2018), CoNLL NER, generic classification, multi-label,
multiple choice (C3).

The entry point is the registry (registry.py; the contract of a task object is base.py's):

    from bert_jax.finetune.tasks import get_task
    task = get_task("mnli").prepare(data_dir)
    train = task.read("train", data_dir)                     # or use_tfds=True, tfds_data_dir=...
    features = task.featurize(train, tokenizer, max_seq_length=128, is_training=True)

Modules: base (the Task contract and shared loss pieces), common (errors, skip reports, tokenisation with
char offsets, packing), one module per kind holding its reader and Task subclass (classification, glue,
squad, ner, multilabel, multiple_choice, c3), registry. TensorFlow/TFDS are imported only inside the TFDS
readers.
"""

from bert_jax.finetune.tasks.base import Task
from bert_jax.finetune.tasks.common import ExampleSet, IGNORE_INDEX, SkipReport, TaskDataError
from bert_jax.finetune.tasks.registry import TASKS, get_task, task_class, task_names

__all__ = ["ExampleSet", "IGNORE_INDEX", "SkipReport", "TaskDataError", "TASKS", "Task", "get_task",
           "task_class", "task_names"]
