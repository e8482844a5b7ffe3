r"""Fine-tuning sweeps: a grid of config values x seeds, dev-set selection, and the table papers print.

    python -m bert_jax.finetune.sweep --config=configs/finetune.py:task=classification,size=tiny \
        --config.data_dir=DATA --config.vocab_file=VOCAB \
        --grid='optimizer.learning_rate=1e-4,3e-4;num_train_epochs=3,10' --seeds=5 --workdir=DIR

From Python / a notebook:   results = sweep.run_sweep(config, {"optimizer.learning_rate": [1e-4, 3e-4]},
                                                       seeds=5, workdir=DIR)

Any config field can be on the grid (`field=v1,v2` joined by `;`); a field the config lacks, or a value of
the wrong type or out of range, is one `error:` line before anything runs (every point is resolved into its
plan first). Seeds are `config.seed + 0 .. seeds-1`. Each (point, seed) run is an ordinary fine-tuning work
directory, DIR/runs/p<point>_s<seed>/; a run whose eval_results.json exists is done, and so is a run that
diverged (NaN/Inf loss: its sweep_error.json records why; it is shown in the table as diverged and never
selected), so a rerun of the same command resumes (finished and diverged runs are skipped; --retry_diverged
runs the diverged ones again; a rerun that changes a config field off the grid is an error, not a mix of old
and new runs). A rerun with a larger --seeds extends the sweep: the finished seeds are kept, only the new ones
run, and the report covers all of them; a smaller --seeds is an error (the directory's report would silently
drop finished seeds: give the same --seeds, or report a subset from sweep_results.json's per-seed runs). A
missing dev split, which selection needs, is an error before any run. Runs that
differ only in seed and learning rate train together as one vmapped program (finetune/multirun.py); anything
else one at a time.

Selection on the dev split by the task's main metric (`--select`):
  best    (default) BERT's rule (Devlin et al. 2019, Sec. 4.1 and its restarts on small sets): every run of
          the grid is a candidate, the point with the best single dev run over its seeds is selected, and
          the reported result is that best seed's dev and test score.
  median  ELECTRA's / Mosbach et al.'s rule: a point's score is the median dev score over its seeds; the
          reported result is the median over seeds of the selected point (dev and test).
          A point is selectable under median only when a strict majority of its seeds (more than half of
          --seeds) finished with a dev score: the median of the one or two seeds that survived a mostly
          diverged point is not the median over seeds, and the survivors are the lucky ones, so such a point
          would win on a biased score. The table marks it "not selectable (k of n seeds)"; if no point is
          selectable nothing is selected and the command fails naming the rule (--retry_diverged, a lower
          learning rate, or --select=best).
Either way the table shows, per point, dev and test median, mean +- std, min and max over the seeds that
finished, and how many diverged (those have no score: they neither count in the statistics nor can be
selected).

Launchers: `--shard=i/n` runs the i-th of n shares of the work units (a unit is a grid point with all its
seeds, or, when there are fewer points than shards, a group of seeds of one point), so each host or slice
takes its own; then `--report` (same --workdir) merges whatever runs exist into the report. Files in DIR:
  sweep_spec.json     the grid, seeds, rule, split names, points and the config's other fields (a rerun must
                      ask for the same sweep; fields that only change how runs execute, such as multirun.*,
                      may differ)
  sweep_results.json  per point: settings, per-seed runs, dev/test statistics, score; the selected point
  sweep_table.md      the table (the selected point in bold, marked "(selected)")
  sweep_spread.png    dev and test per seed for every point, the median marked
  runs/*/sweep_error.json  a run that diverged: {"error": the NaN/Inf message, "status": "diverged"}
"""

from __future__ import annotations

import copy
import dataclasses
import io
import itertools
import json
import logging
import math
import os
import statistics
import textwrap
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import flags
from ml_collections import config_flags

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.finetune import data as ft
from bert_jax.finetune import multirun
from bert_jax.finetune.plan import FinetunePlan, resolve_finetune
from bert_jax.finetune.tasks import registry
from bert_jax import fileio
from bert_jax.input_pipeline import checks
from bert_jax.pretrained import params_dir

_log = logging.getLogger(__name__)

SPEC_NAME, RESULTS_NAME, TABLE_NAME, PLOT_NAME = ("sweep_spec.json", "sweep_results.json", "sweep_table.md",
                                                  "sweep_spread.png")
SELECT_RULES = ("best", "median")


