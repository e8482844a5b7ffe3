"""The one state/step factory of pre-training and fine-tuning: TrainState, parameters created on the mesh,
and pure sharded train/eval steps parameterised by a loss function. No TensorFlow, no ml_collections needed.

API
---
  TrainState(step, params, opt_state, rng)          flax.struct dataclass; `rng` is the raw uint32[2] data of
                                                    a jax.random.key (JAX's default threefry implementation,
                                                    whose streams do not depend on the sharding, so a resume
                                                    on another mesh draws the same dropout masks); the step
                                                    number is folded in at every step
  LossFn(denominators, forward)                     what a step optimises (see below)
  pretraining_loss(model) -> LossFn                 a pre-training model's objectives (models/objectives/)
  model_config(config.model, vocab_size, loaded=None) -> BertConfig   the size table + config.model's fields,
                                                    or a loaded architecture, with the run's runtime fields
  init_params(config, model, mesh) -> (params, param_shardings)    random params on the mesh, no optimizer
  create_train_state(config, model, mesh, tx=None, *, params=None, rng=None)
      -> (state, state_shardings)      params created directly on the mesh: eval_shape(init) -> logical
                                       partition specs -> NamedShardings -> jit(init, out_shardings=...).
                                       `params` (e.g. from init_checkpoint, un-scanned or scanned layout)
                                       replaces the random init. Any model of this package works (the
                                       pre-training model or a fine-tuning head).
  abstract_train_state(config, model, mesh, tx=None) -> (abstract_state, state_shardings)
      ShapeDtypeStructs carrying their shardings (the restore target for Orbax).
  make_train_step(config, model, tx, mesh, state_shardings, *, loss_fn=None) -> StepFn
      step(state, batch) -> (state, metric sums): jit with in/out shardings and donate_argnums=0, traced under
      the mesh + logical rules (so the model's activation constraints apply). `loss_fn` defaults to
      pretraining_loss(model). `step.lower(state, batch)` gives the jax Lowered.
  make_eval_step(config, model, mesh, state_shardings, *, loss_fn=None) -> StepFn: eval(params, batch) -> sums
  merge_metrics(a, b), normalize(metrics_sums) -> dict of floats (host side, at logging steps only)

The run config needs: seed, grad_accum_steps, nan_policy, logical_axis_rules, num_train_steps, warmup_steps,
optimizer.* (see optimizers.py).

Loss functions. A LossFn has two parts so that gradient accumulation is exact:
  denominators(batch) -> dict      global normalisers of the FULL batch (e.g. the number of weighted masked
                                   tokens), computed once before the batch is split into micro-batches;
  forward(params, batch, rng, denominators) -> (loss, metric sums)   rng None = deterministic. In the train
                                   step the denominators also hold "step" (the 0-based step being taken), for
                                   a loss with a schedule of its own (ELECTRA's annealed temperature).
Summing micro-batch losses normalised by the global denominators gives the full-batch loss, not a mean of
per-micro-batch means. With config.grad_accum_steps = A the batch is split into A strided micro-batches
(every device keeps 1/A of its rows per micro-batch) and lax.scan sums their gradients.

Metrics leave a step as sums: the loss function's own (<t>_loss_sum, <t>_correct_sum, <t>_weight_sum |
<t>_count for each target or task), loss_sum/loss_count (the optimised loss per step), grad_norm_sum,
param_norm_sum, step_count (applied steps), nonfinite_count, min_nonfinite_step (first 1-based step
with a NaN/Inf loss or gradient; 2**31-1 if none) and max_finite_step (last 1-based step that was finite; 0
if none). Add them across steps with merge_metrics (on device, no host sync) and normalise once when writing.

NaN/Inf: config.nan_policy == "skip" keeps params and optimizer state of a non-finite step (a NaN/Inf loss,
gradient or updated parameter; its metrics are zeroed and counted in nonfinite_count); "stop" applies
nothing special in the step and the loop raises at the next host sync naming min_nonfinite_step. The loops
check both through `NonFiniteGuard` (skip: stop after config.max_consecutive_nonfinite skipped steps in a
row), and `all_finite(params)` guards every checkpoint.

Minimal use without ml_collections (every field explicit, as bert_jax.bench.__main__.bench_run_config does;
logical_axis_rules=None means axes.DEFAULT_RULES):
  cfg = bench_run_config("adamw")   # engine.train_step.StepSettings(seed, grad_accum_steps, nan_policy, ...)
  model = BertForPreTraining(BertConfig.from_size("base", vocab_size=30522, dtype="bfloat16"))
  mesh = sharding.make_mesh((-1, 1, 1))
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  state, shardings = create_train_state(cfg, model, mesh, tx)
  step = make_train_step(cfg, model, tx, mesh, shardings)
  state, metrics = step(state, batch)
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax.errors import UserError
from bert_jax.models import BertConfig, dummy_inputs, objectives
from bert_jax.models.pretraining import is_pretraining_model
from bert_jax.models.config import ARCHITECTURE_FIELDS, RUNTIME_FIELDS
from bert_jax.pretrained.params_dir import match_layout
from bert_jax.engine import optimizers, sharding

NO_NONFINITE = np.int32(2**31 - 1)
logger = logging.getLogger(__name__)


@flax.struct.dataclass
class TrainState:
  step: jax.Array        # int32 scalar: optimizer steps taken
  params: Any            # plain (unboxed) parameter tree, float32
  opt_state: Any         # optax state; params-shaped parts sharded like the params
  rng: jax.Array         # uint32[2] raw dropout key data; fold_in(key, step) per step


class LossFn(NamedTuple):
  """What a step optimises; see the module docstring."""
  denominators: Callable[[Mapping[str, jax.Array]], dict]
  forward: Callable[..., tuple]


def compute_dtype(name: str) -> str:
  """"auto" -> bfloat16 on GPU/TPU (fast bf16 matmuls), float32 on CPU; other names unchanged."""
  if name == "auto":
    return "bfloat16" if jax.default_backend() in ("gpu", "tpu") else "float32"
  return name


def model_config(model_fields, vocab_size: int, loaded: Optional[BertConfig] = None) -> BertConfig:
  """The run's BertConfig, the one place both loops get it: `loaded` (a checkpoint's architecture) or the size
  table `model_fields.size` with the architecture fields `model_fields` sets (-1: keep the table's), then this
  run's runtime fields (`RUNTIME_FIELDS`: dtype, dropout, attention path, scan, remat) from `model_fields`, a
  config's `model` subtree (pre-training and fine-tuning configs both have one)."""
  present = {k: model_fields[k] for k in RUNTIME_FIELDS + ARCHITECTURE_FIELDS
             if k in model_fields and model_fields[k] is not None and model_fields[k] != -1}
  runtime = {k: v for k, v in present.items() if k in RUNTIME_FIELDS}
  if "dtype" in runtime:
    runtime["dtype"] = compute_dtype(runtime["dtype"])
  if loaded is not None:
    return loaded.replace(**runtime)
  arch = {k: v for k, v in present.items() if k in ARCHITECTURE_FIELDS}
  if "hidden_size" in arch:   # BERT's rule for a custom width: 64-wide heads, FFN = 4H
    arch.setdefault("num_attention_heads", max(1, int(arch["hidden_size"]) // 64))
    arch.setdefault("intermediate_size", 4 * int(arch["hidden_size"]))
  return BertConfig.from_size(model_fields.size, vocab_size=int(vocab_size), **arch, **runtime)


def build_model_config(model_fields, vocab_size: int, loaded: Optional[BertConfig] = None,
                       field: str = "config.model") -> BertConfig:
  """train_step.model_config with its errors as a UserError naming `field`."""
  try:
    return model_config(model_fields, vocab_size, loaded)
  except (ValueError, TypeError) as e:
    raise UserError(f"{field}: {e}") from e


@dataclasses.dataclass(frozen=True)
class StepSettings:
  """The part of a run the state/step factory reads (train_step's `config` argument). PretrainPlan and
  FinetunePlan carry these fields too; `python -m bert_jax.bench` times the real step from this part alone."""
  seed: int
  grad_accum_steps: int
  nan_policy: str
  logical_axis_rules: Tuple
  num_train_steps: int
  warmup_steps: int
  optimizer: optimizers.OptimizerSettings


def _rules(config):
  return sharding.normalize_rules(config.logical_axis_rules)


# ---- state creation ---------------------------------------------------------------------------------
def _init_fn(model: nn.Module):
  cfg = model.config
  inputs = dummy_inputs(cfg)
  if not is_pretraining_model(model):   # task heads: ids, mask, segments
    inputs = inputs[:3]

  def init(rng):
    return model.init({"params": rng}, *inputs, deterministic=True)["params"]
  return init


def param_shardings(model: nn.Module, mesh, rules):
  """(abstract params [ShapeDtypeStruct], NamedSharding tree) from the model's logical axis metadata."""
  boxed = jax.eval_shape(_init_fn(model), jax.random.key(0))
  return nn.unbox(boxed), sharding.logical_shardings(boxed, mesh, rules)


def abstract_train_state(config, model: nn.Module, mesh, tx=None):
  """(TrainState of ShapeDtypeStructs with .sharding set, TrainState of NamedShardings)."""
  tx = tx if tx is not None else optimizers.optimizer_from_run_config(config)[0]
  abstract_params, p_shard = param_shardings(model, mesh, _rules(config))
  abstract_opt = jax.eval_shape(tx.init, abstract_params)
  repl = sharding.replicated(mesh)
  o_shard = optax.tree_map_params(tx, lambda _, s: s, abstract_opt, p_shard,
                                  transform_non_params=lambda _: repl)
  shardings = TrainState(step=repl, params=p_shard, opt_state=o_shard, rng=repl)
  abstract = TrainState(step=jax.ShapeDtypeStruct((), jnp.int32), params=abstract_params,
                        opt_state=abstract_opt, rng=jax.ShapeDtypeStruct((2,), jnp.uint32))
  abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
  return abstract, shardings


def _split_seed(config, rng):
  """(param key, dropout key) from config.seed (or a given key / raw key data)."""
  rng = jax.random.key(int(config.seed)) if rng is None else rng
  if not jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
    rng = jax.random.wrap_key_data(rng)
  return jax.random.split(rng)


def init_params(config, model: nn.Module, mesh, rng=None):
  """(random params created on the mesh, their NamedShardings), without optimizer state: the draw equals
  create_train_state's for the same seed, so loaded arrays can be merged in before the state is made."""
  _, p_shard = param_shardings(model, mesh, _rules(config))
  init = _init_fn(model)
  with sharding.mesh_context(mesh, _rules(config)):
    params = jax.jit(lambda r: nn.unbox(init(r)), out_shardings=p_shard)(_split_seed(config, rng)[0])
  return params, p_shard


def create_train_state(config, model: nn.Module, mesh, tx=None, *, params=None, rng=None):
  """A fresh TrainState laid out on `mesh` (see module docstring). Returns (state, state_shardings)."""
  tx = tx if tx is not None else optimizers.optimizer_from_run_config(config)[0]
  _, shardings = abstract_train_state(config, model, mesh, tx)
  param_rng, dropout_rng = _split_seed(config, rng)
  init = _init_fn(model)

  def make_state(p):
    return TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=tx.init(p),
                      rng=jax.random.key_data(dropout_rng))

  with sharding.mesh_context(mesh, _rules(config)):
    if params is None:
      return jax.jit(lambda r: make_state(nn.unbox(init(r))), out_shardings=shardings)(param_rng), shardings
    params = match_layout(flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else params,
                          model.config.scan_layers)
    _check_same_tree(params, shardings.params)
    params = jax.device_put(params, shardings.params)
    return jax.jit(make_state, in_shardings=(shardings.params,), out_shardings=shardings)(params), shardings


def _check_same_tree(params, reference):
  got = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]}
  want = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(reference)[0]}
  if got != want:
    raise ValueError("initial params do not match the model: missing "
                     f"{sorted(want - got)[:5]}, unexpected {sorted(got - want)[:5]}")


