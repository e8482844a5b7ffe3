"""JAX's persistent compilation cache for train.py / finetune.py (`config.compilation_cache_dir`).

A relaunch with the same model, batch and mesh loads the compiled train step from disk instead of compiling it
again: on the 2-core CPU the tiny model's init + train step take ~11 s to compile cold and ~2 s from the cache
(`experiments/bench_input_pipeline.md`, "Start-up"). Researchers relaunch the same config many times.

  "auto"  (default) $BERT_JAX_COMPILATION_CACHE_DIR if set, else $XDG_CACHE_HOME/bert_jax/xla
          (~/.cache/bert_jax/xla); an empty environment variable turns the cache off
  ""      off
  a path  that directory (a gs:// path works on TPU VMs; JAX writes entries atomically)

Only programs that took at least `min_compile_seconds` to compile are stored, so the cache holds the few
large steps, not every small helper. The key covers the program, the devices and the JAX/XLA versions, so
a stale entry is never used.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import jax

log = logging.getLogger(__name__)

ENV = "BERT_JAX_COMPILATION_CACHE_DIR"


def resolve(value: str) -> Optional[str]:
  """The cache directory for a config value ("auto", "" or a path), or None when off."""
  value = (value or "").strip()
  if value == "auto":
    if ENV in os.environ:
      value = os.environ[ENV].strip()
    else:
      base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
      value = os.path.join(base, "bert_jax", "xla")
  if value.lower() in ("", "none", "off", "false"):
    return None
  return value if "://" in value else os.path.abspath(os.path.expanduser(value))


def enable(value: str, min_compile_seconds: float = 1.0) -> Optional[str]:
  """Points JAX's persistent compilation cache at `resolve(value)` (before the first compile); returns the
  directory, or None when off. A directory that cannot be created turns the cache off with a warning: a
  cache is never a reason for a run to fail."""
  path = resolve(value)
  if path is None:
    return None
  if "://" not in path:
    try:
      os.makedirs(path, exist_ok=True)
    except OSError as e:
      log.warning("compilation cache off: cannot create %s (%s)", path, e)
      return None
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  log.debug("compilation cache: %s (programs that compile in >= %.1f s; config.compilation_cache_dir)",
           path, min_compile_seconds)
  return path
