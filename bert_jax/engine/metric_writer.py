"""The one metrics writer of pre-training and fine-tuning: JSON lines + TensorBoard scalars, process 0 only.

    writer = MetricWriter(workdir)                       # appends (a resumed run continues its files)
    writer.write(step, {"mlm_loss": 2.3, ...})           # metrics.jsonl row {"step": step, ...}, train/ scalars
    writer.write(step, ev, filename="eval_metrics.jsonl", tb_prefix="eval/")
    writer.close()
    rows = read_jsonl(os.path.join(workdir, "metrics.jsonl"))

Rows are flushed at every write (a crash loses nothing written). Non-finite floats are stored as strings
("nan", "inf") so every line stays valid JSON. TensorBoard events go to workdir/tensorboard through
tensorboardX (no TensorFlow); without tensorboardX only the JSON lines are written. Paths go through
bert_jax.fileio (gs:// work dirs too).

After a crash: `truncate_after(path, step)` (pre-training calls it on resume, before the writer opens)
drops the rows logged after the restored checkpoint's step and a torn line (a write cut mid-line), keeping
the original as `<name>.bak-<time>`, so steps stay unique and increasing. `read_jsonl` skips an
unparsable line with a warning instead of failing.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Dict, List, Optional, Tuple

import jax
import numpy as np

from bert_jax import lean_imports
from bert_jax import fileio

log = logging.getLogger(__name__)


def _jsonable(v):
  if isinstance(v, (np.floating, np.integer)):
    v = v.item()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)
  return v


class _FileioEventWriters:
  """tensorboardX writer factory for URL work dirs: its event files go through fileio (tf.io.gfile), like every
  other work-dir file. Without it tensorboardX opens unknown schemes (ram://, ...) as local paths and needs
  google-cloud-storage for gs://."""

  def open(self, path):
    return fileio.open_file(path, "wb")

  def directory_check(self, path):
    fileio.makedirs(path)


def _route_tensorboard_through_fileio(workdir: str) -> None:
  lean_imports.tensorboardx()  # lazy: as in MetricWriter
  from tensorboardX import record_writer  # pylint: disable=g-import-not-at-top
  record_writer.register_writer_factory(workdir.split("://", 1)[0], _FileioEventWriters())


class MetricWriter:
  """See the module docstring. `fresh=True` starts metrics files anew (a fine-tuning run is not resumed).
  `purge_step` (a resumed run: the restored step + 1): TensorBoard hides the events of steps >= it that an
  earlier, crashed run wrote after its last checkpoint, as truncate_after drops their JSON rows (without it
  the curves showed both runs' points for those steps)."""

  def __init__(self, workdir: str, *, fresh: bool = False, enabled: Optional[bool] = None,
               purge_step: Optional[int] = None):
    self.workdir = workdir
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self.fresh = fresh
    self._files: Dict[str, object] = {}
    self._tb = None
    if self.enabled:
      fileio.makedirs(workdir)
      try:
        # lazy: tensorboardX is optional (JSON lines without it); ~0.4 s to import without PyTorch
        SummaryWriter = lean_imports.tensorboardx().SummaryWriter  # without PyTorch: bert_jax/lean_imports.py
        if fileio.is_remote(workdir):
          _route_tensorboard_through_fileio(workdir)
        self._tb = SummaryWriter(fileio.join(workdir, "tensorboard"), purge_step=purge_step)
      except ImportError as e:
        log.warning("TensorBoard disabled (%s); the JSON lines are still written", e)

  def _file(self, filename: str):
    f = self._files.get(filename)
    if f is None:
      f = self._files[filename] = fileio.open_file(fileio.join(self.workdir, filename),
                                                   "w" if self.fresh else "a")
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


def _parse_lines(text: str) -> Tuple[List[Tuple[str, Optional[dict]]], bool]:
  """[(line, row or None when unparsable)] and whether the text ends in a complete line."""
  lines = text.split("\n")
  complete = text.endswith("\n") or not text
  if lines and lines[-1] == "":
    lines.pop()
  out = []
  for line in lines:
    if not line.strip():
      continue
    try:
      row = json.loads(line)
      out.append((line, row if isinstance(row, dict) else None))
    except ValueError:
      out.append((line, None))
  return out, complete


def read_jsonl(path: str) -> List[dict]:
  """The rows of a metrics file ([] when it does not exist); a torn or unparsable line is skipped with a
  warning naming the file and line."""
  if not fileio.exists(path):
    return []
  parsed, _ = _parse_lines(fileio.read_bytes(path).decode("utf-8", errors="replace"))
  bad = [i + 1 for i, (_, row) in enumerate(parsed) if row is None]
  if bad:
    log.warning("%s: skipped %d unreadable line(s) (torn writes?): line %s", path, len(bad),
                ", ".join(map(str, bad[:10])))
  return [row for _, row in parsed if row is not None]


def truncate_after(path: str, step: int) -> int:
  """Drops the rows with "step" > `step` and unparsable (torn) lines from a metrics file, after copying the
  original to `<path>.bak-<UTC time>`; the new file is written atomically. Returns the number of lines
  dropped (0: the file is left untouched)."""
  if not fileio.exists(path):
    return 0
  raw = fileio.read_bytes(path)
  parsed, complete = _parse_lines(raw.decode("utf-8", errors="replace"))
  keep, torn, later = [], 0, 0
  for line, row in parsed:
    if row is None:
      torn += 1
    elif isinstance(row.get("step"), (int, float)) and row["step"] > step:
      later += 1
    else:
      keep.append(line)
  if not torn and not later and complete:
    return 0
  backup = f"{path}.bak-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
  fileio.write_bytes_atomic(backup, raw)
  fileio.write_text_atomic(path, "".join(line + "\n" for line in keep))
  log.warning("%s: dropped %d row(s) logged after the restored step %d and %d torn line(s); the original is "
              "kept as %s", path, later, step, torn, fileio.basename(backup))
  return torn + later
