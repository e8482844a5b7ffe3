"""Checkpoints: Orbax CheckpointManager for the training state, a self-describing work directory, and the
params-directory format shared with the converters. No TensorFlow.

Work directory of a pre-training run (self-describing: `init_checkpoint=DIR` is all fine-tuning needs):
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
  write_workdir_files(workdir, config_dict, model_config, vocab_file)
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional

import jax
import orbax.checkpoint as ocp

from bert_jax.models import BertConfig, scan_params, unscan_params
from bert_jax.pretrained import params_dir
from bert_jax.pretrained.load import CHECKPOINT_SUBDIR
from bert_jax.training import train_step as ts

log = logging.getLogger(__name__)

__all__ = ["CHECKPOINT_SUBDIR", "Checkpointer", "config_to_dict", "convert_layout", "restore_train_state", "write_workdir_files"]


def _is_params_tree(x) -> bool:
  return isinstance(x, dict) and "bert" in x and isinstance(x["bert"], dict)


def convert_layout(tree, scan: bool):
  """Converts every params-shaped subtree (params, Adam moments) to the scanned / un-scanned layout."""
  fn = scan_params if scan else unscan_params
  return jax.tree.map(lambda t: fn(t) if _is_params_tree(t) else t, tree, is_leaf=_is_params_tree)


class Checkpointer:
  """Orbax CheckpointManager with items `state` (pytree) and `meta` (JSON)."""

  def __init__(self, directory: str, keep: int = 3, async_save: bool = True, read_only: bool = False):
    self.directory = os.path.abspath(directory)
    # cleanup_tmp_directories: a save interrupted by a kill leaves a tmp dir that is never a checkpoint.
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=not read_only, read_only=read_only,
                                           cleanup_tmp_directories=not read_only,
                                           enable_async_checkpointing=async_save)
    self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def all_steps(self):
    return list(self.manager.all_steps())

  def save(self, step: int, state, meta: Optional[dict] = None, force: bool = False) -> bool:
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


# ---- work directory ---------------------------------------------------------------------------------
def config_to_dict(config) -> dict:
  """A run config (ml_collections.ConfigDict) as plain JSON data, for config.json."""
  return json.loads(config.to_json_best_effort())


# ---- work directory ---------------------------------------------------------------------------------
def write_workdir_files(workdir: str, config_dict: dict, model_config: BertConfig,
                        vocab_file: Optional[str] = None) -> None:
  """config.json (run config), model_config.json and vocab.txt in the work dir (process 0 only), each
  written atomically (temp file, fsync, rename)."""
  if jax.process_index() != 0:
    return
  os.makedirs(workdir, exist_ok=True)
  params_dir.write_json_atomic(os.path.join(workdir, "config.json"), config_dict)
  params_dir.write_json_atomic(os.path.join(workdir, params_dir.CONFIG_NAME), model_config.to_dict())
  if vocab_file:
    params_dir.copy_vocab(vocab_file, workdir)
