"""When a training loop acts: log, evaluate, checkpoint, stop early. Every loop (pre-training's phases,
fine-tuning, the vmapped multi-run) asks these instead of spelling the arithmetic itself, so each rule is
written once (the shape of big_vision's `utils.itstime` and clu's `periodic_actions`).

    due = Schedule(total_steps=150, log_every=10, eval_every=75)
    due.log(step); due.evaluate(step); due.checkpoint(step, end=phase.end); due.epoch(step)
    stopper = EarlyStopping(patience=3); stop = stopper.update(improved)

`step` is always the number of steps finished so far (1 after the first step), as the loops count it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional


def every(step: int, n: int, last: Optional[int] = None) -> bool:
  """True when an action that runs every `n` steps is due after `step` finished steps: `step` is a multiple
  of `n`, or it is `last` (the final step acts too, so a run of 150 steps logging every 20 logs step 150).
  n <= 0 turns the action off, the last step included; step 0 (nothing run yet) is never due."""
  if n <= 0 or step <= 0:
    return False
  return step % n == 0 or step == last


@dataclasses.dataclass(frozen=True)
class Schedule:
  """A loop's periodic actions over `total_steps`. An interval of 0 turns its action off.

  total_steps       the run's last step: logging and evaluation act there whatever their interval
  log_every         metrics rows every this many steps
  eval_every        evaluation every this many steps
  checkpoint_every  a checkpoint every this many steps; the end of a phase always saves (`checkpoint`)
  steps_per_epoch   batches in one pass over the data (fine-tuning), for `epoch`; 0 where there are no epochs
  """
  total_steps: int
  log_every: int = 0
  eval_every: int = 0
  checkpoint_every: int = 0
  steps_per_epoch: int = 0

  @classmethod
  def epochs(cls, total_steps: int, steps_per_epoch: int, log_every: int, eval_every: int,
             evaluate: bool = True) -> "Schedule":
    """Fine-tuning's schedule: `eval_every` 0 evaluates at the end of every epoch (the plan's convention; its
    evals_per_epoch has already been turned into an interval); `evaluate=False` (no eval split, do_eval off)
    never evaluates."""
    interval = (eval_every if eval_every > 0 else steps_per_epoch) if evaluate else 0
    return cls(total_steps, log_every, interval, 0, steps_per_epoch)

  def log(self, step: int, end: Optional[int] = None) -> bool:
    """A metrics row after `step`: every log_every steps and at `end` (default: the run's last step; a
    pre-training phase's last step logs too, so each phase's final loss is on record)."""
    return every(step, self.log_every, self.total_steps if end is None else end)

  def evaluate(self, step: int) -> bool:
    """An evaluation after `step`: every eval_every steps and at the run's last step (eval_every 0: never)."""
    return every(step, self.eval_every, self.total_steps)

  def checkpoint(self, step: int, end: Optional[int] = None) -> bool:
    """A checkpoint after `step`: every checkpoint_every steps, and always at `end` (default: the run's last
    step; pre-training passes its phase's end, where the next phase's shapes begin), checkpoint_every 0
    included: a run always leaves its final state."""
    return step == (self.total_steps if end is None else end) or every(step, self.checkpoint_every)

  def epoch(self, step: int) -> float:
    """Epochs done after `step` (1.5: half-way through the second), counted as whole epochs finished before
    this step's epoch plus the fraction of this one (its last step gives exactly the next whole number). Summed
    in this order, not step / steps_per_epoch: metrics.jsonl's epochs stay the numbers they always were."""
    done = (step - 1) // self.steps_per_epoch
    return done + (step - done * self.steps_per_epoch) / self.steps_per_epoch


class EarlyStopping:
  """Stops after `patience` evaluations in a row without a better main metric; patience 0 never stops.

      stopper = EarlyStopping(3)
      if stopper.update(improved): ...   # True: time to stop (stopper.bad evaluations without improvement)
  """

  def __init__(self, patience: int):
    self.patience, self.bad = int(patience), 0

  def update(self, improved: bool) -> bool:
    """Counts one evaluation; True when the loop should stop now."""
    self.bad = 0 if improved else self.bad + 1
    return 0 < self.patience <= self.bad
