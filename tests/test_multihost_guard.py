"""bert_jax/engine/watchdog.py in one process: the settings' checks, the verdicts of the heartbeat and of the
step watchdog on a simulated peer (a fake coordination-service client), the limits, committed checkpoints;
and tests/fault_injection.py, which patches bert_jax from outside for the real two-process faults of
tests/test_multihost.py."""

import json
import os
import signal
import time
import types

import pytest

import fault_injection  # tests/fault_injection.py (tests/ is on sys.path under pytest)
from bert_jax.errors import RETRYABLE_EXIT_CODE, UserError
from bert_jax.engine import checkpoints, watchdog
from bert_jax.pretrain import loop
from configs import pretrain as pretrain_config


def settings(**changes):
  base = dict(heartbeat_timeout_s=10.0, watchdog=True, step_factor=10.0, min_s=5.0, compile_s=100.0, eval_s=50.0,
              checkpoint_s=70.0)
  base.update(changes)
  return watchdog.GuardSettings(**base)


class FakeClient:
  """The coordination service's key-value store, shared by the simulated hosts."""

  def __init__(self):
    self.kv = {}

  def key_value_set(self, key, value, allow_overwrite=False):
    self.kv[key] = value

  def key_value_dir_get(self, prefix):
    return sorted((k, v) for k, v in self.kv.items() if k.startswith(prefix))


def test_defaults_turn_the_watchdog_on_for_multi_host_runs_only_and_give_jax_a_later_heartbeat():
  config = pretrain_config.get_config("size=tiny")
  assert watchdog.resolve_guard(config, 2).watchdog and not watchdog.resolve_guard(config, 1).watchdog
  s = watchdog.resolve_guard(config, 2)
  assert (s.heartbeat_timeout_s, s.min_s) == (60.0, 300.0)
  assert watchdog.distributed_init_kwargs(config) == {"heartbeat_timeout_seconds": 90, "initialization_timeout": 330}
  assert RETRYABLE_EXIT_CODE == 75 and RETRYABLE_EXIT_CODE not in (1, 2, 130, 143)


@pytest.mark.parametrize("field, value, message", [
    ("distributed.heartbeat_timeout_s", 0.5, r"config.distributed.heartbeat_timeout_s=0.5"),
    ("distributed.initialization_timeout_s", 1, r"config.distributed.initialization_timeout_s=1"),
    ("distributed.heartbeat_timeout_s", 1e12, r"heartbeat_timeout_s=1000000000000.0; expected >= 2 and <= 1000000$"),
    ("distributed.initialization_timeout_s", 1e10, r"initialization_timeout_s=10000000000.0; expected >= 2 and <="),
    ("watchdog.min_s", 0.0, r"config.watchdog.min_s=0.0; expected >= 1"),
    ("watchdog.checkpoint_s", -1.0, r"config.watchdog.checkpoint_s=-1.0; expected >= 0"),
    ("watchdog.enable", "sometimes", r"config.watchdog.enable='sometimes'; expected auto, true or false"),
    ("watchdog.step_factor", 0.5, r"config.watchdog.step_factor=0.5"),
])
def test_bad_guard_fields_are_user_errors_naming_the_field(field, value, message):
  config = pretrain_config.get_config("size=tiny")
  section, name = field.split(".")
  config[section][name] = value
  with pytest.raises(UserError, match=message):
    watchdog.resolve_guard(config, 2)


@pytest.mark.slow   # a subprocess importing JAX and waiting out the 3 s deadline
def test_a_host_that_never_joins_gives_one_line_and_exit_75_at_the_start_up_deadline(tmp_path):
  """Process 0 of 2 with no process 1: at config.distributed.initialization_timeout_s it prints the line and
  exits 75 (JAX alone waits 300 s, then aborts with a native stack)."""
  import socket
  import subprocess
  import sys
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
  script = ("import sys; from configs import pretrain as p; from bert_jax.pretrain import loop as pretrain\n"
            "c = p.get_config('size=tiny'); d = c.distributed\n"
            f"d.enable, d.coordinator_address, d.num_processes, d.process_id = True, '127.0.0.1:{port}', 2, 0\n"
            "d.initialization_timeout_s = 3\n"
            "pretrain.maybe_initialize_distributed(c); print('joined')\n")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  t0 = time.time()
  proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == RETRYABLE_EXIT_CODE, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: not every host joined the job within 3 s (config.distributed."
                         f"initialization_timeout_s; coordinator 127.0.0.1:{port}, 2 processes)"), last
  assert "joined" not in proc.stdout and time.time() - t0 < 60


