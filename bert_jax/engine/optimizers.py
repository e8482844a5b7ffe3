"""Optimizers as in BERT: AdamW (decoupled weight decay, none on LayerNorm and biases) and LAMB, with linear
warmup + linear/polynomial decay and global-norm clipping. Pure optax, no TensorFlow.

API:
  make_schedule(config) -> optax schedule: step -> learning rate
  make_optimizer(opt, num_train_steps, warmup_steps) -> (optax.GradientTransformation, schedule)
  optimizer_from_run_config(config) -> the same from a pre-training config
  layer_depths(params, num_layers) / with_layerwise_lr_decay(tx, params, decay, num_layers)
                                                     ELECTRA's layer-wise learning-rate decay (fine-tuning only)
  decay_mask(params) -> bool tree: True where weight decay (and LAMB's trust ratio) applies
  scale_by_bert_adam(b1, b2, eps, bias_correction)  Adam moments; without bias correction it is
                                                     Google BERT's AdamWeightDecayOptimizer

Bias correction is on by default: without it the first ~1,000 updates are up to 3x larger
(sqrt(1 - b2^t) / (1 - b1^t)), which at lr 1e-3 kept a tiny BERT at the unigram plateau for 1,500 steps
on a Chinese news corpus and kept it from learning a copy task that it learns in 300 steps with correction.

`schedule="google"` is google-research/bert's `optimization.py` exactly: the learning rate at step t is
`lr * (1 - min(t, num_train_steps) / num_train_steps)` (tf.train.polynomial_decay, power 1, end 0, over all
`num_train_steps` from step 0), replaced by `lr * t / warmup_steps` while t < warmup_steps; and Adam without
bias correction (AdamWeightDecayOptimizer), whatever `bias_correction` says. Our "linear" schedule instead
decays from the peak over the `num_train_steps - warmup_steps` steps after warmup.

`name="stable_adamw"` is StableAdamW (Wortsman et al. 2023, "Stable and low-precision training for large-scale
vision-language models"; ModernBERT's optimizer, Warner et al. 2024): AdamW whose step for each parameter tensor
is divided by max(1, RMS(g^2 / v-hat)), the update clipping that replaces global-norm clipping, with decoupled
weight decay as ModernBERT's (Composer's DecoupledAdamW, optimi's decouple_lr): each step multiplies a weight by
1 - weight_decay * lr_t / peak_lr, so weight_decay=1e-5 is the per-step decay at the peak, not divided by lr;
no decay on norms or biases (`decay_mask_no_norms`).

`schedule="wsd"` is warmup-stable-decay (trapezoidal; Zhai et al. 2022, ModernBERT): linear warmup, the peak
held, then a decay over the last `decay_fraction` of the steps to end_learning_rate, linear or "1-sqrt"
(lr * (1 - sqrt(t / decay_steps)), Hägele et al. 2024), as `decay_shape` says.

`opt` is the `optimizer` subtree of a run config; pre-training and fine-tuning configs give it the same
fields (configs/pretrain.py holds the defaults, configs/finetune.py the fine-tuning ones):
  opt.{name, learning_rate, schedule, power, end_learning_rate, weight_decay, b1, b2, eps, clip_norm,
  bias_correction, decay_fraction, decay_shape}; the step counts come from the loop (fine-tuning derives them
  from epochs).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from bert_jax.errors import UserError

# Substrings of a parameter's path that exclude it from weight decay, as Google BERT's
# exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"] (output_bias of the MLM head included).
NO_DECAY_SUBSTRINGS = ("LayerNorm", "layer_norm", "bias")
# Parameters held fixed (no gradient), which weight decay must not shrink either: the IDF table of an
# inference-free query side (finetune task=embedding, embedding.query_encoder=idf).
FIXED_PATHS = ("query_encoder/idf",)


def _path_str(path) -> str:
  parts = []
  for k in path:
    parts.append(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))))
  return "/".join(parts)


def decay_mask(params) -> Any:
  """True for kernels and embeddings; False for LayerNorm scale/bias and every bias."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: not any(s in _path_str(path) for s in NO_DECAY_SUBSTRINGS + FIXED_PATHS), params)