# ---- loss functions ------------------------------------------------------------------------------------
def pretraining_loss(model: nn.Module) -> LossFn:
  """The pre-training loss of a model from models.pretraining_model: its objectives' losses, each normalised by
  its global denominator, as the model's `loss_parts` defines them (models/objectives/)."""
  return LossFn(*model.loss_parts())


def _default_loss(model, loss_fn):
  return loss_fn if loss_fn is not None else pretraining_loss(model)


# ---- steps ---------------------------------------------------------------------------------------------
class StepFn:
  """A jitted step that is always traced and run under the mesh + logical-axis-rules context."""

  def __init__(self, jitted, mesh, rules):
    self.jitted, self.mesh, self.rules = jitted, mesh, rules

  def __call__(self, *args):
    with sharding.mesh_context(self.mesh, self.rules):
      return self.jitted(*args)

  def lower(self, *args):
    with sharding.mesh_context(self.mesh, self.rules):
      return self.jitted.lower(*args)


def _check_batch(batch, divisor, what):
  b = batch["input_ids"].shape[0]
  if b % divisor:
    raise ValueError(f"global batch {b} is not a multiple of {what} = {divisor}")
  return b


def _make_grads_fn(loss_fn: LossFn, accum, mesh, b_spec, grad_shardings, shards):
  """(params, batch, rng, step) -> (loss, metric sums, grads) of the global batch, accumulated over `accum`
  strided micro-batches with lax.scan (rng None = deterministic forward). The step (0-based, as taken) reaches
  the loss as denominators["step"], for losses with a schedule of their own (ELECTRA's temperature)."""

  def grads_fn(params, batch, rng, step=None):
    b = _check_batch(batch, shards * accum, f"batch shards ({shards}) x grad_accum_steps ({accum})")
    denoms = dict(loss_fn.denominators(batch))
    if step is not None:
      denoms["step"] = step
    grad_fn = jax.value_and_grad(lambda p, mb, r: loss_fn.forward(p, mb, r, denoms), has_aux=True)
    if accum == 1:
      (loss, sums), grads = grad_fn(params, batch, rng)
      return loss, sums, grads

    def split(x):   # [B, ...] -> [A, B/A, ...]; micro-batch i = rows i, A+i, 2A+i, ... (all shards)
      x = x.reshape((b // accum, accum) + x.shape[1:]).swapaxes(0, 1)
      return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(None, *b_spec)))
    micro = jax.tree.map(split, batch)
    micro_rng = (lambda i: None) if rng is None else (lambda i: jax.random.fold_in(rng, i))

    def body(carry, xs):
      g_acc, l_acc, s_acc = carry
      mb, i = xs
      (l, s), g = grad_fn(params, mb, micro_rng(i))
      return (jax.tree.map(jnp.add, g_acc, g), l_acc + l, jax.tree.map(jnp.add, s_acc, s)), None

    zeros_g = jax.tree.map(lambda p, s: jax.lax.with_sharding_constraint(jnp.zeros_like(p), s),
                           params, grad_shardings)
    first = jax.tree.map(lambda x: x[0], micro)
    zeros_s = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(
        lambda: loss_fn.forward(params, first, micro_rng(0), denoms)[1]))
    (grads, loss, sums), _ = jax.lax.scan(
        body, (zeros_g, jnp.zeros((), jnp.float32), zeros_s), (micro, jnp.arange(accum)))
    return loss, sums, grads

  return grads_fn


