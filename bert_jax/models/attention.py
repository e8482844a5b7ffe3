"""Scaled dot-product attention kernels and the choice between them.

Shapes: q, k, v `[batch, length, heads, head_dim]` (BTNH); `input_mask` `[batch, length]` 0/1 with BERT's
right padding (real tokens first, then padding; every input pipeline here writes it that way); the
result has q's shape. Rows of padded queries are not used downstream, so paths may differ there.

Paths (`BertConfig.attention_impl`, or what `auto` resolves to):

| path | kernel | attention dropout | platforms |
|---|---|---|---|
| `einsum` | explicit einsum + float32 softmax, `[B, N, T, T]` probabilities in memory | yes (flax Dropout, the run's JAX key) | all |
| `xla` | `jax.nn.dot_product_attention(implementation="xla")` | no | all |
| `cudnn` | `jax.nn.dot_product_attention(implementation="cudnn")`, padding as sequence lengths | no | GPU |
| `cudnn_dropout` | JAX's cuDNN fused attention with `dropout_rate` inside the kernel | yes (cuDNN Philox) | GPU |
| `pallas_flash` | Pallas TPU flash attention, padding as segment ids | no | TPU (CPU: interpret mode) |

`auto` picks, by `choose_attention`: GPU + dropout active -> `cudnn_dropout`; GPU, no dropout -> `cudnn`;
TPU, no dropout -> `pallas_flash`; otherwise `einsum` (dropout) or `xla`. A fused path that has not yet
passed `experiments/device_check.py` on a real device (`UNVERIFIED_ON_DEVICE`) is not picked by `auto`:
auto then keeps the previous behaviour (`einsum` with dropout, JAX's own choice `dpa_auto` on GPUs, `xla`
elsewhere) and says so in one log line. Naming such a path explicitly opts in. A path whose shape, dtype
or platform rules are not met falls back the same way, with one log line naming the reason; so does a
fused kernel that raises while being traced (e.g. no cuDNN). Errors XLA raises later, when compiling,
cannot be caught here.

Packed rows (`BertConfig.max_examples_per_row > 0`: `input_mask` numbers each row's examples, 0 = padding,
see layers.example_mask): `einsum` and `xla` take the block-diagonal mask, `pallas_flash` takes the example ids
as its SegmentIds (the kernel's own convention), both exact. The cuDNN paths know a row only as one length, so
they would let examples attend to each other: `auto` routes packed rows to `einsum` / `xla` (`PACKED_PATHS`),
the fine-tuning and prediction plans refuse a named cuDNN path with packing, and a named one that still
reaches here falls back the same way with a warning. It never runs on packed rows.

`cudnn_dropout` differs from `einsum` in where the dropout bits come from: cuDNN's Philox generator,
seeded by a static per-layer seed (`layer_seed`) and advanced by XLA on every execution of the kernel, not
the run's JAX dropout key. Same keep rate and scaling (1 / (1 - rate)), but the masks are not reproducible
from `config.seed`, restart from the same sequence after a resume, and are the same on every local device
for the same position. The forward and backward kernels each advance their own offset once per execution,
so they stay in step only if each forward execution is matched by the backward execution of the same
layer in the same order: remat (which re-runs the forward inside the backward) and scan over layers (one
kernel for all layers, run forward 0..L-1 but backward L-1..0) are therefore refused for this path.
"""

from __future__ import annotations

import logging
import math
import zlib
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from bert_jax.logs import log_once

Array = jax.Array
log = logging.getLogger(__name__)

IMPLS = ("auto", "einsum", "xla", "cudnn", "cudnn_dropout", "pallas_flash")
# Paths that `auto` does not pick until experiments/device_check.py has passed for them on a device
# (remove a name here in the same change that records the device run in experiments/bench.md).
UNVERIFIED_ON_DEVICE = frozenset({"cudnn", "cudnn_dropout", "pallas_flash"})
_CAN_DROP = ("einsum", "cudnn_dropout")
_CUDNN_DTYPES = ("bfloat16", "float16")
_PALLAS_BLOCK = 128    # the TPU flash kernel's block size; sequence lengths must be multiples of it
# Paths that keep the examples of a packed row apart (the block-diagonal mask, or segment ids).
PACKED_PATHS = ("einsum", "xla", "dpa_auto", "pallas_flash")


