"""How a user's mistake is raised, how questionable input is reported, and how entry points show both.

    from bert_jax import errors
    raise errors.UserError("config.batch_size=12 is not divisible by 8 data shards x grad_accum_steps=1")
    errors.warn_input("corpus.txt: skipped 67 of 689 lines that are not UTF-8 (first: line 12)")

    if __name__ == "__main__":          # an entry point (train.py, finetune.py)
      errors.run_main(main)             # absl's app.run(main) with the behaviour below
      # argparse entry points (python -m bert_jax.convert, ...create_pretraining_data): run_plain_main(main)

A `UserError` is a mistake in what the user gave us (a flag, a config field, a file, a row of a file): the
entry points print `error: <message>` and exit with `exit_code` (2), with the traceback only under
`--verbose`. Anything else is an internal error and keeps its traceback (exit 1). `Interrupted` (a run
stopped by SIGINT/SIGTERM after its checkpoint) prints one line and exits 128 + signum.

Input warnings: a reader that skips or doubts part of its input (lines that are not UTF-8, a SQuAD v1.1 dev
question without an answer, rows dropped with on_error="skip") calls `warn_input(message)`, which logs the
message and keeps it for the end-of-run summary; in strict mode (`--strict` on every entry point, or
`set_strict(True)` from Python) it raises a UserError instead, so nothing is dropped silently or at all.
The setting is process-wide: every host of a multi-host run parses the same flags.

`run_main` also turns flag-parsing failures into one `error:` line with exit 2: an unknown
`--config.FIELD` (with "did you mean"), a value of the wrong type, a config file that fails to load.

This module imports nothing from bert_jax (absl and ml_collections only inside `run_main`), so every layer
may import it.
"""

import logging
import sys
from typing import Callable, List, Optional, Sequence

_log = logging.getLogger("bert_jax")


class UserError(Exception):
  """A bad flag, config field, file or input row; the message names it and says what was expected."""
  exit_code = 2


class Interrupted(Exception):
  """A run stopped on SIGINT/SIGTERM after saving a checkpoint at `step`; the entry points exit with
  128 + signum (130 for SIGINT, 143 for SIGTERM), as a shell does, so a scheduler sees "not done"."""

  def __init__(self, signum: int, step: int, message: str = ""):
    import signal  # pylint: disable=g-import-not-at-top
    name = signal.Signals(signum).name
    super().__init__(message or f"stopped by {name} at step {step}; checkpoint saved, rerun to resume")
    self.signum = signum
    self.step = step

  @property
  def exit_code(self) -> int:
    return 128 + self.signum


# ---- input warnings and strict mode ---------------------------------------------------------------------
_STRICT = False
_INPUT_WARNINGS: List[str] = []


def set_strict(strict: bool) -> None:
  """Process-wide: input warnings (`warn_input`) raise a UserError instead (the `--strict` flag)."""
  global _STRICT
  _STRICT = bool(strict)


def is_strict() -> bool:
  return _STRICT


def warn_input(message: str) -> None:
  """Reports questionable input the run continues past (skipped lines or rows, unanswered questions).

  The message names the file and the count. Logged as a warning and kept for `input_warnings()` (the entry
  points repeat them at exit); under strict mode raised as a UserError.
  """
  if _STRICT:
    raise UserError(f"{message} (--strict: input warnings are errors)")
  if message in _INPUT_WARNINGS:   # the same file read again (each evaluation, each phase): said once
    return
  _INPUT_WARNINGS.append(message)
  _log.warning("%s", message)


def input_warnings() -> List[str]:
  """The input warnings of this process so far, oldest first."""
  return list(_INPUT_WARNINGS)


def clear_input_warnings() -> None:
  _INPUT_WARNINGS.clear()


# ---- entry points ---------------------------------------------------------------------------------------
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


