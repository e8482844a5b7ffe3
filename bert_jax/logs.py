"""How much a run says: messages said once per process (`log_once`), and the libraries' chatter behind
`--verbose` (`set_verbose`, `native_stderr_quiet`).

A sweep resolves one plan per run, a pipeline opens its records once per phase and a model is built once per
trace, so the same note would otherwise repeat; the first one is logged at `level` and the rest dropped.

    from bert_jax.logs import log_once
    log_once(log, f"masking: {mode} ({why})")                   # INFO
    log_once(log, "generator width rounded", level=logging.WARNING)

At the default verbosity a run prints its plan, progress, metrics, warnings about the user's own input and a
closing line. The entry points (`bert_jax.cli`) call `set_verbose(--verbose)` before `main`, which sets the
libraries' own loggers:
  - Orbax logs through absl (`CheckpointManagerOptions.read_only=True, setting save_interval_steps=0`, `Given
    directory is read only`, `Missing metrics for step 10`, whole option reprs: 25 of a fine-tuning run's 51
    lines): the `absl` and `orbax` loggers show errors only;
  - JAX's backend probe (`Unable to initialize backend 'tpu': ... libtpu.so`, INFO on every run): the `jax`
    logger shows warnings and errors;
  - TensorFlow's C++ start-up lines (`All log messages before absl::InitializeLog() ...`, the oneDNN notice,
    `Could not find cuda drivers`, `failed call to cuInit`) are written to file descriptor 2 by TensorFlow's own
    copy of absl before anything can configure it, so `TF_CPP_MIN_LOG_LEVEL` does not reach them:
    `native_stderr_quiet()` holds them back while TensorFlow loads (bert_jax.lean_imports.tensorflow).
Under `--verbose` all of it shows, at INFO, and this package's own DEBUG lines too.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile
from typing import Iterator, Set, Tuple

_SAID: Set[Tuple[str, str]] = set()   # (logger name, message) already logged in this process

# The libraries whose INFO/WARNING lines are internals at the default verbosity, and the level they keep.
# "absl" carries Orbax's and TFDS' lines (they log through absl.logging); this package logs under "bert_jax".
LIBRARY_LEVELS = {"absl": logging.ERROR, "orbax": logging.ERROR, "jax": logging.WARNING,
                  "jaxlib": logging.WARNING, "tensorflow": logging.ERROR}
_VERBOSE = False
_HELD_STDERR = None   # inside native_stderr_quiet: the console's file descriptor, while fd 2 is a held file

# A line of a native absl/glog logger: `I0000 00:00:1796432864.216918    6163 port.cc:153] ...` (severity, date,
# time, thread, C++ file:line), and the header absl prints before its first such line. Python's absl lines have
# the same shape but name a .py file: a line another thread logs meanwhile is kept.
_NATIVE_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:[\d.]+\s+\d+ [\w./-]+\.(?:cc|cpp|cxx|c|h):\d+\] ")
_NATIVE_HEADER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def log_once(logger: logging.Logger, message: str, level: int = logging.INFO) -> bool:
  """Logs `message` on `logger` at `level` unless this logger already said it; True when it was logged."""
  key = (logger.name, message)
  if key in _SAID:
    return False
  _SAID.add(key)
  logger.log(level, message, stacklevel=2)   # the caller's file:line in the line, not logs.py's
  return True


def forget(logger_name: str = "") -> None:
  """Lets `logger_name`'s messages (every logger's when empty) be said again: a new run in the same process (a
  notebook, a test) gets its notes afresh."""
  for key in [k for k in _SAID if not logger_name or k[0] == logger_name]:
    _SAID.discard(key)


def set_verbose(verbose: bool) -> None:
  """The libraries' loggers at their quiet levels (`LIBRARY_LEVELS`), or everything at INFO and this package's
  DEBUG lines too when `verbose`. Call before the libraries run (they look their loggers up when they log)."""
  global _VERBOSE
  _VERBOSE = bool(verbose)
  for name, level in LIBRARY_LEVELS.items():
    logging.getLogger(name).setLevel(logging.INFO if verbose else level)
  if verbose:
    logging.getLogger("bert_jax").setLevel(logging.DEBUG)
    if logging.getLogger().level > logging.INFO or logging.getLogger().level == logging.NOTSET:
      logging.getLogger().setLevel(logging.INFO)
    if not logging.getLogger().handlers:   # an argparse entry point: Python's last-resort handler shows WARNING+
      logging.basicConfig(level=logging.INFO, format="%(levelname).1s %(name)s: %(message)s")


def verbose() -> bool:
  """True after `set_verbose(True)` (the entry points' --verbose)."""
  return _VERBOSE


def console_stderr() -> None:
  """fd 2 back to the console now, if a `native_stderr_quiet` block holds it: for a process about to end with
  `os._exit` (the multi-host guard's last line, on a thread of its own, while the main thread imports
  TensorFlow), whose held file the exit would lose with that line."""
  held = _HELD_STDERR
  if held is not None:
    try:
      sys.stderr.flush()
      os.dup2(held, 2)
    except (OSError, ValueError):
      pass


def is_native_log_line(line: str) -> bool:
  """A line TensorFlow's (or XLA's) C++ absl logger wrote before it was configured; see the module docstring."""
  return line.rstrip("\n") == _NATIVE_HEADER or bool(_NATIVE_LINE.match(line))


@contextlib.contextmanager
def native_stderr_quiet() -> Iterator[None]:
  """While inside, what is written to file descriptor 2 (C++ libraries and Python alike) is held in a temporary
  file; at the end it is written back without the native absl log lines, or all of it under --verbose or when
  the block raised (an import that fails shows everything it said). A Python line another thread logs meanwhile
  is delayed, never lost. A process that dies inside the block (a segfault in a native library) takes the held
  lines with it: `--verbose` holds nothing back."""
  if _VERBOSE:
    yield
    return
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):   # no real stderr (an embedding host): nothing to hold back
    yield
    return
  global _HELD_STDERR
  raised = False
  with tempfile.TemporaryFile(mode="w+b") as held:
    os.dup2(held.fileno(), 2)
    _HELD_STDERR = saved
    try:
      yield
    except BaseException:
      raised = True
      raise
    finally:
      _HELD_STDERR = None
      try:
        sys.stderr.flush()
      except (OSError, ValueError):
        pass
      os.dup2(saved, 2)
      os.close(saved)
      held.seek(0)
      text = held.read().decode("utf-8", errors="replace")
      keep = text if raised else "".join(l for l in text.splitlines(keepends=True) if not is_native_log_line(l))
      if keep:
        sys.stderr.write(keep)
        sys.stderr.flush()
