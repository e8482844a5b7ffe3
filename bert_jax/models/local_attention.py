"""Sliding-window (local) self-attention whose cost is linear in the length: ModernBERT's local layers.

A query at position i attends to the keys j with |i - j| <= half (`half` = local_attention // 2: 64 for
ModernBERT's window of 128 tokens in all, as Hugging Face's `sliding_window_bidirectional_overlay`) that are
real tokens of its own example. Examples come from the packed-row convention of models/layers.py: input_mask
[B, T] numbers a row's examples (0 = padding, k >= 1 = the k-th example); an unpacked row is 1s then 0s.

Two computations of the same numbers:

* `blocked_attention` (the path used when T > the window): the row is cut into blocks of `half` tokens; block
  b's queries attend to blocks b - 1, b and b + 1 (3 x half keys, which hold every key within +-half of every
  query of the block), masked to the exact window and to the query's example. Scores are [B, N, T/half, half,
  3 half]: 3 x half x T per head instead of T^2, so time and memory grow linearly with T (T = 8,192, window
  128: 192 keys per query instead of 8,192). A length that is not a multiple of the block is padded with
  padding tokens (id 0), which no real query sees, and cut off again.
* `dense_attention`: the [B, N, T, T] masked reference, the fallback (`resolve_local`: when the window covers
  the whole row there is nothing to save, or when `local_attention_impl=dense` asks for it), said once in the
  log.
* `jax_attention` (`local_attention_impl=jax`): `jax.nn.dot_product_attention(local_window_size=(half, half))`
  with implementation=None, the backend's own choice, and the key mask (a row's real keys; packed rows: each
  query's own example, a [B, 1, T, T] mask). In JAX 0.10.2 implementation=None is XLA's masked T x T
  computation on every backend (quadratic in T, as `dense`), and its cuDNN path raises on a window that reaches
  right of the query without a causal mask, so a bidirectional window cannot use it yet; the path is here for
  the JAX release whose dispatcher picks a fused kernel. It has no attention dropout: a config with
  attention_probs_dropout_prob > 0 is refused (encoders/modernbert.py).

Shapes: q, k, v `[batch, length, heads, head_dim]` (BTNH, as models/attention.py); the result has q's shape.
Scores and softmax are float32. Rows of padding queries are not used downstream (they attend to nothing;
their softmax is uniform over masked scores, finite).
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bert_jax.logs import log_once

Array = jax.Array
log = logging.getLogger(__name__)

IMPLS = ("auto", "blocked", "dense", "jax")   # BertConfig.local_attention_impl
_NEG = jnp.finfo(jnp.float32).min


class LocalChoice(NamedTuple):
  path: str      # blocked | dense | jax
  reason: str


def resolve_local(impl: str, seq_len: int, half: int) -> LocalChoice:
  """The sliding-window path for a row of seq_len tokens and a half-window of `half` (a pure function)."""
  if impl not in IMPLS:
    raise ValueError(f"BertConfig.local_attention_impl={impl!r}; expected one of {IMPLS}")
  if impl == "dense":
    return LocalChoice("dense", "local_attention_impl=dense: a masked T x T attention, quadratic in T")
  if impl == "jax":
    return LocalChoice("jax", "local_attention_impl=jax: jax.nn.dot_product_attention(local_window_size="
                              f"({half}, {half})), the backend's choice (XLA's masked T x T in JAX 0.10.2)")
  if impl == "auto" and seq_len <= 2 * half + 1:
    return LocalChoice("dense", f"the window (+-{half}) covers the whole row of {seq_len} tokens: a masked "
                                "T x T attention costs no more")
  return LocalChoice("blocked", f"blocks of {half} tokens, each attending to itself and its two neighbours")


def window_mask(input_mask: Array, half: int) -> Array:
  """[B, T] example ids -> boolean [B, 1, T, T]: |i - j| <= half, key real, same example (the dense mask)."""
  ids = input_mask.astype(jnp.int32)
  t = ids.shape[-1]
  pos = jnp.arange(t)
  near = jnp.abs(pos[:, None] - pos[None, :]) <= half
  same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] > 0)
  return (same & near[None])[:, None]


def dense_attention(q: Array, k: Array, v: Array, input_mask: Array, half: int, dropout_fn=None) -> Array:
  """The reference: [B, N, T, T] float32 scores masked by window_mask; dropout_fn(probs) drops probabilities."""
  scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
  scores = jnp.where(window_mask(input_mask, half), scores, _NEG)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  if dropout_fn is not None:
    probs = dropout_fn(probs)
  return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def _neighbours(x: Array, nb: int, block: int) -> Array:
  """[B, nb * block, ...] -> [B, nb, 3 * block, ...]: for each block, the previous, own and next block (zeros,
  i.e. padding, beyond the row's ends)."""
  pad = [(0, 0)] * x.ndim
  pad[1] = (block, block)
  xp = jnp.pad(x, pad).reshape((x.shape[0], nb + 2, block) + x.shape[2:])
  return jnp.concatenate([xp[:, :-2], xp[:, 1:-1], xp[:, 2:]], axis=2)


def blocked_attention(q: Array, k: Array, v: Array, input_mask: Array, half: int, dropout_fn=None) -> Array:
  """Sliding-window attention in blocks of `half` tokens (module docstring); equals dense_attention on every
  real query. Memory and time O(T x 3 half) per head."""
  b, t, n, d = q.shape
  block = half
  nb = -(-t // block)
  extra = nb * block - t
  ids = input_mask.astype(jnp.int32)
  if extra:   # pad to whole blocks with padding tokens (id 0: no query attends to them)
    q, k, v = (jnp.pad(x, ((0, 0), (0, extra), (0, 0), (0, 0))) for x in (q, k, v))
    ids = jnp.pad(ids, ((0, 0), (0, extra)))
  qb = q.reshape(b, nb, block, n, d)
  kb, vb = _neighbours(k, nb, block), _neighbours(v, nb, block)        # [B, nb, 3 block, N, D]
  ids_q = ids.reshape(b, nb, block)
  ids_k = _neighbours(ids, nb, block)                                  # [B, nb, 3 block]
  # Query r of block c is at c * block + r, key s of its neighbourhood at (c - 1) * block + s: their distance
  # s - block - r does not depend on the block, so the window is one static [block, 3 block] pattern.
  r = jnp.arange(block)[:, None]
  s = jnp.arange(3 * block)[None, :]
  near = jnp.abs(s - block - r) <= half
  mask = (ids_q[..., :, None] == ids_k[..., None, :]) & (ids_k[..., None, :] > 0) & near   # [B, nb, blk, 3blk]
  scores = jnp.einsum("bcqhd,bckhd->bhcqk", qb, kb, preferred_element_type=jnp.float32) / math.sqrt(d)
  scores = jnp.where(mask[:, None], scores, _NEG)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  if dropout_fn is not None:
    probs = dropout_fn(probs)
  out = jnp.einsum("bhcqk,bckhd->bcqhd", probs, vb).reshape(b, nb * block, n, d)
  return out[:, :t]


def jax_attention(q: Array, k: Array, v: Array, input_mask: Array, half: int, packed: bool = True) -> Array:
  """jax.nn.dot_product_attention with local_window_size=(half, half) (module docstring); equals dense_attention
  on every real query. `packed`: input_mask may number several examples a row, so the mask is the [B, 1, T, T]
  same-example one; unpacked rows (0/1) need only the real keys, [B, 1, 1, T]. No dropout."""
  ids = input_mask.astype(jnp.int32)
  if packed:
    mask = ((ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] > 0))[:, None]
  else:
    mask = (ids > 0)[:, None, None, :]
  out = jax.nn.dot_product_attention(q, k, v, mask=mask, local_window_size=(half, half), implementation=None)
  return out.astype(q.dtype)


def sliding_window_attention(q: Array, k: Array, v: Array, input_mask: Array, half: int, impl: str = "auto",
                             dropout_fn=None, packed: bool = True) -> Array:
  """Sliding-window attention by the path resolve_local picks; the dense fallback is said once in the log.
  `packed`: whether input_mask may number several examples a row (the jax path's mask; the others read it
  either way)."""
  choice = resolve_local(impl, q.shape[1], half)
  if choice.path == "jax":
    if dropout_fn is not None:   # the config check refuses it first (encoders/modernbert.py); a direct caller
      raise ValueError("local_attention_impl=jax has no attention dropout; set attention_probs_dropout_prob=0 "
                       "or local_attention_impl=blocked")
    log_once(log, f"sliding-window attention: {choice.reason}")
    return jax_attention(q, k, v, input_mask, half, packed)
  if choice.path == "dense":
    log_once(log, f"sliding-window attention: dense masked T x T at T={q.shape[1]} ({choice.reason})")
    return dense_attention(q, k, v, input_mask, half, dropout_fn)
  return blocked_attention(q, k, v, input_mask, half, dropout_fn)
