"""Messages said once per process: `log_once(logger, message)`.

A sweep resolves one plan per run, a pipeline opens its records once per phase and a model is built once per
trace, so the same note would otherwise repeat; the first one is logged at `level` and the rest dropped.

    from bert_jax.logs import log_once
    log_once(log, f"masking: {mode} ({why})")                   # INFO
    log_once(log, "generator width rounded", level=logging.WARNING)
"""

import logging
from typing import Set, Tuple

_SAID: Set[Tuple[str, str]] = set()   # (logger name, message) already logged in this process


def log_once(logger: logging.Logger, message: str, level: int = logging.INFO) -> bool:
  """Logs `message` on `logger` at `level` unless this logger already said it; True when it was logged."""
  key = (logger.name, message)
  if key in _SAID:
    return False
  _SAID.add(key)
  logger.log(level, message)
  return True


def forget(logger_name: str = "") -> None:
  """Lets `logger_name`'s messages (every logger's when empty) be said again: a new run in the same process (a
  notebook, a test) gets its notes afresh."""
  for key in [k for k in _SAID if not logger_name or k[0] == logger_name]:
    _SAID.discard(key)
