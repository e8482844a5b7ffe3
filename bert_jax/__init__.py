"""bert_jax: pre-training and fine-tuning BERT-family encoders in JAX/Flax.

Subpackages (one concern each; imports go down this list only, evaluation is a leaf):
  models/          embeddings, encoders, pre-training targets, task heads, losses (no TensorFlow)
  input_pipeline/  tokenization, pre-training examples and masking, TFRecords, tf.data readers
  pretrained/      the params-directory format, the model zoo, load_pretrained(name_or_dir)
  engine/          what every run stands on: mesh sharding, optimizers, the state/step factory, Orbax
                   checkpoints, the metric writer, the work dir and its lock, the compile cache, the host
                   guard, periodic actions and the run's own files
  pretrain/        the pre-training application: its plan, loop and FLOPs (on engine/)
  finetune/        the fine-tuning application: task readers + registry, task heads and losses, the loop,
                   sweeps, the predictor (on engine/; never imports pretrain/)
  evaluation/      GLUE, SQuAD and NER scorers (imports nothing from bert_jax)
  convert/         Google TF and Hugging Face checkpoints in and out, model-fit ranking

Top-level modules every layer may import: errors.py (UserError, Interrupted), input_warnings.py
(warn_input, --strict), lean_imports.py (TensorFlow and tensorboardX without Keras or PyTorch), fileio.py
(local and gs:// files, the one atomic writer), logs.py (log_once), cli.py (the entry points' `error:` lines
and exit codes).
"""

__version__ = "0.1.0"
