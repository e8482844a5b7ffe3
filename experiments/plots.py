"""PNG plots of pre-training and fine-tuning curves from the work directories' metrics.jsonl files."""

from __future__ import annotations

import io
import os
from typing import Dict, Optional, Sequence, Tuple

from bert_jax import fileio
from bert_jax.engine.metric_writer import read_jsonl


def _plt():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def _save(plt, fig, path: str) -> str:
  """Lays out `fig`, writes it to `path` atomically (creating the folder: a killed run leaves the old plot or
  the new one, never half a PNG) and closes it."""
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  buf = io.BytesIO()
  fig.savefig(buf, dpi=90, format=os.path.splitext(path)[1][1:] or "png")
  plt.close(fig)
  fileio.write_bytes_atomic(path, buf.getvalue())
  return path


def _series(rows, key):
  pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
  return list(zip(*pts)) if pts else ([], [])


# The pre-training panels, each drawn only when a run logged it: a run without NSP (the demo's preset=budget
# trains MLM alone) drew an empty next-sentence panel with an x-axis from -0.04 to 0.04.
PRETRAINING_PANELS = (("mlm_loss", "masked-LM loss"), ("mlm_accuracy", "masked-LM accuracy"),
                      ("nsp_accuracy", "next-sentence accuracy"), ("sop_accuracy", "sentence-order accuracy"))


def pretraining_curves(workdirs: Dict[str, str], path: str, unigram_accuracy: Optional[float] = None) -> str:
  """MLM loss and accuracy (and NSP / SOP accuracy when trained) against the step, one line per run."""
  plt = _plt()
  rows_by_run = {label: read_jsonl(os.path.join(wd, "metrics.jsonl")) for label, wd in workdirs.items()}
  panels = [(key, title) for key, title in PRETRAINING_PANELS
            if any(_series(rows, key)[0] for rows in rows_by_run.values())] or list(PRETRAINING_PANELS[:2])
  fig, axes = plt.subplots(1, len(panels), figsize=(4.7 * len(panels), 3.8), squeeze=False)
  axes = axes[0]
  for label, rows in rows_by_run.items():
    for ax, (key, _) in zip(axes, panels):
      ax.plot(*_series(rows, key), label=label)
  for ax, (key, title) in zip(axes, panels):
    ax.set_title(title)
    ax.set_xlabel("pre-training step")
    ax.grid(alpha=0.3)
    if key == "mlm_accuracy" and unigram_accuracy is not None:
      ax.axhline(unigram_accuracy, color="gray", ls="--", lw=1, label="most frequent char")
    if key in ("nsp_accuracy", "sop_accuracy"):
      ax.axhline(0.5, color="gray", ls="--", lw=1, label="chance")
    ax.legend(fontsize=8)
  return _save(plt, fig, path)


def finetuning_curves(runs_by_task: Dict[str, Dict[str, str]], path: str,
                      baselines: Optional[Dict[str, float]] = None,
                      metric_names: Optional[Dict[str, str]] = None) -> str:
  """Per task: train loss (top) and the dev main metric (bottom) against the step, one line per run.

  runs_by_task: {task title: {run label: finetune workdir}}; baselines: {task title: dev score} drawn dashed.
  """
  plt = _plt()
  tasks = list(runs_by_task)
  fig, axes = plt.subplots(2, len(tasks), figsize=(5.5 * len(tasks), 7), squeeze=False)
  for j, task in enumerate(tasks):
    metric = (metric_names or {}).get(task)
    for label, wd in runs_by_task[task].items():
      rows = read_jsonl(os.path.join(wd, "metrics.jsonl"))
      train = [r for r in rows if r.get("kind") == "train"]
      dev = [r for r in rows if r.get("kind") == "eval" and r.get("split") == "dev"]
      if metric is None and dev:
        metric = "f1" if "f1" in dev[0] and "accuracy" not in dev[0] else "accuracy"
      line, = axes[0][j].plot(*_series(train, "loss"), lw=1, label=label)
      if metric:
        axes[1][j].plot(*_series(dev, metric), "o-", color=line.get_color(), label=label)
    if baselines and task in baselines:
      axes[1][j].axhline(baselines[task], color="gray", ls="--", lw=1, label="classic baseline")
    axes[0][j].set_title(f"{task}: train loss")
    axes[1][j].set_title(f"{task}: dev {metric or ''}")
    for ax in axes[:, j]:
      ax.set_xlabel("fine-tuning step")
      ax.grid(alpha=0.3)
      ax.legend(fontsize=8)
  return _save(plt, fig, path)


def score_bars(rows: Sequence[dict], path: str, title: str = "",
               references: Optional[Dict[str, Sequence[Tuple[str, float]]]] = None) -> str:
  """Grouped bars: rows = [{"label", "sentiment", "ner"}] (test scores in [0, 1]); `references`: {"sentiment" |
  "ner": [(label, score), ...]} drawn as dashed lines across the panel (the majority class, the classic
  baselines), so a bar at the majority class reads as no better than always answering it."""
  plt = _plt()
  import numpy as np
  labels = [r["label"] for r in rows]
  x = np.arange(len(labels))
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  for ax, key, name in ((axes[0], "sentiment", "sentiment accuracy (test)"), (axes[1], "ner", "NER entity F1 (test)")):
    vals = [r.get(key) for r in rows]
    bars = ax.bar(x, [v if v is not None else 0 for v in vals], color=[r.get("color", "C0") for r in rows])
    for b, v in zip(bars, vals):
      if v is not None:
        ax.text(b.get_x() + b.get_width() / 2, v, f"{100 * v:.1f}", ha="center", va="bottom", fontsize=8)
    refs = list((references or {}).get(key, ()))
    for i, (ref_label, ref) in enumerate(refs):
      ax.axhline(ref, color=("0.35", "C3", "C2", "C4")[i % 4], ls=("--", ":", "-.", "--")[i % 4], lw=1.2,
                 label=f"{ref_label}: {100 * ref:.1f}")
    if refs:
      ax.legend(fontsize=8, loc="upper left")
    shown = [v for v in vals if v is not None] + [r for _, r in refs]
    lo = min(shown) if shown else 0.0
    ax.set_ylim(max(0.0, lo - 0.1), 1.0)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=15, fontsize=8)
    ax.set_title(name)
    ax.grid(axis="y", alpha=0.3)
  if title:
    fig.suptitle(title)
  return _save(plt, fig, path)
