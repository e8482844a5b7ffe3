"""A preemption notice (SIGTERM on one host) at any moment of a multi-host restart stops every host at one step.

StopSignals.start / reached against a model of XLA's preemption sync protocol and the coordination service
(xla/tsl/distributed_runtime/preemption/preemption_sync_manager.cc): each host's counter is the last value
given to ReachedSyncPoint (0 before the first call); the notice puts RECEIVED_PREEMPTION_NOTICE into the
key-value store, every host captures its counter, and the sync point is the largest captured counter + 1;
ReachedSyncPoint(c) is True only for c equal to it. The model captures at the notice itself, the earliest
XLA can, which gives the smallest sync point (counters only grow).

Two hosts resumed at step 40 run as threads, one call at a time in a fixed interleaving (host 0 first, host
1 first, or alternating), and the notice comes after every possible call of start-up and of the first steps.
Before this fix start() checked counter 1, then 40: a notice captured between the two calls set the sync
point to 2, which no step of a run resumed at 40 equals, and both hosts trained on to the end (exit 0)."""

import signal
import threading

import pytest

from bert_jax.engine import workdir as wd

RESUMED_AT, LAST_STEP, HOSTS = 40, 60, 2


class Protocol:
  """The coordination service and XLA's sync protocol for HOSTS threads taking turns. `prefer(turn)`: the host
  that takes the turn when both wait for one (the other goes when the preferred one is blocked at a barrier
  or finished). The notice comes after turn `notice_after` (0: before any)."""

  def __init__(self, prefer, notice_after: int):
    self.prefer, self.notice_after = prefer, notice_after
    self.cv = threading.Condition()
    self.turn = 0
    self.state = ["running"] * HOSTS          # running (between calls), waiting (for a turn), barrier, done
    self.counters, self.sync, self.kv, self.arrived = [0] * HOSTS, None, {}, {}
    self.noticed_at = None
    if notice_after == 0:
      self._notice()

  def _notice(self):
    self.kv[wd.PREEMPTION_NOTICE_KEY] = "2026-12-05T00:00:00Z"
    self.sync = max(self.counters) + 1
    self.noticed_at = list(self.counters)

  def _whose_turn(self):
    first = self.prefer(self.turn)
    for h in (first, 1 - first):
      if self.state[h] == "waiting":
        return h
      if self.state[h] == "running":      # will ask for a turn: wait for it
        return None
    return None

  def call(self, host, fn):
    """`fn()` as one turn of `host`."""
    with self.cv:
      self.state[host] = "waiting"
      self.cv.notify_all()
      assert self.cv.wait_for(lambda: self._whose_turn() == host, timeout=20), ("stuck", self.state, self.turn)
      self.state[host] = "running"
      out = fn()
      self.turn += 1
      if self.turn == self.notice_after:
        self._notice()
      self.cv.notify_all()
      return out

  def done(self, host):
    with self.cv:
      self.state[host] = "done"
      self.cv.notify_all()

  def host(self, h):
    """(checkpointer, coordination client) of host `h`."""
    proto = self

    class Ckpt:
      def reached_preemption(self, counter):
        def check():
          proto.counters[h] = counter
          return proto.sync == counter
        return proto.call(h, check)

    class Client:
      def key_value_try_get(self, key):
        def get():
          if key not in proto.kv:
            raise KeyError(f"NOT_FOUND: Config key {key} not found.")
          return proto.kv[key]
        return proto.call(h, get)

      def key_value_set(self, key, value, allow_overwrite=False):
        proto.call(h, lambda: proto.kv.__setitem__(key, value))

      def key_value_dir_get(self, prefix):
        return proto.call(h, lambda: sorted((k, v) for k, v in proto.kv.items() if k.startswith(prefix)))

      def wait_at_barrier(self, name, timeout_ms, process_ids=None):
        proto.call(h, lambda: proto.arrived.setdefault(name, set()).add(h))
        with proto.cv:
          proto.state[h] = "barrier"
          proto.cv.notify_all()
          assert proto.cv.wait_for(lambda: len(proto.arrived[name]) == HOSTS, timeout=20), "barrier never passed"
          proto.state[h] = "running"
          proto.cv.notify_all()
    return Ckpt(), Client()