def _step_parts(config, model, loss_fn, mesh, state_shardings):
  rules = _rules(config)
  accum = int(config.grad_accum_steps)     # >= 1: the plans check it (config.grad_accum_steps)
  grads_fn = _make_grads_fn(_default_loss(model, loss_fn), accum, mesh, sharding.batch_spec(rules),
                            state_shardings.params, sharding.batch_shards(mesh, rules))
  return rules, grads_fn


def _dropout_key(state):
  return jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)


def make_train_step(config, model: nn.Module, tx, mesh, state_shardings, *, loss_fn: Optional[LossFn] = None,
                    donate: bool = True) -> StepFn:
  """The sharded train step (see module docstring)."""
  nan_policy = config.nan_policy            # stop | skip: the plans check it (config.nan_policy)
  rules, grads_fn = _step_parts(config, model, loss_fn, mesh, state_shardings)
  repl = sharding.replicated(mesh)

  def train_step(state: TrainState, batch: Mapping[str, jax.Array]):
    loss, sums, grads = grads_fn(state.params, dict(batch), _dropout_key(state), state.step)
    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
    param_norm = optax.global_norm(params)
    metrics = dict(sums, loss_sum=loss, loss_count=jnp.ones((), jnp.float32), grad_norm_sum=grad_norm,
                   param_norm_sum=param_norm, step_count=jnp.ones((), jnp.float32))
    if nan_policy == "skip":
      finite = finite & jnp.isfinite(param_norm)     # an update that overflows the params is skipped too
      keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
      new_state = new_state.replace(params=jax.tree.map(keep, params, state.params),
                                    opt_state=jax.tree.map(keep, opt_state, state.opt_state))
      metrics = {k: jnp.where(finite, v, jnp.zeros_like(v)) for k, v in metrics.items()}
    metrics["nonfinite_count"] = 1.0 - finite.astype(jnp.float32)
    metrics["min_nonfinite_step"] = jnp.where(finite, NO_NONFINITE, state.step.astype(jnp.int32) + 1)
    metrics["max_finite_step"] = jnp.where(finite, state.step.astype(jnp.int32) + 1, 0)
    return new_state, metrics

  batch_in = sharding.batch_sharding(mesh, rules)
  jitted = jax.jit(train_step, in_shardings=(state_shardings, batch_in), out_shardings=(state_shardings, repl),
                   donate_argnums=(0,) if donate else ())
  return StepFn(jitted, mesh, rules)


