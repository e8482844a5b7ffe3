"""bert_jax: pre-training and fine-tuning BERT-family encoders in JAX/Flax.

Subpackages (one concern each):
  models/          embeddings, encoders, pre-training targets, task heads, losses (no TensorFlow)
  input_pipeline/  tokenization, pre-training examples, TFRecords, tf.data readers, task readers
  training/        optimizers, mesh sharding, checkpoints, pre-training and fine-tuning loops
  evaluation/      GLUE, SQuAD and NER scorers
  convert/         Google TF and Hugging Face checkpoints in and out, model zoo
"""

__version__ = "0.1.0"