class Choice(NamedTuple):
  path: str      # einsum | xla | dpa_auto | cudnn | cudnn_dropout | pallas_flash
  reason: str    # why, for the one log line


def _unsupported(path: str, platform: str, dtype: str, head_dim: int, seq_len: int) -> Optional[str]:
  """Why `path` cannot run this shape/dtype on `platform` (None = it can)."""
  if path in ("cudnn", "cudnn_dropout"):
    if platform != "gpu":
      return f"{path} needs a GPU (platform is {platform})"
    if dtype not in _CUDNN_DTYPES:
      return f"{path} needs bfloat16/float16 inputs, got {dtype}"
    if head_dim % 8 or head_dim > 128:
      return f"{path} needs head_dim a multiple of 8 and <= 128, got {head_dim}"
    if seq_len % 2:
      return f"{path} needs an even sequence length, got {seq_len}"
  if path == "pallas_flash":
    if platform != "tpu":
      return f"pallas_flash needs a TPU (platform is {platform})"
    if seq_len % _PALLAS_BLOCK:
      return f"pallas_flash needs a sequence length that is a multiple of {_PALLAS_BLOCK}, got {seq_len}"
  return None


def resolve_attention(platform: str, dropout_rate: float, deterministic: bool, dtype: str, head_dim: int,
                      seq_len: int, impl: str = "auto", remat: bool = False, scan: bool = False,
                      unverified=UNVERIFIED_ON_DEVICE, packed: bool = False) -> Choice:
  """The attention path for one call, from static facts only (a pure function: testable on any host).

  platform: jax.default_backend() ("cpu" | "gpu" | "tpu"); dropout_rate: attention_probs_dropout_prob;
  deterministic: True at evaluation; dtype: compute dtype name; remat: layers are rematerialised; scan:
  layers run under nn.scan;
  unverified: paths `auto` must not pick (tests inject an empty set to check the intended rules);
  packed: rows hold several examples (only PACKED_PATHS may run; dpa_auto is given the mask, so it qualifies).
  """
  choice = _resolve(platform, dropout_rate, deterministic, dtype, head_dim, seq_len, impl, remat, scan, unverified)
  if packed and choice.path not in PACKED_PATHS:
    dropout = (not deterministic) and dropout_rate > 0.0
    return Choice("einsum" if dropout else "xla", f"{choice.path} takes one length per row and cannot keep the "
                                                  "examples of a packed row apart")
  return choice


def _resolve(platform, dropout_rate, deterministic, dtype, head_dim, seq_len, impl, remat, scan,
             unverified) -> Choice:
  if impl not in IMPLS:
    raise ValueError(f"attention_impl={impl!r}; expected one of {IMPLS}")
  dropout = (not deterministic) and dropout_rate > 0.0
  plain = "einsum" if dropout else "xla"
  if impl == "auto":
    if platform == "gpu":
      want, previous = ("cudnn_dropout", "einsum") if dropout else ("cudnn", "dpa_auto")
    elif platform == "tpu" and not dropout:
      want, previous = "pallas_flash", "xla"
    else:
      return Choice(plain, f"auto on {platform}, attention dropout {'on' if dropout else 'off'}")
    if want in unverified:
      return Choice(previous, f"auto: {want} has not passed experiments/device_check.py on a device yet "
                              f"(set attention_impl={want} to opt in)")
  else:
    want, previous = impl, plain
    if dropout and impl not in _CAN_DROP:
      return Choice("einsum", f"attention_impl={impl} cannot drop attention probabilities; "
                              f"einsum keeps BERT's dropout {dropout_rate}")
  why = _unsupported(want, platform, dtype, head_dim, seq_len)
  if why is None and want == "cudnn_dropout" and dropout and (remat or scan):
    why = (f"cudnn_dropout with {'remat' if remat else 'scan_layers'} would pair forward and backward kernel "
           "runs with different dropout masks")
  if why is not None:
    return Choice(previous, why)
  return Choice(want, f"attention_impl={impl}")