def make_eval_step(config, model: nn.Module, mesh, state_shardings, *, loss_fn: Optional[LossFn] = None) -> StepFn:
  """eval(params, batch) -> metric sums (deterministic forward, same loss normalisation as training)."""
  rules = _rules(config)
  loss_fn = _default_loss(model, loss_fn)
  shards = sharding.batch_shards(mesh, rules)

  def eval_step(params, batch):
    batch = dict(batch)
    _check_batch(batch, shards, "batch shards")
    loss, sums = loss_fn.forward(params, batch, None, loss_fn.denominators(batch))
    return dict(sums, loss_sum=loss, loss_count=jnp.ones((), jnp.float32))

  jitted = jax.jit(eval_step, in_shardings=(state_shardings.params, sharding.batch_sharding(mesh, rules)),
                   out_shardings=sharding.replicated(mesh))
  return StepFn(jitted, mesh, rules)


# ---- metrics -----------------------------------------------------------------------------------------
def merge_metrics(a: Optional[dict], b: dict) -> dict:
  """Adds metric sums (device arrays, no host sync); `min_*` / `max_*` keys take the minimum / maximum."""
  if a is None:
    return dict(b)
  return _merge(a, b)


@jax.jit
def _merge(a, b):
  return {k: (jnp.minimum(a[k], b[k]) if k.startswith("min_") else jnp.maximum(a[k], b[k])
              if k.startswith("max_") else a[k] + b[k]) for k in b}


