"""Old module paths that still import, for one release, with a DeprecationWarning naming the new path.

The architecture change (see README, "Architecture") moved fine-tuning out of `training/` and
`input_pipeline/tasks/` into `bert_jax/finetune/`, and the params-directory format and the model zoo out of
`convert/` into `bert_jax/pretrained/`. An old path resolves to a thin module object that forwards every
attribute to the new module (same functions and classes, so isinstance and identity hold). The mapping is
done by an import hook, not by import statements, so the layering (imports go down only) stays visible.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

ALIASES = {
    "bert_jax.training.finetune_lib": "bert_jax.finetune.loop",
    "bert_jax.training.finetune_model": "bert_jax.finetune.model",
    "bert_jax.training.finetune_tasks": "bert_jax.finetune.data",
    "bert_jax.training.finetune_predict": "bert_jax.finetune.predict",
    "bert_jax.input_pipeline.tasks": "bert_jax.finetune.tasks",
    "bert_jax.convert.io": "bert_jax.pretrained.params_dir",
    "bert_jax.convert.zoo": "bert_jax.pretrained.zoo",
}


def new_name(old: str):
  """The current module path of a deprecated one (submodules of an aliased package included), else None."""
  for prefix, target in ALIASES.items():
    if old == prefix or old.startswith(prefix + "."):
      return target + old[len(prefix):]
  return None


class _Forward(types.ModuleType):
  def __init__(self, name: str, target):
    super().__init__(name, target.__doc__)
    self._target = target
    if hasattr(target, "__path__"):
      self.__path__ = []   # a package: its submodules resolve through the hook too

  def __getattr__(self, attr):
    return getattr(self._target, attr)

  def __dir__(self):
    return dir(self._target)


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  def find_spec(self, fullname, path=None, target=None):
    if new_name(fullname) is None:
      return None
    return importlib.util.spec_from_loader(fullname, self, is_package=fullname in ALIASES)

  def create_module(self, spec):
    target = new_name(spec.name)
    warnings.warn(f"{spec.name} is deprecated and will be removed in the next release; import {target}",
                  DeprecationWarning, stacklevel=3)
    return _Forward(spec.name, importlib.import_module(target))

  def exec_module(self, module):
    del module


def install() -> None:
  """Appends the hook once (after the normal finders, so existing modules always win)."""
  if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.append(_AliasFinder())