@pytest.mark.parametrize("fields, message", [
    ({}, "config.distributed.enable=true: coordinator_address should be defined. Pass "
         "--config.distributed.coordinator_address=HOST:PORT"),
    ({"coordinator_address": "127.0.0.1:1", "num_processes": 2, "process_id": 2},
     "config.distributed.process_id=2 with config.distributed.num_processes=2: expected a process id in [0, 2)"),
])
def test_distributed_settings_jax_cannot_use_are_one_error_line_and_exit_2(fields, message):
  """enable=true where nothing is auto-detected (no SLURM, no TPU pod), or a process id out of range, was a
  ValueError traceback from jax.distributed.initialize and exit 1."""
  import subprocess
  import sys
  script = ("from configs import pretrain as p; from bert_jax import cli; from bert_jax.pretrain import loop as pretrain\n"
            "c = p.get_config('size=tiny'); d = c.distributed; d.enable = True; d.cpu_collectives = ''\n"
            f"for k, v in {fields!r}.items(): d[k] = v\n"
            "cli.run_main(lambda argv: pretrain.maybe_initialize_distributed(c), argv=['x'])\n")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith("error: " + message), proc.stderr[-500:]


FAIL = r'''
import sys, jax
from bert_jax.engine import watchdog
class Client:
  kv = {}
  def key_value_set(self, key, value, allow_overwrite=False): self.kv[key] = value
  def key_value_dir_get(self, prefix): return sorted(self.kv.items())
s = watchdog.GuardSettings(60.0, False, 10.0, 300.0, 0.0, 0.0, 0.0)
g = watchdog.HostGuard(s, "", process_index=1, process_count=2, client=Client())
g.step_done(40, synced=True)
g.fail(jax.errors.JaxRuntimeError(sys.argv[1]))
'''


@pytest.mark.parametrize("error, code, line", [
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB", 2,
     "error: host 1 of 2: step 41 failed (JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
     "allocate 1.00GiB): out of device memory, which a restart would repeat: lower config.batch_size"),
    ("UNAVAILABLE: Gloo AllGather failed: Connection reset by peer", RETRYABLE_EXIT_CODE,
     "error: host 1 of 2: step 41 failed (JaxRuntimeError: UNAVAILABLE: Gloo AllGather failed"),
])
def test_a_failed_step_out_of_device_memory_is_not_retried_but_a_lost_collective_is(error, code, line):
  """An OOM on a pod exited 75 like a lost collective: supervise and the SLURM script restarted it into the
  same OOM up to MAX_RESTARTS times."""
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, "-c", FAIL, error], cwd=root, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == code, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith(line), proc.stderr[-1000:]


# ---- tests/fault_injection.py: the faults tests/test_multihost.py injects from outside bert_jax ----------
@pytest.mark.parametrize("text, message", [
    ("stall_data", r"--fault='stall_data': expected KIND@STEP:HOST"),
    ("explode@3:0", r"unknown fault 'explode'; expected one of stall_data, die_in_save"),
    ("stall_data@0:1", r"expected a step >= 1 and a host >= 0"),
])
def test_an_injected_fault_is_kind_at_step_colon_host_and_a_bad_one_says_what_was_expected(text, message):
  assert fault_injection.parse("die_in_save@20:1") == fault_injection.Fault("die_in_save", 20, 1)
  with pytest.raises(ValueError, match=message):
    fault_injection.parse(text)


class Blocked(Exception):
  pass


