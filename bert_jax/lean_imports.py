"""TensorFlow and tensorboardX without the packages they import for features bert_jax never uses.

Every train.py and finetune.py start pays these imports, and so does every process of a multi-host job:
  - `import tensorflow` (2.16+) ends with an eager `import keras.src.optimizers` inside `try/except ImportError`
    (it registers Keras optimizers for SavedModel loading). Keras 3 imports scikit-learn and SciPy on the way:
    6.7-7.0 CPU-s with it, 4.5-4.7 without on a 2-core CI machine, for tf.data and tf.io that never touch Keras;
  - tensorboardX imports PyTorch when it is installed, only so that `add_*` accepts torch tensors; bert_jax
    writes floats: 1.5-2.3 CPU-s with PyTorch, 0.4 s without.

`tensorflow()` and `tensorboardx()` import them with that one package hidden for the duration of the import:
a `sys.meta_path` finder finds the package as usual (so `importlib.util.find_spec`, which TensorFlow uses to
locate Keras' API folders, still answers) but its loader raises ImportError, which the optional import catches.
The finder is removed right after, so Keras and PyTorch import normally later if anything asks for them
(`tf.keras`, `import torch`); a package already imported is not touched. Set BERT_JAX_LEAN_IMPORTS=0 to import
them plainly.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Iterator

from bert_jax import logs


class _Refuse(importlib.abc.Loader):
  """A loader that refuses to run the module: `import name` raises ImportError."""

  def __init__(self, name: str):
    self.name = name

  def create_module(self, spec):
    return None

  def exec_module(self, module):
    raise ImportError(f"{self.name}: not imported here (bert_jax.lean_imports)", name=self.name)


class _Hide(importlib.abc.MetaPathFinder):
  """Finds the top-level package `name` normally, with a loader that refuses to run it."""

  def __init__(self, name: str):
    self.name = name

  def find_spec(self, fullname, path, target=None):
    if fullname != self.name:
      return None
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    if spec is not None:
      spec.loader = _Refuse(fullname)
    return spec


def _enabled() -> bool:
  return os.environ.get("BERT_JAX_LEAN_IMPORTS", "1").lower() not in ("0", "false", "no")


@contextlib.contextmanager
def hidden(name: str) -> Iterator[None]:
  """While inside, `import name` (a top-level package not yet imported) raises ImportError."""
  if name in sys.modules or not _enabled():
    yield
    return
  finder = _Hide(name)
  sys.meta_path.insert(0, finder)
  try:
    yield
  finally:
    sys.meta_path.remove(finder)


def _import(module: str, without: str) -> ModuleType:
  if sys.modules.get(module) is not None:
    return sys.modules[module]
  with hidden(without):
    return importlib.import_module(module)


def tensorflow() -> ModuleType:
  """`import tensorflow`, without its eager Keras import (see the module docstring), and without its C++
  start-up lines on the console (the oneDNN notice, `Could not find cuda drivers`, `failed call to cuInit`):
  they are written before anything can configure TensorFlow's logger, so they are held back while it loads and
  lists its devices (`bert_jax.logs.native_stderr_quiet`; `--verbose` shows them)."""
  if sys.modules.get("tensorflow") is not None:
    return sys.modules["tensorflow"]
  with logs.native_stderr_quiet():
    tf = _import("tensorflow", without="keras")
    tf.config.list_physical_devices()   # the CUDA probe (cuInit) runs here, not at the first tf.data call
  return tf


def tensorboardx() -> ModuleType:
  """`import tensorboardX`, without its PyTorch import (see the module docstring)."""
  return _import("tensorboardX", without="torch")