# ---- the grid ----------------------------------------------------------------------------------------------
def _leaf_paths(config, prefix: str = "") -> List[str]:
  out = []
  for k in config.keys():
    v = config[k]
    if hasattr(v, "keys"):
      out += _leaf_paths(v, prefix + k + ".")
    else:
      out.append(prefix + k)
  return out


def _convert(config, path: str, text: str):
  """`text` as the type of config.<path> (bool, int, float, str, tuple); UserError naming the field."""
  current = checks.get_field(config, path)
  text = text.strip()
  try:
    if isinstance(current, bool):
      low = text.lower()
      if low not in ("true", "false", "1", "0"):
        raise ValueError
      return low in ("true", "1")
    if isinstance(current, int):
      return int(text)
    if isinstance(current, float):
      return float(text)
    if isinstance(current, (tuple, list)):
      raise UserError(f"--grid: {path} is a tuple field; sweep scalar fields only")
  except ValueError as e:
    kind = type(current).__name__
    raise UserError(f"--grid: {path}={text!r} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind} (config.{path} = "
                    f"{current!r})") from e
  return text


def parse_grid(text: str, config) -> Dict[str, list]:
  """'a.b=1,2;c=x' -> {"a.b": [1, 2], "c": ["x"]}, values typed as the config's fields."""
  grid: Dict[str, list] = {}
  for part in filter(None, (p.strip() for p in (text or "").split(";"))):
    path, eq, values = part.partition("=")
    path = path.strip()
    if not eq or not values.strip():
      raise UserError(f"--grid: {part!r} is not FIELD=V1,V2,... (points are joined by ';')")
    if path in grid:
      raise UserError(f"--grid: {path} is given twice; list its values once ({path}=V1,V2,...)")
    items = values.split(",")
    if any("=" in v for v in items):   # `a=1,b=2`: the next axis joined by ',' read as a value of this one
      raise UserError(f"--grid: {path}={values.strip()!r} has a value holding '=' "
                      f"({next(v.strip() for v in items if '=' in v)!r}): separate grid axes with ';', e.g. "
                      f"--grid='{_axes_fixed(path, items)}'")
    if any(not v.strip() for v in items):
      raise UserError(f"--grid: {path}={values.strip()!r} has an empty value (a doubled or trailing comma?); "
                      f"expected {path}=V1,V2,...")
    grid[path] = items
  return check_grid(grid, config)


def _axes_fixed(path: str, items: Sequence[str]) -> str:
  """`path=v1,v2,b=x,y` read as two axes: 'path=v1,v2;b=x,y'."""
  axes = [[f"{path}={items[0].strip()}"]]
  for v in items[1:]:
    if "=" in v:
      axes.append([v.strip()])
    else:
      axes[-1].append(v.strip())
  return ";".join(",".join(a) for a in axes)


def check_grid(grid: Dict[str, Sequence], config) -> Dict[str, list]:
  """The grid with its fields checked against `config` and its values typed (strings converted)."""
  out = {}
  known = _leaf_paths(config)
  for path, values in grid.items():
    if path in ("seed",):
      raise UserError("--grid: seed is set by --seeds, not by the grid")
    if not checks.has(config, path) or hasattr(checks.get_field(config, path), "keys"):
      close = cli.close_names(path, known, n=2)
      hint = f"; did you mean {' or '.join(close)}?" if close else ""
      raise UserError(f"--grid: config has no field {path!r}{hint}")
    values = list(values)
    if not values:
      raise UserError(f"--grid: {path} has no values")
    out[path] = [_convert(config, path, v) if isinstance(v, str) else v for v in values]
    if len(set(map(repr, out[path]))) < len(out[path]):
      raise UserError(f"--grid: {path} lists a value twice: {out[path]}")
  return out


def grid_points(grid: Dict[str, list]) -> List[Dict[str, Any]]:
  """The cartesian product, first field slowest."""
  keys = list(grid)
  return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))] or [{}]


def point_label(settings: Dict[str, Any]) -> str:
  return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings.items()) or "(config)"


def _set(config, path: str, value) -> None:
  *parents, leaf = path.split(".")
  target = config
  for p in parents:
    target = target[p]
  target[leaf] = value


def point_config(config, settings: Dict[str, Any], seed: int):
  """A copy of `config` with the point's values and the seed (field references, such as the
  learning_rate alias, keep pointing inside the copy)."""
  c = copy.deepcopy(config)
  with c.unlocked():
    for path, value in settings.items():
      _set(c, path, value)
    c.seed = int(seed)
  return c