def normalize(sums: Mapping[str, Any]) -> dict:
  """Host-side: metric sums -> {<objective or task>_loss, <...>_accuracy, loss, grad_norm, param_norm,
  nonfinite_count, ...} as Python floats."""
  sums = {k: np.asarray(v) for k, v in jax.device_get(dict(sums)).items()}
  out = objectives.normalize_metrics(sums)
  n = float(sums.get("step_count", 0.0))
  for key in ("grad_norm", "param_norm"):
    if f"{key}_sum" in sums and n > 0:
      out[key] = float(sums[f"{key}_sum"]) / n
  if "nonfinite_count" in sums:
    out["nonfinite_count"] = int(sums["nonfinite_count"])
  if "min_nonfinite_step" in sums and int(sums["min_nonfinite_step"]) != int(NO_NONFINITE):
    out["first_nonfinite_step"] = int(sums["min_nonfinite_step"])
  if "max_finite_step" in sums and int(sums["max_finite_step"]) > 0:
    out["last_finite_step"] = int(sums["max_finite_step"])
  return out


# ---- NaN/Inf ------------------------------------------------------------------------------------------
class NonFiniteError(UserError, FloatingPointError):
  """Training diverged (NaN/Inf loss, gradient or parameters). A UserError, so the entry points print one
  `error:` line (the fix is in the config: learning rate, data); a FloatingPointError for older callers."""


