"""Checkpoint interop: Google TF1 and Hugging Face BERT in and out, a model zoo, and model-fit ranking.

    python -m bert_jax.convert import-tf --checkpoint=.../bert_model.ckpt --output=DIR
    python -m bert_jax.convert import-hf --input=HF_DIR --output=DIR
    python -m bert_jax.convert export-hf --input=DIR --output=HF_DIR
    python -m bert_jax.convert zoo
    python -m bert_jax.convert rank --checkpoints=DIR1,DIR2 --text=FILE

DIR (a params directory, see `bert_jax.pretrained.params_dir`) holds model_config.json, vocab.txt and params.msgpack and is accepted as
`init_checkpoint`. TensorFlow is imported only inside `google_tf.read_tf_checkpoint`.
"""

from bert_jax.convert.google_tf import import_tf_checkpoint
from bert_jax.convert.hf import export_hf, import_hf
from bert_jax.convert.mapping import ConversionError, ConversionReport
from bert_jax.convert.rank import rank_checkpoints
from bert_jax.pretrained import REGISTRY, ZooError, load_params_dir, resolve, save_params_dir

__all__ = ["import_tf_checkpoint", "import_hf", "export_hf", "load_params_dir", "save_params_dir",
           "ConversionError", "ConversionReport", "rank_checkpoints", "REGISTRY", "ZooError", "resolve"]