# ---- the sweep ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Run:
  point: int
  seed: int
  workdir: str


def run_dir(workdir: str, point: int, seed: int) -> str:
  return os.path.join(workdir, "runs", f"p{point:03d}_s{seed}")


ERROR_NAME = "sweep_error.json"     # a run that diverged: {"error": message, "status": "diverged"}


def is_diverged(run: Run) -> bool:
  """The run diverged (sweep_error.json, and no eval_results.json from a later successful retry). Only a
  NonFiniteError writes that file (multirun.run_plans), so one from before it held "status" counts too."""
  return (os.path.exists(os.path.join(run.workdir, ERROR_NAME))
          and not os.path.exists(os.path.join(run.workdir, "eval_results.json")))


def is_done(run: Run, retry_diverged: bool = False) -> bool:
  """Finished: eval_results.json exists, or the run diverged (a result too) unless `retry_diverged`."""
  if os.path.exists(os.path.join(run.workdir, "eval_results.json")):
    return True
  return is_diverged(run) and not retry_diverged


def parse_shard(text: str) -> Tuple[int, int]:
  try:
    i, n = (int(x) for x in str(text or "0/1").split("/"))
  except ValueError as e:
    raise UserError(f"--shard={text!r}: expected I/N, e.g. 0/4 (share I of N, 0-based)") from e
  if n < 1 or not 0 <= i < n:
    raise UserError(f"--shard={text!r}: expected 0 <= I < N")
  return i, n


