r"""Fine-tunes Google's BERT-base on GLUE (MNLI, QNLI, MRPC, SST-2), SQuAD v1.1 and CoNLL-2003 from TFDS,
with the BERT paper's recipe, and fills the table in results.md. For a TPU VM or a GPU; not run in CI.

  # 1. once: checkpoints and TFDS data (see prepare.sh; needs network)
  bash experiments/reproduce_paper/prepare.sh /data/bert_repro
  # 2. a sweep per task (the paper's grid x 5 seeds, best on dev) and the table
  python -m experiments.reproduce_paper.run --root=/data/bert_repro --output_dir=/data/bert_repro/runs
  python -m experiments.reproduce_paper.run --root=/data/bert_repro --output_dir=... --tasks=mrpc,sst2 \
      --learning_rates=2e-5 --seeds=1 --dry_run     # print the sweep commands only
  # the standard files instead of TFDS (prepare.sh's checkpoints still come from --root/converted)
  python -m experiments.reproduce_paper.run --root=/data/bert_repro --output_dir=... --glue_dir=glue_data \
      --squad_dir=squad --conll_dir=conll2003
  # several hosts / slices: each takes a share of every task's sweep, then one merges
  python -m experiments.reproduce_paper.run ... --shard=0/4     # (1/4, 2/4, 3/4 on the others)
  python -m experiments.reproduce_paper.run ... --report

Recipe (Devlin et al. 2019, Sec. 4 and App. A.3): batch 32, 3 epochs for GLUE and SQuAD v1.1 (paper: 3
epochs, lr 5e-5, batch 32 for SQuAD), max_seq_length 128 (GLUE) / 384 with doc_stride 128 (SQuAD), AdamW with
10% warmup and linear decay, dropout 0.1. The grid: Sec. 4.1's learning rates {5e-5, 4e-5, 3e-5, 2e-5}
(`--full_grid`: App. A.3's batch {16, 32} x lr {5e-5, 3e-5, 2e-5} x epochs {2, 3, 4}), each point with 5
seeds; selection by the paper's rule, the best dev run (`bert_jax.finetune.sweep --select=best`), and the
table also shows the median over the selected point's seeds. NER uses the cased checkpoint (the paper:
"case-preserving WordPiece model"). Each task is one `python -m bert_jax.finetune.sweep` subprocess (runs
that differ only in seed and learning rate train together as one vmapped program when K copies of the model
fit the accelerator's memory); finished runs are skipped, so an interrupted sweep resumes.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from bert_jax.errors import UserError  # noqa: E402
from experiments.reproduce_paper import table  # noqa: E402

# task -> (finetune task name, TFDS name, checkpoint subfolder, extra config overrides)
TASKS = {
    "mnli": ("mnli", "glue/mnli", "uncased_L-12_H-768_A-12", {}),
    "qnli": ("qnli", "glue/qnli", "uncased_L-12_H-768_A-12", {}),
    "mrpc": ("mrpc", "glue/mrpc", "uncased_L-12_H-768_A-12", {}),
    "sst2": ("sst2", "glue/sst2", "uncased_L-12_H-768_A-12", {}),
    "squad_v1": ("squad_v1", "squad/v1.1", "uncased_L-12_H-768_A-12",
                 {"max_seq_length": 384, "doc_stride": 128, "num_train_epochs": 3.0}),
    # Sentence-level CoNLL-2003 (the paper used maximal document context; expect a few tenths less F1).
    "conll2003": ("ner", "conll2003", "cased_L-12_H-768_A-12", {}),
}
PAPER_LRS = (5e-5, 4e-5, 3e-5, 2e-5)                     # Sec. 4.1 (GLUE), batch 32, 3 epochs
APPENDIX_GRID = "batch_size=16,32;optimizer.learning_rate=5e-5,3e-5,2e-5;num_train_epochs=2,3,4"   # App. A.3


def command(task, args):
  """(the sweep command of `task`, its sweep directory)."""
  name, tfds_name, ckpt, extra = TASKS[task]
  workdir = os.path.join(args.output_dir, task)
  files = {"glue": args.glue_dir, "squad": args.squad_dir, "conll2003": args.conll_dir}[tfds_name.split("/")[0]]
  data = ({"data_dir": os.path.abspath(files)} if files else
          {"tfds_name": tfds_name, "tfds_data_dir": os.path.join(args.root, "tensorflow_datasets")})
  overrides = {"init_checkpoint": os.path.join(args.root, "converted", ckpt), **data, "batch_size": args.batch_size,
               "num_train_epochs": 3.0, "seed": args.seed, "save_best_checkpoint": False}
  overrides.update(extra)
  if args.bf16:
    overrides["model.dtype"] = "bfloat16"
  grid = APPENDIX_GRID if args.full_grid else "optimizer.learning_rate=" + args.learning_rates
  cmd = [sys.executable, "-m", "bert_jax.finetune.sweep", f"--config={ROOT}/configs/finetune.py:task={name}",
         f"--workdir={workdir}", f"--grid={grid}", f"--seeds={args.seeds}", "--select=best",
         f"--shard={args.shard}"] + [f"--config.{k}={v}" for k, v in overrides.items()]
  if args.report:
    cmd = [sys.executable, "-m", "bert_jax.finetune.sweep", "--report", f"--workdir={workdir}"]
  return cmd, workdir


class _Parser(argparse.ArgumentParser):
  """A bad flag is one `error: ...` line and exit 2 (main), not argparse's usage block."""

  def error(self, message):
    raise UserError(f"{message} (--help lists the flags)")


