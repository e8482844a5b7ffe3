"""How the entry points show a user's mistake: one `error:` line and exit 2, input warnings again at exit.

    if __name__ == "__main__":          # an absl entry point (train.py, finetune.py)
      cli.run_main(main)                # absl's app.run(main) with the behaviour below
    # argparse entry points (python -m bert_jax.convert, ...create_pretraining_data): cli.run_plain_main(main)

Exit codes: 0 done; 2 a `UserError` or a bad flag / config override (one `error: ...` line, the traceback
only under `--verbose`); 1 an internal error (with its traceback); 128 + signum an `Interrupted` run (130
SIGINT, 143 SIGTERM). `--strict` makes input warnings errors (`bert_jax.input_warnings`).

`run_main` also turns flag-parsing failures into one `error:` line: an unknown `--config.FIELD` (with "did
you mean"), a value of the wrong type, a config file that fails to load.

`--verbose` also shows the libraries' log lines, which are hidden otherwise (`bert_jax.logs.set_verbose`).
`--help` lists --verbose and --strict beside the entry point's own flags and exits 0.

This module imports from bert_jax only the leaves `errors`, `input_warnings` and `logs`, so an entry point at any
layer may use it, and ml_collections only inside `config_flags_of`, so importing it needs only absl.
"""

import argparse
import difflib
import importlib.util
import os
import re
import sys
import traceback
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from absl import app
from absl import flags

from bert_jax import input_warnings, logs
from bert_jax.errors import Interrupted, UserError


VERBOSE_HELP = ("Show the libraries' log lines (Orbax's checkpoint internals, JAX's backend probes, TensorFlow's "
                "C++ start-up lines) and the traceback of a user error (one `error:` line without).")
STRICT_HELP = ("Input warnings (skipped non-UTF-8 lines, skipped rows, SQuAD v1.1 questions without answers) are "
               "errors.")
HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


class ArgumentParser(argparse.ArgumentParser):
  """argparse for an entry point run by `run_plain_main`: a bad flag (unknown, missing, wrong type, not a
  choice) raises UserError, so the user sees one `error: --flag ...` line and exit 2 instead of argparse's
  usage block; `parser.fail(message)` does the same for the entry point's own checks of the values.
  `--help` lists --verbose and --strict too (`run_plain_main` takes them out of argv before `main` parses)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    self.add_argument("--strict", action="store_true", help=STRICT_HELP)

  def error(self, message: str):
    raise UserError(f"{message} (--help lists the flags)")

  def fail(self, message: str):
    raise UserError(message)


def _print_error(message: str) -> None:
  sys.stderr.flush()
  print(f"error: {message}", file=sys.stderr, flush=True)


def _root_cause(e: BaseException) -> BaseException:
  while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
    e = e.__cause__ if e.__cause__ is not None else e.__context__
  return e


def _flatten_keys(config, prefix: str = "") -> List[str]:
  """Dotted names of every field of a ConfigDict (sub-dicts and their fields)."""
  out = []
  for key in config.keys():
    name = prefix + key
    out.append(name)
    value = config[key]
    if hasattr(value, "keys") and hasattr(value, "get"):
      out.extend(_flatten_keys(value, name + "."))
  return out


def _leaf_closeness(wanted: str, known: str) -> float:
  """How near a field's last name `wanted` is to `known`: 1 for its abbreviation (`lr` -> `learning_rate`, the
  initials of its words) and 0.9 for its beginning (`warmup` -> `warmup_proportion`), else difflib's ratio."""
  words = [w for w in known.split("_") if w]
  if len(words) > 1 and wanted == "".join(w[0] for w in words):
    return 1.0
  if len(wanted) >= 3 and known.startswith(wanted):
    return 0.9
  return difflib.SequenceMatcher(None, wanted, known).ratio()


def close_names(wanted: str, known: Sequence[str], n: int = 2, cutoff: float = 0.6) -> List[str]:
  """The dotted names of `known` nearest to `wanted`, best first: the last names weigh 0.7 (abbreviations count,
  `_leaf_closeness`), the parents 0.3. difflib on the whole string suggested `optimizer.b2 or optimizer.b1` for
  `optimizer.lr`, which shares more characters with them than with `optimizer.learning_rate`."""
  parent, _, leaf = wanted.rpartition(".")
  scored = []
  for name in known:
    known_parent, _, known_leaf = name.rpartition(".")
    near = _leaf_closeness(leaf, known_leaf)
    if near < cutoff:        # a shared parent alone (`no_such_field` -> `batch_size`) is no suggestion
      continue
    same = 1.0 if known_parent == parent else difflib.SequenceMatcher(None, parent, known_parent).ratio()
    scored.append((0.7 * near + 0.3 * same, name))
  scored.sort(key=lambda t: -t[0])   # stable: equal scores keep the config's order
  return [name for score, name in scored[:n] if score >= cutoff]