def run_hosts(prefer, notice_after):
  """Both hosts: start() at RESUMED_AT, then the steps' checks; the step each stopped at (None: trained to the
  end), the protocol."""
  proto = Protocol(prefer, notice_after)
  stopped, errors = [None] * HOSTS, []

  def host(h):
    ckpt, client = proto.host(h)
    signals = wd.StopSignals(ckpt, client=client)
    try:
      if signals.start(RESUMED_AT):
        stopped[h] = RESUMED_AT
      else:
        for step in range(RESUMED_AT + 1, LAST_STEP + 1):
          if signals.reached(step):
            stopped[h] = step
            break
      assert stopped[h] is None or signals.signum == signal.SIGTERM
    except BaseException as e:  # noqa: BLE001 - reported by the test
      errors.append(e)
    finally:
      proto.done(h)

  threads = [threading.Thread(target=host, args=(h,), name=f"host{h}", daemon=True) for h in range(HOSTS)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(60)
  assert not errors, errors
  return stopped, proto


ORDERS = {"host 0 first": lambda turn: 0, "host 1 first": lambda turn: 1, "alternating": lambda turn: turn % 2}


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("notice_after", range(0, 17))   # start-up takes 5 turns per host here; then steps
def test_a_notice_at_any_point_of_a_restarts_start_up_stops_both_hosts_at_one_step(monkeypatch, order, notice_after):
  monkeypatch.setattr(wd.jax, "process_count", lambda: HOSTS)
  monkeypatch.setattr(wd.jax, "process_index", lambda: int(threading.current_thread().name[-1]))
  prefer = ORDERS[order]
  stopped, proto = run_hosts(prefer, notice_after)
  assert proto.noticed_at is not None, "the notice never came: too few turns"
  assert stopped[0] == stopped[1] and stopped[0] is not None, (stopped, proto.noticed_at, proto.sync)
  # a notice before both hosts finished start-up stops them before training; later, within a step of it
  assert stopped[0] <= max(RESUMED_AT, *proto.noticed_at) + 1, (stopped, proto.noticed_at)


def test_without_a_notice_both_hosts_train_to_the_end():
  stopped, proto = run_hosts(lambda turn: turn % 2, notice_after=10_000)
  assert stopped == [None, None] and proto.noticed_at is None


# ---- a SIGTERM while a host joins the job (jax.distributed.initialize) --------------------------------------
@pytest.mark.parametrize("preemption_service", [True, False])
def test_a_sigterm_while_joining_goes_to_every_host_as_a_preemption_notice(monkeypatch, preemption_service):
  """Host 1 SIGTERMed while it waited in jax.distributed.initialize (host 0 not serving yet): it used to stop
  alone (`interrupted: ... while starting, before the plan`, exit 143) and host 0's backend start then failed
  (`Gloo context initialization failed: DEADLINE_EXCEEDED`, a traceback, exit 1: launchers do not restart an
  internal error). Once joined, the signal goes to JAX's preemption service (its handler is in place), which
  every host hears: both stop at start-up, exit 143 (measured in experiments/multihost_faults.md). Without a
  preemption service this host still stops on its own."""
  from bert_jax.errors import Interrupted
  from bert_jax.pretrain import loop
  from configs import pretrain as pretrain_config
  monkeypatch.setattr(loop.jax_distributed.global_state, "preemption_sync_manager",
                      object() if preemption_service else None)
  monkeypatch.setattr(loop.jax, "process_count", lambda: 2)
  monkeypatch.setattr(wd.jax, "process_count", lambda: 2)
  kills, planned = [], []
  monkeypatch.setattr(loop.os, "kill", lambda pid, signum: kills.append((pid, signum)))
  monkeypatch.setattr(loop, "resolve_pretrain", lambda config, workdir: "plan")
  monkeypatch.setattr(loop, "run_plan", lambda plan, signals: planned.append(plan) or {"step": 0})
  config = pretrain_config.get_config("size=tiny")
  noted = []                      # train.py's early handler: nothing before jax.distributed starts, then SIGTERM
  with_term = lambda: noted[0] if noted else None  # noqa: E731
  monkeypatch.setattr(loop, "maybe_initialize_distributed", lambda config: noted.append(signal.SIGTERM))  # joined
  if preemption_service:
    assert loop.train_and_evaluate(config, "/tmp/unused", stop_requested=with_term) == {"step": 0}
    assert kills == [(loop.os.getpid(), signal.SIGTERM)] and planned == ["plan"]
  else:
    with pytest.raises(Interrupted, match="stopped by SIGTERM while starting, before the plan"):
      loop.train_and_evaluate(config, "/tmp/unused", stop_requested=with_term)
    assert kills == [] and planned == []
