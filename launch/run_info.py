r"""Prints where a pre-training work dir stands: its latest complete checkpoint and last metrics.jsonl row.

  python launch/run_info.py gs://my-bucket/runs/bert_large      # or a local path
  latest checkpoint: step 12000 (gs://my-bucket/runs/bert_large/checkpoints/12000)
  last metrics row: {"step": 12000, "mlm_loss": 2.31, ...}

`launch/tpu_pod.sh status|stop` runs it on worker 0. Paths go through `etils.epath` (installed with Orbax),
which reads gs:// itself. A complete Orbax checkpoint is a `checkpoints/<step>` folder with an integer name;
saves still in flight are `<step>.orbax-checkpoint-tmp-*` locally, or lack `commit_success.txt` on gs://,
and are not counted. Exit 0, or 2 when the work dir does not exist or is a file.
"""

import json
import sys

from etils import epath


def latest_checkpoint_step(workdir: epath.Path, remote=None):
  """The highest integer-named folder in workdir/checkpoints, or None. On an object store (gs://; `remote`
  None: by the path) Orbax writes a step under its final name and marks it complete with commit_success.txt
  last, so a step without it is a save in flight (or cut by a crash), not a checkpoint a restart resumes."""
  remote = "://" in str(workdir) if remote is None else remote
  ckpt_dir = workdir / "checkpoints"
  if not ckpt_dir.exists():
    return None
  steps = [int(p.name) for p in ckpt_dir.iterdir()
           if p.name.isdigit() and p.is_dir() and (not remote or (p / "commit_success.txt").exists())]
  return max(steps) if steps else None


def last_metrics_row(workdir: epath.Path):
  """The last complete JSON line of workdir/metrics.jsonl (a half-written last line is skipped), or None."""
  path = workdir / "metrics.jsonl"
  if not path.exists():
    return None
  for line in reversed(path.read_text().splitlines()):
    try:
      return json.loads(line)
    except json.JSONDecodeError:
      continue
  return None


def main(argv):
  if len(argv) != 2:
    print(f"usage: {argv[0]} WORKDIR", file=sys.stderr)
    return 2
  workdir = epath.Path(argv[1])
  if not workdir.exists():
    print(f"error: work dir {workdir} does not exist", file=sys.stderr)
    return 2
  if not workdir.is_dir():      # a file read as an empty work dir: "none", exit 0
    print(f"error: work dir {workdir} is a file, not a directory", file=sys.stderr)
    return 2
  step = latest_checkpoint_step(workdir)
  print("latest checkpoint: " + (f"step {step} ({workdir / 'checkpoints' / str(step)})" if step is not None
                                 else "none"))
  row = last_metrics_row(workdir)
  print("last metrics row: " + (json.dumps(row) if row is not None else "none"))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