def _config_keys(flag: flags.Flag, spec: str) -> Optional[List[str]]:
  """The dotted field names of the config that `--NAME=spec` loads, loaded by the flag's own parser (as
  ml_collections loaded it while parsing); None when it does not load."""
  try:
    return _flatten_keys(flag.parser.parse(spec))
  except Exception:  # noqa: BLE001 - only used to phrase a hint; the parse error itself is reported
    return None


def unknown_config_field(argv: Sequence[str], config_flags_by_name: Mapping[str, flags.Flag]) -> Optional[str]:
  """'--config.no_such_field: configs/pretrain.py has no field ...; did you mean ...?' for the first
  `--NAME.FIELD=...` of argv that the config loaded by `--NAME=...` lacks; None when all exist.

  `config_flags_by_name` maps each config flag's name to its absl Flag (an ml_collections config file flag).
  """
  specs = {}
  for a in argv:
    for name in config_flags_by_name:
      if a.startswith(f"--{name}="):
        specs[name] = a.split("=", 1)[1]
  keys_by_name: Dict[str, Optional[List[str]]] = {}   # each config file is loaded at most once
  for a in argv:
    for name, spec in specs.items():
      if not a.startswith(f"--{name}."):
        continue
      field = a[len(name) + 3:].split("=", 1)[0]
      if name not in keys_by_name:
        keys_by_name[name] = _config_keys(config_flags_by_name[name], spec)
      keys = keys_by_name[name]
      if keys is None:
        return None
      if field in keys:
        continue
      path = spec.partition(":")[0]
      close = close_names(field, keys, n=3)
      parent = field.rpartition(".")[0]
      if close:
        hint = "did you mean " + " or ".join(f"--{name}.{c}" for c in close) + "?"
      else:
        siblings = [k[len(parent) + 1:] if parent else k for k in keys
                    if k.startswith(parent + ".") and "." not in k[len(parent) + 1:]] if parent else \
                   [k for k in keys if "." not in k]
        hint = f"its fields{' under ' + parent if parent else ''} are: {', '.join(siblings)}"
      return f"--{name}.{field}: {path} has no field {field!r}; {hint}"
  return None


def _flag_error_message(e: BaseException, argv: Sequence[str],
                        config_flags_by_name: Mapping[str, flags.Flag]) -> str:
  unknown = unknown_config_field(argv, config_flags_by_name)
  if unknown:
    return unknown
  top = str(e).strip()
  flag = re.match(r"^flag (--\S+): ", top)          # absl: "flag --config.batch_size=abc: <reason>"
  prefix = flag.group(1) + ": " if flag else ""
  root = _root_cause(e)
  text = str(root.args[0]) if isinstance(root, KeyError) and len(root.args) == 1 else str(root)
  lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
  if lines and lines[0].startswith("Traceback"):    # a config file's own exception, with its traceback
    lines = lines[-1:]
  text = " ".join(lines) if lines else type(root).__name__
  if "must have a value other than None" in text:   # a required flag is missing
    return re.sub(r"^.*Flag (--\S+) must have a value other than None.*$", r"\1 is required", text)
  return prefix + text


def config_flags_of(flag_values: flags.FlagValues) -> Dict[str, flags.Flag]:
  """{name: Flag} of the ml_collections config-file flags defined in `flag_values`."""
  # lazy: ml_collections is not installed where only JAX is, and create_pretraining_data (which the training
  # input pipeline imports) uses only run_plain_main
  from ml_collections.config_flags.config_flags import is_config_flag  # pylint: disable=g-import-not-at-top
  return {name: flag_values[name] for name in flag_values if is_config_flag(flag_values[name])}


def missing_config_file(argv: Sequence[str], config_flags_by_name: Mapping[str, flags.Flag],
                        cwd: Optional[str] = None, script: Optional[str] = None) -> Optional[str]:
  """The one-line message for the first `--NAME=path[:args]` of argv whose config file does not exist (None when
  all do): a relative path such as `configs/pretrain.py` names a file of the checkout, so run from outside it
  the user got ml_collections' `Failed loading config file ... Attempted [Relative path]` or `[Errno 2]`. The
  message names the file that would work: the same path beside the entry point (`script`, default sys.argv[0]),
  or the installed configs (`pip install .` ships configs/ as the package bert_jax_configs)."""
  cwd = cwd or os.getcwd()
  script = sys.argv[0] if script is None else script
  for a in argv:
    for name in config_flags_by_name:
      if not a.startswith(f"--{name}="):
        continue
      spec = a.split("=", 1)[1]
      path, colon, args = spec.partition(":")
      if not path or os.path.exists(os.path.join(cwd, path)):
        continue
      candidates = []
      if not os.path.isabs(path) and script:
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(script)), path))
      installed = importlib.util.find_spec("bert_jax_configs")
      if installed is not None and installed.submodule_search_locations:
        candidates.append(os.path.join(list(installed.submodule_search_locations)[0], os.path.basename(path)))
      found = next((c for c in candidates if os.path.isfile(c)), None)
      where = f" in {cwd}" if not os.path.isabs(path) else ""
      if found:
        fix = f"run from the checkout, or pass the configs' path: --{name}={found}{colon}{args}"
      else:
        fix = ("run from the bert_jax checkout, or pass the path of its configs/ folder (installed: the "
               "bert_jax_configs package)")
      return f"--{name}={spec}: no config file {path}{where}; {fix}"
  return None