def choose_attention(platform: str, dropout_rate: float, deterministic: bool, dtype: str, head_dim: int,
                     seq_len: int, impl: str = "auto", **kwargs) -> str:
  """The path name only; see resolve_attention."""
  return resolve_attention(platform, dropout_rate, deterministic, dtype, head_dim, seq_len, impl,
                           **kwargs).path


def _log_choice(choice: Choice, impl: str, other: Optional[Choice] = None, deterministic: bool = False) -> None:
  """One line per distinct (requested, chosen, reason): info for auto, a warning when a named path is not
  the one that runs. `other`: the choice of the same call in the other mode (training <-> evaluation), so a
  model whose training and evaluation calls take different paths says both in one line, whichever is traced
  first; it said `auto -> xla (... dropout off)` at init and `auto -> einsum (... dropout on)` at the first
  training step, which read as a contradiction."""
  if other is None or other == choice:
    if choice.path != impl or impl == "auto":
      log_once(log, f"attention: {impl} -> {choice.path} ({choice.reason})",
               logging.INFO if impl == "auto" else logging.WARNING)
    return
  train, evaluation = (other, choice) if deterministic else (choice, other)
  if impl != "auto" and train.path == impl and evaluation.path == impl:
    return
  log_once(log, f"attention: {impl} -> {train.path} in training ({train.reason}), {evaluation.path} in "
                f"evaluation ({evaluation.reason})",
           logging.INFO if impl == "auto" else logging.WARNING)


def layer_seed(path) -> int:
  """A static cuDNN dropout seed per attention layer (from its module path), so layers draw different
  masks. [path: a tuple of module names]"""
  return zlib.crc32("/".join(str(p) for p in path).encode()) & 0x7FFFFFFF


# ---- kernels: [B, T, N, H] in, [B, T, N, H] out ---------------------------------------------------------
def einsum_attention(q: Array, k: Array, v: Array, mask: Array, dropout_fn=None) -> Array:
  """Reference: float32 scores and softmax; `mask` boolean, broadcastable to [B, N, T, T];
  dropout_fn(probs) drops probabilities (None = no dropout)."""
  scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
  scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  if dropout_fn is not None:
    probs = dropout_fn(probs)
  return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def _lengths(input_mask: Array) -> Array:
  return jnp.sum(input_mask > 0, axis=-1).astype(jnp.int32)


def cudnn_attention(q: Array, k: Array, v: Array, input_mask: Array, causal: bool = False) -> Array:
  """cuDNN flash attention through jax.nn.dot_product_attention; right padding as sequence lengths."""
  lengths = _lengths(input_mask)
  return jax.nn.dot_product_attention(q, k, v, is_causal=causal, query_seq_lengths=lengths,
                                      key_value_seq_lengths=lengths, implementation="cudnn")


def cudnn_dropout_attention(q: Array, k: Array, v: Array, input_mask: Array, dropout_rate: float, seed: int,
                            causal: bool = False) -> Array:
  """cuDNN fused attention with attention-probability dropout inside the kernel (GPU only).

  Calls JAX's cuDNN module directly (`jax.nn.dot_product_attention` does not expose dropout). Right
  padding is passed as q/kv sequence lengths (mask type PADDING); `seed` is static (see layer_seed).
  """
  # lazy: a private JAX module (pinned by tests) that only the cudnn_dropout path, on a GPU, needs
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
  lengths = _lengths(input_mask)
  mask_type = cudnn_fa.MaskType.PADDING_CAUSAL if causal else cudnn_fa.MaskType.PADDING
  return cudnn_fa.dot_product_attention(q, k, v, q_seqlen=lengths, kv_seqlen=lengths,
                                        scale=1.0 / math.sqrt(q.shape[-1]), mask_type=mask_type,
                                        seed=int(seed), dropout_rate=float(dropout_rate), qkv_layout="BTNH")