def _load_config_file(spec: str):
  """get_config(...) of `path[:args]` as ml_collections' config flags load it (None when it fails)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  path, sep, arg = spec.partition(":")
  if not os.path.isfile(path):
    return None
  try:
    module_spec = importlib.util.spec_from_file_location("_bert_jax_config_for_hint", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg) if sep else module.get_config()
  except Exception:  # noqa: BLE001 - only used to phrase a hint
    return None


def _unknown_config_fields(argv: Sequence[str], config_flag_names: Sequence[str]) -> Optional[str]:
  """'--config.no_such_field: configs/pretrain.py has no field ...; did you mean ...?' for the first
  `--NAME.FIELD=...` of argv that the config loaded by `--NAME=...` lacks; None when all exist."""
  import difflib  # pylint: disable=g-import-not-at-top
  specs = {}
  for a in argv:
    for name in config_flag_names:
      if a.startswith(f"--{name}="):
        specs[name] = a.split("=", 1)[1]
  for a in argv:
    for name, spec in specs.items():
      if not a.startswith(f"--{name}."):
        continue
      field = a[len(name) + 3:].split("=", 1)[0]
      config = _load_config_file(spec)
      if config is None:
        return None
      keys = _flatten_keys(config)
      if field in keys:
        continue
      path = spec.partition(":")[0]
      close = difflib.get_close_matches(field, keys, n=3, cutoff=0.6)
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


def _flag_error_message(e: BaseException, argv: Sequence[str], config_flag_names: Sequence[str]) -> str:
  unknown = _unknown_config_fields(argv, config_flag_names)
  if unknown:
    return unknown
  import re  # pylint: disable=g-import-not-at-top
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


def run_main(main: Callable[[List[str]], object], argv: Optional[Sequence[str]] = None) -> None:
  """absl's `app.run(main)` for an entry point, with this package's error output.

  Adds the flags --verbose (a user error's traceback too) and --strict (input warnings are errors).
  Exit codes: 0 done; 2 a UserError or a bad flag / config override (one `error: ...` line); 1 an
  internal error (with its traceback); 128 + signum an `Interrupted` run (130 SIGINT, 143 SIGTERM).
  """
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  if "verbose" not in FLAGS:
    flags.DEFINE_bool("verbose", False, "Show the traceback of a user error too (one `error:` line without).")
  if "strict" not in FLAGS:
    flags.DEFINE_bool("strict", False, "Input warnings (skipped non-UTF-8 lines, skipped rows, SQuAD v1.1 "
                      "questions without answers) are errors.")
  argv = list(sys.argv if argv is None else argv)
  verbose_in_argv = any(a in ("--verbose", "--verbose=true", "--verbose=True", "--verbose=1") for a in argv)
  config_flag_names = [name for name, flag in FLAGS._flags().items()  # pylint: disable=protected-access
                       if type(flag).__module__.startswith("ml_collections")]

  def parse(args):
    try:
      rest = FLAGS(args)
    except SystemExit:   # --help
      raise
    except Exception as e:  # noqa: BLE001 - any failure while parsing is a bad flag or config
      if verbose_in_argv:
        import traceback  # pylint: disable=g-import-not-at-top
        traceback.print_exc()
      _print_error(_flag_error_message(e, args, config_flag_names))
      sys.exit(UserError.exit_code)
    for name in config_flag_names:     # a config file that failed to load raises only when read
      try:
        value = getattr(FLAGS, name)
        if value is not None:
          value.keys()             # ml_collections' _ErrorConfig raises its load error here
      except Exception as e:  # noqa: BLE001
        if verbose_in_argv:
          import traceback  # pylint: disable=g-import-not-at-top
          traceback.print_exc()
        reason = [l.strip() for l in str(e).splitlines() if l.strip()][-1:] or [type(e).__name__]
        _print_error(f"--{name}={FLAGS[name].serialize().split('=', 1)[-1]}: {reason[0]}")
        sys.exit(UserError.exit_code)
    return rest

  def wrapped(args):
    set_strict(FLAGS.strict)
    return _call(main, args, FLAGS.verbose)

  app.run(wrapped, argv=argv, flags_parser=parse)


def run_plain_main(main: Callable[[List[str]], Optional[int]], argv: Optional[Sequence[str]] = None) -> None:
  """`sys.exit(main(argv))` for an argparse entry point (python -m bert_jax.convert, create_pretraining_data)
  with the same error output and exit codes as `run_main`; --verbose and --strict are taken out of argv
  before `main` parses the rest."""
  argv = list(sys.argv[1:] if argv is None else argv)
  verbose = "--verbose" in argv
  set_strict("--strict" in argv)
  argv = [a for a in argv if a not in ("--verbose", "--strict")]
  sys.exit(_call(main, argv, verbose) or 0)


def _call(main, argv, verbose: bool):
  """main(argv); a UserError -> one `error:` line, exit 2; Interrupted -> one line, exit 128 + signum;
  the input warnings repeated at the end."""
  try:
    return main(argv)
  except UserError as e:
    if verbose:
      import traceback  # pylint: disable=g-import-not-at-top
      traceback.print_exc()
    _print_error(str(e))
    sys.exit(e.exit_code)
  except Interrupted as e:
    print(f"interrupted: {e}", file=sys.stderr, flush=True)
    sys.exit(e.exit_code)
  finally:
    for message in _INPUT_WARNINGS:
      print(f"warning: {message}", file=sys.stderr, flush=True)
