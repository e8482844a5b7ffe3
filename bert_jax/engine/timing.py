"""Small clocks of the training loops: a run's start-up, logged as one line, the steps/s of a logging
window that leaves compilation out, and a fine-tuning run's training time with its first step apart.

    clock = StartupClock()                 # at the loop's entry; the launch is the process's start time
    with clock.stage("data"): ...          # stages that run at the same time as others
    clock.ready()                          # set-up done
    clock.first_step()                     # after the first step's sync: logs the start-up line once

    window = StepWindow()
    window.step(); window.rate(batch_size) # sequences/s since the last reset(); None until the first step synced

    clock = TrainClock()
    clock.step(outputs); summary = clock.summary(steps)   # {train_seconds, first_step_seconds, ...}
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any, Dict, Iterator, Optional

import jax

log = logging.getLogger(__name__)

_MODULE_IMPORTED = time.time()


def process_start_time() -> float:
  """Wall-clock time this process started (Linux /proc), else when this module was imported."""
  try:
    with open("/proc/self/stat") as f:
      ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
      uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
  except (OSError, ValueError, IndexError):
    return _MODULE_IMPORTED


class StartupClock:
  """Where a run's start-up went: imports and config, then stages that run at once (the data on one thread,
  the state and the compile on another), then the first step."""

  def __init__(self):
    self.launch = process_start_time()
    self.entered = time.time()
    self.stages: Dict[str, float] = {}
    self._ready: Optional[float] = None
    self._first_step: Optional[float] = None
    self._lock = threading.Lock()

  @contextlib.contextmanager
  def stage(self, name: str) -> Iterator[None]:
    t0 = time.time()
    try:
      yield
    finally:
      with self._lock:
        self.stages[name] = time.time() - t0

  def ready(self) -> None:
    self._ready = time.time()

  def first_step(self) -> None:
    """Logs `start-up: imports and config X s; then at once: data X s | state X s + train-step compile X s;
    first step X s later; first step X s after launch` once."""
    if self._first_step is not None:
      return
    self._first_step = now = time.time()
    ready = self._ready if self._ready is not None else now
    model_part = " + ".join(f"{k} {v:.1f} s" for k, v in self.stages.items() if k != "data")
    log.info("start-up: imports and config %.1f s; then at once: data %.1f s | %s; first step %.1f s later; "
             "first step %.1f s after launch", self.entered - self.launch, self.stages.get("data", 0.0),
             model_part, now - ready, now - self.launch)


class StepWindow:
  """Steps since the last logging step, timed from the first step's sync (compilation excluded)."""

  def __init__(self):
    self.start: Optional[float] = None
    self.steps = 0

  def synced(self) -> None:
    """The first step finished (compiled and ran): time from here."""
    self.start, self.steps = time.time(), 0

  def step(self) -> None:
    if self.start is not None:
      self.steps += 1

  def rate(self, batch_size: int) -> Optional[float]:
    """Sequences per second over the window; None before any timed step."""
    if self.start is None or not self.steps:
      return None
    return self.steps * batch_size / max(time.time() - self.start, 1e-9)

  def reset(self) -> None:
    if self.start is not None:
      self.start, self.steps = time.time(), 0


class TrainClock:
  """A loop's training time with the first step apart: it compiles, which is not throughput. `step(outputs)`
  after every step waits for the first one's outputs (the only sync it adds) and times it."""

  def __init__(self):
    self.start = time.time()
    self.first_step_seconds: Optional[float] = None

  def step(self, outputs: Any) -> bool:
    """True right after the first step (now finished and timed); False for every later one."""
    if self.first_step_seconds is not None:
      return False
    jax.block_until_ready(outputs)
    self.first_step_seconds = time.time() - self.start
    return True

  def summary(self, steps: int) -> Dict[str, Any]:
    """{train_seconds, first_step_seconds, train_steps, steps_per_second} for `steps` finished steps (call it
    once the last step's outputs are ready). steps_per_second leaves the first step out: None below 2 steps."""
    seconds = time.time() - self.start
    first = self.first_step_seconds or 0.0
    return {"train_seconds": round(seconds, 2), "first_step_seconds": round(first, 2), "train_steps": steps,
            "steps_per_second": round((steps - 1) / max(seconds - first, 1e-9), 3) if steps > 1 else None}
