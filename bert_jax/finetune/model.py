"""Fine-tuning model side: the task head on the encoder, the task losses and the prediction step.
No TensorFlow. State creation and the train step are training.train_step's, with `task_loss` as the loss:

    plan = resolve_finetune(config, workdir)                     # finetune/plan.py: plan.model, plan.task
    model = build_model(plan.task, plan.model, plan.classifier_dropout)
    params, p_shard = ts.init_params(plan, model, mesh)          # random, created on the mesh
    state, shardings = ts.create_train_state(plan, model, mesh, tx, params=merged)
    step = ts.make_train_step(plan, model, tx, mesh, shardings, loss_fn=task_loss(model, task))
    predict = make_predict_step(model, task, mesh, rules, p_shard)   # (params, batch) -> outputs, sums

The head, the loss weights and sums are the task's own (tasks/base.py): nothing here depends on the kind.
"""

from __future__ import annotations

from typing import Dict

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from bert_jax.finetune.tasks import Task
from bert_jax.models import BertConfig
from bert_jax.models.config import SIZES
from bert_jax.pretrained import params_dir
from bert_jax.engine import sharding
from bert_jax.engine.train_step import LossFn, StepFn

# Peak fine-tuning learning rate by model size. BERT paper (base/large): best of 5e-5, 4e-5, 3e-5, 2e-5.
# Google's 24 small BERTs were tuned over 3e-4, 1e-4, 5e-5, 3e-5; the small ones land at the high end.
DEFAULT_LEARNING_RATES = {"tiny": 3e-4, "mini": 2e-4, "small": 1e-4, "medium": 5e-5, "base": 3e-5,
                          "large": 2e-5}
HEAD_NAMES = ("classifier", "qa_outputs", "crf")


def init_groups(plan) -> tuple:
  """The top-level parameter groups init_checkpoint fills: the encoder, what the task's head reads of the
  pre-trained model (Task.init_groups: SPLADE's masked-LM head), and with load_head the task heads."""
  return ("bert",) + tuple(plan.task.init_groups()) + (HEAD_NAMES if plan.load_head else ())


def check_init_groups(plan, report: dict, fresh_groups=()):
  """A group the head reads of the pre-trained model that init_checkpoint lacks (or whose converter
  initialised it) is an error: SPLADE on a random MLM head would train from noise without a word."""
  for g in plan.task.init_groups():
    if g in fresh_groups or not any(p.split("/")[0] == g for p in report["loaded"]):
      raise ValueError(f"pooling={plan.task.pooling} reads the pre-trained params['{g}'] (the masked-LM head), "
                       f"but init_checkpoint {plan.init_checkpoint} has " +
                       ("it only randomly initialised at conversion" if g in fresh_groups else "none") +
                       "; start from a pre-training work dir or a checkpoint converted with its MLM head")


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


def reinit_top_layers(params: dict, fresh: dict, k: int, num_layers: int):
  """(params with the pooler and the top `k` encoder layers taken from `fresh` (the random init), the paths
  re-initialised); Zhang et al. 2021's re-initialisation. Both trees host-side, either layer layout."""
  params = params_dir.match_layout(params, False)
  fresh = params_dir.match_layout(fresh, False)
  top = {f"layer_{i}" for i in range(num_layers - k, num_layers)}
  again = []

  def pick(path, old, new):
    parts = [str(getattr(p, "key", p)) for p in path]
    if parts[:1] == ["bert"] and (parts[1:2] == ["pooler"] or (parts[1:2] == ["encoder"] and parts[2] in top)):
      again.append("/".join(parts))
      return new
    return old

  out = jax.tree_util.tree_map_with_path(pick, params, fresh)
  return out, again


def build_model(task: Task, bert_cfg: BertConfig, classifier_dropout: float = -1.0) -> nn.Module:
  """The task's head on the encoder; the task carries the head options (`pooling` for sentence-level heads,
  `crf` and `scheme` for tagging; data.make_task sets them from the config, Predictor from
  finetune_info.json). classifier_dropout < 0: the encoder's hidden dropout."""
  rate = None if classifier_dropout is None or classifier_dropout < 0 else float(classifier_dropout)
  return task.build_head(bert_cfg, rate)


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


def task_loss(model, task: Task) -> LossFn:
  """The fine-tuning objective for training.train_step's step factory: the weighted mean task loss of the
  full batch (its weight sum is the global denominator, so gradient accumulation is exact)."""
  def denominators(batch):
    return {"weight": jnp.maximum(jnp.sum(task.loss_weights(batch)), 1e-6)}

  def forward(params, batch, rng, denoms):
    sums = task.loss_sums(apply_model(model, params, batch, rng), batch)
    return sums["task_loss_sum"] / denoms["weight"], sums

  return LossFn(denominators, forward)


def make_predict_step(model, task: Task, mesh, rules, p_shard) -> StepFn:
  """predict(params, batch) -> {"outputs": the head's per-example outputs (logits / start_logits, end_logits),
  float32, "sums": the task's loss sums as in training when task.eval_loss (the batch then carries the label
  keys: task.eval_keys), else {}}; replicated."""
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
