"""Checkpoints: Orbax CheckpointManager for the training state, a self-describing work directory, and the
params-directory format shared with the converters. No TensorFlow.

Work directory of a pre-training run (self-describing: `init_checkpoint=DIR` is all fine-tuning needs):
  DIR/plan.json              what the config resolved to (pretrain/plan.py)
  DIR/config.json            the run config (configs/pretrain.py after overrides)
  DIR/model_config.json      BertConfig.to_dict() (a superset of Google's bert_config.json keys)
  DIR/vocab.txt              the WordPiece vocab, copied in
  DIR/checkpoints/<step>/    Orbax: item `state` (TrainState: step, params, opt_state, rng) and item `meta`
                             (JSON: step, scan_layers, data-iterator position, mesh, process count)
  DIR/metrics.jsonl, DIR/eval_metrics.jsonl, DIR/plots/, DIR/tensorboard/   (written by pretrain.py)

Params directories (converted checkpoints, fine-tuning's best_checkpoint/) and reading a work dir's
params for `init_checkpoint` live in bert_jax.pretrained (one format, one loader).

API:
  Checkpointer(directory, keep=3, async_save=True, read_only=False)
      .latest_step() -> int | None          (only complete checkpoints; interrupted saves are ignored)
      .save(step, state, meta, force=False) asynchronous; .wait() blocks until it is on disk
      .restore(abstract_state, step=None) -> (state, meta)   onto the shardings in abstract_state (any mesh)
      .close()
  restore_train_state(ckpt, config, model, mesh, tx, step=None) -> (state, shardings, meta)
      converts between scan_layers layouts when the checkpoint's differs from the model's
  restore_latest_readable(ckpt, config, model, mesh, tx) -> (state, shardings, meta)
      the newest checkpoint that restores; an unreadable newer one is logged ("checkpoint 60 unreadable
      (reason); restoring 40") and moved aside to checkpoints/60.corrupt-<time>; none readable -> UserError
  write_workdir_files(workdir, config_dict, model_config, vocab_file)

A Checkpointer that writes (read_only=False) deletes interrupted saves (`<step>.orbax-checkpoint-tmp-*`) when
it opens: open it only while holding the work-dir lock (bert_jax.engine.workdir), never beside a live run.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Optional

import jax
import orbax.checkpoint as ocp

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.models import BertConfig, objectives, scan_params, unscan_params
from bert_jax.pretrained import params_dir
from bert_jax.pretrained.load import CHECKPOINT_SUBDIR
from bert_jax.engine import run_files
from bert_jax.engine import train_step as ts
from bert_jax.engine import workdir as wd

log = logging.getLogger(__name__)

__all__ = ["CHECKPOINT_SUBDIR", "Checkpointer", "config_to_dict", "convert_layout", "restore_latest_readable",
           "restore_train_state", "write_workdir_files"]


def _is_params_tree(x) -> bool:
  return isinstance(x, dict) and "bert" in x and isinstance(x["bert"], dict)


def convert_layout(tree, scan: bool):
  """Converts every params-shaped subtree (params, Adam moments) to the scanned / un-scanned layout."""
  fn = scan_params if scan else unscan_params
  return jax.tree.map(lambda t: fn(t) if _is_params_tree(t) else t, tree, is_leaf=_is_params_tree)


class Checkpointer:
  """Orbax CheckpointManager with items `state` (pytree) and `meta` (JSON)."""

  def __init__(self, directory: str, keep: int = 3, async_save: bool = True, read_only: bool = False):
    self.directory = fileio.abspath(directory)
    # cleanup_tmp_directories: a save interrupted by a kill leaves a tmp dir that is never a checkpoint. Only
    # a writing Checkpointer cleans, and pre-training opens one only while it holds the work-dir lock.
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=not read_only, read_only=read_only,
                                           cleanup_tmp_directories=not read_only,
                                           enable_async_checkpointing=async_save)
    self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def all_steps(self):
    return list(self.manager.all_steps())

  def save(self, step: int, state, meta: Optional[dict] = None, force: bool = False) -> bool:
    """Saves asynchronously. Refuses (ts.NonFiniteError) a state whose params hold a NaN/Inf: a checkpoint
    is always one a run can resume from."""
    params = state.params if hasattr(state, "params") else state.get("params", state) if isinstance(
        state, dict) else state
    if not ts.all_finite(params):
      raise ts.NonFiniteError(f"the parameters at step {int(step)} hold NaN/Inf values; not checkpointed (the "
                              f"newest checkpoint, {self.latest_step()}, is finite). Lower the learning rate "
                              "or check the data")
    meta = dict(meta or {}, step=int(step))
    return self.manager.save(int(step), args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                                meta=ocp.args.JsonSave(meta)), force=force)

  def wait(self):
    self.manager.wait_until_finished()

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()

  def reached_preemption(self, step: int) -> bool:
    return self.manager.reached_preemption(step)

  def restore_meta(self, step: Optional[int] = None) -> dict:
    step = self._step(step)
    return dict(self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"])

  def restore(self, abstract_state, step: Optional[int] = None):
    """(state, meta): arrays laid out as the ShapeDtypeStructs' shardings in `abstract_state` say (the
    checkpoint may come from another mesh or device count)."""
    step = self._step(step)
    out = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state),
                                                             meta=ocp.args.JsonRestore()))
    return out["state"], dict(out["meta"])

  def reload(self):
    """Re-reads the list of checkpoints from disk (after one was moved aside)."""
    self.manager.reload()

  def _step(self, step):
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"{self.directory}: no complete checkpoint")
    return int(step)


def restore_train_state(ckpt: Checkpointer, config, model, mesh, tx, step: Optional[int] = None):
  """Restores the full TrainState onto `mesh` (any device count). Returns (state, shardings, meta).

  A checkpoint written with the other scan_layers setting is restored in its own layout and converted.
  """
  meta = ckpt.restore_meta(step)
  saved_scan = bool(meta.get("scan_layers", model.config.scan_layers))
  abstract, shardings = ts.abstract_train_state(config, model, mesh, tx)
  if saved_scan == model.config.scan_layers:
    state, meta = ckpt.restore(abstract, step)
    return state, shardings, meta
  other = model.clone(config=model.config.replace(scan_layers=saved_scan))
  abstract_saved, _ = ts.abstract_train_state(config, other, mesh, tx)
  state, meta = ckpt.restore(abstract_saved, step)
  convert = jax.jit(lambda s: s.replace(params=convert_layout(s.params, model.config.scan_layers),
                                        opt_state=convert_layout(s.opt_state, model.config.scan_layers)),
                    out_shardings=shardings)
  log.info("checkpoint step %s: converted scan_layers=%s -> %s", meta.get("step"), saved_scan,
           model.config.scan_layers)
  return convert(state), shardings, meta


def _reason(e: BaseException) -> str:
  """One line on why a restore failed: the exception type and the first line of its message."""
  text = str(e).strip().splitlines()[0] if str(e).strip() else ""
  return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def restore_latest_readable(ckpt: Checkpointer, config, model, mesh, tx):
  """restore_train_state of the newest checkpoint that restores. Returns (state, shardings, meta).

  A newer checkpoint that fails (truncated or corrupted data file, garbage metadata, missing state/) is logged
  in one line and, once an older one has restored (so the failure is the checkpoint's, not this run's
  config), moved aside to `<step>.corrupt-<UTC time>` (process 0). When no checkpoint restores, nothing is
  moved and a UserError lists each step and its reason: a run never restarts from scratch silently.
  """
  steps = sorted(ckpt.all_steps(), reverse=True)
  failed = []
  for i, step in enumerate(steps):
    try:
      out = restore_train_state(ckpt, config, model, mesh, tx, step=step)
    except Exception as e:  # noqa: BLE001 - Orbax/tensorstore/JSON errors of a damaged checkpoint
      quiet_orphaned_reads()
      reason = _reason(e)
      failed.append((step, reason))
      nxt = steps[i + 1] if i + 1 < len(steps) else None
      log.warning("checkpoint %d unreadable (%s); %s", step, reason,
                  f"restoring {nxt}" if nxt is not None else "no older checkpoint")
      continue
    if failed:
      _move_aside(ckpt, [s for s, _ in failed])
    return out
  raise UserError(
      f"no checkpoint in {ckpt.directory} can be restored: "
      + "; ".join(f"step {s}: {r}" for s, r in failed)
      + ". Nothing was moved or deleted. " + _changed_fields(ckpt, getattr(config, "config", None))
      + "If the run's config changed (optimizer, model), resume with the original "
      "one; to start over, move the checkpoints/ directory away")


# The run config fields that shape the checkpointed state (params, optimizer state) besides the architecture,
# which the plan compares itself (workdir.check_resume_model_config).
# Each objective's settings that shape its parameters (models/objectives/) are added where they are read.
STATE_FIELDS = ("targets", "optimizer.name")


def _changed_fields(ckpt: Checkpointer, run_config: Optional[dict]) -> str:
  """'This run changes config.targets: (A, B) in the work dir vs (C,) now. ' for the STATE_FIELDS (and the
  objectives' state fields) whose value differs from the work dir's config.json ("" when none or unreadable)."""
  try:
    saved = params_dir.read_json(fileio.join(fileio.dirname(ckpt.directory), "config.json"))
  except Exception:  # noqa: BLE001 - a hint only
    return ""

  def get(tree, path):
    for key in path.split("."):
      if not isinstance(tree, dict) or key not in tree:
        return None
      tree = tree[key]
    return tuple(tree) if isinstance(tree, list) else tree
  changed = [f"config.{f}: {get(saved, f)!r} in the work dir vs {get(run_config, f)!r} now"
             for f in STATE_FIELDS + objectives.state_fields()
             if run_config and get(saved, f) is not None and get(saved, f) != get(run_config, f)]
  return f"This run changes {'; '.join(changed)}. " if changed else ""


_QUIET = {"installed": False}


def quiet_orphaned_reads() -> None:
  """After a failed restore, the tensorstore reads still in flight complete into Orbax's closed event loop, and
  each printed a bare `RuntimeError: Event loop is closed` traceback through sys.unraisablehook (132 of them
  for a truncated tiny checkpoint, after the one-line "checkpoint 20 unreadable" warning). From the first
  failure on, those are dropped; any other unraisable exception still reaches the previous hook."""
  if _QUIET["installed"]:
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    if (unraisable.object is None and isinstance(unraisable.exc_value, RuntimeError)
        and str(unraisable.exc_value) == "Event loop is closed"):
      return
    previous(unraisable)

  sys.unraisablehook = hook
  _QUIET["installed"] = True


def _move_aside(ckpt: Checkpointer, steps) -> None:
  stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
  if jax.process_index() == 0:
    for step in steps:
      src = fileio.join(ckpt.directory, str(step))
      dst = f"{src}.corrupt-{stamp}"
      fileio.rename(src, dst)
      log.warning("moved the unreadable checkpoint %d aside to %s", step, dst)
  wd.barrier("bert_jax_checkpoint_move_aside")
  ckpt.reload()


# ---- work directory ---------------------------------------------------------------------------------
def config_to_dict(config) -> dict:
  """A run config (ml_collections.ConfigDict) as plain JSON data, for config.json."""
  return json.loads(config.to_json_best_effort())


def write_workdir_files(workdir: str, config_dict: dict, model_config: BertConfig,
                        vocab_file: Optional[str] = None) -> None:
  """config.json (run config), model_config.json and vocab.txt in the work dir, by process 0 only and then a
  barrier, each written atomically (temp file, fsync, rename) and only when its content changed (a resumed
  run with the same command rewrites nothing)."""
  if jax.process_index() == 0:
    fileio.makedirs(workdir)
    if run_files.write_run_files(workdir, config=config_dict, only_if_changed=True) and \
        fileio.exists(fileio.join(workdir, params_dir.CONFIG_NAME)):
      log.info("%s updated (the run config changed since the last start)", run_files.CONFIG_NAME)
    run_files.write_json_if_changed(fileio.join(workdir, params_dir.CONFIG_NAME), model_config.to_dict())
    if vocab_file:
      params_dir.copy_vocab(vocab_file, workdir)
  wd.barrier("bert_jax_workdir_files")