def work_units(points: int, seeds: Sequence[int], shards: int) -> List[List[Tuple[int, int]]]:
  """Units of (point, seed): a point with all its seeds; split into seed groups when points < shards."""
  groups = 1 if points >= shards else -(-shards // points)
  size = -(-len(seeds) // groups)
  return [[(p, s) for s in seeds[g * size:(g + 1) * size]] for p in range(points) for g in range(groups)
          if seeds[g * size:(g + 1) * size]]


# Fields that change how a run executes but not what it computes: a resume may change them.
_RUNTIME_FIELDS = ("compilation_cache_dir", "multirun", "mesh", "logical_axis_rules", "log_every_steps",
                   "eval_batch_size", "save_best_checkpoint", "tfds_data_dir", "model.attention_impl",
                   "model.scan_layers", "model.remat_policy")
_ALIASES = ("learning_rate", "weight_decay")   # deprecated aliases of optimizer.* (the same values)


def _flat(d, prefix: str = "") -> Dict[str, Any]:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[prefix + k] = v
  return out


def base_settings(config, grid) -> Dict[str, Any]:
  """The config's fields that decide the runs' results, less the grid's fields and the seed (which the sweep
  sets per run): what a resume must keep (a run skipped as finished was trained with them). `config`: a
  ConfigDict or its dict (a run's config.json)."""
  flat = json.loads(json.dumps(_flat(config if isinstance(config, dict) else config.to_dict()), default=str))
  skip = set(grid) | {"seed"} | set(_ALIASES)
  return {k: v for k, v in sorted(flat.items())
          if k not in skip and not any(k == f or k.startswith(f + ".") for f in _RUNTIME_FIELDS)}


def _spec(config, grid, seeds, select, plan: FinetunePlan) -> dict:
  task = plan.task
  return {"task": task.name, "main_metric": task.main_metric,
          "dev_split": (list(plan.data.eval_splits) or list(task.eval_splits) or [None])[0],
          "test_splits": list(plan.data.test_splits) or list(task.test_splits),
          "grid": grid, "seeds": list(seeds), "select": select,
          "points": [{"index": i, "settings": s, "label": point_label(s)} for i, s in enumerate(grid_points(grid))],
          "config": base_settings(config, grid)}


def _check_dev_split(plans: Sequence[FinetunePlan], split: Optional[str]) -> None:
  """The sweep selects on `split`: it must exist for the runs about to train (one read per data source), or
  every run would train and none could be selected."""
  seen = set()
  for plan in plans:
    d = plan.data
    key = (d.data_dir, d.tfds_name, split)
    if key in seen:
      continue
    seen.add(key)
    where = f"TFDS {d.tfds_name}" if d.tfds_name else f"--config.data_dir={d.data_dir!r}"
    if split is None:
      raise UserError(f"task {plan.task.name} has no dev split to select on; set --config.eval_splits")
    if not plan.do_eval:
      raise UserError("config.do_eval=False: the sweep selects on the dev score, which only an evaluation gives")
    examples, reason = ft.read_split_or_reason(plan.task, d, split)
    if examples is None:
      reason = f" ({reason})" if reason else ""
      raise UserError(f"{where} has no {split!r} split for task {plan.task.name}{reason}, and the sweep selects "
                      "on it (the task's dev split, or the first of --config.eval_splits); add it or name "
                      "another with --config.eval_splits")


def run_sweep(config, grid, seeds: int = 5, workdir: str = "sweep", *, select: str = "best",
              shard: Tuple[int, int] = (0, 1), report: Optional[bool] = None, retry_diverged: bool = False) -> dict:
  """Runs the sweep's missing runs of this shard and, unsharded (or `report=True`), writes the report.
  `grid`: {field: [values]} or the --grid text; `retry_diverged`: run the runs that diverged again (they are
  finished results otherwise). Returns sweep_results.json's content ({} when a shard only ran its runs)."""
  if select not in SELECT_RULES:
    raise UserError(f"--select={select!r}; expected one of {', '.join(SELECT_RULES)}")
  if int(seeds) < 1:
    raise UserError(f"--seeds={seeds}: at least 1")
  grid = parse_grid(grid, config) if isinstance(grid, str) else check_grid(grid, config)
  seed_list = [int(config.seed) + j for j in range(int(seeds))]
  points = grid_points(grid)
  workdir = os.path.abspath(workdir)
  # Every (point, seed) resolves now: a bad value on the grid fails before any run (it names the field).
  plans: Dict[Tuple[int, int], FinetunePlan] = {}
  for i, settings in enumerate(points):
    for s in seed_list:
      try:
        plans[(i, s)] = resolve_finetune(point_config(config, settings, s), run_dir(workdir, i, s))
      except UserError as e:
        raise UserError(f"grid point {point_label(settings)}: {e}") from e
  _check_distinct_points(points, [plans[(i, seed_list[0])] for i in range(len(points))])
  spec = _spec(config, grid, seed_list, select, plans[(0, seed_list[0])])
  _check_spec(workdir, spec)
  index, count = shard
  units = work_units(len(points), seed_list, count)
  mine = [r for u, unit in enumerate(units) if u % count == index for r in unit]
  todo = [(i, s) for i, s in mine if not is_done(Run(i, s, run_dir(workdir, i, s)), retry_diverged)]
  if todo:
    _check_dev_split([plans[r] for r in todo], spec["dev_split"])
  _write_spec(workdir, spec)     # after every check: a failed start leaves no spec to block the corrected one
  diverged = sum(is_diverged(Run(i, s, run_dir(workdir, i, s))) for i, s in mine if (i, s) not in todo)
  _log.info("sweep: %d points x %d seeds; shard %d/%d has %d runs, %d already done%s", len(points), len(seed_list),
            index, count, len(mine), len(mine) - len(todo),
            f" ({diverged} of them diverged; --retry_diverged runs them again)" if diverged else "")
  for i, s in todo:   # a retried diverged run: its old record goes, so a crash of the retry is not "diverged"
    old = os.path.join(run_dir(workdir, i, s), ERROR_NAME)
    if os.path.exists(old):
      os.remove(old)
  for group in _vmap_groups([plans[r] for r in todo]):
    for plan, result in zip(group, multirun.run_plans(group)):
      if "error" in result:
        _log.warning("run %s diverged: %s", plan.workdir, result["error"])
        fileio.makedirs(plan.workdir)
        fileio.write_json_atomic(os.path.join(plan.workdir, ERROR_NAME), dict(result, status="diverged"))
  if report if report is not None else count == 1:
    return write_report(workdir)
  return {}


def _check_distinct_points(points: Sequence[Dict[str, Any]], plans: Sequence[FinetunePlan]) -> None:
  """UserError when the points do not share the task, main metric and dev split the sweep selects on (task
  or eval_splits on the grid: the others' dev scores were silently missing), or when two grid points resolve
  to the same run (a field and its alias on the grid, such as learning_rate and optimizer.learning_rate, or
  -1 and the value it resolves to): the table would show one setting twice and the selection would count its
  seeds as two points."""
  def selected_on(plan: FinetunePlan):
    task = plan.task
    return (task.name, task.main_metric, (list(plan.data.eval_splits) or list(task.eval_splits) or [None])[0])

  for i, plan in enumerate(plans[1:], start=1):
    if selected_on(plan) != selected_on(plans[0]):
      raise UserError(f"--grid: points {point_label(points[0])!r} and {point_label(points[i])!r} differ in the task, "
                      f"its main metric or dev split ({selected_on(plans[0])} vs {selected_on(plan)}); a sweep "
                      "selects on one metric of one dev split: run one sweep per task")
  seen: Dict[str, int] = {}
  for i, plan in enumerate(plans):
    d = plan.to_dict()
    d.pop("workdir", None)
    key = json.dumps(d, sort_keys=True, default=str)
    if key in seen:
      raise UserError(f"--grid: points {point_label(points[seen[key]])!r} and {point_label(points[i])!r} resolve to "
                      "the same run config (a field and its alias, or a value and the default it resolves to); "
                      "list each setting once")
    seen[key] = i


def _vmap_groups(plans: Sequence[FinetunePlan]) -> List[List[FinetunePlan]]:
  """Plans grouped by everything but seed and learning rate (what one vmapped program may vary)."""
  groups: Dict[str, List[FinetunePlan]] = {}
  for p in plans:
    d = p.to_dict()
    key = {k: v for k, v in d.items() if k not in multirun.VARYING}
    key["optimizer"] = {k: v for k, v in d["optimizer"].items() if k != "learning_rate"}
    groups.setdefault(json.dumps(key, sort_keys=True, default=str), []).append(p)
  return list(groups.values())


def _finished_run_settings(workdir: str, grid) -> Optional[Dict[str, Any]]:
  """base_settings of a finished run's config.json (a sweep directory from before the spec held them)."""
  runs = os.path.join(workdir, "runs")
  for name in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
    d = os.path.join(runs, name)
    if os.path.exists(os.path.join(d, "eval_results.json")) and os.path.exists(os.path.join(d, "config.json")):
      with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
        return base_settings(json.load(f), grid)
  return None


def _check_spec(workdir: str, spec: dict) -> None:
  """UserError when the directory holds another sweep than `spec` (or the same one run with another config)."""
  path = os.path.join(workdir, SPEC_NAME)
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      old = json.load(f)
    new = json.loads(json.dumps(spec))
    if "config" not in old:   # written before the spec recorded the config: a finished run's, if any
      old["config"] = _finished_run_settings(workdir, old.get("grid") or {}) or {}
    # Fields both know (a field added to or dropped from configs/finetune.py since does not block a resume).
    was, now = old.pop("config"), new.pop("config")
    diff = [k for k in sorted(set(was) & set(now)) if was[k] != now[k]]
    if diff:
      shown = "; ".join(f"config.{k}: {was[k]!r} in the sweep vs {now[k]!r} now" for k in diff[:3]) + (
          f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
      raise UserError(f"--workdir={workdir} holds a sweep run with another config ({shown}): its finished runs "
                      "would be reused as if run with this one; use a new directory, or the same --config "
                      "flags to resume it")
    # the selection rule only changes the report: a rerun may ask for another; more seeds extend the sweep
    was_seeds, now_seeds = list(old.get("seeds") or []), list(new.get("seeds") or [])
    differ = [k for k in sorted(set(old) | set(new)) if k not in ("select", "seeds", "points")
              and old.get(k) != new.get(k)]
    if differ:
      shown = "; ".join(f"{k}: {old.get(k)!r} in the sweep vs {new.get(k)!r} now" for k in differ)
      raise UserError(f"--workdir={workdir} holds another sweep ({shown}); use a new directory, or the same "
                      "flags to resume it")
    if now_seeds[:len(was_seeds)] != was_seeds:
      if len(now_seeds) < len(was_seeds) and was_seeds[:len(now_seeds)] == now_seeds:
        raise UserError(f"--workdir={workdir} holds a sweep over {len(was_seeds)} seeds {was_seeds}; --seeds="
                        f"{len(now_seeds)} asks for fewer: give --seeds={len(was_seeds)} to resume it (a sweep "
                        "only grows; sweep_results.json lists every seed's run)")
      raise UserError(f"--workdir={workdir} holds a sweep over seeds {was_seeds}, not {now_seeds} (config.seed "
                      f"{was_seeds[0] if was_seeds else '?'} in the sweep vs {now_seeds[0]} now); use a new "
                      "directory, or the same --config.seed to resume or extend it")
    if len(now_seeds) > len(was_seeds):
      _log.info("sweep: extending %d seeds to %d (seeds %s run now)", len(was_seeds), len(now_seeds),
                now_seeds[len(was_seeds):])


def _write_spec(workdir: str, spec: dict) -> None:
  fileio.makedirs(workdir)
  fileio.write_json_atomic(os.path.join(workdir, SPEC_NAME), spec)


# ---- the report --------------------------------------------------------------------------------------------
def stats(values: Sequence[float]) -> Optional[dict]:
  if not values:
    return None
  return {"n": len(values), "median": statistics.median(values), "mean": statistics.fmean(values),
          "std": statistics.stdev(values) if len(values) > 1 else 0.0, "min": min(values), "max": max(values)}


def _finite(value) -> Optional[float]:
  """A score, or None for a missing or NaN one (STS-B's correlation of a constant prediction): NaN would
  poison max() and the median of the selection."""
  return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _read_run(workdir: str, spec: dict, point: int, seed: int) -> dict:
  d = run_dir(workdir, point, seed)
  out = {"seed": seed, "workdir": os.path.relpath(d, workdir)}
  path = os.path.join(d, "eval_results.json")
  if not os.path.exists(path):
    err = os.path.join(d, ERROR_NAME)
    out["status"] = "diverged" if os.path.exists(err) else "missing"
    if os.path.exists(err):
      try:
        with open(err, encoding="utf-8") as f:
          out["error"] = str(json.load(f).get("error", ""))
      except (OSError, ValueError, AttributeError):
        pass
    return out
  with open(path, encoding="utf-8") as f:
    r = json.load(f)
  metric = spec["main_metric"]
  out["status"] = "done"
  out["dev"] = _finite((r.get(spec["dev_split"]) or {}).get(metric))
  tests = [s for s in spec["test_splits"] if metric in (r.get(s) or {})]
  out["test"] = _finite(r[tests[0]][metric]) if tests else None
  out["best_step"] = (r.get("best") or {}).get("step")
  out["train_seconds"] = (r.get("timing") or {}).get("train_seconds")
  return out


def collect(workdir: str, select: Optional[str] = None) -> dict:
  """sweep_results.json's content from the runs in `workdir` (what exists now); `select`: another rule
  than the sweep's (the runs are the same, only the report's selection changes)."""
  path = os.path.join(workdir, SPEC_NAME)
  if not os.path.exists(path):
    raise UserError(f"--workdir={workdir} has no {SPEC_NAME}: not a sweep directory (run the sweep first)")
  with open(path, encoding="utf-8") as f:
    spec = json.load(f)
  if select is not None:
    if select not in SELECT_RULES:
      raise UserError(f"--select={select!r}; expected one of {', '.join(SELECT_RULES)}")
    spec["select"] = select
  points = []
  for p in spec["points"]:
    runs = [_read_run(workdir, spec, p["index"], s) for s in spec["seeds"]]
    dev = [r["dev"] for r in runs if r.get("dev") is not None]
    test = [r["test"] for r in runs if r.get("test") is not None]
    best_run = max((r for r in runs if r.get("dev") is not None), key=lambda r: r["dev"], default=None)
    score = None if not dev else (max(dev) if spec["select"] == "best" else statistics.median(dev))
    # median: the surviving seeds of a mostly diverged (or mostly unfinished) point are no median over seeds
    selectable = score is not None and (spec["select"] == "best" or 2 * len(dev) > len(spec["seeds"]))
    points.append(dict(p, runs=runs, dev=stats(dev), test=stats(test), score=score, selectable=selectable,
                       best_seed=best_run["seed"] if best_run else None))
  scored = [p for p in points if p["selectable"]]
  selected = max(scored, key=lambda p: p["score"]) if scored else None
  result = None
  if selected is not None:
    if spec["select"] == "best":
      run = next(r for r in selected["runs"] if r["seed"] == selected["best_seed"])
      result = {"dev": run["dev"], "test": run["test"], "seed": run["seed"]}
    else:
      result = {"dev": selected["dev"]["median"], "test": selected["test"]["median"] if selected["test"] else None}
  missing = sum(r["status"] == "missing" for p in points for r in p["runs"])
  diverged = sum(r["status"] == "diverged" for p in points for r in p["runs"])
  return dict(spec, points=points, selected=selected["index"] if selected else None, result=result,
              runs_total=len(spec["points"]) * len(spec["seeds"]), runs_missing=missing, runs_diverged=diverged)


def _fmt(s: Optional[dict], scale: float = 100.0) -> Tuple[str, str, str, str]:
  if not s:
    return ("–", "–", "–", "–")
  return (f"{scale * s['median']:.1f}", f"{scale * s['mean']:.1f} ± {scale * s['std']:.1f}",
          f"{scale * s['min']:.1f}", f"{scale * s['max']:.1f}")


def percent_factor(task: str) -> float:
  """What prints task `task`'s metrics in percent: 100 for fractions, 1 for a task that reports percent
  (SQuAD; Task.metrics_in_percent)."""
  cls = registry.TASKS.get(task)
  cls = registry.TASKS.get(cls, cls) if isinstance(cls, str) else cls
  return 1.0 if getattr(cls, "metrics_in_percent", False) else 100.0


def _scale(results: dict) -> Tuple[float, str]:
  """(factor, words) that print the sweep's main metric in percent (percent_factor)."""
  k = percent_factor(results["task"])
  return (k, "in percent" if k == 1.0 else "x 100")


def table_markdown(results: dict) -> str:
  """The per-point table; metrics in percent; the selected point in bold, marked (selected)."""
  m = results["main_metric"]
  k, words = _scale(results)
  rule = ("best dev run over seeds (BERT)" if results["select"] == "best" else "median dev over seeds (ELECTRA)")
  diverged = results.get("runs_diverged", 0)
  finished = results["runs_total"] - results["runs_missing"] - diverged
  lines = [f"Task {results['task']}, {m} {words} over seeds {results['seeds']}; selection: {rule}. "
           f"{finished}/{results['runs_total']} runs done"
           + (f", {diverged} diverged (NaN/Inf; not selected; --retry_diverged reruns them)" if diverged else "")
           + ".", "",
           "| point | n | diverged | dev median | dev mean ± std | dev min | dev max | test median | "
           "test mean ± std | test min | test max |", "|" + "---|" * 11]
  for p in results["points"]:
    sel = p["index"] == results["selected"]
    label = f"**{p['label']}** (selected)" if sel else p["label"]
    n = p["dev"]["n"] if p["dev"] else 0
    if p.get("score") is not None and not p.get("selectable", True):
      label += f" (not selectable: {n} of {len(results['seeds'])} seeds have a dev score, median needs a majority)"
    bad = [str(r["seed"]) for r in p["runs"] if r.get("status") == "diverged"]
    div = f"{len(bad)} (seed {', '.join(bad)})" if bad else "0"
    lines.append("| " + " | ".join((label, str(n), div) + _fmt(p["dev"], k) + _fmt(p["test"], k)) + " |")
  r = results.get("result")
  if r:
    test = "–" if r["test"] is None else f"{k * r['test']:.1f}"
    lines += ["", f"Selected: {results['points'][results['selected']]['label']} -> dev {k * r['dev']:.1f}, "
                  f"test {test}" + (f" (seed {r['seed']})" if "seed" in r else " (medians)")]
  return "\n".join(lines) + "\n"


def plot_spread(results: dict, path: str, figure_out: Optional[list] = None) -> str:
  """Dev and test main metric of every seed per point (dots) with the median (bar)."""
  import matplotlib  # lazy: ~1 s of import, only for the report
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # lazy: as above
  pts = results["points"]
  k, words = _scale(results)
  fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(pts) + 2), 4))
  for j, (split, color, dx) in enumerate((("dev", "tab:blue", -0.12), ("test", "tab:orange", 0.12))):
    for i, p in enumerate(pts):
      ys = [k * r[split] for r in p["runs"] if r.get(split) is not None]
      if ys:
        ax.scatter([i + dx] * len(ys), ys, color=color, s=14, alpha=0.7, label=split if i == 0 else None)
        ax.hlines(statistics.median(ys), i + dx - 0.1, i + dx + 0.1, color=color, lw=2)
  if results["selected"] is not None:
    ax.axvspan(results["selected"] - 0.4, results["selected"] + 0.4, color="0.9", zorder=0)
  ax.set_xticks(range(len(pts)))
  ax.set_xticklabels([p["label"].replace(", ", "\n") for p in pts], fontsize=7)
  ax.set_ylabel(f"{results['main_metric']} {words}")
  # Wrapped to the figure's width (~8 characters of 12-point text per inch): one or two points make a 5-inch
  # figure, and the one-line title was cut off at both sides.
  title = f"{results['task']}: spread over {len(results['seeds'])} seeds (selected point shaded)"
  ax.set_title(textwrap.fill(title, width=max(20, int(8 * fig.get_figwidth()))))
  ax.legend()
  fig.tight_layout()
  if figure_out is not None:   # tests look at the laid-out figure
    figure_out.append(fig)
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=80)
  plt.close(fig)
  fileio.write_bytes_atomic(path, buf.getvalue())
  return path


