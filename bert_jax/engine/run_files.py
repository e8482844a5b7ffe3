"""The files that say what a run is, beside its checkpoints, written one way by every run (pre-training, a
fine-tuning run, each replica of a vmapped multi-run):

  plan.json          what the config resolved to (the plan's to_dict())
  config.json        the run config as given, plus the values resolved at start-up under "resolved"
  init_report.json   which parameters came from init_checkpoint and which were initialised (fine-tuning)

Each is indented, key-sorted JSON written atomically (bert_jax.fileio: temp file, fsync, rename), so a reader
sees a whole file or the previous one. Which process writes is the caller's choice (process 0 of a pod).
Pre-training writes config.json (and model_config.json) with `only_if_changed`: a resumed run with the same
command rewrites nothing, and a changed config is noticed and logged.
"""

from __future__ import annotations

import json
from typing import List, Optional

from bert_jax import fileio

PLAN_NAME = "plan.json"
CONFIG_NAME = "config.json"
INIT_REPORT_NAME = "init_report.json"


def write_json_if_changed(path: str, obj) -> bool:
  """Writes `obj` as JSON atomically unless `path` already holds exactly that; True when it wrote."""
  if fileio.exists(path):
    try:
      if json.loads(fileio.read_text(path)) == json.loads(json.dumps(obj, default=str)):
        return False
    except ValueError:
      pass                   # unreadable: replace it
  fileio.write_json_atomic(path, obj)
  return True


def write_run_files(workdir: str, plan: Optional[dict] = None, config: Optional[dict] = None,
                    resolved: Optional[dict] = None, init_report: Optional[dict] = None, *,
                    only_if_changed: bool = False) -> List[str]:
  """plan.json, config.json (`config` with `resolved` under "resolved") and init_report.json, each when given;
  returns the paths written (with `only_if_changed`, those whose content changed)."""
  files = []
  if plan is not None:
    files.append((PLAN_NAME, plan))
  if config is not None:
    files.append((CONFIG_NAME, dict(config, resolved=resolved) if resolved is not None else config))
  if init_report is not None:
    files.append((INIT_REPORT_NAME, init_report))
  paths = []
  for name, content in files:
    path = fileio.join(workdir, name)
    if only_if_changed:
      if write_json_if_changed(path, content):
        paths.append(path)
    else:
      fileio.write_json_atomic(path, content)
      paths.append(path)
  return paths