def decay_mask_no_norms(params) -> Any:
  """decay_mask without any norm either (a path naming "norm" in any case: ModernBERT's attn_norm, mlp_norm,
  final_norm; BERT's LayerNorm): StableAdamW's rule, "not on norms or biases"."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: not (any(s in _path_str(path).lower() for s in ("norm", "bias"))
                           or any(s in _path_str(path) for s in FIXED_PATHS)), params)


def google_schedule(learning_rate: float, num_train_steps: int, warmup_steps: int) -> optax.Schedule:
  """Google BERT's `optimization.create_optimizer` learning rate: polynomial decay (power 1, end 0) over
  num_train_steps from step 0, overridden by the linear warmup lr * step / warmup_steps while
  step < warmup_steps."""
  lr, total, warmup = float(learning_rate), max(1, int(num_train_steps)), int(warmup_steps)

  def schedule(step):
    t = jnp.asarray(step, jnp.float32)
    decayed = lr * (1.0 - jnp.minimum(t, float(total)) / float(total))
    if warmup <= 0:
      return decayed
    return jnp.where(t < warmup, lr * t / float(warmup), decayed)

  return schedule


def uses_bias_correction(opt) -> bool:
  """Adam bias correction: off for schedule="google" (Google's optimizer has none), else as configured."""
  return bool(opt.bias_correction) and opt.schedule != "google"


def make_schedule(opt, num_train_steps: int, warmup_steps: int) -> optax.Schedule:
  """Linear warmup 0 -> lr over warmup_steps, then decay to end_learning_rate at num_train_steps:
  linear (power 1), polynomial (lr - end) * (1 - t)^power, or constant; or "google" (module docstring)."""
  lr, end = float(opt.learning_rate), float(opt.end_learning_rate)
  total = int(num_train_steps)
  warmup = max(0, min(int(warmup_steps), total))
  kind = opt.schedule
  if kind == "wsd":
    return wsd_schedule(lr, end, total, warmup, float(getattr(opt, "decay_fraction", 0.1)),
                        str(getattr(opt, "decay_shape", "linear")))
  if kind == "google":
    if end != 0.0 or float(opt.power) != 1.0:
      raise UserError(f"optimizer.schedule='google' decays linearly to 0 (Google's optimization.py); got "
                      f"optimizer.end_learning_rate={end} and optimizer.power={opt.power}: set them to 0.0 "
                      "and 1.0, or use schedule='polynomial'")
    return google_schedule(lr, total, int(warmup_steps))
  if kind == "linear":
    power = 1.0
  elif kind == "polynomial":
    power = float(opt.power)
  elif kind == "constant":
    power = 0.0
  else:
    raise UserError(f"optimizer.schedule={kind!r}; expected linear, polynomial, constant, wsd or google")
  decay = (optax.constant_schedule(lr) if power == 0.0 else
           optax.polynomial_schedule(lr, end, power, max(1, total - warmup)))
  if warmup == 0:
    return decay
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), decay], [warmup])


DECAY_SHAPES = ("linear", "1-sqrt")


def wsd_schedule(lr: float, end: float, total: int, warmup: int, decay_fraction: float,
                 shape: str) -> optax.Schedule:
  """Warmup-stable-decay: 0 -> lr linearly over `warmup` steps, lr until the last round(decay_fraction x total)
  steps, then to `end` at `total`: linear, or 1-sqrt (lr - (lr - end) sqrt(t / decay_steps))."""
  if shape not in DECAY_SHAPES:
    raise UserError(f"optimizer.decay_shape={shape!r}; expected one of {', '.join(DECAY_SHAPES)}")
  if not 0.0 <= decay_fraction <= 1.0:
    raise UserError(f"optimizer.decay_fraction={decay_fraction}; expected a share of the steps in [0, 1]")
  decay_steps = min(int(round(decay_fraction * total)), total - warmup)
  decay_start = total - decay_steps

  def schedule(step):
    t = jnp.asarray(step, jnp.float32)
    up = lr * t / max(1, warmup) if warmup else jnp.asarray(lr, jnp.float32)
    frac = jnp.clip((t - decay_start) / max(1, decay_steps), 0.0, 1.0)
    frac = jnp.sqrt(frac) if shape == "1-sqrt" else frac
    down = lr - (lr - end) * frac
    return jnp.where(t < warmup, up, jnp.where(t < decay_start, lr, down))

  return schedule