def write_report(workdir: str, select: Optional[str] = None) -> dict:
  """sweep_results.json, sweep_table.md and sweep_spread.png from the runs that exist (the merge step);
  `select`: report with this rule instead of the sweep's."""
  workdir = os.path.abspath(workdir)
  results = collect(workdir, select)
  fileio.write_json_atomic(os.path.join(workdir, RESULTS_NAME), results)
  fileio.write_text_atomic(os.path.join(workdir, TABLE_NAME), table_markdown(results))
  plot_spread(results, os.path.join(workdir, PLOT_NAME))
  return results


def nothing_selected(results: dict) -> Optional[str]:
  """The error of a finished sweep none of whose runs has a dev score (every run failed, e.g. diverged), so
  the command does not exit 0 with an empty table; None when a point was selected."""
  if results.get("selected") is not None:
    return None
  scored = [p["dev"]["n"] for p in results["points"] if p.get("score") is not None]
  if scored:
    return (f"--select=median needs a point whose seeds mostly finished, and no point has a dev "
            f"{results['main_metric']} on more than half of its {len(results['seeds'])} seeds (at most "
            f"{max(scored)}; the rest diverged or are missing: rerun with --retry_diverged, lower the learning "
            f"rate, or report with --select=best)")
  failed = sum(r.get("status") in ("diverged", "failed") for p in results["points"] for r in p["runs"])
  return (f"no run of the sweep has a dev {results['main_metric']}: {failed} of {results['runs_total']} runs "
          f"diverged (runs/*/{ERROR_NAME} says why; lower the learning rate, or rerun with --retry_diverged)")


