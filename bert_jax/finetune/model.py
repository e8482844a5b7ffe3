"""Fine-tuning model side: the encoder config, the task head, the task losses and the prediction step.
No TensorFlow. State creation and the train step are training.train_step's, with `task_loss` as the loss:

    pre = load_pretrained(init_checkpoint)                       # bert_jax.pretrained (zoo name or dir)
    bert_cfg = build_bert_config(config, vocab_size, pre)
    model = build_model(task, bert_cfg, classifier_dropout)
    params, p_shard = ts.init_params(config, model, mesh)        # random, created on the mesh
    state, shardings = ts.create_train_state(config, model, mesh, tx, params=merged)
    step = ts.make_train_step(config, model, tx, mesh, shardings, loss_fn=task_loss(model, task))
    predict = make_predict_step(model, task, mesh, rules, p_shard)   # (params, batch) -> outputs, sums

The head, the loss weights and sums are the task's own (tasks/base.py): nothing here depends on the kind.
"""

from __future__ import annotations

import weakref
from typing import Dict, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from bert_jax.finetune.tasks import Task
from bert_jax.models import BertConfig
from bert_jax.models.config import SIZES
from bert_jax.pretrained import Pretrained
from bert_jax.training import sharding
from bert_jax.training.train_step import LossFn, StepFn, compute_dtype

# Peak fine-tuning learning rate by model size. BERT paper (base/large): best of 5e-5, 4e-5, 3e-5, 2e-5.
# Google's 24 small BERTs were tuned over 3e-4, 1e-4, 5e-5, 3e-5; the small ones land at the high end.
DEFAULT_LEARNING_RATES = {"tiny": 3e-4, "mini": 2e-4, "small": 1e-4, "medium": 5e-5, "base": 3e-5,
                          "large": 2e-5}
HEAD_NAMES = ("classifier", "qa_outputs", "crf")


def size_name(cfg: BertConfig) -> str:
  """The size-table name of an architecture, or the nearest one by hidden size and depth."""
  for name, (layers, hidden) in SIZES.items():
    if (cfg.num_hidden_layers, cfg.hidden_size) == (layers, hidden):
      return name
  h, l = cfg.hidden_size, cfg.num_hidden_layers
  if h <= 128:
    return "tiny"
  if h <= 256:
    return "mini"
  if h <= 512:
    return "small" if l <= 4 else "medium"
  return "base" if h <= 768 else "large"


def default_learning_rate(cfg: BertConfig) -> float:
  return DEFAULT_LEARNING_RATES[size_name(cfg)]


