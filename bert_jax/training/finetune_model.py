"""Fine-tuning model side: the encoder config, the task head, initialisation from a pre-trained checkpoint,
parameters on the mesh, and the jitted train / eval steps. No TensorFlow.

    init = load_init_checkpoint(path)          # InitCheckpoint(config, params, vocab_file, do_lower_case, source)
    bert_cfg = build_bert_config(config, vocab_size, init)
    model = build_model(task, bert_cfg, classifier_dropout)
    params, p_shard = init_params(model, mesh, rules, seed)          # random, created on the mesh
    params, report = merge_pretrained(params, init.params, ...)      # params["bert"] from the checkpoint
    state, shardings = create_state(params, tx, p_shard, mesh)       # training.train_step.TrainState
    step = make_train_step(model, task.kind, tx, mesh, rules, shardings)   # (state, batch) -> (state, sums)
    predict = make_eval_step(model, mesh, rules, p_shard)                  # (params, batch) -> outputs

`init_checkpoint` may be a converted checkpoint directory (model_config.json + params.msgpack + vocab.txt,
as written by `python -m bert_jax.convert` and by fine-tuning's best_checkpoint), a zoo name
(`bert_jax.convert.zoo.resolve`), or a pre-training work directory (read with
`bert_jax.training.checkpoints.load_pretrained` when that module provides it).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any, Dict, Optional, Tuple

import flax
import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax.models import BertConfig, heads, scan_params, unscan_params
from bert_jax.models.config import SIZES
from bert_jax.training import sharding
from bert_jax.training.finetune_tasks import task_loss
from bert_jax.training.train_step import StepFn, TrainState

_log = logging.getLogger(__name__)

# Peak fine-tuning learning rate by model size. BERT paper (base/large): best of 5e-5, 4e-5, 3e-5, 2e-5.
# Google's 24 small BERTs were tuned over 3e-4, 1e-4, 5e-5, 3e-5; the small ones land at the high end.
DEFAULT_LEARNING_RATES = {"tiny": 3e-4, "mini": 2e-4, "small": 1e-4, "medium": 5e-5, "base": 3e-5,
                          "large": 2e-5}
HEAD_NAMES = ("classifier", "qa_outputs")
# XLA's RngBitGenerator for parameter init and dropout: on a 2-core CPU a tiny model's init compiles in ~3 s
# instead of ~9 s with threefry, and the train step ~2x faster (measured under load); the random streams
# are deterministic per seed and backend.
RNG_IMPL = "rbg"


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


def compute_dtype(name: str) -> str:
  if name == "auto":
    return "bfloat16" if jax.default_backend() in ("gpu", "tpu") else "float32"
  return name


# --------------------------------------------------------------------------------------------------------
# Init checkpoint.
# --------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class InitCheckpoint:
  config: BertConfig
  params: Dict[str, Any]            # un-scanned layout, numpy
  vocab_file: str
  do_lower_case: Optional[bool]     # None when the checkpoint does not say
  source: str                       # the directory it came from
  extra: Dict[str, Any] = dataclasses.field(default_factory=dict)   # finetune_info.json of a fine-tuned dir


def _read_json(path):
  import json  # pylint: disable=g-import-not-at-top
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def load_init_checkpoint(path: str) -> InitCheckpoint:
  """Resolves a zoo name / directory and reads the BERT config, params and vocab (see module docstring)."""
  from bert_jax.convert import io as convert_io, zoo  # pylint: disable=g-import-not-at-top
  directory = zoo.resolve(path)
  # A fine-tuning work directory: its best checkpoint.
  if os.path.isdir(os.path.join(directory, "best_checkpoint")) and not os.path.isdir(
      os.path.join(directory, "checkpoints")):
    directory = os.path.join(directory, "best_checkpoint")
  try:
    from bert_jax.training import checkpoints  # pylint: disable=g-import-not-at-top
  except ImportError:  # pragma: no cover
    checkpoints = None
  if checkpoints is not None and hasattr(checkpoints, "load_pretrained"):
    # A pre-training work dir (latest checkpoint) or a params directory.
    cfg, params, vocab = checkpoints.load_pretrained(directory)[:3]
  else:  # pragma: no cover
    cfg, params, vocab = convert_io.load_params_dir(directory)
  if not vocab:
    raise FileNotFoundError(f"init_checkpoint {directory} has no vocab.txt")
  extra = _read_json(os.path.join(directory, "finetune_info.json"))
  lower = convert_io.read_info(directory).get("do_lower_case", extra.get("do_lower_case"))
  if lower is None:   # a pre-training work dir records its tokenizer casing in the run config
    lower = _read_json(os.path.join(directory, "config.json")).get("data", {}).get("do_lower_case")
  return InitCheckpoint(cfg, _to_numpy(unscan_params(params)), vocab, lower, directory, extra)


def _to_numpy(tree):
  tree = flax.core.unfreeze(tree) if isinstance(tree, flax.core.FrozenDict) else tree
  return jax.tree.map(np.asarray, tree)


def vocab_lines(vocab_file: str) -> int:
  with open(vocab_file, encoding="utf-8") as f:
    return sum(1 for _ in f)


def build_bert_config(config, vocab_size: int, init: Optional[InitCheckpoint] = None) -> BertConfig:
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
                       f"{init.source} was trained with vocab_size={ckpt_vocab}; use the checkpoint's own "
                       "vocab.txt (leave vocab_file empty)")
    return init.config.replace(**runtime)
  arch = {k: int(getattr(m, k)) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                           "intermediate_size") if int(getattr(m, k)) > 0}
  if "hidden_size" in arch and "num_attention_heads" not in arch:
    arch["num_attention_heads"] = max(1, arch["hidden_size"] // 64)
  if "hidden_size" in arch and "intermediate_size" not in arch:
    arch["intermediate_size"] = 4 * arch["hidden_size"]
  return BertConfig.from_size(m.size, vocab_size=int(vocab_size),
                              max_position_embeddings=int(m.max_position_embeddings), **arch, **runtime)


def build_model(task, bert_cfg: BertConfig, classifier_dropout: float = -1.0) -> nn.Module:
  rate = None if classifier_dropout is None or classifier_dropout < 0 else float(classifier_dropout)
  if task.head == "sequence_classification":
    return heads.BertForSequenceClassification(bert_cfg, task.num_labels, dropout_rate=rate)
  if task.head == "token_classification":
    return heads.BertForTokenClassification(bert_cfg, task.num_labels, dropout_rate=rate)
  if task.head == "question_answering":
    return heads.BertForQuestionAnswering(bert_cfg)
  raise ValueError(f"unknown head {task.head!r}")


# --------------------------------------------------------------------------------------------------------
# Parameters on the mesh.
# --------------------------------------------------------------------------------------------------------
def _init_fn(model):
  def init(rng):
    ids = jnp.zeros((1, 8), jnp.int32)
    return model.init({"params": rng}, ids, jnp.ones_like(ids), jnp.zeros_like(ids), deterministic=True)["params"]
  return init


def _fit_to_shape(s: NamedSharding, shape) -> NamedSharding:
  """Replicates dimensions a mesh axis does not divide (e.g. 3 labels over tensor=2)."""
  spec = list(s.spec) + [None] * (len(shape) - len(s.spec))
  for i, (dim, ax) in enumerate(zip(shape, spec)):
    if ax is not None:
      names = ax if isinstance(ax, tuple) else (ax,)
      if dim % math.prod(s.mesh.shape[a] for a in names):
        spec[i] = None
  return NamedSharding(s.mesh, P(*spec))


def param_shardings(model, mesh, rules):
  boxed = jax.eval_shape(_init_fn(model), jax.random.PRNGKey(0))
  shard = sharding.logical_shardings(boxed, mesh, rules)
  abstract = nn.unbox(boxed)
  return abstract, jax.tree.map(lambda s, a: _fit_to_shape(s, a.shape), shard, abstract)


def init_params(model, mesh, rules, seed: int):
  """Random parameters created directly on the mesh; returns (params, shardings)."""
  _, p_shard = param_shardings(model, mesh, rules)
  init = _init_fn(model)
  with sharding.mesh_context(mesh, rules):
    params = jax.jit(lambda r: nn.unbox(init(r)), out_shardings=p_shard)(jax.random.key(seed, impl=RNG_IMPL))
  return params, p_shard


def _flat(tree) -> Dict[Tuple[str, ...], Any]:
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    out[tuple(str(getattr(k, "key", k)) for k in path)] = leaf
  return out


def merge_pretrained(params, p_shard, loaded: Dict[str, Any], scanned: bool, load_head: bool = False):
  """Replaces params["bert"] (and with load_head the task head) by the checkpoint's arrays.

  Returns (params on the mesh, report {"loaded": [...], "initialised": [...], "unused": [...]}) with
  '/'-joined parameter paths. A shape mismatch is an error naming the parameter.
  """
  host = _to_numpy(jax.device_get(params))
  if scanned:
    host = unscan_params(host)
  want = _flat(host)
  have = _flat(loaded)
  prefixes = [("bert",)] + ([(h,) for h in HEAD_NAMES] if load_head else [])
  report = {"loaded": [], "initialised": [], "unused": []}
  for path in want:
    if path in have and any(path[:len(p)] == p for p in prefixes):
      if tuple(have[path].shape) != tuple(want[path].shape):
        raise ValueError(f"init_checkpoint parameter {'/'.join(path)} has shape {tuple(have[path].shape)}, "
                         f"the model expects {tuple(want[path].shape)}")
      want[path] = np.asarray(have[path], dtype=want[path].dtype)
      report["loaded"].append("/".join(path))
    else:
      report["initialised"].append("/".join(path))
  report["unused"] = ["/".join(p) for p in have if p not in want]
  if not report["loaded"]:
    raise ValueError("init_checkpoint holds none of the model's encoder parameters (params['bert']); "
                     f"its top-level keys are {sorted(loaded)}")
  if load_head and not any(p.split("/")[0] in HEAD_NAMES for p in report["loaded"]):
    raise ValueError("load_head is set but the init_checkpoint has no task head of matching names and shapes")
  merged = traverse_util.unflatten_dict(want)
  if scanned:
    merged = scan_params(merged)
  return jax.device_put(merged, p_shard), report


def create_state(params, tx, p_shard, mesh, seed: int):
  """TrainState (step, params, opt_state, rng) on the mesh, and its shardings."""
  repl = sharding.replicated(mesh)
  abstract_opt = jax.eval_shape(tx.init, params)
  o_shard = optax.tree_map_params(tx, lambda _, s: s, abstract_opt, p_shard, transform_non_params=lambda _: repl)
  shardings = TrainState(step=repl, params=p_shard, opt_state=o_shard, rng=repl)
  rng = jax.random.key_data(jax.random.key(seed + 1, impl=RNG_IMPL))   # uint32[4] raw key data

  def make(p):
    return TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=tx.init(p), rng=rng)

  state = jax.jit(make, in_shardings=(p_shard,), out_shardings=shardings)(params)
  return state, shardings


def _apply(model, params, batch, rng):
  return model.apply({"params": params}, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                     deterministic=rng is None, rngs=None if rng is None else {"dropout": rng})


def make_train_step(model, kind: str, tx, mesh, rules, state_shardings) -> StepFn:
  """step(state, batch) -> (state, sums): sums = loss_sum, weight_sum[, correct_sum], grad_norm,
  learning-rate-free (the loop reads the schedule), nonfinite (1.0 when the loss or gradient is NaN/Inf)."""

  def train_step(state: TrainState, batch):
    rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng, impl=RNG_IMPL), state.step)

    def loss_fn(p):
      return task_loss(kind, _apply(model, p, batch, rng), batch)

    (loss, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    grad_norm = optax.global_norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    sums = dict(sums, grad_norm_sum=grad_norm, step_count=jnp.ones((), jnp.float32),
                nonfinite=1.0 - finite.astype(jnp.float32))
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), sums

  batch_in = sharding.batch_sharding(mesh, rules)
  jitted = jax.jit(train_step, in_shardings=(state_shardings, batch_in),
                   out_shardings=(state_shardings, sharding.replicated(mesh)), donate_argnums=(0,))
  return StepFn(jitted, mesh, rules)


def make_eval_step(model, mesh, rules, p_shard, kind: Optional[str] = None) -> StepFn:
  """predict(params, batch) -> {"outputs": the head's outputs (logits / start_logits, end_logits), float32,
  "sums": loss sums as in training (only with `kind`; the batch then carries the label keys)}; replicated."""

  def eval_step(params, batch):
    out = _apply(model, params, batch, None)
    out = {k: v for k, v in out.items() if k != "pooled_output"}
    sums = task_loss(kind, out, batch)[1] if kind is not None else {}
    return {"outputs": out, "sums": sums}

  jitted = jax.jit(eval_step, in_shardings=(p_shard, sharding.batch_sharding(mesh, rules)),
                   out_shardings=sharding.replicated(mesh))
  return StepFn(jitted, mesh, rules)


def to_host(tree):
  """Device arrays -> host numpy. Multi-host: gathers the global value (replicated or sharded) on every host."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
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