class StableAdamState(NamedTuple):
  inner: Any          # optax.scale_by_adam's state, then add_decayed_weights'


def scale_by_stable_adam(b1: float, b2: float, eps: float, weight_decay_over_peak: float,
                         mask) -> optax.GradientTransformation:
  """StableAdamW's direction before the learning rate: optax.scale_by_adam (bias-corrected moments), plus the
  decoupled decay weight_decay / peak_lr x w (masked), each tensor's sum divided by max(1, RMS) with
  RMS = sqrt(mean(g^2 / max(v-hat, eps^2))) over that tensor (Wortsman et al. 2023, Algorithm 1). Multiplied by
  the learning rate after, the decay is weight_decay x lr_t / peak_lr x w, clipped with the step."""
  inner = optax.chain(optax.scale_by_adam(b1=b1, b2=b2, eps=eps),
                      optax.add_decayed_weights(weight_decay_over_peak, mask=mask))

  def init(params):
    return StableAdamState(inner.init(params))

  def update(grads, state, params=None):
    updates, new_inner = inner.update(grads, state.inner, params)
    adam = new_inner[0]
    correction = 1.0 - jnp.asarray(b2, jnp.float32) ** adam.count.astype(jnp.float32)

    def clip(u, g, nu):
      v_hat = nu.astype(jnp.float32) / correction
      rms = jnp.sqrt(jnp.mean(jnp.square(g.astype(jnp.float32)) / jnp.maximum(v_hat, eps * eps)))
      return (u / jnp.maximum(1.0, rms)).astype(u.dtype)

    return jax.tree.map(clip, updates, grads, adam.nu), StableAdamState(new_inner)

  return optax.GradientTransformation(init, update)


class BertAdamState(NamedTuple):
  count: jax.Array
  mu: Any
  nu: Any


