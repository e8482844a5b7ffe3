"""Owning a work directory: the lock, the config files, the resume checks, the multi-host barrier.

One process group owns a work dir at a time (pre-training and fine-tuning alike):

    with workdir.WorkdirLock(dir, kind="pretrain"):      # process 0 holds it; every process calls it
      ...                                                # a second train.py / finetune.py -> UserError

The lock is `DIR/workdir.lock`, a JSON file {host, pid, pid_start, start_time, heartbeat, token, kind}
created exclusively (O_CREAT|O_EXCL locally; on gs:// written and read back, best effort). A background
thread refreshes `heartbeat` (and the file's mtime) every HEARTBEAT_SECONDS. A lock is stale, and is
taken over with a warning, when its process is dead on this host (pid gone, or the pid now belongs to a
process started at another time), or, for another host, when its heartbeat is older than STALE_SECONDS.
A live holder makes the second run stop at once with a UserError naming its host, pid and start time.

`StopSignals` turns SIGINT / SIGTERM into "save at the current step, then raise errors.Interrupted" for
both loops.

Nothing else in the package deletes files another run may be writing: Orbax's tmp-directory cleanup runs
only in the Checkpointer that pre-training opens after taking this lock; read-only Checkpointers never
clean.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from typing import Callable, Optional

import jax
import numpy as np
from jax._src import distributed as jax_distributed  # the coordination service's client: jax has no public one
from jax.experimental import multihost_utils

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.models.config import RUNTIME_FIELDS

log = logging.getLogger(__name__)

LOCK_NAME = "workdir.lock"
HEARTBEAT_SECONDS = 30.0      # how often the holder refreshes the lock
STALE_SECONDS = 300.0         # another host's lock without a heartbeat for 5 min (10 missed beats) is stale

# Compute settings a resumed run may change; every other BertConfig field is the architecture.
COMPUTE_FIELDS = RUNTIME_FIELDS + ("initializer_range",)


# ---- multi-host ------------------------------------------------------------------------------------------
def barrier(name: str) -> None:
  """All processes wait here (multihost_utils.sync_global_devices); a no-op in a single process."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def _all_agree(ok: bool) -> bool:
  """Process 0's `ok`, broadcast to every process."""
  if jax.process_count() == 1:
    return ok
  return bool(multihost_utils.broadcast_one_to_all(np.int32(1 if ok else 0)))


# ---- the lock ----------------------------------------------------------------------------------------
def _pid_start(pid: int) -> Optional[str]:
  """The start time of `pid` in clock ticks since boot (/proc/PID/stat field 22), None off Linux; tells a
  recycled pid from the process that wrote the lock."""
  try:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
      return f.read().rsplit(")", 1)[1].split()[19]
  except (OSError, IndexError):
    return None


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def _fmt_time(t) -> str:
  try:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t)))
  except (TypeError, ValueError):
    return "?"


def describe_holder(info: dict) -> str:
  return (f"host {info.get('host', '?')}, pid {info.get('pid', '?')}, started {_fmt_time(info.get('start_time'))}"
          + (f" ({info['kind']})" if info.get("kind") else ""))


