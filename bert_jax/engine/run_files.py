"""The files that say what a run is, beside its checkpoints, written one way by every run (pre-training, a
fine-tuning run, each replica of a vmapped multi-run):

  plan.json          what the config resolved to (the plan's to_dict())
  config.json        the run config as given, plus the values resolved at start-up under "resolved"
  init_report.json   which parameters came from init_checkpoint and which were initialised (fine-tuning)

Each is indented, key-sorted JSON written atomically (bert_jax.fileio: temp file, fsync, rename), so a reader
sees a whole file or the previous one. Which process writes is the caller's choice (process 0 of a pod).
"""

from __future__ import annotations

from typing import List, Optional

from bert_jax import fileio

PLAN_NAME = "plan.json"
CONFIG_NAME = "config.json"
INIT_REPORT_NAME = "init_report.json"


def write_run_files(workdir: str, plan: dict, config: Optional[dict] = None, resolved: Optional[dict] = None,
                    init_report: Optional[dict] = None) -> List[str]:
  """plan.json, and config.json (`config` with `resolved` under "resolved") and init_report.json when given;
  returns the paths written."""
  files = [(PLAN_NAME, plan)]
  if config is not None:
    files.append((CONFIG_NAME, dict(config, resolved=resolved) if resolved is not None else config))
  if init_report is not None:
    files.append((INIT_REPORT_NAME, init_report))
  paths = []
  for name, content in files:
    paths.append(fileio.join(workdir, name))
    fileio.write_json_atomic(paths[-1], content)
  return paths
