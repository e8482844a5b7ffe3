"""train.py as a real two-host job: 2 processes x 2 CPU devices (jax.distributed on 127.0.0.1, gloo), one work
dir, checkpoints, metrics and evaluation, on the mesh (2, 2, 1): the data axis across the hosts and fsdp over
each host's devices, so parameters and optimizer state are sharded within a host and the gradients cross hosts.
A dead, a stuck and a preempted host on that work dir, each run resuming the previous one (A and B are
injected from outside bert_jax by tests/fault_injection.py, which patches host 1's process, then runs train.py):
  A. stall_data@8:1 (host 1's data iterator blocks; its heartbeats go on): the step watchdog stops both
     hosts, exit 75, host 1's log holds every thread's stack and names the stalled phase;
  B. die_in_save@10:1 (host 1 SIGKILLed while checkpoint 10 is written): host 0 prints the one
     `error: host 1 of 2 stopped responding ...` line and exits 75 within the heartbeat timeout;
  C. SIGTERM to host 1 only, during its start-up (restored, before its first step): both hosts stop at the
     restored step (StopSignals.start: they agree on the notice), or, if the notice comes only after
     start-up, both at one later step (JAX's preemption sync point), and exit 143; this start resumed from
     checkpoint 5, not from the half-written 10 (which is gone);
  D. SIGTERM to both hosts (the whole slice preempted) after the restart's first step: the same;
  E. the second restart finishes (both exit 0, the guard never fired).
C, D and E run under `launch/tpu_pod.sh supervise` on tests/test_launch.py's stub slice (gcloud playing two
TPU VMs on this machine): it sees each 143, restarts every worker and ends when both finish; the stopped
runs' logs are kept as train.log.2 and train.log.1.
The reference is 1 process x 4 devices on the same mesh, fed the same global batches (the two hosts'
streams, concatenated as jax.make_array_from_process_local_data lays them out): every metrics window that no
restart cut, the evaluations and the final parameters of the interrupted two-host job equal it.
The launches share a compilation cache (a restart loads the compiled step, as on a pod).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import jax

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "launch"))
from local_cluster import Cluster, free_port  # noqa: E402  launch/ is scripts, not a package
from test_launch import GCLOUD_STUB  # noqa: E402  the stub slice (tests/ is on sys.path under pytest)

from bert_jax.errors import RETRYABLE_EXIT_CODE  # noqa: E402
from bert_jax.pretrained import load_pretrained  # noqa: E402

pytestmark = pytest.mark.slow
# The chain is 11 train.py start-ups (each pays TensorFlow's, JAX's and Orbax's imports and a restore). It
# replaced the one-step two-process train-step test, which it covers end to end (two hosts reproduce one
# host's losses). In the full suite (`bash .ci/run`, clean clone, 2 quiet cores) it took 187 s of 9 min 35 s;
# its first form (9 start-ups) made the run 7 min 24 s against 6 min 25 s without it, back to back.

HEARTBEAT_S = 10
STEPS = 20              # checkpoints every 5, metrics every 5, evaluations every 10
DOCS = 120
WORDS = "the a cat dog sat on mat run play is was hello world jax bert model train data".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """Two training files (one per host), an eval file, a vocab; each document starts with its own token docN,
  so a batch tells which documents it came from."""
  d = tmp_path_factory.mktemp("corpus")
  rng = np.random.default_rng(0)
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS + [f"doc{i}" for i in range(DOCS + 10)]
  (d / "vocab.txt").write_text("\n".join(vocab) + "\n")

  def doc(n):
    sents = [" ".join(rng.choice(WORDS, size=rng.integers(4, 10))) + " ." for _ in range(rng.integers(2, 5))]
    return f"doc{n} " + "\n".join(sents)

  for f in range(2):
    (d / f"train-{f}.txt").write_text("\n\n".join(doc(n) for n in range(f, DOCS, 2)) + "\n")
  (d / "eval.txt").write_text("\n\n".join(doc(DOCS + n) for n in range(10)) + "\n")
  return d


def flags(corpus, workdir, *extra):
  return ["--config=configs/pretrain.py:size=tiny,runlocal", f"--workdir={workdir}",
          f"--config.data.input_files={corpus / 'train-0.txt'},{corpus / 'train-1.txt'}",
          f"--config.data.eval_input_files={corpus / 'eval.txt'}", f"--config.data.vocab_file={corpus / 'vocab.txt'}",
          f"--config.num_train_steps={STEPS}", "--config.checkpoint_every_steps=5", "--config.progress_bar=false",
          "--config.mesh.shape=(2,2,1)",      # data across the hosts, fsdp over each host's 2 devices
          f"--config.distributed.heartbeat_timeout_s={HEARTBEAT_S}", *extra]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  return dict(os.environ, BERT_JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("xla_cache")))


def rows(workdir, name="metrics.jsonl"):
  with open(os.path.join(workdir, name)) as f:
    return [json.loads(line) for line in f if line.strip()]


def final_params(workdir):
  return load_pretrained(str(workdir)).params


def assert_params_close(a, b, **tol):
  la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves_with_path(b)
  assert [p for p, _ in la] == [p for p, _ in lb]
  for (path, x), (_, y) in zip(la, lb):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path), **tol)


REFERENCE = r'''
import dataclasses, os, runpy, sys
sys.path.insert(0, os.getcwd())      # the repository (this script lives in a temp dir)
import numpy as np
from bert_jax.input_pipeline import pretrain_dataset
from bert_jax.pretrain import loop as pretrain

class Joined:
  """The two hosts' streams side by side: host 0's rows, then host 1's (one global batch)."""
  def __init__(self, parts):
    self.parts = parts
  def __iter__(self):
    return self
  def __next__(self):
    got = [next(p) for p in self.parts]
    return {k: np.concatenate([g[k] for g in got]) for k in got[0]}
  def state(self):
    return self.parts[0].state()

