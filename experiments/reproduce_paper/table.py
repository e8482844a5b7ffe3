"""The BERT paper's BERT-base dev numbers beside ours: reads each task's sweep (<output_dir>/<task>/runs/*/
eval_results.json, the grid in sweep_spec.json; run.py makes them), keeps the grid point with the best dev run
(the paper's selection rule) and writes a markdown table with that run's score and the median over the
selected point's seeds.

  python -m experiments.reproduce_paper.table --output_dir=/data/bert_repro/runs   # prints, writes results.md
"""

import argparse
import glob
import json
import os
import statistics
import sys

# task -> (row label, metric label, paper value, eval split, metric key in eval_results.json, scale to %)
# Paper numbers: Devlin et al. 2019, Table 5 (BERT-base dev: MNLI-m, QNLI, MRPC and SST-2 accuracy),
# Table 2 (SQuAD v1.1 dev F1/EM) and Table 7 (CoNLL-2003 dev F1, fine-tuning approach, BERT-base).
ROWS = (
    ("mnli", "MNLI-m", "accuracy", 84.4, "dev_matched", "accuracy", 100.0),
    ("qnli", "QNLI", "accuracy", 88.4, "dev", "accuracy", 100.0),
    ("mrpc", "MRPC", "accuracy", 86.7, "dev", "accuracy", 100.0),
    ("sst2", "SST-2", "accuracy", 92.7, "dev", "accuracy", 100.0),
    ("squad_v1", "SQuAD v1.1", "F1", 88.5, "dev", "f1", 1.0),
    ("squad_v1", "SQuAD v1.1", "EM", 80.8, "dev", "exact_match", 1.0),
    ("conll2003", "CoNLL-2003 NER", "F1", 96.4, "dev", "f1", 100.0),
)


def _settings(output_dir, task, run_dir):
  """The grid point's label from sweep_spec.json; the run's point name (p000) when the spec is gone."""
  name = os.path.basename(run_dir).split("_")[0]
  try:
    with open(os.path.join(output_dir, task, "sweep_spec.json"), encoding="utf-8") as f:
      spec = json.load(f)
    return spec["points"][int(name[1:])]["label"]
  except (OSError, ValueError, KeyError, IndexError, TypeError):
    return name


def best_run(output_dir, task, split, key, select_key=None):
  """(best dev value, its grid point, median over that point's seeds, seeds) or None when no run finished.
  `select_key`: the metric that picks the run (default `key`); SQuAD's EM is the EM of the best-F1 run, as
  the paper reports one model's EM and F1."""
  select_key = select_key or key
  values = {}
  for path in sorted(glob.glob(os.path.join(output_dir, task, "runs", "p*_s*", "eval_results.json"))):
    with open(path, encoding="utf-8") as f:
      res = json.load(f)
    scores = res.get(split) or {}
    if scores.get(key) is not None and scores.get(select_key) is not None:
      point = os.path.basename(os.path.dirname(path)).split("_")[0]
      values.setdefault(point, []).append((scores[select_key], scores[key], os.path.dirname(path)))
  if not values:
    return None
  point, runs = max(values.items(), key=lambda kv: max(r[0] for r in kv[1]))
  best = max(runs, key=lambda r: r[0])
  return best[1], _settings(output_dir, task, best[2]), statistics.median(r[1] for r in runs), len(runs)


def markdown(output_dir=None):
  lines = ["| task | metric | paper (BERT-base, dev) | ours (best run) | median over seeds | selected point | "
           "difference |", "|---|---|---|---|---|---|---|"]
  for task, label, metric, paper, split, key, scale in ROWS:
    run = best_run(output_dir, task, split, key, "f1" if key == "exact_match" else None) if output_dir else None
    if run is None:
      lines.append(f"| {label} | {metric} | {paper:.1f} |  |  |  |  |")
    else:
      ours = run[0] * scale
      lines.append(f"| {label} | {metric} | {paper:.1f} | {ours:.1f} | {run[2] * scale:.1f} ({run[3]} seeds) | "
                   f"{run[1]} | {ours - paper:+.1f} |")
  return "\n".join(lines) + "\n"


def write_results(output_dir, path):
  """results.md, written atomically (temp file, fsync, rename): a reader never sees half a table."""
  text = "# BERT-base fine-tuned with bert_jax vs the BERT paper (dev sets)\n\n" + markdown(output_dir)
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  return path


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--output_dir", required=True)
  args = p.parse_args(argv)
  if not os.path.isdir(args.output_dir):
    print(f"error: --output_dir={args.output_dir}: no such directory (run.py's --output_dir, holding one sweep "
          "per task)", file=sys.stderr)
    return 2
  print(open(write_results(args.output_dir, os.path.join(args.output_dir, "results.md")),
             encoding="utf-8").read())
  return 0


if __name__ == "__main__":
  sys.exit(main())
