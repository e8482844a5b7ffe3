"""The one metrics writer of pre-training and fine-tuning: JSON lines + TensorBoard scalars, process 0 only.

    writer = MetricWriter(workdir)                       # appends (a resumed run continues its files)
    writer.write(step, {"mlm_loss": 2.3, ...})           # metrics.jsonl row {"step": step, ...}, train/ scalars
    writer.write(step, ev, filename="eval_metrics.jsonl", tb_prefix="eval/")
    writer.close()
    rows = read_jsonl(os.path.join(workdir, "metrics.jsonl"))

Rows are flushed at every write (a crash loses nothing written). Non-finite floats are stored as strings
("nan", "inf") so every line stays valid JSON. TensorBoard events go to workdir/tensorboard through
tensorboardX (no TensorFlow); without tensorboardX only the JSON lines are written.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Dict, List, Optional

import jax
import numpy as np

log = logging.getLogger(__name__)


def _jsonable(v):
  if isinstance(v, (np.floating, np.integer)):
    v = v.item()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)
  return v


class MetricWriter:
  """See the module docstring. `fresh=True` starts metrics files anew (a fine-tuning run is not resumed)."""

  def __init__(self, workdir: str, *, fresh: bool = False, enabled: Optional[bool] = None):
    self.workdir = workdir
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self.fresh = fresh
    self._files: Dict[str, object] = {}
    self._tb = None
    if self.enabled:
      os.makedirs(workdir, exist_ok=True)
      try:
        from tensorboardX import SummaryWriter
        self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
      except ImportError as e:
        log.warning("TensorBoard disabled (%s); the JSON lines are still written", e)

  def _file(self, filename: str):
    f = self._files.get(filename)
    if f is None:
      f = self._files[filename] = open(os.path.join(self.workdir, filename), "w" if self.fresh else "a",
                                       encoding="utf-8")
    return f

  def write(self, step: int, scalars: dict, *, filename: str = "metrics.jsonl", tb_prefix: str = "train/"):
    """One row {"step": step, **scalars}; numeric values also become TensorBoard scalars tb_prefix + key."""
    if not self.enabled:
      return
    row = {"step": int(step), **{k: _jsonable(v) for k, v in scalars.items()}}
    f = self._file(filename)
    f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    f.flush()
    if self._tb is not None:
      for k, v in row.items():
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
          self._tb.add_scalar(tb_prefix + k, v, int(step))
      self._tb.flush()

  def close(self):
    for f in self._files.values():
      f.close()
    self._files = {}
    if self._tb is not None:
      self._tb.close()
      self._tb = None


def read_jsonl(path: str) -> List[dict]:
  """The rows of a metrics file ([] when it does not exist)."""
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]
