"""Questionable input the run continues past: logged once, repeated at exit, an error under `--strict`.

    from bert_jax import input_warnings
    input_warnings.warn_input("corpus.txt: skipped 67 of 689 lines that are not UTF-8 (first: line 12)")

A reader that skips or doubts part of its input (lines that are not UTF-8, a SQuAD v1.1 dev question without
an answer, rows dropped with on_error="skip") calls `warn_input(message)`, which logs the message and keeps
it for the end-of-run summary (`bert_jax.cli` prints them again at exit); in strict mode (`--strict` on every
entry point, or `set_strict(True)` from Python) it raises a UserError instead, so nothing is dropped silently
or at all. The setting is process-wide: every host of a multi-host run parses the same flags.

Readers at every layer call `warn_input`, so this module imports nothing from bert_jax but `errors`.
"""

import logging
from typing import List

from bert_jax.errors import UserError

_log = logging.getLogger("bert_jax")

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
