r"""launch/slurm_gpu.sbatch's state in the work dir: each task's exit code, the job's failure requeues.

  python launch/slurm_state.py begin WORKDIR JOB_ID             # a run of the job starts: forgets the last
                                                                 # run's task codes; prints the failure requeues
  python launch/slurm_state.py task-exit WORKDIR JOB_ID PROCID CODE   # one task's train.py ended with CODE
  python launch/slurm_state.py verdict WORKDIR JOB_ID NTASKS STATUS   # prints the code that decides the run
  python launch/slurm_state.py requeued WORKDIR JOB_ID          # counts one failure requeue; prints the count

Why: srun returns its tasks' highest exit code, so one host's user error (2) hid behind its peers' 75 ("a
host stopped responding") or a killed host's 137 and the job was requeued into the same error. `verdict` is
the most severe code the tasks recorded (launch/local_cluster.py `severity`: 2 > a crash > 75 > 137 > 134 >
143 > 130 > 0), with srun's STATUS counted too when a task recorded none (its node died with it).

SLURM_RESTART_COUNT counts every requeue of the job, the time-limit and preemption ones too, so a long run
requeued at each time limit hit MAX_RESTARTS without a single failure. `requeued` counts only the requeues
after a failure (exit 75 / 134 / 137 / 143 without a signal to the batch shell), per job id (a new sbatch
starts again at 0).

Files: WORKDIR/slurm/JOB_ID/task<PROCID>.exit_code and WORKDIR/slurm/JOB_ID/failure_requeues, each written
whole (local or a shared file system: temp file, fsync, rename; gs:// through etils.epath, where an object
appears whole). Exit 0, or 2 for bad arguments.
"""

import os
import sys
import tempfile

from etils import epath

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import severity  # noqa: E402  launch/ is scripts, not a package

REQUEUES = "failure_requeues"


def state_dir(workdir: str, job_id: str) -> epath.Path:
  return epath.Path(workdir) / "slurm" / str(job_id)


def write_atomic(path: epath.Path, text: str) -> None:
  """`text` to `path` whole: a reader (or a crash at any moment) sees the old content or the new."""
  path.parent.mkdir(parents=True, exist_ok=True)
  if "://" in str(path):
    path.write_text(text)                     # an object store writes an object whole
    return
  fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, str(path))
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  dir_fd = os.open(str(path.parent), os.O_RDONLY)
  try:
    os.fsync(dir_fd)
  finally:
    os.close(dir_fd)


def read_int(path: epath.Path):
  """The integer in `path`, or None (missing, or not an integer)."""
  try:
    return int(path.read_text().strip())
  except (FileNotFoundError, ValueError):
    return None


def begin(workdir: str, job_id: str) -> int:
  d = state_dir(workdir, job_id)
  if d.exists():
    for p in d.iterdir():
      if p.name.startswith("task") and p.name.endswith(".exit_code"):
        p.unlink()
  return read_int(d / REQUEUES) or 0


def task_exit(workdir: str, job_id: str, procid: int, code: int) -> None:
  write_atomic(state_dir(workdir, job_id) / f"task{procid}.exit_code", f"{code}\n")


def verdict(workdir: str, job_id: str, ntasks: int, status: int) -> int:
  d = state_dir(workdir, job_id)
  codes = [read_int(d / f"task{i}.exit_code") for i in range(ntasks)]
  known = [c for c in codes if c is not None]
  if len(known) < len(codes):                 # a task gone with its node: srun's code stands in for it
    known.append(status)
  return max(known, key=severity)


def requeued(workdir: str, job_id: str) -> int:
  path = state_dir(workdir, job_id) / REQUEUES
  n = (read_int(path) or 0) + 1
  write_atomic(path, f"{n}\n")
  return n


def main(argv) -> int:
  usage = __doc__.split("\n\n")[1]
  try:
    cmd, workdir, job_id, *rest = argv[1:]
    if cmd == "begin" and not rest:
      print(begin(workdir, job_id))
    elif cmd == "task-exit" and len(rest) == 2:
      task_exit(workdir, job_id, int(rest[0]), int(rest[1]))
    elif cmd == "verdict" and len(rest) == 2:
      print(verdict(workdir, job_id, int(rest[0]), int(rest[1])))
    elif cmd == "requeued" and not rest:
      print(requeued(workdir, job_id))
    else:
      raise ValueError
  except ValueError:
    print(f"error: bad arguments {argv[1:]}; usage:\n{usage}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