def _check(args):
  """UserError for a flag value the sweeps would refuse only after a task or two had run."""
  if args.seeds < 1:
    raise UserError(f"--seeds={args.seeds}: at least 1")
  if args.batch_size < 1:
    raise UserError(f"--batch_size={args.batch_size}: at least 1")
  for lr in (x.strip() for x in args.learning_rates.split(",")):
    try:
      ok = float(lr) > 0
    except ValueError:
      ok = False
    if not ok:
      raise UserError(f"--learning_rates={args.learning_rates!r}: {lr!r} is not a positive number "
                      "(comma-separated, e.g. 5e-5,3e-5)")
  i, _, n = args.shard.partition("/")
  if not (i.isdigit() and n.isdigit() and int(i) < int(n)):
    raise UserError(f"--shard={args.shard!r}: expected I/N with 0 <= I < N, e.g. 0/4")
  if args.dry_run or args.report:
    return
  for flag in ("root", "glue_dir", "squad_dir", "conll_dir"):
    path = getattr(args, flag)
    if path and not os.path.isdir(path):
      raise UserError(f"--{flag}={path}: no such directory" + (
          " (prepare.sh's folder: converted/ and tensorflow_datasets/)" if flag == "root" else ""))


def main(argv=None):
  try:
    return _main(argv)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    return 2


def _main(argv=None):
  p = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--root", required=True, help="prepare.sh's folder: converted/ and tensorflow_datasets/")
  p.add_argument("--output_dir", required=True, help="one work directory per task and learning rate")
  p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {','.join(TASKS)}")
  p.add_argument("--learning_rates", default=",".join(f"{x:g}" for x in PAPER_LRS))
  p.add_argument("--full_grid", action="store_true", help="App. A.3's grid (batch x lr x epochs)")
  p.add_argument("--seeds", type=int, default=5, help="runs per grid point (seeds seed..seed+N-1)")
  p.add_argument("--shard", default="0/1", help="I/N: this host's share of each sweep")
  p.add_argument("--report", action="store_true", help="only merge the runs into each task's report")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--bf16", action="store_true", help="bfloat16 compute (the default 'auto' already picks it "
                 "on GPU/TPU)")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  p.add_argument("--glue_dir", default="", help="read GLUE from the standard files (download_glue_data.py's "
                 "glue_data: MNLI/, QNLI/, MRPC/, SST-2/) instead of TFDS")
  p.add_argument("--squad_dir", default="", help="read SQuAD v1.1 from train-v1.1.json / dev-v1.1.json here")
  p.add_argument("--conll_dir", default="", help="read CoNLL-2003 from train.txt / dev.txt (or valid.txt) / "
                 "test.txt here")
  args = p.parse_args(argv)
  # the sweeps run with cwd=ROOT: a relative --output_dir / --root would land under (or be looked up in) the
  # repository, while commands.log and results.md are written relative to the caller's directory
  args.output_dir, args.root = os.path.abspath(args.output_dir), os.path.abspath(args.root)
  tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
  unknown = [t for t in tasks if t not in TASKS]
  if unknown or not tasks:
    raise UserError(f"--tasks={args.tasks!r}: unknown tasks {unknown}; expected some of {list(TASKS)}")
  _check(args)
  log_path = os.path.join(args.output_dir, "commands.log")
  if not args.dry_run:
    os.makedirs(args.output_dir, exist_ok=True)
  failed = []
  for task in tasks:
    cmd, _ = command(task, args)
    line = " ".join(shlex.quote(c) for c in cmd)
    print(line, flush=True)
    if args.dry_run:
      continue
    t0 = time.time()
    rc = subprocess.call(cmd, cwd=ROOT)
    with open(log_path, "a", encoding="utf-8") as f:
      f.write(json.dumps({"task": task, "rc": rc, "seconds": round(time.time() - t0, 1), "command": line}) + "\n")
    if rc:
      failed.append(task)
      print(f"  FAILED (exit {rc}): {task}; continuing", flush=True)
  if not args.dry_run and (args.shard in ("0/1", "") or args.report):
    path = table.write_results(args.output_dir, os.path.join(args.output_dir, "results.md"))
    print(open(path, encoding="utf-8").read())
  if failed:
    print(f"error: {len(failed)} of {len(tasks)} sweeps failed: {', '.join(failed)} (their errors above; "
          f"{log_path})", file=sys.stderr, flush=True)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
