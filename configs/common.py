"""What the config files share: one typed reader of the variant string after the colon, and presets as data.

    from configs import common    # installed: from bert_jax_configs import common

    def get_config(arg=None):
      arg = common.parse_arg(arg, "configs/pretrain.py", bare=common.size_words(), size=(None, common.SIZES),
                             preset=(None, tuple(presets.PRESETS)), fast=False, runlocal=False)
      ...
      if arg.preset:
        common.override(config, presets.PRESETS[arg.preset], f"configs/presets.py:{arg.preset}")

`--config=configs/pretrain.py:size=tiny,preset=budget,runlocal` hands get_config "size=tiny,preset=budget,
runlocal". Each spec entry names one key the string may hold:

  key=False                    a flag: `key` alone (or key=true / key=false) sets it
  key=(default, kind)          a value: kind is str, int or float, or a tuple of the allowed strings;
                               default None = not given (the config file decides, e.g. a preset's size)
  key=(default, choices, fn)   fn(value) first, then the check against choices (task aliases: "SST-2" -> sst2)

`bare` maps a word given alone to (key, value): `tiny` for size=tiny, `debug` for runlocal, a task's name.
Unknown keys, values of the wrong type or outside the choices, a key given twice (`tiny,size=base`): one
ArgError naming the key and what is allowed, which the entry points print as one `error:` line.
"""

from typing import Any, Dict, Mapping, Optional, Tuple

import ml_collections

from bert_jax.errors import UserError
from bert_jax.models.config import SIZES as _SIZE_TABLE

SIZES = tuple(_SIZE_TABLE)          # tiny, mini, small, medium, base, large: the model size table's names


class ArgError(UserError, ValueError):
  """A bad variant string after the colon. Also a ValueError: ml_collections' config flag and callers such
  as experiments/pod_memory.py catch that for a config file that fails to load."""


def size_words() -> Dict[str, Tuple[str, Any]]:
  """The bare words of the size table and of runlocal: `tiny` = size=tiny, `debug` = runlocal."""
  return {**{s: ("size", s) for s in SIZES}, "debug": ("runlocal", True)}


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _allowed(key: str, entry) -> str:
  """How `key` is written, for the error that lists the allowed keys."""
  if isinstance(entry, bool):
    return key
  kind = entry[1]
  if isinstance(kind, tuple):
    return f"{key}={'|'.join(kind)}" if len(kind) <= 8 else f"{key}=NAME"
  return f"{key}={getattr(kind, '__name__', 'VALUE').upper()}"


def parse_arg(arg: Optional[str], where: str, *, bare: Optional[Mapping[str, Tuple[str, Any]]] = None,
              **spec) -> ml_collections.ConfigDict:
  """The comma-separated `arg` read against `spec` (module docstring): a ConfigDict of every spec key, the
  given value or the default. `where` names the config file in the errors."""
  bare = dict(bare or {})
  values = {k: (v if isinstance(v, bool) else v[0]) for k, v in spec.items()}
  given: Dict[str, str] = {}
  expected = ", ".join(_allowed(k, v) for k, v in spec.items())
  for part in filter(None, (p.strip() for p in (arg or "").split(","))):
    key, eq, text = (s.strip() for s in part.partition("="))
    if not eq and key in bare:
      key, value = bare[key]
    elif key not in spec:
      kinds = "/".join(dict.fromkeys(k for k, _ in bare.values()))
      words = "" if not bare else (f" (or one of {', '.join(bare)} alone)" if len(bare) <= 12 else
                                   f" (or a {kinds} name alone)")
      raise ArgError(f"{where}: unknown config argument {part!r}; expected {expected}{words}")
    else:
      value = _convert(where, key, text, eq, spec[key])
    if key in given:      # tiny,size=base took the last one without a word
      raise ArgError(f"{where}: {key} given twice ({given[key]!r} and {part!r}); expected one")
    given[key] = part
    values[key] = value
  return ml_collections.ConfigDict(values)


def _convert(where: str, key: str, text: str, eq: str, entry) -> Any:
  """`text` (given after `key=`, or nothing when `eq` is empty) as the value that `entry` asks for."""
  if isinstance(entry, bool):
    if not eq:
      return True
    if text.lower() not in _BOOLS:
      raise ArgError(f"{where}: {key}={text!r}; expected {key} alone, {key}=true or {key}=false")
    return _BOOLS[text.lower()]
  kind, fn = entry[1], (entry[2] if len(entry) > 2 else None)
  if not text:
    raise ArgError(f"{where}: {key} needs a value; expected {_allowed(key, entry)}")
  if isinstance(kind, tuple):
    value = fn(text) if fn else text
    if value not in kind:
      raise ArgError(f"{where}: unknown {key} {text!r}; expected one of {', '.join(kind)}")
    return value
  try:
    return kind(text)
  except ValueError as e:
    raise ArgError(f"{where}: {key}={text!r}; expected {_allowed(key, entry)} ({e})") from e


def override(config: ml_collections.ConfigDict, fields: Mapping[str, Any], where: str) -> None:
  """Sets each dotted field of `fields` ("optimizer.learning_rate": 1e-3) on `config`. A callable value is
  called with the config: a field that follows another one (the budget preset's warmup follows
  num_train_steps through a field reference, so --config.num_train_steps moves it too)."""
  for path, value in fields.items():
    *parents, leaf = path.split(".")
    node = config
    for name in parents:
      if name not in node:
        raise KeyError(f"{where}: {path}: the config has no {name!r}")
      node = node[name]
    node[leaf] = value(config) if callable(value) else value
