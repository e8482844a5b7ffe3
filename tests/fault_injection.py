r"""train.py with one fault injected from outside the library: the dead and stuck hosts of tests/test_multihost.py
and experiments/multihost_faults.py. bert_jax holds no fault hook; this script patches two of its functions in
its own process, then runs train.py as `__main__`.

    python tests/fault_injection.py --fault=stall_data@8:1 <train.py's flags>

Faults, KIND@STEP:HOST (only the process whose jax.process_index() is HOST is touched; the others run
train.py unchanged):
  stall_data@STEP:HOST   the host's data iterator blocks for good before the batch of step STEP (it is alive:
                         its heartbeats go on, only the step watchdog can notice); patches
                         bert_jax.pretrain.loop.open_data
  die_in_save@STEP:HOST  the host SIGKILLs itself right after the checkpoint save of step STEP started (its
                         files half-written, never committed); patches Checkpointer.save

Each fault announces itself on stderr first ("fault injection stall_data@8:1: ..."), which the measurements
time the detection from.
"""

from __future__ import annotations

import dataclasses
import os
import runpy
import signal
import sys
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":
  # train.py sees the repository first on sys.path, as when it is started itself (not this script's folder)
  sys.path[0] = REPO
  # train.py sets it before its imports; the patches below import bert_jax (and TensorFlow's loggers) first
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402

from bert_jax.engine import checkpoints  # noqa: E402
from bert_jax.pretrain import loop  # noqa: E402

KINDS = ("stall_data", "die_in_save")


@dataclasses.dataclass(frozen=True)
class Fault:
  """`kind` on host `process` at step `step` (1-based: the step whose batch or checkpoint it hits)."""
  kind: str
  step: int
  process: int

  def __str__(self):
    return f"{self.kind}@{self.step}:{self.process}"


def parse(text: str) -> Fault:
  """"KIND@STEP:HOST" -> Fault; ValueError saying what was expected."""
  try:
    kind, rest = text.split("@", 1)
    step, process = (int(x) for x in rest.split(":", 1))
  except ValueError:
    raise ValueError(f"--fault={text!r}: expected KIND@STEP:HOST, e.g. stall_data@8:1") from None
  if kind not in KINDS:
    raise ValueError(f"--fault={text!r}: unknown fault {kind!r}; expected one of {', '.join(KINDS)}")
  if step < 1 or process < 0:
    raise ValueError(f"--fault={text!r}: expected a step >= 1 and a host >= 0")
  return Fault(kind, step, process)


def _say(fault: Fault, what: str) -> None:
  sys.stdout.flush()
  sys.stderr.write(f"fault injection {fault}: {what}\n")
  sys.stderr.flush()


class StallingData:
  """A host's data iterator, except that the batch of step `fault.step` never comes. `next_step` is the step
  whose batch the next `next()` returns. Everything else (`state()` for the checkpoint) is the iterator's."""

  def __init__(self, data, next_step: int, fault: Fault):
    self._data, self._next_step, self._fault = data, next_step, fault

  def __iter__(self):
    return self

  def __next__(self):
    if self._next_step == self._fault.step:
      _say(self._fault, "the data iterator blocks for good")
      self.block()                      # the watchdog's stack dump names the frame above: __next__
    self._next_step += 1
    return next(self._data)

  @staticmethod
  def block():
    """Waits for good (a unit test replaces it with a raise)."""
    threading.Event().wait()

  def __getattr__(self, name):
    return getattr(self._data, name)


def install(fault: Fault) -> None:
  """Patches this process's bert_jax for `fault`; the host check runs at call time, after jax.distributed
  has started and process_index() means the host."""
  if fault.kind == "stall_data":
    open_data = loop.open_data

    def stalling_open_data(plan, phase, *, start_step: int = 0, evaluation: bool = False):
      data = open_data(plan, phase, start_step=start_step, evaluation=evaluation)
      if evaluation or jax.process_index() != fault.process:
        return data
      # the phase's batch `start_step` (0-based) is the one of global step phase.start + start_step + 1
      return StallingData(data, phase.start + start_step + 1, fault)

    loop.open_data = stalling_open_data
  else:
    save = checkpoints.Checkpointer.save

    def save_then_die(self, step, *args, **kwargs):
      out = save(self, step, *args, **kwargs)     # returns once the asynchronous write has started
      if int(step) == fault.step and jax.process_index() == fault.process:
        _say(fault, f"SIGKILL during the save of step {step}")
        os.kill(os.getpid(), signal.SIGKILL)
      return out

    checkpoints.Checkpointer.save = save_then_die


def main(argv) -> None:
  faults = [a for a in argv if a.startswith("--fault=")]
  if len(faults) != 1:
    sys.exit("error: expected one --fault=KIND@STEP:HOST before train.py's flags")
  try:
    install(parse(faults[0].split("=", 1)[1]))
  except ValueError as e:
    sys.exit(f"error: {e}")
  train = os.path.join(REPO, "train.py")
  sys.argv = [train] + [a for a in argv if a not in faults]
  runpy.run_path(train, run_name="__main__")


if __name__ == "__main__":
  main(sys.argv[1:])