def scale_by_bert_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                       bias_correction: bool = False) -> optax.GradientTransformation:
  """Adam direction m / (sqrt(v) + eps). bias_correction=False is Google BERT's optimizer (no m-hat/v-hat);
  True is optax.scale_by_adam."""
  if bias_correction:
    return optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

  def init(params):
    zeros = lambda p: jnp.zeros_like(p, dtype=jnp.float32)  # noqa: E731
    return BertAdamState(jnp.zeros([], jnp.int32), jax.tree.map(zeros, params), jax.tree.map(zeros, params))

  def update(updates, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
    updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
    return updates, BertAdamState(optax.safe_increment(state.count), mu, nu)

  return optax.GradientTransformation(init, update)


def make_optimizer(opt, num_train_steps: int, warmup_steps: int):
  """(tx, schedule). AdamW: clip -> Adam -> + wd * w (masked) -> * -lr.
  LAMB: clip -> Adam -> + wd * w (masked) -> trust ratio ||w|| / ||u|| (same mask) -> * -lr."""
  schedule = make_schedule(opt, num_train_steps, warmup_steps)
  if opt.schedule == "google" and bool(opt.bias_correction):
    logging.getLogger(__name__).info("optimizer.schedule=google: Adam without bias correction, as Google's "
                                     "AdamWeightDecayOptimizer (optimizer.bias_correction=True not used)")
  chain = []
  if float(opt.clip_norm) > 0:
    chain.append(optax.clip_by_global_norm(float(opt.clip_norm)))
  if opt.name == "stable_adamw":
    wd = float(opt.weight_decay) / max(float(opt.learning_rate), 1e-30)
    chain.append(scale_by_stable_adam(float(opt.b1), float(opt.b2), float(opt.eps), wd, decay_mask_no_norms))
    chain.append(optax.scale_by_learning_rate(schedule))
    return optax.chain(*chain), schedule
  chain.append(scale_by_bert_adam(float(opt.b1), float(opt.b2), float(opt.eps), uses_bias_correction(opt)))
  if float(opt.weight_decay) > 0:
    chain.append(optax.add_decayed_weights(float(opt.weight_decay), mask=decay_mask))
  if opt.name == "lamb":
    chain.append(optax.masked(optax.scale_by_trust_ratio(), decay_mask))
  elif opt.name != "adamw":
    raise ValueError(f"optimizer.name={opt.name!r}; expected adamw, lamb or stable_adamw")
  chain.append(optax.scale_by_learning_rate(schedule))
  return optax.chain(*chain), schedule


def optimizer_from_run_config(config):
  """(tx, schedule) of a pre-training run config: config.optimizer over config.num_train_steps with
  config.warmup_steps."""
  return make_optimizer(config.optimizer, int(config.num_train_steps), int(config.warmup_steps))


# ---- layer-wise learning-rate decay (fine-tuning only; pre-training never calls it) ------------------------
def layer_depths(params, num_layers: int) -> Any:
  """ELECTRA's depth of every parameter (electra/model/optimization.py `_get_layer_lrs`): embeddings 0,
  encoder layer i i+1, the pooler num_layers+1, the task head num_layers+2. Scanned encoders (one
  `layers` subtree stacked on axis 0) get a [num_layers, 1, ...] array of depths that broadcasts."""
  def depth(path, leaf):
    parts = _path_str(path).split("/")
    if "embeddings" in parts:
      return 0
    for p in parts:
      if p.startswith("layer_") and p[len("layer_"):].isdigit():
        return int(p[len("layer_"):]) + 1
    if "layers" in parts and "encoder" in parts:     # scanned: axis 0 is the layer
      shape = (num_layers,) + (1,) * (jnp.ndim(leaf) - 1)
      return jnp.arange(1, num_layers + 1, dtype=jnp.float32).reshape(shape)
    if "pooler" in parts:
      return num_layers + 1
    return num_layers + 2
  return jax.tree_util.tree_map_with_path(depth, params)


def scale_by_layer_decay(decay: float, num_layers: int) -> optax.GradientTransformation:
  """Multiplies each update by decay ** (num_layers + 2 - depth) (`layer_depths`): the head keeps the peak
  learning rate, the pooler gets decay x it, the top encoder layer decay^2, the embeddings decay^(L+2).
  Placed after the whole chain, it scales the per-layer learning rate, weight decay included, as ELECTRA."""
  def scales(params):
    return jax.tree.map(lambda d: jnp.asarray(float(decay), jnp.float32) ** (num_layers + 2 - jnp.asarray(d)),
                        layer_depths(params, num_layers))

  def init(params):
    del params
    return optax.EmptyState()

  def update(updates, state, params=None):
    return jax.tree.map(lambda u, s: (u * s).astype(u.dtype), updates, scales(updates)), state

  return optax.GradientTransformation(init, update)


def with_layerwise_lr_decay(tx: optax.GradientTransformation, decay: float,
                            num_layers: int) -> optax.GradientTransformation:
  """`tx` followed by `scale_by_layer_decay`; `tx` itself when decay == 1 (off)."""
  if float(decay) == 1.0:
    return tx
  return optax.chain(tx, scale_by_layer_decay(decay, num_layers))


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
  """config.optimizer, resolved (optimizers.make_optimizer reads these fields)."""
  name: str
  learning_rate: float
  schedule: str
  power: float
  end_learning_rate: float
  weight_decay: float
  b1: float
  b2: float
  eps: float
  clip_norm: float
  bias_correction: bool
  decay_fraction: float = 0.1        # schedule=wsd: share of the steps that decay
  decay_shape: str = "linear"        # schedule=wsd: linear | 1-sqrt

  @classmethod
  def from_config(cls, opt, **changes) -> "OptimizerSettings":
    fields = {f.name: opt[f.name] for f in dataclasses.fields(cls) if f.name in opt}
    fields.setdefault("schedule", "linear")
    fields.setdefault("power", 1.0)
    fields.setdefault("end_learning_rate", 0.0)
    fields.setdefault("bias_correction", True)
    fields.update(changes)
    return cls(**fields)


def optimizer_settings(opt, num_train_steps: int, warmup_steps: int, **changes) -> OptimizerSettings:
  """config.optimizer (+ `changes`) as settings, checked by building the optimizer once (its own rules:
  name, schedule, Google's schedule's fixed end and power) as a UserError naming config.optimizer."""
  settings = OptimizerSettings.from_config(opt, **changes)
  try:
    make_optimizer(settings, num_train_steps, warmup_steps)
  except ValueError as e:
    raise UserError(f"config.optimizer: {e}") from e
  return settings