@jax.jit
def _all_finite(tree):
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def all_finite(tree) -> bool:
  """True when every float array of `tree` (sharded or host) is free of NaN/Inf; one host sync."""
  return bool(jax.device_get(_all_finite(tree)))


class NonFiniteGuard:
  """The loops' NaN/Inf policy, checked at each host sync on the normalised window metrics.

  stop: raises NonFiniteError naming the first non-finite step. skip: logs the skipped steps and raises once
  `max_consecutive` steps in a row were skipped (a run whose every step is skipped learns nothing while
  looking alive; `max_consecutive` <= 0 never stops). `checkpoint` (a callable giving the newest checkpoint
  step, or None) goes into the message."""

  def __init__(self, nan_policy: str, max_consecutive: int, what: str = "", checkpoint=None):
    self.nan_policy, self.max_consecutive, self.what = nan_policy, int(max_consecutive), what
    self.checkpoint = checkpoint
    self.last_finite = None     # last 1-based step that was finite (None: none seen yet)

  def check(self, summary: dict, step: int, start_step: int = 0) -> None:
    """`summary`: ts.normalize of the steps (…, step]; `start_step`: where this run started (resume)."""
    bad = int(summary.get("nonfinite_count", 0) or 0)
    if "last_finite_step" in summary:
      self.last_finite = max(self.last_finite or 0, int(summary["last_finite_step"]))
    if not bad:
      return
    where = f" of {self.what}" if self.what else ""
    ckpt = self.checkpoint() if self.checkpoint is not None else None
    ckpt_text = f"; the newest checkpoint ({ckpt}) is finite" if ckpt is not None else ""
    first = summary.get("first_nonfinite_step", "?")
    if self.nan_policy == "stop":
      raise NonFiniteError(
          f"non-finite loss or gradient at step {first}{where} ({bad} step(s) in this logging window)"
          f"{ckpt_text}. Lower the learning rate, check the data, or set nan_policy='skip'.")
    run = step - (self.last_finite if self.last_finite is not None else start_step)
    logger.warning("skipped %d step(s) with a non-finite loss, gradient or update (first: step %s); %d in a row",
                   bad, first, run)
    if 0 < self.max_consecutive <= run:
      raise NonFiniteError(
          f"nan_policy='skip': the last {run} steps{where} (up to step {step}) were all non-finite and skipped "
          f"(max_consecutive_nonfinite={self.max_consecutive}); training has diverged{ckpt_text}. Lower the "
          "learning rate or check the data.")