# ---- command line ------------------------------------------------------------------------------------------
FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command's flags (defined when run as a program, so importing this module defines none)."""
  config_flags.DEFINE_config_file("config", None, "Fine-tuning config, e.g. configs/finetune.py:task=mrpc.",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Sweep directory: runs/, sweep_spec.json, sweep_results.json, the table.")
  flags.DEFINE_string("grid", "", "FIELD=V1,V2;FIELD2=V3,V4 (any config field; empty: the config alone).")
  flags.DEFINE_integer("seeds", 5, "Runs per grid point, seeds config.seed + 0..N-1.")
  flags.DEFINE_enum("select", "best", SELECT_RULES, "best: BERT's best dev run; median: median dev over seeds.")
  flags.DEFINE_string("shard", "0/1", "I/N: run share I of N of the work units (one host or slice each).")
  flags.DEFINE_bool("report", False, "Only merge the existing runs into the report (after the shards); with "
                    "--select, under that rule.")
  flags.DEFINE_bool("retry_diverged", False, "Run the runs that diverged (NaN/Inf) again; a resume skips them "
                    "otherwise, as finished results.")

def main(argv):
  if len(argv) > 1:
    raise UserError(f"unexpected arguments: {argv[1:]} (flags are --name=value)")
  if not FLAGS.workdir:
    raise UserError("--workdir is required (the sweep directory)")
  logging.getLogger().setLevel(logging.INFO)
  if FLAGS.report:   # --select given with --report: the same runs reported under that rule
    results = write_report(FLAGS.workdir, FLAGS.select if FLAGS["select"].present else None)
  else:
    if FLAGS.config is None:
      raise UserError("--config is required, e.g. --config=configs/finetune.py:task=mrpc")
    results = run_sweep(FLAGS.config, FLAGS.grid, FLAGS.seeds, FLAGS.workdir, select=FLAGS.select,
                        shard=parse_shard(FLAGS.shard), retry_diverged=FLAGS.retry_diverged)
  if results:
    print(table_markdown(results), end="")
    print(f"results: {os.path.join(FLAGS.workdir, RESULTS_NAME)}")
    if not FLAGS.report and nothing_selected(results):
      raise UserError(nothing_selected(results))
  else:
    print(f"shard {FLAGS.shard} done; after every shard: python -m bert_jax.finetune.sweep --report "
          f"--workdir={FLAGS.workdir}")


if __name__ == "__main__":
  define_flags()
  cli.run_main(main)
