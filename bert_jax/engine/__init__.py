"""The engine both applications (pretrain/, finetune/) run on.

  sharding        the (data, fsdp, tensor) mesh and logical-to-mesh rules
  optimizers      AdamW / LAMB with BERT's schedules; OptimizerSettings, resolved from config.optimizer
  train_step      the state/step factory (LossFn, micro-batch accumulation, NaN policy); StepSettings
  checkpoints     the Orbax Checkpointer (refuses non-finite parameters) and the params-dir export
  workdir         the work dir's lock, marker and atomic files
  metric_writer   metrics.jsonl + TensorBoard scalars, truncated to a restored step on resume
  compile_cache   JAX's persistent compilation cache
  timing          the clocks: start-up, a logging window's steps/s, a run's training time (first step apart)
  watchdog        the host guard: heartbeats, dead/stuck hosts -> one line and exit 75
  coordinator     host 0's death seen from the other hosts: JAX's abort becomes the guard's line and exit 75
  validation      the device and checkpoint checks both plans share
  periodic        "is it time to log / evaluate / checkpoint / stop" for every loop
  run_files       plan.json, config.json and init_report.json, written one way

`sharding`, `optimizers`, `train_step` and `checkpoints` import JAX/Flax/Optax/Orbax only (no TensorFlow, no
ml_collections), so they run on a GPU machine without TF. Import submodules explicitly:
  from bert_jax.engine import sharding, optimizers, train_step
"""