def pallas_flash_attention(q: Array, k: Array, v: Array, input_mask: Array, causal: bool = False) -> Array:
  """Pallas TPU flash attention (jax.experimental.pallas.ops.tpu); input_mask's example ids as segment ids (1
  real, 0 pad on unpacked rows; 1..K on packed ones), so real queries see exactly the real keys of their own
  example. Length must be a multiple of 128 (the kernel's block). On a
  CPU it runs only inside `jax.experimental.pallas.tpu.force_tpu_interpret_mode()` (the numerics tests)."""
  from jax.experimental.pallas.ops.tpu import flash_attention as tpu_fa  # lazy: Pallas, only this TPU path
  t = q.shape[1]
  block = min(_PALLAS_BLOCK, t)
  sizes = tpu_fa.BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1,
                            block_q_major_dkv=block, block_k_major_dkv=block, block_k_dkv=block,
                            block_q_dkv=block, block_k_major_dq=block, block_k_dq=block, block_q_dq=block)
  segments = input_mask.astype(jnp.int32)
  to_bnth = lambda x: jnp.swapaxes(x, 1, 2)   # [B, T, N, H] <-> [B, N, T, H]

  out = tpu_fa.flash_attention(to_bnth(q), to_bnth(k), to_bnth(v),
                               segment_ids=tpu_fa.SegmentIds(q=segments, kv=segments), causal=causal,
                               sm_scale=1.0 / math.sqrt(q.shape[-1]), block_sizes=sizes)
  return to_bnth(out)


def attend(q: Array, k: Array, v: Array, mask: Array, input_mask: Array, *, impl: str, platform: str,
           dropout_rate: float, deterministic: bool, causal: bool = False, remat: bool = False,
           scan: bool = False, packed: bool = False,
           dropout_fn=None, seed: int = 0) -> Array:
  """Attention by the path `resolve_attention` picks. mask: boolean [B, 1, 1|T, T] (padding or causal)
  for the einsum/XLA paths; input_mask [B, T] for the fused ones; dropout_fn(probs) for the einsum path;
  seed: static cuDNN dropout seed; packed: rows hold several examples (mask is then block-diagonal).
  Returns [B, T, N, H]."""
  choice = resolve_attention(platform, dropout_rate, deterministic, jnp.dtype(q.dtype).name, q.shape[-1],
                             q.shape[1], impl, remat=remat, scan=scan, packed=packed)
  _log_choice(choice, impl, resolve_attention(platform, dropout_rate, not deterministic, jnp.dtype(q.dtype).name,
                                              q.shape[-1], q.shape[1], impl, remat=remat, scan=scan, packed=packed),
              deterministic)
  dropout = (not deterministic) and dropout_rate > 0.0
  fused = {
      "cudnn_dropout": lambda: cudnn_dropout_attention(q, k, v, input_mask, dropout_rate if dropout else 0.0,
                                                       seed, causal),
      "cudnn": lambda: cudnn_attention(q, k, v, input_mask, causal),
      "pallas_flash": lambda: pallas_flash_attention(q, k, v, input_mask, causal),
  }
  if choice.path in fused:
    try:   # a kernel that rejects the call while tracing (no cuDNN, a layout rule we do not mirror) falls back
      return fused[choice.path]()
    except (NotImplementedError, ValueError, RuntimeError) as e:
      fallback = Choice("einsum" if dropout else "xla", f"{choice.path} failed while tracing: "
                        f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
      _log_choice(fallback, choice.path)
      choice = fallback
  if choice.path == "einsum":
    return einsum_attention(q, k, v, mask, dropout_fn if dropout else None)
  return jax.nn.dot_product_attention(q, k, v, mask=mask,
                                      implementation=None if choice.path == "dpa_auto" else "xla")
