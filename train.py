r"""Pre-trains a BERT-family model (any size, CPU to TPU pod slice); resumes automatically from --workdir.

  python train.py --config=configs/pretrain.py:size=tiny,runlocal --workdir=/tmp/bert_tiny \
      --config.data.input_files=corpus.txt --config.data.vocab_file=vocab.txt
  python train.py --config=configs/pretrain.py:size=base,preset=bert_paper --workdir=gs://bucket/bert_base \
      --config.data.input_files='gs://bucket/data/train-*.tfrecord' --config.data.vocab_file=vocab.txt

The work directory ends up self-describing (plan.json, config.json, model_config.json, vocab.txt, checkpoints/,
metrics.jsonl, eval_metrics.jsonl, tensorboard/, plots/): pass it as `init_checkpoint` to finetune.py.
Multi-host: see launch/ (TPU VM pod slices are detected automatically; GPU clusters set
--config.distributed.enable=true and the coordinator flags). Every config field is documented in
configs/pretrain.py; the loop is bert_jax/pretrain/loop.py.
"""

import logging
import os
import signal

# A SIGTERM while the libraries load (seconds) is noted here, not fatal: the run then stops with an
# `interrupted:` line (exit 143), as one later in start-up does (bert_jax/pretrain/loop.py). Multi-host,
# jax.distributed's own SIGTERM handler (its preemption sync point) replaces this one when it starts.
# A SIGINT (Ctrl-C) is noted only until the loop's module is imported (nothing written yet, no jax.distributed):
# then main restores Python's handler and stops with one `interrupted:` line (exit 130). It was a
# KeyboardInterrupt traceback from whichever import it hit, or, raised in a garbage-collector callback, a
# traceback and the run went on. A handler noting it any longer would swallow Ctrl-C on a multi-host run, where
# nothing reads it. A second Ctrl-C raises KeyboardInterrupt at once; an ignored SIGINT (a background job) stays
# ignored.
EARLY_SIGNALS = []
EARLY_SIGINT = []


def _note_early_sigint(signum, frame):
  del frame
  EARLY_SIGINT.append(signum)
  signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
  EARLY_HANDLERS = {signal.SIGTERM: signal.signal(signal.SIGTERM,
                                                  lambda signum, frame: EARLY_SIGNALS.append(signum))}
  if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    EARLY_HANDLERS[signal.SIGINT] = signal.signal(signal.SIGINT, _note_early_sigint)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from bert_jax import cli, errors  # noqa: E402

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Pre-training config, e.g. configs/pretrain.py:size=base.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Work directory: config, vocab, checkpoints, metrics (resumed if present).")
flags.mark_flags_as_required(["config", "workdir"])


# Top-level fields every pre-training config has (configs/pretrain.py); the loop reads them unconditionally.
REQUIRED_FIELDS = ("batch_size", "num_train_steps", "targets", "model", "data", "optimizer", "mesh", "distributed")


def check_is_pretrain_config(config, filename: str) -> None:
  """UserError when --config is not a pre-training config (e.g. configs/finetune.py): it was an
  AttributeError traceback from deep in the loop."""
  missing = [f for f in REQUIRED_FIELDS if f not in config]
  if missing:
    raise errors.UserError(f"--config={filename}: not a pre-training config, it lacks {', '.join(missing)}; "
                           "train.py takes configs/pretrain.py (a fine-tuning config goes to finetune.py)")


def main(argv):
  if len(argv) > 1:
    raise errors.UserError(f"unexpected arguments: {argv[1:]} (flags are --name=value)")
  logging.getLogger().setLevel(logging.INFO)   # the plan and progress; the libraries' lines: bert_jax/logs.py
  check_is_pretrain_config(FLAGS.config, config_flags.get_config_filename(FLAGS["config"]))
  # lazy: --help and flag errors answer before JAX and TensorFlow load (seconds)
  from bert_jax.pretrain import loop as pretrain  # pylint: disable=g-import-not-at-top
  if signal.SIGINT in globals().get("EARLY_HANDLERS", {}):   # Ctrl-C acts as usual again (see the top)
    signal.signal(signal.SIGINT, EARLY_HANDLERS.pop(signal.SIGINT))
  if EARLY_SIGINT:
    raise errors.Interrupted(signal.SIGINT, 0, "stopped by SIGINT while starting (nothing written)")
  try:
    result = pretrain.train_and_evaluate(FLAGS.config, FLAGS.workdir,
                                        stop_requested=lambda: EARLY_SIGNALS[0] if EARLY_SIGNALS else None)
  finally:   # the run's own handlers are gone: SIGTERM acts as usual again
    for signum, handler in globals().get("EARLY_HANDLERS", {}).items():
      signal.signal(signum, handler)
  shown = {k: v for k, v in sorted(result.items()) if isinstance(v, (int, float)) and k != "time"}
  print("final: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in shown.items()))
  print(closing_line(FLAGS.workdir, result.get("step")))


def closing_line(workdir: str, step) -> str:
  """`work dir: DIR (checkpoint at step N, ...)`: where the run's files are and what a user opens next (the
  last line was a metrics line, while finetune.py ends with `results: ...`)."""
  parts = []
  if os.path.isdir(os.path.join(workdir, "checkpoints")):
    parts.append(f"checkpoints/ (step {step}; fine-tune it: finetune.py --config.init_checkpoint={workdir})"
                 if step is not None else "checkpoints/")
  parts += [name for name in ("metrics.jsonl", "eval_metrics.jsonl", "plots/loss_curve.png", "plan.json")
            if os.path.exists(os.path.join(workdir, name))]
  return f"work dir: {workdir}" + (f": {', '.join(parts)}" if parts else "")


if __name__ == "__main__":
  cli.run_main(main)   # error: ... lines (exit 2) for user errors; --verbose, --strict
