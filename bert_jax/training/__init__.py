"""Pre-training machinery: mesh and sharding, optimizers, train/eval steps, checkpoints, the training loop.

`sharding`, `optimizers`, `train_step`, `flops` and `checkpoints` import JAX/Flax/Optax/Orbax only (no
TensorFlow, no ml_collections), so they run on a GPU machine without TF. Import submodules explicitly:
  from bert_jax.training import sharding, optimizers, train_step
"""
