"""Checkpoints: Orbax CheckpointManager for the training state, a self-describing work directory, and the
params-directory format shared with the converters. No TensorFlow.

Work directory of a pre-training run (self-describing: `init_checkpoint=DIR` is all fine-tuning needs):
  DIR/config.json            the run config (configs/pretrain.py after overrides)
  DIR/model_config.json      BertConfig.to_dict() (a superset of Google's bert_config.json keys)
  DIR/vocab.txt              the WordPiece vocab, copied in
  DIR/checkpoints/<step>/    Orbax: item `state` (TrainState: step, params, opt_state, rng) and item `meta`
                             (JSON: step, scan_layers, data-iterator position, mesh, process count)
  DIR/metrics.jsonl, DIR/eval_metrics.jsonl, DIR/plots/, DIR/tensorboard/   (written by pretrain.py)

Params directory (converted checkpoints; the same format as bert_jax.convert.io):
  DIR/model_config.json      BertConfig.to_dict() (scan_layers=False). Read in this order:
                             model_config.json, bert_config.json, config.json (any with hidden_size;
                             Google's bert_config.json keys work too)
  DIR/vocab.txt              the WordPiece vocab (optional for load_params_dir)
  DIR/params.msgpack         flax.serialization.to_bytes of the params tree in the un-scanned (per-layer)
  or DIR/params/             layout, float32; or an Orbax StandardSave of it (fmt="orbax", for big models)
                             tree = {"bert": {...}, "mlm": {...}, "nsp": {...}} (heads optional)

API:
  Checkpointer(directory, keep=3, async_save=True, read_only=False)
      .latest_step() -> int | None          (only complete checkpoints; interrupted saves are ignored)
      .save(step, state, meta, force=False) asynchronous; .wait() blocks until it is on disk
      .restore(abstract_state, step=None) -> (state, meta)   onto the shardings in abstract_state (any mesh)
      .restore_params(step=None) -> params (host numpy, un-scanned)
      .close()
  restore_train_state(ckpt, config, model, mesh, tx, step=None) -> (state, shardings, meta)
      converts between scan_layers layouts when the checkpoint's differs from the model's
  write_workdir_files(workdir, config_dict, model_config, vocab_file)
  save_params_dir(directory, model_config, params, vocab_file=None, fmt="msgpack")
  load_params_dir(directory) -> (BertConfig, params, vocab_path | None)
  load_pretrained(init_checkpoint) -> (BertConfig, params, vocab_path | None)
      accepts a pre-training work dir (latest checkpoint) or a params directory
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Optional

import flax
import jax
import numpy as np
import orbax.checkpoint as ocp

from bert_jax.input_pipeline import fileio
from bert_jax.models import BertConfig, scan_params, unscan_params

log = logging.getLogger(__name__)

CHECKPOINT_SUBDIR = "checkpoints"


def _is_params_tree(x) -> bool:
  return isinstance(x, dict) and "bert" in x and isinstance(x["bert"], dict)


def _scanned(params) -> bool:
  return "layers" in params.get("bert", {}).get("encoder", {})


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

  def restore_params(self, step: Optional[int] = None):
    """Only the params, as host numpy arrays in the un-scanned layout (no optimizer state is read)."""
    step = self._step(step)
    path = os.path.join(self.directory, str(step), "state")
    with ocp.PyTreeCheckpointer() as ckptr:
      tree = ckptr.metadata(path)
    tree = getattr(tree, "item_metadata", tree)
    tree = getattr(tree, "tree", tree)
    target = jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree["params"])
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
    with ocp.PyTreeCheckpointer() as ckptr:
      out = ckptr.restore(path, args=ocp.args.PyTreeRestore(
          item={"params": target}, restore_args={"params": restore_args}, partial_restore=True))
    params = out["params"]
    return unscan_params(params) if _scanned(params) else params

  def _step(self, step):
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"{self.directory}: no complete checkpoint")
    return int(step)


def restore_train_state(ckpt: Checkpointer, config, model, mesh, tx, step: Optional[int] = None):
  """Restores the full TrainState onto `mesh` (any device count). Returns (state, shardings, meta).

  A checkpoint written with the other scan_layers setting is restored in its own layout and converted.
  """
  from bert_jax.training import train_step as ts  # local: train_step imports this module's siblings
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


# ---- work directory and params directories -----------------------------------------------------------
def write_workdir_files(workdir: str, config_dict: dict, model_config: BertConfig,
                        vocab_file: Optional[str] = None) -> None:
  """config.json (run config), model_config.json and vocab.txt in the work dir (process 0 only)."""
  if jax.process_index() != 0:
    return
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(config_dict, f, indent=2, sort_keys=True, default=str)
    f.write("\n")
  model_config.to_json_file(os.path.join(workdir, "model_config.json"))
  if vocab_file:
    dst = os.path.join(workdir, "vocab.txt")
    if fileio.is_remote(vocab_file):   # e.g. gs://bucket/vocab.txt
      with fileio.open_file(vocab_file) as src, open(dst, "w", encoding="utf-8") as out:
        out.write(src.read())
    elif os.path.abspath(vocab_file) != os.path.abspath(dst):
      shutil.copyfile(vocab_file, dst)


def save_params_dir(directory: str, model_config: BertConfig, params, vocab_file: Optional[str] = None,
                    fmt: str = "msgpack") -> str:
  """Writes a params directory (see module docstring): model_config.json, vocab.txt, params.msgpack or
  params/ (Orbax).

  Params are stored un-scanned (per layer), the interchange layout. Returns `directory`.
  """
  if fmt not in ("orbax", "msgpack"):
    raise ValueError(f"fmt={fmt!r}; expected orbax or msgpack")
  directory = os.path.abspath(directory)
  os.makedirs(directory, exist_ok=True)
  params = flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else params
  if _scanned(params):
    params = unscan_params(params)
  params = jax.tree.map(np.asarray, jax.device_get(params))
  model_config.replace(scan_layers=False).to_json_file(os.path.join(directory, "model_config.json"))
  if vocab_file and os.path.abspath(vocab_file) != os.path.join(directory, "vocab.txt"):
    shutil.copyfile(vocab_file, os.path.join(directory, "vocab.txt"))
  if fmt == "msgpack":
    tmp = os.path.join(directory, "params.msgpack.tmp")
    with open(tmp, "wb") as f:
      f.write(flax.serialization.to_bytes(params))
    os.replace(tmp, os.path.join(directory, "params.msgpack"))   # never a half-written file
  else:
    path = os.path.join(directory, "params")
    if os.path.exists(path):
      shutil.rmtree(path)
    with ocp.StandardCheckpointer() as ckptr:
      ckptr.save(path, params)
      ckptr.wait_until_finished()
  return directory


def _read_model_config(directory: str) -> BertConfig:
  for name in ("model_config.json", "bert_config.json", "config.json"):
    path = os.path.join(directory, name)
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        d = json.load(f)
      if "hidden_size" in d:   # a run config.json (pre-training work dir) has no hidden_size at top level
        return BertConfig.from_json_file(path)
  raise FileNotFoundError(f"{directory}: no model config (model_config.json, bert_config.json or "
                          "config.json with hidden_size)")


def _vocab_path(directory: str) -> Optional[str]:
  path = os.path.join(directory, "vocab.txt")
  return path if os.path.exists(path) else None


def load_params_dir(directory: str):
  """(BertConfig, params [host numpy, un-scanned], vocab path or None) from a params directory."""
  directory = os.path.abspath(directory)
  config = _read_model_config(directory)
  msgpack_path = os.path.join(directory, "params.msgpack")
  orbax_path = os.path.join(directory, "params")
  if os.path.isdir(orbax_path):
    with ocp.StandardCheckpointer() as ckptr:
      meta = ckptr.metadata(orbax_path)
      tree = getattr(meta, "item_metadata", meta)
      tree = getattr(tree, "tree", tree)
      target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype,
                                                           sharding=jax.sharding.SingleDeviceSharding(
                                                               jax.local_devices(backend="cpu")[0])), tree)
      params = ckptr.restore(orbax_path, target)
    params = jax.tree.map(np.asarray, params)
  elif os.path.exists(msgpack_path):
    with open(msgpack_path, "rb") as f:
      params = flax.serialization.msgpack_restore(f.read())
  else:
    raise FileNotFoundError(f"{directory}: no params/ (Orbax) or params.msgpack")
  params = flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else params
  if _scanned(params):
    params = unscan_params(params)
  return config.replace(scan_layers=False), params, _vocab_path(directory)


def is_workdir(directory: str) -> bool:
  return os.path.isdir(os.path.join(directory, CHECKPOINT_SUBDIR))


def load_pretrained(init_checkpoint: str):
  """(BertConfig, params, vocab path | None) from a pre-training work dir (its latest complete checkpoint;
  params only, no optimizer state) or a params directory (save_params_dir / the converters)."""
  directory = os.path.abspath(os.path.expanduser(init_checkpoint))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"init_checkpoint={init_checkpoint!r} is not a directory (expected a pre-training "
                            "work dir or a converted params directory)")
  if is_workdir(directory):
    config = _read_model_config(directory)
    ckpt = Checkpointer(os.path.join(directory, CHECKPOINT_SUBDIR), async_save=False, read_only=True)
    try:
      params = ckpt.restore_params()
    finally:
      ckpt.close()
    return config.replace(scan_layers=False), params, _vocab_path(directory)
  return load_params_dir(directory)
