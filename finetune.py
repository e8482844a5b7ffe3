r"""Fine-tunes a BERT encoder on GLUE, SQuAD v1.1/v2.0, CoNLL NER or a generic classification set.

  python finetune.py --config=configs/finetune.py:task=mrpc --workdir=/tmp/ft_mrpc \
      --config.data_dir=glue_data --config.init_checkpoint=/tmp/bert_base_converted
  python finetune.py --config=configs/finetune.py:task=squad_v1 --workdir=/tmp/ft_squad \
      --config.data_dir=squad --config.init_checkpoint=bert-base-uncased
  python finetune.py --config=configs/finetune.py:task=classification,size=mini --workdir=/tmp/ft_snow \
      --config.data_dir=/tmp/snow/sentiment --config.vocab_file=/tmp/snow/vocab.txt

Writes DIR/eval_results.json, prediction files, metrics.jsonl, tensorboard/, curves.png and best_checkpoint/
(see bert_jax/finetune/loop.py). Every config field is documented in configs/finetune.py.
"""

import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from bert_jax import cli, errors  # noqa: E402

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Fine-tuning config, e.g. configs/finetune.py:task=mrpc.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Output directory: results, predictions, metrics, best checkpoint.")
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first (multi-host runs).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise errors.UserError(f"unexpected arguments: {argv[1:]} (flags are --name=value)")
  # lazy: --help and flag errors answer before JAX loads
  import jax  # pylint: disable=g-import-not-at-top
  if FLAGS.distributed:
    jax.distributed.initialize()
  # lazy: the plan's and the loop's imports load after the flags parse
  from bert_jax.finetune import loop  # pylint: disable=g-import-not-at-top
  from bert_jax.finetune.plan import resolve_finetune  # pylint: disable=g-import-not-at-top
  logging.getLogger().setLevel(logging.INFO)
  logging.getLogger("bert_jax").debug("JAX devices: %s", jax.devices())   # --verbose (the plan has the mesh)
  plan = resolve_finetune(FLAGS.config, FLAGS.workdir)   # a bad config fails before weights or data are read
  if plan.data.tfds_name:
    # TFDS readers import TensorFlow; keep it off the accelerators JAX uses.
    from bert_jax import lean_imports  # pylint: disable=g-import-not-at-top
    tf = lean_imports.tensorflow()  # lazy: only for TFDS tasks (without Keras: bert_jax/lean_imports.py)
    tf.config.set_visible_devices([], "GPU")
  results = loop.run_plan(plan)
  main_metric = results["main_metric"]
  for split, metrics in results.items():
    if isinstance(metrics, dict) and main_metric in metrics:
      print(f"{results['task']} {split}: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())
                                                         if isinstance(v, float)))
  print(closing_line(FLAGS.workdir, results))


def closing_line(workdir: str, results: dict) -> str:
  """`results: DIR/eval_results.json (also there: ...)`: the files a user opens next, those the run wrote."""
  others = [name for name in ("curves.png", *(results.get("prediction_files") or []), "best_checkpoint/")
            if os.path.exists(os.path.join(workdir, name))]
  return f"results: {os.path.join(workdir, 'eval_results.json')}" + (
      f" (also there: {', '.join(others)})" if others else "")


if __name__ == "__main__":
  cli.run_main(main)   # error: ... lines (exit 2) for user errors; --verbose, --strict