def test_stall_data_blocks_the_named_hosts_batch_of_that_step_in_a_resumed_phase_and_spares_the_rest(monkeypatch):
  opened = []

  def open_data(plan, phase, *, start_step=0, evaluation=False):
    opened.append((start_step, evaluation))
    return iter(range(100))

  def block():
    raise Blocked

  monkeypatch.setattr(loop, "open_data", open_data)
  monkeypatch.setattr(fault_injection.StallingData, "block", staticmethod(block))
  fault_injection.install(fault_injection.parse("stall_data@15:0"))      # this process is host 0
  phase = types.SimpleNamespace(start=10)
  data = loop.open_data(None, phase, start_step=2)      # resumed at step 12: the next batch is step 13's
  assert [next(data), next(data)] == [0, 1]             # steps 13 and 14
  with pytest.raises(Blocked):
    next(data)                                          # step 15's never comes
  assert next(iter(loop.open_data(None, phase, evaluation=True))) == 0     # evaluation data is not touched
  assert opened == [(2, False), (0, True)]


def test_stall_data_on_another_host_leaves_this_hosts_data_alone(monkeypatch):
  monkeypatch.setattr(loop, "open_data", lambda plan, phase, *, start_step=0, evaluation=False: iter(range(3)))
  fault_injection.install(fault_injection.parse("stall_data@1:1"))
  assert list(loop.open_data(None, types.SimpleNamespace(start=0))) == [0, 1, 2]


def test_die_in_save_sigkills_the_named_host_right_after_that_steps_save_started(monkeypatch):
  events = []
  monkeypatch.setattr(checkpoints.Checkpointer, "save", lambda self, step, state, meta=None, force=False:
                      events.append(("save", step)) or True)
  monkeypatch.setattr(os, "kill", lambda pid, signum: events.append(("kill", pid, signum)))
  fault_injection.install(fault_injection.parse("die_in_save@10:0"))
  for step in (5, 10):
    assert checkpoints.Checkpointer.save(None, step, state=None) is True
  assert events == [("save", 5), ("save", 10), ("kill", os.getpid(), signal.SIGKILL)]


def two_hosts(**changes):
  client = FakeClient()
  return client, [watchdog.HostGuard(settings(**changes), "", process_index=i, process_count=2, client=client)
                  for i in range(2)]


def test_a_peer_without_heartbeats_for_the_timeout_is_dead_and_named_with_the_step():
  client, (g0, g1) = two_hosts()
  for g in (g0, g1):
    g.step_done(40, synced=True)
  g1.enter("step", 40)
  g1._publish()
  g0._publish()
  assert g0.verdict() is None
  g0._peer_changed[1] -= 11                    # host 1's record has not changed for 11 s (> 10 s)
  g0._peers[1] = json.loads(client.kv["bert_jax/guard/1"])
  message, stacks = g0.verdict()
  assert message.startswith("host 1 of 2 stopped responding during step 41 (no heartbeat for 11 s; its last "
                            "report: step at step 40)") and not stacks


def test_host_0_silent_is_the_coordinator_and_a_finished_peer_is_not_dead():
  _, (g0, g1) = two_hosts()
  g1._kv_ok -= 11
  g1._peer_changed[0] = time.monotonic()
  assert g1.verdict()[0].startswith("host 0 of 2 (the coordinator) stopped responding during step 1")
  g0._peers[1] = {"beat": 9, "step": 30, "phase": "done"}
  g0._peer_changed[1] -= 100
  assert g0.verdict() is None                  # host 1 finished: its silence is not a death


def test_a_peer_that_stopped_the_job_is_repeated_with_this_hosts_stacks():
  _, (g0, _) = two_hosts()
  g0._peers[1] = {"beat": 3, "step": 14, "phase": "data", "exit": "host 1 of 2 stalled in data at step 15: ..."}
  assert g0.verdict() == ("host 1 of 2 stalled in data at step 15: ... (reported by host 1)", True)


