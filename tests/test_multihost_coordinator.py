"""Host 0 (jax.distributed's coordinator) dies: the other hosts print the host guard's one line and exit 75,
as for any dead host, instead of JAX's abort (SIGABRT, exit 134, a page of extension modules).

bert_jax/engine/coordinator.py's SIGABRT handler on its own (subprocesses without JAX: a closed port is a lost
coordinator, a listening one is somebody else's abort, which ends as before), HostGuard.coordinator_lost's
line, then the real thing: two jax.distributed processes with a HostGuard each, host 0 SIGKILLed. The same
through train.py, at the default 60 s heartbeat timeout, is in tests/test_multihost.py.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from bert_jax.engine import coordinator, watchdog
from bert_jax.errors import RETRYABLE_EXIT_CODE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]          # nothing listens there once the socket is closed


@pytest.mark.parametrize("address, want", [("127.0.0.1:8476", ("127.0.0.1", 8476)), ("[::1]:1234", ("::1", 1234)),
                                           ("tpu-0.internal:8476", ("tpu-0.internal", 8476))])
def test_coordinator_addresses_are_host_and_port(address, want):
  assert coordinator.parse_address(address) == want
  with pytest.raises(ValueError, match="not a HOST:PORT address"):
    coordinator.parse_address("127.0.0.1")


def test_a_listening_coordinator_is_there_and_a_closed_port_is_gone():
  with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    assert coordinator.coordinator_gone(f"127.0.0.1:{server.getsockname()[1]}") is None
  assert coordinator.coordinator_gone(f"127.0.0.1:{closed_port()}") == "connection refused"


ABORT = r'''
import faulthandler, os, sys
from bert_jax.engine import coordinator
if sys.argv[3] == "faulthandler":
  faulthandler.enable()               # as absl.app.run does before train.py's main
def lost(why):
  sys.stderr.write(f"lost: {why}\n"); sys.stderr.flush(); os._exit(75)
watch = coordinator.AbortWatch(sys.argv[1], lost)
assert watch.install()
if sys.argv[2] == "uninstall":
  watch.uninstall()
os.abort()
'''


def _abort(address, mode="keep", before="faulthandler"):
  return subprocess.run([sys.executable, "-c", ABORT, address, mode, before], cwd=REPO, capture_output=True,
                        text=True, timeout=60)


@pytest.mark.parametrize("before", ["faulthandler", "the default action"])
def test_an_abort_with_the_coordinator_gone_becomes_on_lost_and_its_exit_code(before):
  proc = _abort(f"127.0.0.1:{closed_port()}", before=before)
  assert proc.returncode == RETRYABLE_EXIT_CODE, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1] == "lost: connection refused"
  assert "Fatal Python error" not in proc.stderr       # faulthandler's dump (and its module list) never ran


def test_an_abort_while_the_coordinator_listens_ends_as_before_through_faulthandler():
  with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    proc = _abort(f"127.0.0.1:{server.getsockname()[1]}")
  assert proc.returncode == -signal.SIGABRT, proc.stderr[-2000:]
  assert "Fatal Python error: Aborted" in proc.stderr and "lost:" not in proc.stderr


@pytest.mark.parametrize("before", ["faulthandler", "the default action"])
def test_after_uninstall_an_abort_is_an_abort(before):
  proc = _abort(f"127.0.0.1:{closed_port()}", "uninstall", before)
  assert proc.returncode == -signal.SIGABRT and "lost:" not in proc.stderr, proc.stderr[-2000:]
  assert ("Fatal Python error: Aborted" in proc.stderr) == (before == "faulthandler")


class FakeClient:
  def __init__(self):
    self.kv = {}

  def key_value_set(self, key, value, allow_overwrite=False):
    self.kv[key] = value

  def key_value_dir_get(self, prefix):
    return sorted((k, v) for k, v in self.kv.items() if k.startswith(prefix))


class Exited(Exception):
  pass


@pytest.mark.parametrize("record, line", [
    ({"beat": 7, "step": 11, "phase": "step"},
     "error: host 0 of 2 (the coordinator) stopped responding during step 12 (its coordination service is gone: "
     "connection refused; its last report: step at step 11); newest complete checkpoint: step 10; restart all "
     "hosts to resume"),
    ({"beat": 7, "step": 11, "phase": "data", "exit": "host 0 of 2 stalled in data at step 12: no step ..."},
     "error: host 0 of 2 stalled in data at step 12: no step ... (reported by host 0); newest complete checkpoint: "
     "step 10; restart all hosts to resume"),
])
def test_a_lost_coordinator_is_one_line_naming_host_0_and_exit_75_without_touching_its_store(
    monkeypatch, tmp_path, capsys, record, line):
  (tmp_path / "10").mkdir()
  client = FakeClient()
  settings = watchdog.GuardSettings(60.0, True, 10.0, 300.0, 0.0, 0.0, 0.0)
  g1 = watchdog.HostGuard(settings, str(tmp_path), process_index=1, process_count=2, client=client)
  released = []
  g1.at_exit(lambda: released.append(True))
  g1._peers[0] = record
  g1.step_done(11, synced=True)

  def exit_(code):
    raise Exited(code)
  monkeypatch.setattr(watchdog.os, "_exit", exit_)
  start = time.monotonic()
  with pytest.raises(Exited) as e:
    g1._report_coordinator_lost("connection refused")     # what coordinator_lost runs on its own thread
  assert e.value.args[0] == RETRYABLE_EXIT_CODE and released == [True]
  assert capsys.readouterr().err.strip().splitlines()[-1] == line
  assert client.kv == {} and time.monotonic() - start < 1      # no report to a store that is gone, no wait


def test_a_lost_coordinator_exits_75_even_when_its_report_hangs(monkeypatch):
  # The report runs beside the aborting thread, which may hold a native logging lock a hook waits for.
  g1 = watchdog.HostGuard(watchdog.GuardSettings(60.0, True, 10.0, 300.0, 0.0, 0.0, 0.0), "", process_index=1,
                          process_count=2, client=FakeClient())
  monkeypatch.setattr(watchdog, "LINGER_MAX_S", 0.5)
  monkeypatch.setattr(g1, "_report_coordinator_lost", lambda why: time.sleep(30))

  def exit_(code):
    raise Exited(code)
  monkeypatch.setattr(watchdog.os, "_exit", exit_)
  start = time.monotonic()
  with pytest.raises(Exited) as e:
    g1.coordinator_lost("connection refused")
  assert e.value.args[0] == RETRYABLE_EXIT_CODE and 0.4 < time.monotonic() - start < 5


HELD = r'''
from bert_jax import logs
from bert_jax.engine import watchdog
g = watchdog.HostGuard(watchdog.GuardSettings(10.0, False, 10.0, 300.0, 0.0, 0.0, 0.0), "", process_index=1,
                       process_count=2, client=None)
with logs.native_stderr_quiet():       # what TensorFlow's import does on the main thread during start-up
  g.fire("host 0 of 2 (the coordinator) stopped responding during step 6 (...)", dump_stacks=False,
         store_gone=True)
'''


def test_the_line_reaches_the_console_while_tensorflows_start_up_output_is_held():
  # fd 2 was a temporary file inside the block and os._exit dropped it: exit 75 and no line at all.
  proc = subprocess.run([sys.executable, "-c", HELD], cwd=REPO, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == RETRYABLE_EXIT_CODE
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: host 0 of 2 (the coordinator) stopped responding during step 6 (...); newest complete checkpoint: "), \
      proc.stderr[-2000:]


# ---- two jax.distributed processes, host 0 SIGKILLed -------------------------------------------------------
HOST = r'''
import os, sys, time
sys.path.insert(0, os.getcwd())
from configs import pretrain as p
from bert_jax.engine import watchdog
from bert_jax.pretrain import loop
index, port, ckpt = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = p.get_config("size=tiny"); d = c.distributed
d.enable, d.coordinator_address, d.num_processes, d.process_id = True, f"127.0.0.1:{port}", 2, index
d.heartbeat_timeout_s = 60
import faulthandler; faulthandler.enable()          # as under absl.app.run: JAX's abort lists the modules
loop.maybe_initialize_distributed(c)
if sys.argv[4] == "start-up":                       # host 0 dies before this host's guard started
  print("ready", flush=True)
  time.sleep(300)
guard = watchdog.HostGuard(watchdog.resolve_guard(c, 2), ckpt, start_step=10).start()
step, ready = 10, False
while True:
  step += 1
  guard.enter("step", step - 1)
  time.sleep(0.2)
  guard.step_done(step, synced=True)
  if not ready and 1 - index in guard._peers:
    print("ready", flush=True); ready = True
'''


LINES = {
    "guard": r"error: host 0 of 2 \(the coordinator\) stopped responding during step \d+ \(its coordination service is "
             r"gone: connection refused; its last report: \w+ at step \d+\); newest complete checkpoint: step 10; "
             r"restart all hosts to resume",
    "start-up": r"error: host 0 of 2 \(the coordinator\) stopped responding during start-up, before training \(its "
                r"coordination service is gone: connection refused\); restart all hosts to resume",
}


@pytest.mark.slow    # two processes importing JAX (about 15 s on 2 loaded cores, mostly waiting)
@pytest.mark.parametrize("when", ["guard", "start-up"])
def test_host_0_killed_its_peer_prints_the_guards_line_and_exits_75_within_seconds(tmp_path, when):
  """Heartbeat timeout 60 s: the guard's own verdict would come after a minute, JAX's abort after 1-3 s. While
  the guard runs, its line; between jax.distributed's start and the guard (the plan), the start-up's."""
  (tmp_path / "ckpt" / "10").mkdir(parents=True)
  port = closed_port()
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
  logs = [open(tmp_path / f"host{i}.log", "w+") for i in range(2)]
  procs = [subprocess.Popen([sys.executable, "-c", HOST, str(i), str(port), str(tmp_path / "ckpt"), when], cwd=REPO,
                            stdout=logs[i], stderr=subprocess.STDOUT, env=env) for i in range(2)]
  try:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not all("ready" in (tmp_path / f"host{i}.log").read_text()
                                                  for i in range(2)):
      assert all(p.poll() is None for p in procs), [(tmp_path / f"host{i}.log").read_text()[-2000:] for i in range(2)]
      time.sleep(0.1)
    killed = time.monotonic()
    procs[0].kill()
    code = procs[1].wait(timeout=120)
    took = time.monotonic() - killed
  finally:
    for p in procs:
      p.kill()
  out = (tmp_path / "host1.log").read_text()
  print(f"host 1 exited {code}, {took:.1f} s after host 0 was killed")
  assert code == RETRYABLE_EXIT_CODE, out[-3000:]
  last = out.strip().splitlines()[-1]
  assert re.fullmatch(LINES[when], last), last
  assert "Extension modules" not in out and "Fatal Python error" not in out, out[-3000:]
  assert took < 30, took                # well inside the 60 s heartbeat timeout
