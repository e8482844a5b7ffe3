"""Dead, stuck and preempted hosts: end a multi-host run in about a minute with one line and a retryable code.

JAX is fail-together: when one process of a `jax.distributed` job dies, the others are meant to die too. Left
alone they do it badly: a collective that lost a participant raises `Gloo AllGather failed ... Connection
reset` and the process then waits for the dead host in `jax.distributed.shutdown` (5 min); or the
coordination service aborts the survivors after its heartbeat timeout (SIGABRT, 100 s by default, with a page
of loaded extension modules as the last output); and a host that is alive but stuck (a blocked data
iterator, a hung file system) hangs every other host without any limit. `HostGuard` replaces all three:

    guard = HostGuard(settings, checkpoint_dir).start()   # settings: resolve_guard(config, process_count)
    guard.enter("data", step); batch = next(data)         # what the main thread is doing, for the messages
    guard.enter("step", step); ...                        # and for the phase's allowance
    guard.step_done(step, synced=True)                    # progress (synced: the host waited for the device)
    guard.stop("done")                                    # a clean end (or "stopped", "failed")

Two daemon threads:
  - heartbeats (multi-host only): every heartbeat_timeout_s / 10, this host's record {beat, step, phase} goes
    to the coordination service's key-value store (`bert_jax/guard/<process>`) and every host's record is
    read back. A peer whose record has not changed for `heartbeat_timeout_s` is dead (or frozen: SIGSTOP);
    on a host other than 0, a key-value store that has not answered for that long means host 0 (the
    coordinator) is gone. Changes are timed on this host's monotonic clock: no clock agreement needed.
  - the check, twice a second: a dead peer as above, a peer that reported a fatal exit (its line is
    repeated, so every host prints the same reason), and the step watchdog: no step finished on this host
    for max(min_s, step_factor x the median step time x the steps since the last device sync), plus
    compile_s while the first step of a phase compiles, eval_s while evaluating, checkpoint_s while saving.

Either way the host prints every thread's stack (faulthandler; for a stall), then ONE line,
  error: host 1 of 2 stopped responding during step 41; newest complete checkpoint: step 40; restart all
  hosts to resume
and exits with `errors.RETRYABLE_EXIT_CODE` (75, EX_TEMPFAIL) through `os._exit`: no `atexit` wait for the
dead peer, no Orbax save left waiting for it. launch/tpu_pod.sh (supervised) and launch/slurm_gpu.sbatch
restart or requeue on 75 as on 143.

Host 0 runs jax.distributed's coordination service. When it dies, JAX's client on every other host aborts
within a second or two (SIGABRT); on hosts other than 0 that abort is intercepted (engine/coordinator.py: a
SIGABRT handler that finds host 0's port closed; initialize_distributed puts it in place with a start-up line,
the guard's start with its own) and the host prints the same kind of line,
  error: host 0 of 2 (the coordinator) stopped responding during step 12 (its coordination service is gone:
  connection refused; its last report: step at step 11); newest complete checkpoint: step 10; ...
then exits 75. Host 0 still leaves last when it ends the run itself: after its line it waits until every
peer that still beats has said it is leaving (at most 2 beats + 6 s; a dead or frozen one is not waited for),
so the peers repeat its reason rather than report its departure.
The half-written checkpoint a dying host leaves is an Orbax temporary
directory (`<step>.orbax-checkpoint-tmp-*` locally, no `commit_success.txt` on gs://): never a step, never
restored, deleted when the next run opens its Checkpointer.

A step that raises while every host still looks alive (`await_verdict`, then `fail`): the traceback, then for
a JAX runtime error (a collective that timed out) one line and exit 75, else exit 1, at once: no 5-minute
wait in `jax.distributed.shutdown` for peers that wait for this host. `barrier` (the coordination service's,
not a collective) lines the hosts up before each phase's first step: gloo gives a new communicator 30 s.

JAX's own coordination-service heartbeat is set to `heartbeat_timeout_s + JAX_HEARTBEAT_MARGIN_S`
(distributed_init_kwargs): it stays the backstop (SIGABRT) if this process cannot act at all. An abort
while host 0 still listens (that backstop, an XLA check failure) is not intercepted.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import functools
import json
import logging
import os
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from typing import Dict, Optional

import jax

from bert_jax.errors import RETRYABLE_EXIT_CODE, UserError
from bert_jax import fileio, logs
from bert_jax.engine import coordinator
from bert_jax.input_pipeline import checks

log = logging.getLogger(__name__)

KEY_PREFIX = "bert_jax/guard/"
JAX_HEARTBEAT_MARGIN_S = 30     # JAX's own heartbeat fires this much later: ours gives the one-line outcome
MAX_TIMEOUT_S = 1_000_000         # JAX takes its timeouts as 32-bit seconds (a larger one was a TypeError traceback)
FINAL_PHASES = ("done", "stopped", "failed")
LINGER_MAX_S = 20.0       # the longest host 0 waits, after its own line, for the peers to leave first


# ---- settings (resolved once, by the plan; the heartbeat timeout also before jax.distributed starts) -------
@dataclasses.dataclass(frozen=True)
class GuardSettings:
  """config.distributed.heartbeat_timeout_s and config.watchdog.*, resolved."""
  heartbeat_timeout_s: float
  watchdog: bool                 # the step watchdog runs (heartbeats run on every multi-host run)
  step_factor: float
  min_s: float
  compile_s: float
  eval_s: float
  checkpoint_s: float

  def describe(self) -> str:
    return f"heartbeat timeout {self.heartbeat_timeout_s:g} s; " + (
        f"step watchdog {self.step_factor:g} x median step, floor {self.min_s:g} s (+ compile {self.compile_s:g} "
        f"s, eval {self.eval_s:g} s, checkpoint {self.checkpoint_s:g} s)" if self.watchdog else "step watchdog off")


def heartbeat_timeout(config) -> float:
  """config.distributed.heartbeat_timeout_s, checked (also read before the plan, by jax.distributed's start)."""
  checks.check_range(config, "distributed.heartbeat_timeout_s", lo=2, hi=MAX_TIMEOUT_S)
  return float(config.distributed.get("heartbeat_timeout_s", 60))


def initialization_timeout(config) -> float:
  """config.distributed.initialization_timeout_s, checked."""
  checks.check_range(config, "distributed.initialization_timeout_s", lo=2, hi=MAX_TIMEOUT_S)
  return float(config.distributed.get("initialization_timeout_s", 300))


def distributed_init_kwargs(config) -> Dict[str, int]:
  """jax.distributed.initialize's heartbeat and start-up timeouts: ours plus a margin, so this module acts
  first (JAX's own end is an abort with a native stack, SIGABRT)."""
  return {"heartbeat_timeout_seconds": int(heartbeat_timeout(config) + JAX_HEARTBEAT_MARGIN_S),
          "initialization_timeout": int(initialization_timeout(config) + JAX_HEARTBEAT_MARGIN_S)}


def initialize_distributed(config, **kwargs) -> None:
  """jax.distributed.initialize(**kwargs, distributed_init_kwargs(config)), with a deadline: a host that does
  not get every process into the job within config.distributed.initialization_timeout_s (a peer that never
  started, or died before joining) prints one line and exits RETRYABLE_EXIT_CODE, where JAX would wait its
  own timeout and abort."""
  limit = initialization_timeout(config)
  joined = threading.Event()
  where = kwargs.get("coordinator_address") or "auto-detected"
  expected = kwargs.get("num_processes") or "the auto-detected number of"

  def deadline():
    if not joined.wait(limit):
      sys.stdout.flush()
      sys.stderr.write(f"error: not every host joined the job within {limit:g} s "
                       f"(config.distributed.initialization_timeout_s; coordinator {where}, {expected} processes): "
                       "a host did not start or died before joining; nothing was trained; restart all hosts\n")
      sys.stderr.flush()
      os._exit(RETRYABLE_EXIT_CODE)

  threading.Thread(target=deadline, name="bert_jax-init-deadline", daemon=True).start()
  try:
    jax.distributed.initialize(**kwargs, **distributed_init_kwargs(config))
  finally:
    joined.set()        # joined, or failed at once (a bad argument): no deadline line after that one
  from jax._src import distributed  # pylint: disable=g-import-not-at-top  jax exposes no public client
  state = distributed.global_state
  if state.process_id != 0 and state.coordinator_address:   # until the host guard takes over (HostGuard.start)
    coordinator.watch(state.coordinator_address, functools.partial(_coordinator_lost_in_start_up,
                                                                   state.num_processes))


def _coordinator_lost_in_start_up(count: int, why: str) -> None:
  """Host 0 died after this host joined and before its host guard started (the plan, the model's set-up):
  the line and exit RETRYABLE_EXIT_CODE, in place of JAX's abort. Nothing was trained or written yet."""
  try:
    logs.console_stderr()
    sys.stdout.flush()
    sys.stderr.write(f"error: host 0 of {count} (the coordinator) stopped responding during start-up, before "
                     f"training (its coordination service is gone: {why}); restart all hosts to resume\n")
    sys.stderr.flush()
  finally:
    os._exit(RETRYABLE_EXIT_CODE)


def stop_watching_coordinator() -> None:
  """A run that ends before its host guard took over (a user error in the plan, a stop during start-up):
  from here an abort is JAX's again, not `host 0 stopped responding`."""
  coordinator.unwatch()


def resolve_guard(config, process_count: int) -> GuardSettings:
  """The guard's settings from config.distributed / config.watchdog (UserError naming the field)."""
  hb = heartbeat_timeout(config)
  initialization_timeout(config)      # checked with the plan too (it is used before the plan, at start-up)
  w = config.get("watchdog")
  if w is None:
    return GuardSettings(hb, process_count > 1, 10.0, 300.0, 1800.0, 1800.0, 1800.0)
  enable = str(w.get("enable", "auto")).lower()
  if enable not in ("auto", "true", "false"):
    raise UserError(f"config.watchdog.enable={w.enable!r}; expected auto, true or false")
  checks.check_range(config, "watchdog.step_factor", lo=1)
  checks.check_range(config, "watchdog.min_s", lo=1)     # 0: it fired between the first two steps of every run
  for name in ("compile_s", "eval_s", "checkpoint_s"):
    checks.check_range(config, f"watchdog.{name}", lo=0)
  on = process_count > 1 if enable == "auto" else enable == "true"
  return GuardSettings(hb, on, float(w.step_factor), float(w.min_s), float(w.compile_s), float(w.eval_s),
                       float(w.checkpoint_s))


# ---- checkpoints as a dying host leaves them ---------------------------------------------------------------
def complete_checkpoint_steps(directory: str) -> list:
  """Steps under `directory` that Orbax committed: integer names (a save in progress or interrupted is
  `<step>.orbax-checkpoint-tmp-*`); on object stores, with commit_success.txt."""
  try:
    names = fileio.listdir(directory)
  except Exception:  # noqa: BLE001 - no directory yet
    return []
  steps = []
  for name in names:
    name = name.rstrip("/")
    if name.isdigit() and (not fileio.is_remote(directory)
                           or fileio.exists(fileio.join(directory, name, "commit_success.txt"))):
      steps.append(int(name))
  return sorted(steps)


def _newest_checkpoint(directory: str) -> str:
  steps = complete_checkpoint_steps(directory) if directory else []
  return f"step {steps[-1]}" if steps else "none (the run restarts from step 0)"


# What a run out of device memory prints after its step (multi-host: HostGuard.fail; one process: pretrain).
OUT_OF_MEMORY_ADVICE = ("out of device memory, which a restart would repeat: lower config.batch_size (raise "
                        "config.grad_accum_steps to keep it), set config.model.remat_policy or shard the parameters "
                        "(config.mesh.shape, fsdp)")


def is_out_of_memory(error: BaseException) -> bool:
  """XLA's RESOURCE_EXHAUSTED (an allocation or a compile that does not fit in device memory): not retryable."""
  return "RESOURCE_EXHAUSTED" in str(error)


# ---- the guard -------------------------------------------------------------------------------------------
class HostGuard:
  """See the module docstring. One per run; every method is cheap (the main thread calls them per step)."""

  def __init__(self, settings: GuardSettings, checkpoint_dir: str = "", *, process_index: Optional[int] = None,
               process_count: Optional[int] = None, client=None, stream=None, start_step: int = 0,
               coordinator_address: Optional[str] = None):
    self.settings = settings
    self._coordinator_address = coordinator_address     # host 0's HOST:PORT (default: jax.distributed's)
    self._watching = False           # this guard's SIGABRT handler for a lost host 0 is in place
    self.checkpoint_dir = checkpoint_dir
    self.index = jax.process_index() if process_index is None else process_index
    self.count = jax.process_count() if process_count is None else process_count
    self._client = client
    self._stream = stream
    self.multi_host = self.count > 1
    self.beat_s = max(0.25, settings.heartbeat_timeout_s / 10)
    now = time.monotonic()
    self.step, self.phase = int(start_step), "start"    # a resumed run: its checkpoint's step until it runs
    self._phase_since = now
    self._last_progress = now
    self._last_sync, self._last_sync_step = now, 0
    self._synced_step = 0
    self._window_clean = False
    self._per_step = deque(maxlen=50)
    self._peers: Dict[int, dict] = {}
    self._peer_changed: Dict[int, float] = {i: now for i in range(self.count) if i != self.index}
    self._peer_final_since: Dict[int, float] = {}
    self._kv_ok = now
    self._stop = threading.Event()
    self._fired = threading.Lock()
    self._threads = []
    self._at_exit = []
    self._exit_report = ""

  def at_exit(self, fn) -> None:
    """`fn()` runs (best effort) before the guard ends the process: the work-dir lock's release, so that a
    restart on another machine (a requeued SLURM job) is not refused for 300 s by a lock nobody holds."""
    self._at_exit.append(fn)

  # -- the main thread's reports --
  def enter(self, phase: str, step: Optional[int] = None) -> None:
    """The main thread starts `phase` ("compile", "data", "step", "checkpoint", "eval", "finish")."""
    if phase != self.phase:
      self.phase, self._phase_since = phase, time.monotonic()
      if phase in ("compile", "eval", "checkpoint"):
        self._window_clean = False
    if step is not None:
      self.step = int(step)

  def step_done(self, step: int, synced: bool = False) -> None:
    """Step `step` was dispatched (synced: and the host has waited for it on the device)."""
    now = time.monotonic()
    self.step = int(step)
    self._last_progress = now
    if synced:
      n = step - self._last_sync_step
      if self._window_clean and n > 0:
        self._per_step.append((now - self._last_sync) / n)
      self._last_sync, self._last_sync_step, self._window_clean = now, step, True
      self._synced_step = step

  def progress(self) -> None:
    """Progress that is not a step (an evaluation batch, a checkpoint written)."""
    self._last_progress = time.monotonic()

  def barrier(self, name: str) -> None:
    """Every host waits here (the coordination service's barrier, not a collective), up to the compile
    allowance plus the floor. Before a phase's first step: gloo gives a new communicator's set-up only 30 s
    for every host to arrive (`Gloo context initialization failed: DEADLINE_EXCEEDED`), and hosts that
    tokenized their data at different speeds can be further apart than that."""
    if self.multi_host and self._client is not None:
      self._client.wait_at_barrier(f"bert_jax/{name}", int(1000 * (self.settings.compile_s + self.settings.min_s)))

  # -- limits --
  def limit(self) -> float:
    """Seconds without progress after which the watchdog fires, in the current phase."""
    s = self.settings
    base = s.min_s
    if self._per_step:
      pending = max(1, self.step + 1 - self._synced_step)
      base = max(base, s.step_factor * statistics.median(self._per_step) * pending)
    extra = {"compile": s.compile_s, "eval": s.eval_s, "checkpoint": s.checkpoint_s,
             "start": s.compile_s, "finish": s.checkpoint_s,
             "failed-step": s.heartbeat_timeout_s + 5}.get(self.phase, 0.0)
    return base + extra

  # -- threads --
  def start(self) -> "HostGuard":
    if self.multi_host:
      if self._client is None:
        from jax._src import distributed  # pylint: disable=g-import-not-at-top  jax exposes no public client
        self._client = distributed.global_state.client
        self._coordinator_address = self._coordinator_address or distributed.global_state.coordinator_address
      if self.index != 0 and self._coordinator_address:
        self._watching = coordinator.watch(self._coordinator_address, self.coordinator_lost)
      self._threads.append(threading.Thread(target=self._beat_loop, name="host-guard-heartbeat", daemon=True))
    if self.multi_host or self.settings.watchdog:
      self._threads.append(threading.Thread(target=self._check_loop, name="host-guard-check", daemon=True))
    for t in self._threads:
      t.start()
    return self

  def stop(self, final_phase: str = "done") -> None:
    """Stops checking; tells the peers this host ended (`done`, `stopped` or `failed`) so they do not
    take its silence for a death."""
    if self._watching:                    # from here on jax.distributed's shutdown is the peers' business
      coordinator.unwatch()
      self._watching = False
    self.enter(final_phase)
    self._stop.set()
    if self.multi_host and self._client is not None:
      self._publish_within(5.0)           # the coordinator may be gone already, or frozen

  def _publish(self, **extra) -> None:
    self._beats = getattr(self, "_beats", 0) + 1
    record = dict(beat=self._beats, step=self.step, phase=self.phase, **extra)
    if self._exit_report:            # sticky: a later beat must not overwrite the reason the peers repeat
      record["exit"] = self._exit_report
    self._client.key_value_set(f"{KEY_PREFIX}{self.index}", json.dumps(record), True)

  def _publish_within(self, seconds: float, **extra) -> bool:
    """`_publish(**extra)` on a daemon thread, waited for at most `seconds`: True once it is stored. A frozen
    or unreachable coordinator (SIGSTOP, a hung VM) does not answer and JAX's call has no deadline of its
    own: the host that is ending must still print its line and exit."""
    done = threading.Event()

    def publish():
      try:
        self._publish(**extra)
        done.set()
      except Exception:  # noqa: BLE001 - best effort: the peers time out otherwise
        pass

    threading.Thread(target=publish, name="host-guard-report", daemon=True).start()
    return done.wait(seconds)

  def _read_peers(self) -> None:
    """The peers' newest records from the key-value store; a changed record is a heartbeat."""
    entries = self._client.key_value_dir_get(KEY_PREFIX)
    now = time.monotonic()
    self._kv_ok = now
    for key, value in entries:
      i = int(key.rstrip("/").rsplit("/", 1)[-1])
      if i == self.index:
        continue
      record = json.loads(value)
      if record != self._peers.get(i):
        self._peers[i] = record
        self._peer_changed[i] = now

  def _beat_loop(self) -> None:
    warned = False
    while not self._stop.is_set():
      try:
        self._publish()
        self._read_peers()
      except Exception as e:  # noqa: BLE001 - the key-value store unreachable: timed by the check thread
        if not warned:
          log.warning("host guard: the coordination service did not answer (%s)", e)
          warned = True
      self._stop.wait(self.beat_s)

  def _check_loop(self) -> None:
    while not self._stop.wait(0.5):
      verdict = self.verdict()
      if verdict is not None:
        self.fire(*verdict)

  def verdict(self):
    """(message, dump_stacks) when this host must stop now, else None."""
    now, s = time.monotonic(), self.settings
    during = f"during step {self.step + 1}"
    if self.multi_host:
      for i, changed in self._peer_changed.items():
        record = self._peers.get(i, {})
        if record.get("exit"):           # a peer stopped the job: the same reason here, and this host's stacks
          return f"{record['exit']} (reported by host {i})", True
        if record.get("phase") in FINAL_PHASES:
          since = self._peer_final_since.setdefault(i, now)
          if record["phase"] == "failed" and now - since > 2 * self.beat_s + 1:
            return (f"host {i} of {self.count} stopped with an error at step {record.get('step')} (see its "
                    f"log) {during}"), False
          continue
        if now - changed > s.heartbeat_timeout_s:
          return (f"host {i} of {self.count} stopped responding {during} (no heartbeat for "
                  f"{now - changed:.0f} s; its last report: {record.get('phase', 'start')} at step "
                  f"{record.get('step', 0)})"), False
      if self.index != 0 and now - self._kv_ok > s.heartbeat_timeout_s:
        return (f"host 0 of {self.count} (the coordinator) stopped responding {during} (no answer for "
                f"{now - self._kv_ok:.0f} s)"), False
    if s.watchdog and self.phase not in FINAL_PHASES:
      idle, limit = now - self._last_progress, self.limit()
      if idle > limit:
        return self._stall_message(idle, limit), True
    return None

  def _stall_message(self, idle: float, limit: float) -> str:
    here = f"host {self.index} of {self.count}"
    mine = f"in {self.phase} at step {self.step + 1}"
    stuck = [(r.get("step", 0), i, r.get("phase")) for i, r in self._peers.items()
             if r.get("phase") not in FINAL_PHASES and r.get("phase") not in ("step", None)
             and r.get("step", 0) <= self.step]
    if self.phase in ("step",) and stuck:
      step, i, phase = min(stuck)
      who = f"host {i} of {self.count} is stuck in {phase} at step {step + 1} (its stacks are in its log); " \
            f"{here} waited {mine}"
    else:
      who = f"{here} stalled {mine}"
    return f"{who}: no step finished for {idle:.0f} s (watchdog limit {limit:.0f} s; thread stacks above)"

  def _err(self):
    return self._stream or sys.stderr

  def coordinator_lost(self, why: str) -> None:
    """Host 0's coordination service is gone (`why`: engine/coordinator.py found its port closed after JAX's
    client aborted this process): the one line, naming host 0 as `verdict` names any dead host (or repeating
    the reason host 0 reported before it left), and exit RETRYABLE_EXIT_CODE. Never returns: it runs inside
    the SIGABRT handler, and returning lets the abort go on. The work (the line, the exit hooks: the work-dir
    lock's release) runs on a thread of its own, given LINGER_MAX_S: the aborting thread may hold a native
    logging lock that a library call in a hook would wait for."""
    worker = threading.Thread(target=self._report_coordinator_lost, args=(why,), name="host-guard-coordinator-lost",
                              daemon=True)
    try:
      worker.start()
      worker.join(LINGER_MAX_S)
    finally:
      os._exit(RETRYABLE_EXIT_CODE)

  def _report_coordinator_lost(self, why: str) -> None:
    try:
      record, during = self._peers.get(0, {}), f"during step {self.step + 1}"
      if record.get("exit"):
        message = f"{record['exit']} (reported by host 0)"
      elif record.get("phase") == "failed":
        message = f"host 0 of {self.count} stopped with an error at step {record.get('step')} (see its log) {during}"
      else:
        message = (f"host 0 of {self.count} (the coordinator) stopped responding {during} (its coordination "
                   f"service is gone: {why}; its last report: {record.get('phase', 'start')} at step "
                   f"{record.get('step', self.step)})")
      self.fire(message, dump_stacks=False, store_gone=True)
      time.sleep(LINGER_MAX_S)      # another thread is firing (its line, then its exit): let it finish
    finally:
      os._exit(RETRYABLE_EXIT_CODE)

  def fire(self, message: str, dump_stacks: bool, store_gone: bool = False) -> None:
    """Prints the stacks (a stall) and the one line, tells the peers, exits RETRYABLE_EXIT_CODE.
    `store_gone`: host 0's key-value store is gone with it, so nothing is published (that would only wait)."""
    if not self._fired.acquire(blocking=False):
      return
    if self._stream is None:
      logs.console_stderr()       # not into TensorFlow's held start-up output, which os._exit would drop
    err = self._err()
    line = (f"{message}; newest complete checkpoint: {_newest_checkpoint(self.checkpoint_dir)}; restart all "
            "hosts to resume")
    try:
      sys.stdout.flush()
      if dump_stacks:
        err.write(f"host guard: every thread's stack on host {self.index} of {self.count}:\n")
        err.flush()
        faulthandler.dump_traceback(file=err, all_threads=True)
      for fn in self._at_exit:
        try:
          fn()
        except Exception:  # noqa: BLE001 - exiting anyway; a stale lock is taken over later
          pass
      if self.multi_host and self._client is not None and "(reported by host" not in message and not store_gone:
        self._exit_report = message
        wait = min(5.0, 2 * self.beat_s + 0.5)
        if self._publish_within(wait):
          time.sleep(wait)                  # the peers read it (if this is host 0, the store goes)
      err.write(f"error: {line}\n")
      err.flush()
      if self.multi_host and self._client is not None and not store_gone:
        if self.index == 0:
          self.linger()
        else:
          self._say_leaving()
    finally:
      os._exit(RETRYABLE_EXIT_CODE)   # no atexit: jax.distributed.shutdown would wait for the dead peer

  def peers_still_here(self) -> list:
    """The peers that beat within the heartbeat timeout and have neither finished nor said they are leaving."""
    now = time.monotonic()
    return [i for i, changed in sorted(self._peer_changed.items())
            if now - changed <= self.settings.heartbeat_timeout_s and not self._peers.get(i, {}).get("leaving")
            and self._peers.get(i, {}).get("phase") not in FINAL_PHASES]

  def linger(self) -> float:
    """Host 0 runs the coordination service: a peer whose JAX client loses it aborts (SIGABRT and JAX's list
    of loaded modules) before it prints its own line. So host 0 leaves last: it waits until every peer that
    is still beating has said it is leaving, at most 2 beats + 6 s (a reporting peer waits 2 beats + 0.5 s
    for the others to read its report). A dead or frozen peer is not waited for. Returns the seconds waited."""
    start = time.monotonic()
    deadline = start + min(LINGER_MAX_S, 2 * self.beat_s + 6.0)
    while time.monotonic() < deadline:
      try:
        self._read_peers()
      except Exception:  # noqa: BLE001 - the store is in this process; nothing left to wait for
        break
      if not self.peers_still_here():
        break
      time.sleep(0.1)
    return time.monotonic() - start

  def _say_leaving(self) -> None:
    """Tells host 0 that this host is leaving (best effort, at most 1 s: host 0 may already be gone)."""
    self._stop.set()                          # the beat thread must not overwrite the record below
    self._publish_within(1.0, leaving=True)

  def fail(self, error: BaseException) -> None:
    """A multi-host run's step raised `error` and every host still looks alive (`await_verdict` returned):
    its traceback goes to the log, the peers learn (they stop within two beats), and the process ends now,
    not after `jax.distributed.shutdown` has waited 5 min for peers that wait for it. A JAX runtime error (a
    collective that timed out or lost a connection) is retryable: one `error:` line, exit 75; out of device
    memory (RESOURCE_EXHAUSTED) is not: a line naming the fields that lower it, exit 2; anything else is an
    internal error: exit 1 after its traceback. Single-process runs: returns (the caller re-raises)."""
    if not self.multi_host:
      return
    if self._stream is None:
      logs.console_stderr()
    traceback.print_exception(error, file=self._err())
    # Out of device memory is a JAX runtime error too, but a restart repeats it: not retryable (exit 2), so a
    # supervisor stops instead of restarting into the same OOM MAX_RESTARTS times.
    out_of_memory = is_out_of_memory(error)
    retryable = isinstance(error, jax.errors.JaxRuntimeError) and not out_of_memory
    first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
    message = (f"host {self.index} of {self.count}: step {self.step + 1} failed ({type(error).__name__}: "
               f"{first})")
    self._stop.set()
    self.enter("failed")
    if retryable:
      self.fire(message, dump_stacks=False)
    for fn in self._at_exit:
      try:
        fn()
      except Exception:  # noqa: BLE001
        pass
    self._publish_within(2.0)
    if out_of_memory:
      self._err().write(f"error: {message}: {OUT_OF_MEMORY_ADVICE}\n")
      self._err().flush()
      os._exit(2)
    self._err().write(f"error: {message}: an internal error, see the traceback above\n")
    self._err().flush()
    os._exit(1)

  def await_verdict(self, error: BaseException) -> None:
    """The main thread's step failed (`error`, e.g. a collective that lost a peer): wait up to one heartbeat
    timeout for the guard to find the cause (then the process exits from the check thread); returns if
    every host still looks alive, and the caller re-raises."""
    if not (self.multi_host and self._threads):
      return
    log.info("step failed on host %d (%s: %s); checking that every host is alive (up to %.0f s)", self.index,
             type(error).__name__, str(error).splitlines()[0][:200] if str(error) else "",
             self.settings.heartbeat_timeout_s)
    self.enter("failed-step")
    self._last_progress = time.monotonic()      # the watchdog gives the heartbeat verdict its time first
    deadline = time.monotonic() + self.settings.heartbeat_timeout_s + 2 * self.beat_s + 1
    while time.monotonic() < deadline:
      time.sleep(0.25)