def test_host_0_leaves_last_it_waits_for_the_peers_still_beating_to_say_they_are_leaving(monkeypatch):
  # Host 0 runs the coordination service: leaving first would get a peer aborted by JAX (SIGABRT) before that
  # peer prints its own line (seen in the two-process stall: host 1 exited -6 instead of 75).
  monkeypatch.setattr(watchdog, "LINGER_MAX_S", 0.6)
  client, (g0, g1) = two_hosts()
  g1.enter("data", 14)
  g1._publish()
  g0._read_peers()
  assert g0.peers_still_here() == [1]
  waited = g0.linger()                       # host 1 beats and has not said it is leaving: the whole bound
  assert 0.5 <= waited < 2 and g0.peers_still_here() == [1]
  g1._say_leaving()                          # what a non-zero host does right before its exit
  assert json.loads(client.kv[f"{watchdog.KEY_PREFIX}1"])["leaving"] is True
  assert g0.linger() < 0.5 and g0.peers_still_here() == []
  _, (h0, h1) = two_hosts()                  # a dead peer (no heartbeat for longer than the timeout) or a
  h0._peer_changed[1] -= 11                  # finished one is not waited for
  assert h0.linger() < 0.5
  h0._peers[1], h0._peer_changed[1] = {"beat": 5, "step": 30, "phase": "done"}, time.monotonic()
  assert h0.peers_still_here() == []


class FrozenClient(FakeClient):
  """A coordination service that no longer answers (host 0 frozen by SIGSTOP, a hung VM): every call blocks
  until the test ends."""

  def __init__(self):
    super().__init__()
    self.thawed = __import__("threading").Event()

  def key_value_set(self, key, value, allow_overwrite=False):
    self.thawed.wait()

  def key_value_dir_get(self, prefix):
    self.thawed.wait()
    return []


class Exited(Exception):
  pass


def test_a_host_whose_coordinator_froze_still_prints_its_line_and_exits_75(monkeypatch, tmp_path, capsys):
  # Two processes, host 0 SIGSTOPped: host 1's report to the frozen store never returned, so its line was never
  # printed and JAX aborted it 19 s later (SIGABRT, exit 134) instead of exit 75.
  (tmp_path / "40").mkdir()
  client = FrozenClient()
  g1 = watchdog.HostGuard(settings(heartbeat_timeout_s=3.0), str(tmp_path), process_index=1, process_count=2,
                          client=client)
  def exit_(code):
    raise Exited(code)
  monkeypatch.setattr(watchdog.os, "_exit", exit_)
  g1.enter("step", 40)
  g1._kv_ok -= 4
  codes = []

  def fire():
    try:
      g1.fire(*g1.verdict())
    except Exited as e:
      codes.append(e.args[0])

  thread = __import__("threading").Thread(target=fire, daemon=True)
  thread.start()
  thread.join(10)
  err = capsys.readouterr().err
  client.thawed.set()
  assert codes == [RETRYABLE_EXIT_CODE], err
  last = err.strip().splitlines()[-1]
  assert last.startswith("error: host 0 of 2 (the coordinator) stopped responding during step 41 (no answer for "
                         "4 s); newest complete checkpoint: step 40; restart all hosts to resume"), last


def test_during_a_resumed_runs_start_up_the_lines_name_its_steps_not_step_1():
  # A host frozen while the others restored checkpoint 15 was reported as "stopped responding during step 1
  # (...; its last report: start at step 0)".
  client = FakeClient()
  g0, g1 = (watchdog.HostGuard(settings(), "", process_index=i, process_count=2, client=client, start_step=15)
            for i in range(2))
  g0._publish()
  g1._read_peers()
  g1._peer_changed[0] -= 11
  assert g1.verdict()[0].startswith("host 0 of 2 stopped responding during step 16 (no heartbeat for 11 s; its "
                                    "last report: start at step 15)")


def test_the_exit_report_survives_the_next_heartbeat():
  # The beat thread goes on publishing while the ending host waits for its peers to read its report: a plain
  # record would replace it before they read it.
  client, (g0, g1) = two_hosts()
  g1._exit_report = "host 1 of 2 stalled in data at step 15: ..."
  g1._publish()
  g0._read_peers()
  assert g0.verdict() == ("host 1 of 2 stalled in data at step 15: ... (reported by host 1)", True)