def build_bert_config(config, vocab_size: int, init: Optional[Pretrained] = None) -> BertConfig:
  """The encoder config: the checkpoint's architecture (or the size table) + the run's runtime fields."""
  m = config.model
  runtime = dict(hidden_dropout_prob=float(m.hidden_dropout_prob),
                 attention_probs_dropout_prob=float(m.attention_probs_dropout_prob),
                 dtype=compute_dtype(m.dtype), attention_impl=m.attention_impl, scan_layers=bool(m.scan_layers),
                 remat_policy=m.remat_policy)
  if init is not None:
    ckpt_vocab = init.config.vocab_size
    if vocab_size != ckpt_vocab:
      raise ValueError(f"vocab size mismatch: the vocab file has {vocab_size} tokens but the checkpoint "
                       f"{init.directory} was trained with vocab_size={ckpt_vocab}; use the checkpoint's own "
                       "vocab.txt (leave vocab_file empty)")
    return init.config.replace(**runtime)
  arch = {k: int(m[k]) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "intermediate_size") if int(m[k]) > 0}
  if "hidden_size" in arch and "num_attention_heads" not in arch:
    arch["num_attention_heads"] = max(1, arch["hidden_size"] // 64)
  if "hidden_size" in arch and "intermediate_size" not in arch:
    arch["intermediate_size"] = 4 * arch["hidden_size"]
  return BertConfig.from_size(m.size, vocab_size=int(vocab_size),
                              max_position_embeddings=int(m.max_position_embeddings), **arch, **runtime)


def build_model(task: Task, bert_cfg: BertConfig, classifier_dropout: float = -1.0) -> nn.Module:
  """The task's head on the encoder; the task carries the head options (`pooling` for sentence-level heads,
  `crf` and `scheme` for tagging; data.make_task sets them from the config, Predictor from
  finetune_info.json). classifier_dropout < 0: the encoder's hidden dropout."""
  rate = None if classifier_dropout is None or classifier_dropout < 0 else float(classifier_dropout)
  model = task.build_head(bert_cfg, rate)
  for key in [k for k, (ref, _) in _MODEL_TASKS.items() if ref() is None]:
    del _MODEL_TASKS[key]
  _MODEL_TASKS[id(model)] = (weakref.ref(model), task)
  return model


# --------------------------------------------------------------------------------------------------------
# Task losses and the prediction step.
# --------------------------------------------------------------------------------------------------------
def apply_model(model, params, batch, rng=None) -> dict:
  """The head's outputs on a batch (model inputs + the head's extra inputs); dropout on when `rng` is given."""
  extra = {k: batch[k] for k in getattr(model, "extra_input_keys", ())}
  return model.apply({"params": params}, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                     deterministic=rng is None, rngs=None if rng is None else {"dropout": rng}, **extra)


# Head outputs that are not per-example rows (CRF scores): the loss reads them, prediction drops them.
_NON_ROW_OUTPUTS = ("pooled_output", "crf_transitions", "crf_start", "crf_end")


def row_outputs(outputs: dict) -> dict:
  """The per-example outputs of a head (what task.predict reads), without pooled vectors and CRF scores."""
  return {k: v for k, v in outputs.items() if k not in _NON_ROW_OUTPUTS}


# Shim while finetune/loop.py still passes `task.kind` (a string) or None to task_loss / make_predict_step:
# the task object given to build_model for that model stands in. Remove once every caller passes the task.
_MODEL_TASKS: Dict[int, tuple] = {}


def _resolve_task(model, task: Union[Task, str, None]) -> Optional[Task]:
  if task is None or isinstance(task, Task):
    return task
  ref, built = _MODEL_TASKS.get(id(model), (None, None))
  if ref is None or ref() is not model or built.kind != task:
    raise ValueError(f"task kind {task!r} given for a model that build_model did not build for such a task; "
                     "pass the task object")
  return built


def task_loss(model, task: Task) -> LossFn:
  """The fine-tuning objective for training.train_step's step factory: the weighted mean task loss of the
  full batch (its weight sum is the global denominator, so gradient accumulation is exact)."""
  task = _resolve_task(model, task)

  def denominators(batch):
    return {"weight": jnp.maximum(jnp.sum(task.loss_weights(batch)), 1e-6)}

  def forward(params, batch, rng, denoms):
    sums = task.loss_sums(apply_model(model, params, batch, rng), batch)
    return sums["task_loss_sum"] / denoms["weight"], sums

  return LossFn(denominators, forward)


def make_predict_step(model, task: Optional[Task], mesh, rules, p_shard) -> StepFn:
  """predict(params, batch) -> {"outputs": the head's per-example outputs (logits / start_logits, end_logits),
  float32, "sums": the task's loss sums as in training when task.eval_loss (the batch then carries the label
  keys: task.eval_keys), else {}}; replicated."""
  if task is None:   # shim: loop.py passes None for a task without an eval loss
    with_loss = False
  else:
    task = _resolve_task(model, task)
    with_loss = task.eval_loss

  def predict_step(params, batch):
    full = apply_model(model, params, batch)
    return {"outputs": row_outputs(full), "sums": task.loss_sums(full, batch) if with_loss else {}}

  jitted = jax.jit(predict_step, in_shardings=(p_shard, sharding.batch_sharding(mesh, rules)),
                   out_shardings=sharding.replicated(mesh))
  return StepFn(jitted, mesh, rules)


def to_host(tree):
  """Device arrays -> host numpy. Multi-host: gathers the global value (replicated or sharded) on every host."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  return multihost_utils.process_allgather(tree, tiled=True)


def to_global_batch(batch: Dict[str, np.ndarray], mesh, rules):
  """Single process: the host arrays (jit shards them). Multi-host: every host holds the same global
  batch and contributes the rows of its devices."""
  if jax.process_count() == 1:
    return batch
  s = sharding.batch_sharding(mesh, rules)
  out = {}
  for k, v in batch.items():
    n = v.shape[0] // jax.process_count()
    i = jax.process_index()
    out[k] = jax.make_array_from_process_local_data(s, v[i * n:(i + 1) * n], v.shape)
  return out