def parse_flags(flag_values: flags.FlagValues, argv: Sequence[str],
                config_flags_by_name: Optional[Mapping[str, flags.Flag]] = None) -> List[str]:
  """flag_values(argv) (the arguments left); a bad flag, an unknown `--config.FIELD` (with "did you mean")
  or a config file that fails to load raises UserError with the message `run_main` prints. Entry points with
  their own FlagValues (python -m bert_jax.input_pipeline.inspect) parse through this too.
  `config_flags_by_name`: the config flags before parsing (default: taken now, before it)."""
  if config_flags_by_name is None:
    config_flags_by_name = config_flags_of(flag_values)
  missing = missing_config_file(argv, config_flags_by_name)
  if missing:
    raise UserError(missing)
  try:
    rest = flag_values(list(argv))
  except SystemExit:   # --help
    raise
  except Exception as e:  # noqa: BLE001 - any failure while parsing is a bad flag or config
    raise UserError(_flag_error_message(e, argv, config_flags_by_name)) from e
  for name in config_flags_by_name:     # a config file that failed to load raises only when read
    try:
      value = flag_values[name].value
      if value is not None:
        value.keys()             # ml_collections' _ErrorConfig raises its load error here
    except Exception as e:  # noqa: BLE001
      reason = [l.strip() for l in str(e).splitlines() if l.strip()][-1:] or [type(e).__name__]
      raise UserError(f"--{name}={flag_values[name].serialize().split('=', 1)[-1]}: {reason[0]}") from e
  return rest


def run_main(main: Callable[[List[str]], object], argv: Optional[Sequence[str]] = None) -> None:
  """absl's `app.run(main)` for an entry point, with this package's error output.

  Adds the flags --verbose (a user error's traceback too) and --strict (input warnings are errors).
  Exit codes: 0 done; 2 a UserError or a bad flag / config override (one `error: ...` line); 1 an
  internal error (with its traceback); 128 + signum an `Interrupted` run (130 SIGINT, 143 SIGTERM).
  """
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  argv = list(sys.argv if argv is None else argv)
  # Registered as the main module's flags (absl names it sys.argv[0]), so `--help`, absl's short help of that
  # module's flags, lists them; they were only under --helpfull.
  main_module = sys.argv[0] if sys.argv and sys.argv[0] else None
  if "verbose" not in FLAGS:
    flags.DEFINE_bool("verbose", False, VERBOSE_HELP, module_name=main_module)
  if "strict" not in FLAGS:
    flags.DEFINE_bool("strict", False, STRICT_HELP, module_name=main_module)
  verbose_in_argv = any(a in ("--verbose", "--verbose=true", "--verbose=True", "--verbose=1") for a in argv)
  # Taken before parsing: parsing defines one more flag per --config.FIELD override.
  config_flags_by_name = config_flags_of(FLAGS)

  def parse(args):
    try:
      return parse_flags(FLAGS, args, config_flags_by_name)
    except SystemExit as e:   # absl's --help / --helpfull print the flags and exit 1; asked for, it is a success
      if e.code == 1 and any(a in HELP_FLAGS for a in args[1:]):
        sys.exit(0)
      raise
    except UserError as e:
      if verbose_in_argv:
        traceback.print_exc()
      _print_error(str(e))
      sys.exit(UserError.exit_code)

  def wrapped(args):
    input_warnings.set_strict(FLAGS.strict)
    return _call(main, args, FLAGS.verbose)

  app.run(wrapped, argv=argv, flags_parser=parse)


def run_plain_main(main: Callable[[List[str]], Optional[int]], argv: Optional[Sequence[str]] = None) -> None:
  """`sys.exit(main(argv))` for an argparse entry point (python -m bert_jax.convert, create_pretraining_data)
  with the same error output and exit codes as `run_main`; --verbose and --strict are taken out of argv
  before `main` parses the rest."""
  argv = list(sys.argv[1:] if argv is None else argv)
  verbose = "--verbose" in argv
  input_warnings.set_strict("--strict" in argv)
  argv = [a for a in argv if a not in ("--verbose", "--strict")]
  sys.exit(_call(main, argv, verbose) or 0)


def _call(main, argv, verbose: bool):
  """main(argv); a UserError -> one `error:` line, exit 2; Interrupted -> one line, exit 128 + signum;
  the input warnings repeated at the end."""
  logs.set_verbose(verbose)   # the libraries' chatter only under --verbose (bert_jax/logs.py)
  try:
    return main(argv)
  except UserError as e:
    if verbose:
      traceback.print_exc()
    _print_error(str(e))
    sys.exit(e.exit_code)
  except Interrupted as e:
    print(f"interrupted: {e}", file=sys.stderr, flush=True)
    sys.exit(e.exit_code)
  finally:
    for message in input_warnings.input_warnings():
      print(f"warning: {message}", file=sys.stderr, flush=True)