def test_the_watchdog_fires_after_the_limit_and_names_the_stuck_peer_and_phase():
  _, (g0, g1) = two_hosts()
  g0.step_done(14, synced=True)
  g0.enter("step", 14)
  g0._peers[1] = {"beat": 5, "step": 14, "phase": "data"}
  g0._peer_changed[1] = time.monotonic()
  assert g0.verdict() is None
  g0._last_progress -= 6                        # > min_s = 5 s without a finished step
  message, stacks = g0.verdict()
  assert stacks and message.startswith("host 1 of 2 is stuck in data at step 15 (its stacks are in its log); "
                                       "host 0 of 2 waited in step at step 15: no step finished for 6 s "
                                       "(watchdog limit 5 s")
  g1.enter("data", 14)
  g1._last_progress -= 6
  assert g1.verdict()[0].startswith("host 1 of 2 stalled in data at step 15: no step finished for 6 s")


def test_the_limit_is_the_floor_or_factor_x_median_step_plus_the_phase_allowance():
  g = watchdog.HostGuard(settings(min_s=5.0), "", process_index=0, process_count=1)
  assert g.limit() == 5.0 + 100.0              # start-up: the compile allowance
  g.enter("step", 0)
  assert g.limit() == 5.0
  g._last_sync -= 20                            # 20 steps in 20 s, synced: median 1 s per step
  g.step_done(20, synced=True)
  g._last_sync -= 20
  g.step_done(40, synced=True)
  assert g.limit() == pytest.approx(10.0)       # 10 x 1 s x 1 pending step > the 5 s floor
  g.step_done(45)                               # 5 steps dispatched since the last sync: they may all be waited on
  assert g.limit() == pytest.approx(60.0)
  for phase, extra in (("eval", 50.0), ("checkpoint", 70.0), ("compile", 100.0)):
    g.enter(phase)
    assert g.limit() == pytest.approx(60.0 + extra)


def test_committed_checkpoints_exclude_a_half_written_save(tmp_path):
  for name in ("10", "20", "30.orbax-checkpoint-tmp-1712", "40.corrupt-20260101T000000", "workdir.lock"):
    (tmp_path / name).mkdir()
  assert watchdog.complete_checkpoint_steps(str(tmp_path)) == [10, 20]
  assert watchdog.complete_checkpoint_steps(str(tmp_path / "missing")) == []


FIRE = r'''
import sys, time
from bert_jax.engine import watchdog
s = watchdog.GuardSettings(10.0, True, 10.0, 0.5, 0.0, 0.0, 0.0)
g = watchdog.HostGuard(s, sys.argv[1], process_index=0, process_count=1)
g.at_exit(lambda: open(sys.argv[2], "w").write("released"))
g.start()
g.enter("data", 6)
def stuck_in_the_data_iterator():
  time.sleep(60)
stuck_in_the_data_iterator()
'''


@pytest.mark.slow
def test_a_stall_prints_the_stacks_then_one_line_and_exits_75_after_the_exit_hooks(tmp_path):
  import os
  import subprocess
  import sys
  (tmp_path / "ckpt" / "10").mkdir(parents=True)
  (tmp_path / "ckpt" / "20.orbax-checkpoint-tmp-5").mkdir()
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  start = time.monotonic()
  proc = subprocess.run([sys.executable, "-c", FIRE, str(tmp_path / "ckpt"), str(tmp_path / "hook")], cwd=repo,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == RETRYABLE_EXIT_CODE, proc.stderr
  assert time.monotonic() - start < 60
  err = proc.stderr.strip().splitlines()
  assert "in stuck_in_the_data_iterator" in proc.stderr and "host-guard-check" not in err[-1]
  assert err[-1].startswith("error: host 0 of 1 stalled in data at step 7: no step finished for 1 s (watchdog "
                            "limit 0 s; thread stacks above); newest complete checkpoint: step 10; restart all "
                            "hosts to resume"), err[-1]
  assert (tmp_path / "hook").read_text() == "released"
