r"""Fine-tunes Google's BERT-base on GLUE (MNLI, QNLI, MRPC, SST-2), SQuAD v1.1 and CoNLL-2003 from TFDS,
with the BERT paper's recipe, and fills the table in results.md. For a TPU VM or a GPU; not run in CI.

  # 1. once: checkpoints and TFDS data (see prepare.sh; needs network)
  bash experiments/reproduce_paper/prepare.sh /data/bert_repro
  # 2. fine-tune (a learning-rate sweep per task, as in the paper) and write the table
  python -m experiments.reproduce_paper.run --root=/data/bert_repro --output_dir=/data/bert_repro/runs
  python -m experiments.reproduce_paper.run --root=/data/bert_repro --output_dir=... --tasks=mrpc,sst2 \
      --learning_rates=2e-5 --dry_run            # print the finetune.py commands only

Recipe (Devlin et al. 2019, Sec. 4 and App. A.3): batch 32, 3 epochs for GLUE and SQuAD v1.1 (paper: 3
epochs, lr 5e-5, batch 32 for SQuAD), max_seq_length 128 (GLUE) / 384 with doc_stride 128 (SQuAD), AdamW with
10% warmup and linear decay, dropout 0.1, the best learning rate of {5e-5, 4e-5, 3e-5, 2e-5} on dev. NER uses
the cased checkpoint (the paper: "case-preserving WordPiece model"). Each run is `finetune.py` in a subprocess
(one at a time, all local accelerator cores through the default mesh), so each has its own work directory
with eval_results.json; a finished run (eval_results.json present) is not repeated.
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
PAPER_LRS = (5e-5, 4e-5, 3e-5, 2e-5)


def command(task, lr, args):
  name, tfds_name, ckpt, extra = TASKS[task]
  workdir = os.path.join(args.output_dir, task, f"lr{lr:g}")
  overrides = {"init_checkpoint": os.path.join(args.root, "converted", ckpt), "tfds_name": tfds_name,
               "tfds_data_dir": os.path.join(args.root, "tensorflow_datasets"), "learning_rate": lr,
               "batch_size": args.batch_size, "num_train_epochs": 3.0, "seed": args.seed}
  overrides.update(extra)
  if args.bf16:
    overrides["model.dtype"] = "bfloat16"
  cmd = [sys.executable, os.path.join(ROOT, "finetune.py"), f"--config={ROOT}/configs/finetune.py:task={name}",
         f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in overrides.items()]
  return cmd, workdir


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--root", required=True, help="prepare.sh's folder: converted/ and tensorflow_datasets/")
  p.add_argument("--output_dir", required=True, help="one work directory per task and learning rate")
  p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {','.join(TASKS)}")
  p.add_argument("--learning_rates", default=",".join(f"{x:g}" for x in PAPER_LRS))
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--bf16", action="store_true", help="bfloat16 compute (the default 'auto' already picks it "
                 "on GPU/TPU)")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  args = p.parse_args(argv)
  tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
  unknown = [t for t in tasks if t not in TASKS]
  if unknown:
    p.error(f"unknown tasks {unknown}; expected some of {list(TASKS)}")
  lrs = [float(x) for x in args.learning_rates.split(",") if x.strip()]
  log_path = os.path.join(args.output_dir, "commands.log")
  if not args.dry_run:
    os.makedirs(args.output_dir, exist_ok=True)
  for task in tasks:
    for lr in lrs:
      cmd, workdir = command(task, lr, args)
      line = " ".join(shlex.quote(c) for c in cmd)
      print(line, flush=True)
      if args.dry_run:
        continue
      if os.path.exists(os.path.join(workdir, "eval_results.json")):
        print(f"  done before: {workdir}", flush=True)
        continue
      t0 = time.time()
      rc = subprocess.call(cmd)
      with open(log_path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"task": task, "lr": lr, "rc": rc, "seconds": round(time.time() - t0, 1),
                            "command": line}) + "\n")
      if rc:
        print(f"  FAILED (exit {rc}): {task} lr={lr:g}; continuing", flush=True)
  if not args.dry_run:
    path = table.write_results(args.output_dir, os.path.join(args.output_dir, "results.md"))
    print(open(path, encoding="utf-8").read())


if __name__ == "__main__":
  main()
