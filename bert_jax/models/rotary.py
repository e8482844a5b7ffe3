"""Rotary position embeddings (Su et al. 2021) in the rotate-half form of GPT-NeoX, Llama and ModernBERT.

Shapes: q, k `[batch, length, heads, head_dim]`; positions `[batch, length]` int (per-example positions on
packed rows: models/layers.example_positions). The rotation is computed in float32 and cast back to q's
dtype, as Hugging Face's `apply_rotary_pos_emb` does.
"""

from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def inverse_frequencies(head_dim: int, theta: float) -> np.ndarray:
  """[head_dim / 2] float32: 1 / theta^(2i / head_dim), computed in float32 as transformers' default rope
  (`base ** (arange(0, dim, 2, float) / dim)`), so the angles agree with it to the last bit or two."""
  exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
  return (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)


def cos_sin(positions: Array, head_dim: int, theta: float) -> Tuple[Array, Array]:
  """positions [B, T] -> (cos, sin) [B, T, 1, head_dim] float32 (the angle table repeated over both halves)."""
  freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inverse_frequencies(head_dim, theta))
  angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
  return jnp.cos(angles), jnp.sin(angles)


def rotate_half(x: Array) -> Array:
  """[..., D] -> [..., D]: (x1, x2) -> (-x2, x1) over the two halves of the last axis."""
  x1, x2 = jnp.split(x, 2, axis=-1)
  return jnp.concatenate([-x2, x1], axis=-1)


def apply_rotary(x: Array, cos: Array, sin: Array) -> Array:
  """x [B, T, N, D] rotated by the (cos, sin) of cos_sin, in float32, returned in x's dtype."""
  xf = x.astype(jnp.float32)
  return (xf * cos + rotate_half(xf) * sin).astype(x.dtype)