def open_data(plan, phase, *, start_step=0, evaluation=False):
  data = dataclasses.replace(plan.data, per_host_batch_size=plan.batch_size // 2)
  return Joined([pretrain_dataset.open_dataset(data, phase.max_seq_length, phase.max_predictions_per_seq,
                                               phase_index=phase.index, evaluation=evaluation,
                                               start_step=start_step, process_index=h, process_count=2)
                 for h in range(2)])

pretrain.open_data = open_data
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
'''


def test_the_hosts_read_disjoint_documents_and_together_all_of_them(corpus):
  from bert_jax.input_pipeline import pretrain_dataset  # tensorflow: imported when this test runs
  from bert_jax.input_pipeline.data_plan import PretrainData
  data = PretrainData(input_files=f"{corpus / 'train-0.txt'},{corpus / 'train-1.txt'}", eval_input_files="",
                      vocab_file=str(corpus / "vocab.txt"), per_host_batch_size=8, masking="auto",
                      google_exact=False, do_lower_case=True, masking_strategy="token", span_geo_p=0.2,
                      span_max_length=10, chinese_whole_word_mask=False, masked_lm_prob=0.15, short_seq_prob=0.1,
                      pair_mode="nsp", pack_sequences=False, shuffle_buffer=100, seed=0)
  vocab = (corpus / "vocab.txt").read_text().split("\n")
  seen = []
  for host in range(2):
    it = pretrain_dataset.open_dataset(data, 64, 10, process_index=host, process_count=2)
    docs = set()
    for _ in range(12):                       # 96 rows per host: more than its 60 documents' pairs in one epoch
      b = next(it)
      first = np.where(b["segment_ids"] == 0, b["input_ids"], 0)   # segment A only: B may be a random sentence
      for row, positions, weights in zip(first, b["masked_lm_positions"], b["masked_lm_weights"]):
        row[positions[weights > 0]] = 0       # masked positions may hold a random token (the 10% of 80/10/10)
      docs |= {vocab[t] for t in np.unique(first) if vocab[t].startswith("doc")}
    seen.append(docs)
  assert not seen[0] & seen[1]
  assert min(len(seen[0]), len(seen[1])) >= DOCS * 0.3     # each host reads its half (a document's marker
  assert len(seen[0] | seen[1]) >= DOCS * 0.6              # shows only when its first line opens segment A)


# ---- the fault chain --------------------------------------------------------------------------------------
# The watchdog's limit is max(min_s, step_factor x median step x steps since the last sync): with the default
# factor 10 a loaded CI machine waited 58-68 s for the stall; 2 still leaves a 10 s floor for these 0.2 s steps.
FAULT_FLAGS = ("--config.watchdog.min_s=10", "--config.watchdog.step_factor=2", "--config.watchdog.compile_s=300",
               "--config.watchdog.eval_s=120", "--config.watchdog.checkpoint_s=120")
LINE = re.compile(r"^error: (.*); newest complete checkpoint: (step \d+|none.*); restart all hosts to resume$")


def _run(corpus, env, workdir, logs, fault, timeout=600):
  """Both hosts run tests/fault_injection.py --fault=FAULT (train.py, with the fault on the host it names)."""
  cluster = Cluster([f"--fault={fault}", *flags(corpus, workdir, *FAULT_FLAGS)], str(logs), env=env,
                    script=os.path.join("tests", "fault_injection.py")).start()
  try:
    codes = cluster.wait(timeout=timeout)
  finally:
    cluster.kill()
  return cluster, codes


def test_stall_dead_host_preemption_of_one_host_supervised_restart_to_the_one_host_losses_and_params(
    corpus, env, tmp_path):
  workdir = tmp_path / "w"
  # The reference, 1 process x 4 devices, uninterrupted, fed the same global batches, runs alongside run A
  # (whose hosts wait out the stall; 2 cores).
  script = tmp_path / "one_host.py"
  script.write_text(REFERENCE)
  ref_dir = tmp_path / "one_host"
  with open(tmp_path / "one_host.log", "w") as log:
    reference = subprocess.Popen([sys.executable, str(script)] + flags(corpus, ref_dir), cwd=REPO, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=4",
                                          JAX_PLATFORMS="cpu"))
  try:
    stops = _chain(corpus, env, workdir, tmp_path)
    reference.wait(timeout=600)
  finally:
    reference.kill()
  assert reference.returncode == 0, (tmp_path / "one_host.log").read_text()[-3000:]
  _compare_with_the_reference(workdir, ref_dir, stops)


def _chain(corpus, env, workdir, tmp_path):
  # A: host 1's data iterator blocks before step 8; its heartbeats go on, only the watchdog can tell.
  a, codes = _run(corpus, env, workdir, tmp_path / "a", "stall_data@8:1")
  log1 = a.text(1)
  assert codes == [RETRYABLE_EXIT_CODE] * 2, log1[-3000:]
  assert "host guard: every thread's stack on host 1 of 2" in log1 and "in __next__" in log1
  assert "the data iterator blocks for good" in log1
  for i in range(2):        # whichever host's watchdog fired first, both lines name host 1, its phase and step
    m = LINE.match(a.last_line(i))
    assert m and m.group(2) == "step 5", a.last_line(i)
    assert re.search(r"host 1 of 2 (stalled|is stuck) in data at step 8", m.group(1)), a.last_line(i)
    idle = re.search(r"no step finished for (\d+) s \(watchdog limit (\d+) s", m.group(1))
    assert idle and int(idle.group(1)) <= int(idle.group(2)) + 3, m.group(1)      # caught on time
  assert abs(a.ended[0] - a.ended[1]) < HEARTBEAT_S and sorted(os.listdir(workdir / "checkpoints")) == ["5"]

  # B: host 1 is SIGKILLed while checkpoint 10 is written: host 0 names it and exits 75 within the timeout.
  b, codes = _run(corpus, env, workdir, tmp_path / "b", "die_in_save@10:1")
  assert codes == [RETRYABLE_EXIT_CODE, -signal.SIGKILL], b.text(0)[-3000:]
  assert b.ended[0] - b.ended[1] < HEARTBEAT_S + 15, (b.ended, b.text(0)[-2000:])
  assert re.match(r"error: host 1 of 2 stopped responding during step 1[01] \(no heartbeat for \d+ s; its last "
                  r"report: \w+ at step (9|10)\); newest complete checkpoint: step 5; restart all hosts to "
                  r"resume$", b.last_line(0)), b.last_line(0)
  assert "Extension modules" not in b.text(0)            # not JAX's SIGABRT (its heartbeat is 30 s later)
  assert any(n.startswith("10.") for n in os.listdir(workdir / "checkpoints"))     # the half-written save

  # C, D, E under launch/tpu_pod.sh supervise, on a stub slice. C: SIGTERM to host 1 alone once it has restored
  # checkpoint 5, before its first step (a SIGTERM there was once lost: both hosts trained on to exit 0): both
  # stop at one agreed step and exit 143. The supervisor restarts every worker. D: SIGTERM to both hosts (the
  # whole slice preempted) after the restart's first step: both save one agreed step and exit 143.
  # E: the second restart finishes (both exit 0, the guard ran and never fired).
  slice_env, homes = _stub_slice(tmp_path / "slice", env, workdir)
  run_dirs = [home / "bert_jax_run" for home in homes]
  supervisor = subprocess.Popen(["bash", os.path.join(REPO, "launch", "tpu_pod.sh"), "supervise",
                                 *flags(corpus, workdir, *FAULT_FLAGS)[2:]],
                                env=slice_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    for restart, targets, when in ((1, [1], "resumed from "), (2, [0, 1], "start-up: ")):
      for i in targets:   # C: once restored, before the first step; D: after each target's first step
        log = run_dirs[i] / "train.log"
        assert _wait_for_text(log, when, timeout=400), _tail(log)
      for i in targets:
        os.kill(int((run_dirs[i] / "train.pid").read_text()), signal.SIGTERM)
      for run_dir in run_dirs:   # the supervisor restarted both (each restart moves the logs up by one)
        assert _wait_for_text(run_dir / f"train.log.{restart}", "", timeout=300), _logs_so_far(run_dirs)
    out, _ = supervisor.communicate(timeout=600)
  finally:
    supervisor.kill()
    for run_dir in run_dirs:                  # nothing of the job outlives a failed test
      try:
        os.kill(int((run_dir / "train.pid").read_text()), signal.SIGKILL)
      except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
  assert supervisor.returncode == 0, out[-3000:] + _tail(run_dirs[0] / "train.log")
  stopped = r"supervise: a worker exited 143: \S+: interrupted: stopped by SIGTERM (during start-up )?at step \d+"
  assert len(re.findall(stopped, out)) == 2, out
  assert "supervise: restart 2 of 3" in out and "supervise: finished after 2 restart(s)" in out, out
  stops, resumed_at = [], 5
  for n in (2, 1):                            # train.log.2: C (host 1 alone), train.log.1: D (both hosts)
    logs = [(run_dir / f"train.log.{n}").read_text() for run_dir in run_dirs]
    assert re.search(rf"resumed from \S+ at step {resumed_at}\b", logs[0]), logs[0][-2000:]
    steps = [re.search(r"^interrupted: stopped by SIGTERM (during start-up )?at step (\d+)", t, re.M) for t in logs]
    assert steps[0] and steps[1] and steps[0].group(2) == steps[1].group(2), (logs[0][-1500:], logs[1][-1500:])
    stop = int(steps[0].group(2))
    if n == 2:       # C: which of the two ways (the notice during start-up, the usual case, or after it)
      print(f"C: SIGTERM to host 1 after its restore: both stopped at step {stop} (resumed at {resumed_at})")
    assert (stop == resumed_at) == bool(steps[0].group(1)) == bool(steps[1].group(1)), (logs[0][-1500:],)
    if stop > resumed_at:                   # a run that trained: its last metrics window was cut
      stops.append(stop)
    resumed_at = stop
  assert 5 < stops[0] and stops[-1] == resumed_at < STEPS and stops == sorted(set(stops)), stops
  e = [(run_dir / "train.log").read_text() for run_dir in run_dirs]          # the second restart
  assert re.search(rf"resumed from \S+ at step {resumed_at}\b", e[0]), e[0][-2000:]
  for i in range(2):
    assert (run_dirs[i] / "exit_code").read_text().strip() == "0"
    assert not [l for l in e[i].splitlines() if l.startswith("error:") or "host guard" in l]
  assert not [n for n in os.listdir(workdir / "checkpoints") if not n.isdigit()]   # the tmp 10 was deleted
  assert sorted(os.listdir(workdir / "checkpoints"), key=int)[-1] == str(STEPS)
  assert (workdir / "plots" / "loss_curve.png").exists()
  return stops


# ---- host 0 dies ------------------------------------------------------------------------------------------
def test_host_0_killed_mid_run_host_1_prints_one_line_naming_it_and_exits_75_well_inside_the_timeout(
    corpus, env, tmp_path):
  """At the default heartbeat timeout (60 s) host 1 must not wait for it: JAX's client notices the lost
  coordination service within seconds and would abort (SIGABRT, exit 134); the guard turns that into its line
  (engine/coordinator.py). Measured 0.2-3 s; experiments/multihost_faults.py times it at more steps."""
  workdir = tmp_path / "w"
  args = [f for f in flags(corpus, workdir) if not f.startswith(("--config.num_train_steps=",
                                                                  "--config.distributed.heartbeat_timeout_s="))]
  cluster = Cluster([*args, "--config.num_train_steps=500", "--config.distributed.heartbeat_timeout_s=60"],
                    str(tmp_path / "logs"), env=env).start()
  try:
    ckpts = workdir / "checkpoints"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and all(c is None for c in cluster.poll()) and not (
        ckpts.is_dir() and "5" in os.listdir(ckpts)):
      time.sleep(0.1)
    assert cluster.poll() == [None, None], (cluster.text(0)[-2000:], cluster.text(1)[-2000:])
    killed = time.monotonic()
    cluster.signal(0, signal.SIGKILL)
    cluster.wait(timeout=120, until=lambda: cluster.poll()[1] is not None)
    codes = cluster.poll()
  finally:
    cluster.kill()
  took = cluster.ended.get(1, time.monotonic()) - killed
  print(f"host 1 exited {codes[1]} {took:.1f} s after host 0 was killed")
  assert codes[1] == RETRYABLE_EXIT_CODE, cluster.text(1)[-3000:]
  m = LINE.match(cluster.last_line(1))
  assert m and re.match(r"host 0 of 2 \(the coordinator\) stopped responding during step \d+ \(its coordination "
                        r"service is gone: connection refused; its last report: \w+ at step \d+\)$", m.group(1)), \
      cluster.last_line(1)
  assert "Extension modules" not in cluster.text(1) and "Fatal Python error" not in cluster.text(1)
  assert took < 30, took                  # JAX's own abort comes within 1-3 s; the timeout is 60 s


def _logs_so_far(run_dirs):
  return "\n".join(_tail(d / name, 1500) for d in run_dirs for name in ("train.log", "train.log.1"))


def _stub_slice(root, env, workdir):
  """A 2-worker TPU slice played by tests/test_launch.py's stub gcloud, whose workers run this checkout's
  train.py as one jax.distributed job: each worker's venv python adds its process id and the coordinator (the
  TPU runtime's part on a real slice). Returns (the environment for launch/tpu_pod.sh, the worker homes)."""
  (root / "bin").mkdir(parents=True)
  gcloud = root / "bin" / "gcloud"
  gcloud.write_text(GCLOUD_STUB.format(py=sys.executable, n=2))
  gcloud.chmod(0o755)
  port, homes = free_port(), []
  for i in range(2):
    home = root / f"worker{i}"
    (home / "bert_jax_venv" / "bin").mkdir(parents=True)
    os.symlink(REPO, home / "bert_jax")        # tpu_pod.sh runs train.py from ~/bert_jax (setup's copy)
    python = home / "bert_jax_venv" / "bin" / "python"
    python.write_text(f"""#!/bin/bash
if [ "$1" = train.py ]; then
  exec {sys.executable} "$@" --config.distributed.enable=true \\
      --config.distributed.coordinator_address=127.0.0.1:{port} \\
      --config.distributed.num_processes=2 --config.distributed.process_id={i}
fi
exec {sys.executable} "$@"
""")
    python.chmod(0o755)
    homes.append(home)
  slice_env = dict(env, PATH=f"{root / 'bin'}{os.pathsep}{env['PATH']}", STUB_ROOT=str(root), TPU_NAME="my-tpu",
                   ZONE="us-central2-b", WORKDIR=str(workdir), CONFIG="configs/pretrain.py:size=tiny,runlocal",
                   POLL_SECONDS="1", MAX_RESTARTS="3", STOP_TIMEOUT="120", STATE_DIR=str(root / "state"),
                   XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
  return slice_env, homes


def _wait_for_text(path, needle, timeout):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if path.exists() and needle in path.read_text(errors="replace"):
      return True
    time.sleep(0.1)
  return False


def _tail(path, n=3000):
  return path.read_text(errors="replace")[-n:] if path.exists() else f"({path} missing)"


def _compare_with_the_reference(workdir, ref_dir, stops):
  want = {r["step"]: r for r in rows(ref_dir)}
  assert sorted(want) == [5, 10, 15, 20]
  # the metrics windows (5 steps each) that no stop cut short (a stop logs its partial window, the restart the
  # rest of it)
  got = [r for r in rows(workdir) if not any(r["step"] - 5 < s <= r["step"] for s in stops)]
  assert [r["step"] for r in got][0] == 5 and got[-1]["step"] == STEPS and len(got) >= 2
  for r in got:
    for k in ("loss", "mlm_loss", "nsp_loss", "grad_norm"):
      np.testing.assert_allclose(r[k], want[r["step"]][k], rtol=2e-5, err_msg=f"{k} at step {r['step']}")
  evals, want_evals = rows(workdir, "eval_metrics.jsonl"), {r["step"]: r for r in rows(ref_dir, "eval_metrics.jsonl")}
  assert sorted(want_evals) == [10, 20] and STEPS in {r["step"] for r in evals}
  for r in evals:
    for k in ("eval_loss", "eval_mlm_loss"):
      np.testing.assert_allclose(r[k], want_evals[r["step"]][k], rtol=2e-5, err_msg=f"{k} at step {r['step']}")
  assert_params_close(final_params(workdir), final_params(ref_dir), rtol=1e-4, atol=1e-6)
