"""The exception types of a user's mistake and of a stopped run; every layer may raise them.

    from bert_jax.errors import UserError
    raise UserError("config.batch_size=12 is not divisible by 8 data shards x grad_accum_steps=1")

A `UserError` is a mistake in what the user gave us (a flag, a config field, a file, a row of a file): the
entry points (`bert_jax.cli`) print `error: <message>` and exit with `exit_code` (2), with the traceback only
under `--verbose`. Anything else is an internal error and keeps its traceback (exit 1). `Interrupted` (a run
stopped by SIGINT/SIGTERM after its checkpoint) prints one line and exits 128 + signum. A multi-host run
whose peer died or stalled prints one `error:` line and exits RETRYABLE_EXIT_CODE (75, EX_TEMPFAIL from
sysexits.h: "try again later"; bert_jax.engine.watchdog): restart every host and it resumes.

This module imports nothing from bert_jax, so every layer may import it. Input warnings and `--strict` are
in `bert_jax.input_warnings`, the entry points' error output in `bert_jax.cli`.
"""

import signal

# A multi-host run stopped because a host died, froze or stalled (bert_jax.engine.watchdog): nothing is
# wrong with the config or the data; restarting every host resumes from the newest complete checkpoint.
# Distinct from 1 (internal error), 2 (UserError), 130/143 (SIGINT/SIGTERM after a checkpoint).
RETRYABLE_EXIT_CODE = 75


class UserError(Exception):
  """A bad flag, config field, file or input row; the message names it and says what was expected."""
  exit_code = 2


class Interrupted(Exception):
  """A run stopped on SIGINT/SIGTERM after saving a checkpoint at `step`; the entry points exit with
  128 + signum (130 for SIGINT, 143 for SIGTERM), as a shell does, so a scheduler sees "not done"."""

  def __init__(self, signum: int, step: int, message: str = ""):
    name = signal.Signals(signum).name
    super().__init__(message or f"stopped by {name} at step {step}; checkpoint saved, rerun to resume")
    self.signum = signum
    self.step = step

  @property
  def exit_code(self) -> int:
    return 128 + self.signum
