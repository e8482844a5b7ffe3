"""Plays a pod slice on one machine: one train.py job as N local processes (jax.distributed on 127.0.0.1, gloo
collectives, D CPU devices each). The multi-host tests (tests/test_multihost.py), the fault measurements
(experiments/multihost_faults.py) and anyone trying a multi-host config before paying for a slice use it.

    python launch/local_cluster.py --processes=2 --devices=2 --logs=/tmp/logs -- \
        --config=configs/pretrain.py:size=tiny,runlocal --workdir=/tmp/w --config.data.input_files=corpus.txt \
        --config.data.vocab_file=vocab.txt

Each process gets the train.py flags after `--` plus --config.distributed.{enable,coordinator_address,
num_processes,process_id}; its output goes to LOGS/host<i>.log. The command exits with the most severe
exit code of the processes (`exit_status`: a user error before a crash before a retryable stop before a
stopped run; 0 when all finished; a process killed by signal N counts as 128 + N, 137 for SIGKILL, as a
shell reports it), and prints each process's exit code, seconds and last line. Ctrl-C (or
SIGTERM, SIGHUP) sends SIGTERM to every process: they agree on a step, save it and exit 143; a second Ctrl-C
kills them.

    cluster = Cluster(flags, logs_dir, processes=2, devices=2).start()
    cluster.signal(1, signal.SIGKILL); codes = cluster.wait(timeout=300); cluster.last_line(0)
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Cluster:
  """N train.py processes of one jax.distributed job (see the module docstring)."""

  def __init__(self, flags: Sequence[str], logs_dir: str, *, processes: int = 2, devices: int = 2,
               port: Optional[int] = None, env: Optional[Dict[str, str]] = None, script: str = "train.py",
               new_session: bool = False):
    self.flags, self.logs_dir, self.processes, self.devices = list(flags), logs_dir, processes, devices
    self.port = port or free_port()
    self.env = dict(os.environ if env is None else env)
    # the device count is ours; the caller's other XLA flags (--xla_dump_to=..., ...) are kept, not dropped
    kept = [f for f in self.env.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")]
    self.env.update(XLA_FLAGS=" ".join(kept + [f"--xla_force_host_platform_device_count={devices}"]),
                    JAX_PLATFORMS="cpu")
    self.script = script
    self.new_session = new_session     # the processes out of the terminal's reach: signals come from us only
    self.procs: List[subprocess.Popen] = []
    self.started = 0.0
    self.ended: Dict[int, float] = {}

  def log_path(self, i: int) -> str:
    return os.path.join(self.logs_dir, f"host{i}.log")

  def start(self) -> "Cluster":
    os.makedirs(self.logs_dir, exist_ok=True)
    self.started = time.monotonic()
    for i in range(self.processes):
      argv = [sys.executable, os.path.join(REPO, self.script)] + self.flags + [
          "--config.distributed.enable=true", f"--config.distributed.coordinator_address=127.0.0.1:{self.port}",
          f"--config.distributed.num_processes={self.processes}", f"--config.distributed.process_id={i}"]
      with open(self.log_path(i), "ab") as log:
        self.procs.append(subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=self.new_session))
    return self

  def poll(self) -> List[Optional[int]]:
    """Each process's exit code (None while running); notes when each ended."""
    codes = []
    for i, p in enumerate(self.procs):
      rc = p.poll()
      if rc is not None and i not in self.ended:
        self.ended[i] = time.monotonic()
      codes.append(rc)
    return codes

  def wait(self, timeout: float, until=lambda: False) -> List[Optional[int]]:
    """Waits until every process ended, `timeout` seconds passed or `until()` is true; the exit codes (None:
    still running)."""
    deadline = time.monotonic() + timeout
    while True:
      codes = self.poll()
      if all(c is not None for c in codes) or time.monotonic() > deadline or until():
        return codes
      time.sleep(0.1)

  def signal(self, i: int, signum: int) -> None:
    if self.procs[i].poll() is None:
      self.procs[i].send_signal(signum)

  def kill(self) -> None:
    """SIGKILL to every process still running (SIGCONT first: a stopped one)."""
    for p in self.procs:
      if p.poll() is None:
        p.send_signal(signal.SIGCONT)
        p.kill()
    for p in self.procs:
      p.wait()
    self.poll()

  def text(self, i: int) -> str:
    with open(self.log_path(i), encoding="utf-8", errors="replace") as f:
      return f.read()

  def last_line(self, i: int) -> str:
    lines = [l for l in self.text(i).splitlines() if l.strip()]
    return lines[-1] if lines else ""

  def wait_for_text(self, i: int, needle: str, timeout: float) -> bool:
    """True once `needle` appears in process i's log (False after `timeout` s or when it ended without)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if needle in self.text(i):
        return True
      if self.procs[i].poll() is not None:
        return needle in self.text(i)
      time.sleep(0.1)
    return False


# exit_status's order, most severe first. What decides it is what a supervisor should do with the job's code:
# one host's user error (2) means every rerun fails the same way, however many peers then reported it dead
# (75) or were killed; a crash (1, or any code not listed here: 139 SIGSEGV, ...) needs a look too and a rerun
# likely repeats it; 75 (a host died or stalled, host 0 included; its line names it), 137 (a SIGKILLed host)
# and 134 (a JAX abort the host guard could not turn into 75) are retryable: a restart resumes from the newest
# checkpoint; 143 / 130 a run stopped on request after saving its checkpoint; 0 finished.
USER_ERROR, RETRYABLE, STOPPED = 2, (75, 137, 134), (143, 130)


def severity(code: int) -> int:
  """The rank of one process's exit code (128 + N for a signal) in exit_status's order: higher is worse."""
  if code == 0:
    return 0
  if code in STOPPED:
    return 1 + len(STOPPED) - STOPPED.index(code)            # 143 above 130
  if code in RETRYABLE:
    return 10 + len(RETRYABLE) - RETRYABLE.index(code)       # 75 above 137 above 134
  if code == USER_ERROR:
    return 30
  return 20                                                 # 1 and anything else: a crash


def exit_status(codes: Sequence[Optional[int]]) -> int:
  """The most severe of the processes' exit codes (see `severity`): 2 (a user error) > 1 and any other
  unlisted code (a crash) > 75 > 137 > 134 (retryable: restart and it resumes) > 143 > 130 (stopped after
  a checkpoint) > 0. A signal (Popen's -N) counts as 128 + N; None (still running) is ignored; ties go to the
  first process."""
  shell = [128 - c if c < 0 else c for c in codes if c is not None]
  return max(shell, key=severity, default=0)


def positive_int(text: str) -> int:
  """argparse type: an integer >= 1 (--processes=0 ran nothing and exited 0; --devices=0 crashed XLA)."""
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"{value}; expected >= 1")
  return value


def shell_code(rc: Optional[int]) -> str:
  """A Popen return code as a shell reports it: -N (killed by signal N) -> "128+N (SIGNAME)"."""
  if rc is None or rc >= 0:
    return str(rc)
  try:
    name = signal.Signals(-rc).name
  except ValueError:
    name = f"signal {-rc}"
  return f"{128 - rc} ({name})"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--processes", type=positive_int, default=2)
  parser.add_argument("--devices", type=positive_int, default=2, help="CPU devices per process")
  parser.add_argument("--logs", default="local_cluster_logs", help="folder of the per-process logs")
  parser.add_argument("flags", nargs="*", help="train.py flags (after --)")
  args = parser.parse_args(argv)
  # Ctrl-C reached every process of the terminal's group: each train.py took SIGINT on its own (a traceback, no
  # agreed step) while this one sent SIGTERM. Now only this process gets it (and SIGHUP, SIGTERM) and sends
  # SIGTERM to all: every host saves the same step and exits 143.
  # The handler only notes the signal and the wait loops read the note: an exception raised from it could land
  # inside Popen.poll() between taking and releasing its wait lock, after which poll() never sees an exit.
  stops: List[int] = []

  def note(signum, frame):
    del frame
    stops.append(signum)

  for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, note)
  cluster = Cluster(args.flags, args.logs, processes=args.processes, devices=args.devices, new_session=True)
  cluster.start()
  codes = cluster.wait(timeout=float("inf"), until=lambda: bool(stops))
  if stops and None in codes:
    for i in range(len(cluster.procs)):
      cluster.signal(i, signal.SIGTERM)
    codes = cluster.wait(timeout=600, until=lambda: len(stops) > 1)   # a second Ctrl-C: at once
    if None in codes:                  # none left behind: SIGKILL (after 10 minutes or a second Ctrl-C)
      cluster.kill()
      codes = cluster.poll()
  for i, rc in enumerate(codes):
    took = cluster.ended.get(i, time.monotonic()) - cluster.started
    print(f"host {i}: exit {shell_code(rc)} after {took:.0f} s; last line: {cluster.last_line(i)}")
  return exit_status(codes)


if __name__ == "__main__":
  sys.exit(main())
