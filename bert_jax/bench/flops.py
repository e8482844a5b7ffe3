"""A measured matmul peak (FLOP/s) for MFU; the model FLOP count is bert_jax.pretrain.flops."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp



def measure_matmul_peak(dtype: str = "bfloat16", n: int = 8192, repeats: int = 10) -> float:
  """FLOP/s of a chained square matmul on the default device (n=8192 on GPUs, smaller on CPUs)."""
  dt = jnp.dtype(dtype)
  if jax.default_backend() == "cpu":
    n = min(n, 1024)
  a = jax.random.normal(jax.random.key(0), (n, n), dt)
  b = jax.random.normal(jax.random.key(1), (n, n), dt) / n ** 0.5

  @jax.jit
  def chain(a, b):
    def body(_, x):
      return (x @ b).astype(dt)
    return jax.lax.fori_loop(0, repeats, body, a)

  chain(a, b).block_until_ready()
  best = float("inf")
  for _ in range(3):
    t0 = time.perf_counter()
    chain(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2.0 * n ** 3 * repeats / best
