"""bert_jax: pre-training and fine-tuning BERT-family encoders in JAX/Flax.

Subpackages (one concern each; imports go down this list only, evaluation is a leaf):
  models/          embeddings, encoders, pre-training targets, task heads, losses (no TensorFlow)
  input_pipeline/  tokenization, pre-training examples and masking, TFRecords, tf.data readers
  pretrained/      the params-directory format, the model zoo, load_pretrained(name_or_dir)
  training/        mesh sharding, optimizers, the state/step factory, Orbax checkpoints, metrics, pre-training
  finetune/        task readers + registry, task heads and losses, the fine-tuning loop, the predictor
  evaluation/      GLUE, SQuAD and NER scorers (imports nothing from bert_jax)
  convert/         Google TF and Hugging Face checkpoints in and out, model-fit ranking

Top-level modules every layer may import: errors.py (UserError, Interrupted), input_warnings.py
(warn_input, --strict), cli.py (the entry points' `error:` lines and exit codes).
"""

__version__ = "0.1.0"