class WorkdirLock:
  """See the module docstring. Every process calls acquire()/release() (or uses `with`); process 0 holds the
  file, the others learn the outcome through a broadcast."""

  def __init__(self, directory: str, kind: str = ""):
    self.directory = fileio.abspath(directory)
    self.path = fileio.join(self.directory, LOCK_NAME)
    self.kind = kind
    self.info: Optional[dict] = None
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None

  # -- inspection --
  def read(self) -> Optional[dict]:
    """The lock file's content, None when there is none ({} when it is unreadable: a torn write)."""
    if not fileio.exists(self.path):
      return None
    try:
      return json.loads(fileio.read_text(self.path))
    except (ValueError, OSError):
      return {}
    except Exception:  # noqa: BLE001 - tf.errors.NotFoundError: removed between exists() and read
      return None

  def stale_reason(self, info: dict) -> Optional[str]:
    """Why the lock `info` is stale (a string), or None when its holder may still be running."""
    if not info:
      return "unreadable lock file"
    age = time.time() - max(float(info.get("heartbeat", 0) or 0), fileio.mtime(self.path) or 0.0)
    if info.get("host") == socket.gethostname():
      pid = int(info.get("pid", -1))
      if pid <= 0 or not _pid_alive(pid):
        return f"process {pid} is gone"
      start = _pid_start(pid)
      if info.get("pid_start") and start and start != info["pid_start"]:
        return f"pid {pid} now belongs to another process"
      return None
    if age > STALE_SECONDS:
      return f"no heartbeat for {age:.0f} s (> {STALE_SECONDS:.0f} s)"
    return None

  # -- holding --
  def acquire(self) -> "WorkdirLock":
    error: Optional[BaseException] = None
    if jax.process_index() == 0:
      try:
        self._acquire_local()
      except Exception as e:  # noqa: BLE001 - re-raised below, after telling the other processes
        error = e
    if not _all_agree(error is None):
      if error is not None:
        raise error
      raise UserError(f"work dir {self.directory} is in use (process 0 could not take {LOCK_NAME})")
    return self

  def _new_info(self) -> dict:
    now = time.time()
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _pid_start(os.getpid()),
            "start_time": now, "heartbeat": now, "token": uuid.uuid4().hex, "kind": self.kind,
            "process_count": jax.process_count()}

  def _acquire_local(self):
    fileio.makedirs(self.directory)
    for _ in range(3):
      info = self._new_info()
      if self._create_exclusive(info):
        self.info = info
        self._start_heartbeat()
        log.debug("work dir %s locked (%s)", self.directory, LOCK_NAME)   # internals: --verbose
        return
      held = self.read()
      if held is None:            # released between our attempt and the read: try again
        continue
      reason = self.stale_reason(held)
      if reason is None:
        raise UserError(
            f"work dir {self.directory} is in use by another run: {describe_holder(held)}, last heartbeat "
            f"{_fmt_time(held.get('heartbeat'))}. Wait for it to finish or stop it, or use another --workdir "
            f"(a lock left by a dead process on this host is taken over automatically; one from another host "
            f"after {STALE_SECONDS:.0f} s without a heartbeat)")
      # Take over a stale lock: move it aside first (only one contender's rename succeeds), then create ours.
      aside = f"{self.path}.stale-{os.getpid()}-{time.time_ns()}"
      try:
        fileio.rename(self.path, aside)
      except Exception:  # noqa: BLE001 - another process moved or replaced it first: look again
        continue
      fileio.remove(aside)
      log.warning("work dir %s: took over a stale lock (%s) of %s", self.directory, reason, describe_holder(held))
    raise UserError(f"work dir {self.directory}: could not take {LOCK_NAME} (another run keeps replacing it)")

  def _create_exclusive(self, info: dict) -> bool:
    data = json.dumps(info, sort_keys=True).encode("utf-8")
    if not fileio.is_remote(self.path):
      try:
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
      except FileExistsError:
        return False
      except OSError as e:   # read-only, not ours, a virtual file system: one line and exit 2, not a traceback
        raise UserError(f"work dir {self.directory}: cannot write in it ({e.strerror or e} creating {LOCK_NAME}); "
                        "pass a writable --workdir") from e
      try:
        os.write(fd, data)
        os.fsync(fd)
      finally:
        os.close(fd)
      return True
    # Object stores have no exclusive create: write if absent, wait, and read back who won.
    if fileio.exists(self.path):
      return False
    fileio.write_bytes_atomic(self.path, data)
    time.sleep(0.5)
    back = self.read() or {}
    return back.get("token") == info["token"]

  def _start_heartbeat(self):
    self._stop.clear()
    self._thread = threading.Thread(target=self._beat, name="workdir-lock-heartbeat", daemon=True)
    self._thread.start()

  def _beat(self):
    while not self._stop.wait(HEARTBEAT_SECONDS):
      try:
        held = self.read()
        if not held or held.get("token") != self.info["token"]:
          log.error("work dir %s: %s was replaced by %s; this run no longer owns the work dir", self.directory,
                    LOCK_NAME, describe_holder(held or {}))
          return
        self.info = dict(self.info, heartbeat=time.time())
        fileio.write_text_atomic(self.path, json.dumps(self.info, sort_keys=True))
      except Exception as e:  # noqa: BLE001 - a failed heartbeat must not kill training; retried next beat
        log.warning("work dir lock heartbeat failed: %s", e)

  def release(self) -> None:
    """Stops the heartbeat and deletes the lock file if it is still ours (process 0)."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout=5)
      self._thread = None
    if self.info is None:
      return
    held = self.read()
    if held and held.get("token") == self.info["token"]:
      fileio.remove(self.path)
    self.info = None

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()


# ---- config files ------------------------------------------------------------------------------------------
def model_config_differences(saved: dict, wanted: dict) -> list:
  """["hidden_size: 128 in workdir vs 256 in config", ...] over the architecture fields both dicts hold."""
  out = []
  for k in sorted(set(saved) & set(wanted)):
    if k in COMPUTE_FIELDS:
      continue
    if saved[k] != wanted[k]:
      out.append(f"{k}: {saved[k]} in workdir vs {wanted[k]} in config")
  return out


def check_resume_model_config(workdir: str, saved: dict, wanted: dict, source: str) -> None:
  """UserError when a resumed run asks for another architecture than the work dir's model_config.json
  (`source` says where `wanted` came from: the size table or init_checkpoint)."""
  diffs = model_config_differences(saved, wanted)
  if diffs:
    raise UserError(
        f"work dir {workdir} holds a different model than this run's config ({source}): " + "; ".join(diffs)
        + ". Resume with the original settings, or use a new --workdir (init_checkpoint=" + workdir
        + " starts a new run from its weights)")


# ---- signals ------------------------------------------------------------------------------------------
# XLA's preemption sync manager (xla/tsl/distributed_runtime/preemption) puts this key into the coordination
# service when a host's notifier sees SIGTERM; every host's sync protocol starts when it appears.
PREEMPTION_NOTICE_KEY = "RECEIVED_PREEMPTION_NOTICE"


class StopSignals:
  """SIGINT / SIGTERM -> "save at the current step and stop" (single process; `signum` says which). A second
  SIGINT raises KeyboardInterrupt at once (abort without waiting for the save). Multi-host runs use the JAX
  preemption sync point (`ckpt`: a Checkpointer, SIGTERM on every host) so that all processes stop at the
  same step.
  Shared by pre-training and fine-tuning; handlers are installed only from the main thread."""

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self, ckpt=None, client=None):
    self.ckpt = ckpt
    self.client = client        # the coordination service's client (default: jax.distributed's)
    self.signum: Optional[int] = None
    self.previous = {}
    if jax.process_count() == 1:
      for s in self.SIGNALS:
        try:
          self.previous[s] = signal.signal(s, self._handler)
        except ValueError:   # not the main thread
          pass

  def _handler(self, signum, frame):
    del frame
    if self.signum is None:
      log.warning("%s: saving a checkpoint at the current step and stopping (during start-up: stopping once it "
                  "ends, without a checkpoint; Ctrl-C again to abort at once)", signal.Signals(signum).name)
      self.signum = signum
      if signum == signal.SIGINT:
        signal.signal(signal.SIGINT, signal.default_int_handler)

  def start(self, step: int, barrier: Optional[Callable[[str], None]] = None) -> bool:
    """Called on every host once the run is restored at `step`, before its first step: True on every host
    when a preemption notice arrived during start-up (stop now; the checkpoint at `step` is on disk), False
    on every host otherwise (a later notice stops them all at one later step). `barrier(name)`: every host
    waits there (the host guard's; default: the coordination service's, 1 h).

    JAX's preemption sync manager (XLA's PreemptionSyncManager) keeps, per process, the last counter given
    to its sync point check (0 until the first call). A notice (SIGTERM on any host: XLA's handler puts the
    key RECEIVED_PREEMPTION_NOTICE into the coordination service) makes every host capture its counter,
    and the sync point is the largest captured counter + 1; the check is True only for exactly that
    counter. We give it the step, as orbax's CheckpointManager does inside save(). A restart resumes at
    step k > 0, so a notice captured before the hosts' first check (counters 0) set the sync point to 1,
    which no later step equals: the signal was lost and the run went on to exit 0. Checking counter 1, then
    k, as this did until now, still lost a notice captured between the two calls (sync point 2).

    So the counter goes straight to k, and the hosts agree on the notice themselves: each reads the notice
    key after setting k and publishes what it saw; after a barrier, any host that saw it stops every host
    at k. A host that did not see it set k before the notice existed, so every counter captured for that
    notice on it is >= k: the sync point is > k, and the first steps' checks (k + 1, k + 2, ...) reach it
    on every host. Tested against a model of XLA's protocol with the notice at every point of start-up
    (tests/test_reliability_workdir.py)."""
    if jax.process_count() == 1:
      return self.signum is not None      # one process: a signal during start-up (restore, compile, data)
    client = self.client or jax_distributed.global_state.client
    if self.ckpt is None or client is None:
      return False
    seen = False
    try:
      self.ckpt.reached_preemption(step)
      service = True
    except Exception:  # noqa: BLE001 - preemption service unavailable: reached() warns once; every host still
      service = False  # goes through the barrier below, so none waits there for one that skipped it
    if service:
      try:
        client.key_value_try_get(PREEMPTION_NOTICE_KEY)
        seen = True
      except Exception:  # noqa: BLE001 - NOT_FOUND: no notice yet
        pass
    client.key_value_set(f"bert_jax/start_notice/{step}/{jax.process_index()}", "1" if seen else "0")
    if barrier is not None:
      barrier(f"start_notice_{step}")
    else:
      client.wait_at_barrier(f"bert_jax/start_notice_{step}", 3_600_000)
    early = any(v == "1" for _, v in client.key_value_dir_get(f"bert_jax/start_notice/{step}/"))
    if early:
      self.signum = self.signum or signal.SIGTERM
    return early

  def reached_before_start(self) -> bool:
    """One process: a signal already arrived (before the run's state exists, e.g. during the plan)."""
    return jax.process_count() == 1 and self.signum is not None

  def reached(self, step: int) -> bool:
    if jax.process_count() > 1 and self.ckpt is not None:
      try:
        if self.ckpt.reached_preemption(step):
          self.signum = self.signum or signal.SIGTERM
          return True
      except Exception as e:  # noqa: BLE001 - preemption service unavailable
        if not getattr(self, "_warned", False):
          log.warning("the preemption sync point is unavailable (%s: %s); SIGTERM will not stop this run "
                      "cleanly", type(e).__name__, e)
          self._warned = True
        return False
      return False
    return self.signum is not None

  def restore(self):
    for s, previous in self.previous.items():
      if previous is not None:
        signal.signal(s, previous)
    self.previous = {}
