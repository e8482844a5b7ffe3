"""Fine-tuning loop: data from the task registry, a head on a (pre-trained) encoder, AdamW with warmup and
linear decay, evaluation with the official metric, the best checkpoint, and the files users submit.

    from bert_jax.finetune import loop
    results = loop.run(config, workdir)     # config: configs/finetune.py

Start-up order: init_checkpoint (encoder weights, config, vocab; the head is initialised) else random init
from config.model.size + vocab_file. A run holds DIR/workdir.lock (bert_jax.training.workdir: a second
finetune.py on the same dir stops at once naming the holder). Fine-tuning does not resume: a rerun starts
over (metrics.jsonl anew). SIGINT / SIGTERM stop after the current step and raise errors.Interrupted
(exit 130 / 143; best_checkpoint/ keeps the best evaluation so far); nan_policy=skip stops after
max_consecutive_nonfinite skipped steps in a row. Training runs ceil(num_train_epochs x batches per epoch) steps; the
last batch of an epoch is padded with zero-weight rows, so every example is seen once per epoch.

Files written to `workdir`:
  config.json            the run config, plus the values resolved at start-up ("resolved")
  init_report.json       which parameters came from init_checkpoint and which were initialised
  metrics.jsonl          {"kind": "train", "step", "epoch", "loss", "accuracy", "learning_rate", "grad_norm"} per
                         log step and {"kind": "eval", "step", "epoch", "split", <task metrics>} per evaluation
  tensorboard/           the same scalars (tensorboardX)
  curves.png             train loss and the main eval metric against steps
  best_checkpoint/       params dir (model_config.json, params.msgpack, vocab.txt) of the best evaluation
                         + finetune_info.json (task, labels, max_seq_length, casing): `init_checkpoint` and
                         `bert_jax.finetune.predict.Predictor.from_workdir` read it
  eval_results.json      {"task", "main_metric", "best": {step, epoch, value}, "<split>": metrics, ...} for
                         every eval split (dev; MNLI dev_matched/dev_mismatched) and labelled test split,
                         computed with the best parameters, plus timing and the training summary
  predictions            GLUE: <task>_dev_predictions.tsv and leaderboard files (CoLA.tsv, MNLI-m.tsv, AX.tsv..)
                         for test; SQuAD: predictions.json, nbest_predictions.json (+ null_odds.json for v2);
                         NER: dev_predictions.txt / test_predictions.txt (CoNLL: word gold pred);
                         classification: classification_<split>_predictions.tsv
"""

from __future__ import annotations

import io
import logging
import math
import os
import signal
import time
from typing import Any, Dict, List, Optional

import jax
import numpy as np

from bert_jax.finetune import data as ft
from bert_jax.finetune import model as fm
from bert_jax.finetune import validation
from bert_jax.errors import Interrupted
from bert_jax.input_pipeline import fileio, tokenization
from bert_jax.pretrained import Pretrained, load_pretrained, params_dir
from bert_jax.pretrained.load import BEST_DIR, check_vocab_matches, merge_params
from bert_jax.training import compile_cache, optimizers, sharding
from bert_jax.training import train_step as ts
from bert_jax.training import workdir as workdir_lib
from bert_jax.training.checkpoints import config_to_dict
from bert_jax.training.metric_writer import MetricWriter

_log = logging.getLogger(__name__)

INFO_NAME = params_dir.FINETUNE_INFO_NAME


def signal_name(signum: int) -> str:
  return signal.Signals(signum).name


def plot_curves(workdir: str, records: List[dict], main_metric: str) -> str:
  """curves.png: train loss (and eval loss) and the main eval metric against the step."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  train = [r for r in records if r["kind"] == "train"]
  evals = [r for r in records if r["kind"] == "eval" and main_metric in r]
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
  a1.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
  for split in sorted({r["split"] for r in evals}):
    pts = [r for r in evals if r["split"] == split]
    if "loss" in pts[0]:
      a1.plot([r["step"] for r in pts], [r["loss"] for r in pts], "o-", label=f"{split} loss")
    a2.plot([r["step"] for r in pts], [r[main_metric] for r in pts], "o-", label=split)
  a1.set_xlabel("step")
  a1.set_title("loss")
  a1.legend()
  a2.set_xlabel("step")
  a2.set_title(main_metric)
  if evals:
    a2.legend()
  fig.tight_layout()
  path = fileio.join(workdir, "curves.png")
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=80)
  plt.close(fig)
  fileio.write_bytes_atomic(path, buf.getvalue())
  return path


# --------------------------------------------------------------------------------------------------------
# Helpers.
# --------------------------------------------------------------------------------------------------------
def resolve_do_lower_case(value, init: Optional[Pretrained], vocab_file: str) -> bool:
  v = ft.bool_or_none(value, "do_lower_case")
  if v is not None:
    return v
  if init is not None and init.do_lower_case is not None:
    return bool(init.do_lower_case)
  return params_dir.guess_do_lower_case(vocab_file, hint=init.directory if init is not None else "")


def _round_up(n: int, k: int) -> int:
  return -(-n // k) * k


def run_model(predict_step, params, features, keys, batch_size: int, mesh, rules):
  """(head outputs for every row of `features`, eval padding removed, as host numpy arrays; summed loss
  sums of the rows, {} when the step computes no loss)."""
  n = int(features["input_ids"].shape[0])
  outs: Dict[str, list] = {}
  sums: Dict[str, float] = {}
  for batch in ft.iterate_batches(features, keys, batch_size):
    real = int(batch["example_weight"].sum())
    got = fm.to_host(predict_step(params, fm.to_global_batch(batch, mesh, rules)))
    for k, v in got["outputs"].items():
      outs.setdefault(k, []).append(np.asarray(v)[:real])
    for k, v in got["sums"].items():
      sums[k] = sums.get(k, 0.0) + float(v)
  out = {k: np.concatenate(v, axis=0) for k, v in outs.items()}
  assert all(v.shape[0] == n for v in out.values())
  return out, sums


def eval_keys(task) -> tuple:
  """Feature keys fed to the eval step: model inputs, plus labels where the loss is meaningful (SQuAD
  evaluation windows carry no answer positions)."""
  return tuple(task.model_input_keys) if task.kind == "squad" else ft.device_keys(task)


def evaluate_split(task, data: ft.SplitData, predict_step, params, batch_size, mesh, rules):
  """(metrics, predictions) of one split with the official scorer (+ "loss" when labelled); metrics {}
  when the split has no labels."""
  outputs, sums = run_model(predict_step, params, data.features, eval_keys(task), batch_size, mesh, rules)
  preds = task.predict(data.examples, data.features, outputs)
  metrics = dict(task.evaluate(data.examples, preds, data.split))
  if metrics and sums.get("task_weight_sum", 0.0) > 0:
    metrics["loss"] = sums["task_loss_sum"] / sums["task_weight_sum"]
  return metrics, preds


def save_best(directory: str, bert_cfg, params, vocab_file: str, info: dict):
  """The best parameters as a params dir (un-scanned, float32) + finetune_info.json. Written next to the old
  one and swapped in by renames, so a crash leaves the previous best or the new one, never neither."""
  tmp, old = directory + ".tmp", directory + ".old"
  for d in (tmp, old):
    fileio.rmtree(d)
  params_dir.save_params_dir(tmp, bert_cfg.replace(scan_layers=False, dtype="float32", remat_policy="none"),
                             params, vocab_file, info={"do_lower_case": info["do_lower_case"],
                                                       "source": "finetune", "format": "bert_jax"})
  params_dir.write_json_atomic(fileio.join(tmp, INFO_NAME), info)
  if fileio.exists(directory):
    fileio.rename(directory, old)      # the old best stays whole until the new one is complete (in tmp)
  fileio.rename(tmp, directory)
  fileio.rmtree(old)


def _merge_init(params, p_shard, init: Pretrained, load_head: bool):
  """The model's random params with the checkpoint's encoder (and, with load_head, its task head) merged
  in; returns (params on the mesh, report of loaded / initialised / unused paths)."""
  groups = ("bert",) + (fm.HEAD_NAMES if load_head else ())
  merged, report = merge_params(params_dir.host_params(params), init.params, groups)
  if not any(p.startswith("bert/") for p in report["loaded"]):
    raise ValueError("init_checkpoint holds none of the model's encoder parameters (params['bert']); "
                     f"its top-level keys are {sorted(init.params)}")
  if load_head and not any(p.split("/")[0] in fm.HEAD_NAMES for p in report["loaded"]):
    raise ValueError("load_head is set but the init_checkpoint has no task head of matching names and shapes")
  # p_shard has the model's tree structure, so it tells the layer layout the model expects.
  return jax.device_put(params_dir.match_layout(merged, params_dir.is_scanned(p_shard)), p_shard), report


# --------------------------------------------------------------------------------------------------------
# The run.
# --------------------------------------------------------------------------------------------------------
def run(config, workdir: str) -> dict:
  """Fine-tunes and evaluates `config.task`; returns the eval_results.json content. Holds the work-dir lock
  while it runs."""
  validation.validate_finetune_config(config)   # UserError before any model or data work
  fileio.makedirs(workdir)
  lock = workdir_lib.WorkdirLock(workdir, kind="finetune").acquire()
  try:
    compile_cache.enable(str(config.get("compilation_cache_dir", "auto")))
    return _run(config, workdir)
  finally:
    lock.release()


def _run(config, workdir: str) -> dict:
  t_start = time.time()
  is_main = jax.process_index() == 0
  os.makedirs(workdir, exist_ok=True)

  # ---- checkpoint, vocab, tokenizer, task ----
  init = load_pretrained(config.init_checkpoint) if config.init_checkpoint else None
  load_head = bool(config.load_head) or not config.do_train
  if load_head and init is None:
    raise ValueError("do_train=False (or load_head=True) needs an init_checkpoint with a fine-tuned head")
  vocab_file = config.vocab_file or (init.vocab_file if init is not None else "")
  if not vocab_file:
    raise ValueError("no vocab: set vocab_file (random init) or init_checkpoint (which carries vocab.txt)")
  if not os.path.exists(vocab_file):
    raise FileNotFoundError(f"vocab_file {vocab_file} does not exist")
  do_lower_case = resolve_do_lower_case(config.do_lower_case, init, vocab_file)
  if init is not None:
    check_vocab_matches(init.config.vocab_size, init.directory, vocab_file)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  head_labels = init.finetune_info.get("label_list") if (init is not None and load_head) else None
  task = ft.make_task(config, label_list=head_labels)
  _log.info("task %s: %s", task.name, task)
  bert_cfg = fm.build_bert_config(config, params_dir.count_vocab_lines(vocab_file), init)
  if int(config.max_seq_length) > bert_cfg.max_position_embeddings:
    raise ValueError(f"max_seq_length={config.max_seq_length} exceeds the model's max_position_embeddings="
                     f"{bert_cfg.max_position_embeddings}")

  # ---- data (before any compilation, so bad input fails fast) ----
  t_data = time.time()
  train = None
  if config.do_train:
    train = ft.load_split(task, config, task.train_split, tokenizer, is_training=True)
    if train is None:
      raise FileNotFoundError(f"task {task.name}: no {task.train_split} split in data_dir={config.data_dir!r}"
                              + (f" / TFDS {config.tfds_name}" if ft.use_tfds(config) else ""))
  eval_names = ft.split_list(config.eval_splits) or list(task.eval_splits)
  eval_data = []
  if config.do_eval or config.do_predict:
    for s in eval_names:
      d = ft.load_split(task, config, s, tokenizer)
      if d is None:
        _log.warning("eval split %s not found; skipped", s)
      else:
        eval_data.append(d)
  test_names = ft.split_list(config.test_splits) or list(task.test_splits)
  test_data = []
  if config.do_predict:
    for s in test_names:
      d = ft.load_split(task, config, s, tokenizer)
      if d is not None:
        test_data.append(d)
  t_data = time.time() - t_data
  skipped = {d.split: d.examples.skipped.to_dict() for d in ([train] if train else []) + eval_data + test_data
             if d.examples.skipped.total}

  # ---- model ----
  model = fm.build_model(task, bert_cfg, float(config.model.classifier_dropout))
  mesh = sharding.make_mesh(tuple(config.mesh.shape), tuple(config.mesh.axes))
  rules = sharding.normalize_rules(config.logical_axis_rules)
  shards = sharding.batch_shards(mesh, rules)
  batch_size = int(config.batch_size)
  if batch_size % shards:
    raise ValueError(f"batch_size={batch_size} is not a multiple of the {shards} batch shards of the mesh "
                     f"{sharding.describe(mesh)}")
  eval_batch_size = _round_up(int(config.eval_batch_size), shards)
  params, p_shard = ts.init_params(config, model, mesh)
  init_report = {"init_checkpoint": config.init_checkpoint or None, "loaded": [], "unused": [],
                 "initialised": ["/".join(str(getattr(k, "key", k)) for k in p)
                                 for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]}
  if init is not None:
    params, rep = _merge_init(params, p_shard, init, load_head)
    init_report.update(rep, init_checkpoint=init.directory)
    _log.info("init_checkpoint %s: loaded %d arrays, initialised %d (%s), unused %d (%s)", init.directory,
              len(rep["loaded"]), len(rep["initialised"]), ", ".join(rep["initialised"]), len(rep["unused"]),
              ", ".join(rep["unused"][:8]))
  else:
    _log.info("random init: %s", bert_cfg)

  # ---- optimisation ----
  steps_per_epoch = ft.num_batches(train.num_rows, batch_size) if train else 0
  total_steps = int(math.ceil(float(config.num_train_epochs) * steps_per_epoch)) if train else 0
  if int(config.max_train_steps) > 0:
    total_steps = min(total_steps, int(config.max_train_steps))
  warmup_steps = int(float(config.warmup_proportion) * total_steps)
  opt = config.optimizer.copy_and_resolve_references()
  if float(opt.learning_rate) <= 0:   # -1: by model size (DEFAULT_LEARNING_RATES)
    opt.learning_rate = fm.default_learning_rate(bert_cfg)
  lr = float(opt.learning_rate)
  tx, schedule = optimizers.make_optimizer(opt, max(total_steps, 1), warmup_steps)

  resolved = {"task": task.name, "kind": task.kind, "label_list": task.label_list, "num_labels": task.num_labels,
              "vocab_file": vocab_file, "do_lower_case": do_lower_case, "model": bert_cfg.to_dict(),
              "size": fm.size_name(bert_cfg), "learning_rate": lr, "train_examples": len(train.examples) if train
              else 0, "train_features": train.num_rows if train else 0, "steps_per_epoch": steps_per_epoch,
              "total_steps": total_steps, "warmup_steps": warmup_steps, "batch_size": batch_size,
              "eval_batch_size": eval_batch_size, "mesh": sharding.describe(mesh), "skipped": skipped}
  if is_main:
    params_dir.write_json_atomic(os.path.join(workdir, "config.json"), dict(config_to_dict(config), resolved=resolved))
    params_dir.write_json_atomic(os.path.join(workdir, "init_report.json"), init_report)
  _log.info("fine-tuning %s: %s", task.name, {k: v for k, v in resolved.items() if k != "model"})

  info = {"task": task.name, "kind": task.kind, "head": task.head, "label_list": task.label_list,
          "num_labels": task.num_labels, "max_seq_length": int(config.max_seq_length),
          "do_lower_case": do_lower_case, "doc_stride": int(config.doc_stride),
          "max_query_length": int(config.max_query_length), "n_best_size": int(config.n_best_size),
          "max_answer_length": int(config.max_answer_length),
          "null_score_diff_threshold": float(config.null_score_diff_threshold),
          "version_2_with_negative": bool(getattr(task, "version_2_with_negative", False)),
          "ner_scheme": config.ner_scheme, "ner_mode": config.ner_mode,
          "classification": config_to_dict(config.classification)}
  info.update(task.head_options())   # pooling / crf / multilabel threshold: Predictor rebuilds the head

  predict_step = fm.make_predict_step(model, None if task.kind == "squad" else task.kind, mesh, rules, p_shard)
  writer = MetricWriter(workdir, fresh=True)
  records: List[dict] = []

  def log_record(record: dict):
    records.append(record)
    prefix = record["kind"] + (f"_{record['split']}" if "split" in record else "") + "/"
    writer.write(record["step"], {k: v for k, v in record.items() if k != "step"}, tb_prefix=prefix)
  main_metric = task.main_metric
  best = {"value": -math.inf, "step": 0, "epoch": 0.0, "metrics": {}}
  best_params = None
  timing: Dict[str, Any] = {"data_seconds": round(t_data, 2)}

  def evaluate_all(params, step, epoch):
    nonlocal best, best_params
    results = {}
    for d in eval_data:
      rec, _ = evaluate_split(task, d, predict_step, params, eval_batch_size, mesh, rules)
      results[d.split] = rec
      log_record(dict(rec, kind="eval", step=int(step), epoch=round(epoch, 3), split=d.split))
    if not results:
      return False
    value = results[eval_data[0].split].get(main_metric)
    _log.info("step %d (epoch %.2f) eval: %s", step, epoch, results)
    if value is not None and value > best["value"]:
      best = {"value": float(value), "step": int(step), "epoch": round(epoch, 3), "metrics": results}
      best_params = fm.to_host(params)
      if config.save_best_checkpoint and is_main and config.do_train:
        save_best(os.path.join(workdir, BEST_DIR), bert_cfg, best_params, vocab_file,
                  dict(info, step=int(step), metrics=results))
      return True
    return False

  # ---- training ----
  state = None
  if train is not None and total_steps > 0:
    state, state_shardings = ts.create_train_state(config, model, mesh, tx, params=params)
    del params
    train_step = ts.make_train_step(config, model, tx, mesh, state_shardings, loss_fn=fm.task_loss(model, task.kind))
    keys = ft.device_keys(task)
    rng = np.random.default_rng(int(config.seed))
    eval_every = int(config.eval_every_steps)
    log_every = max(1, int(config.log_every_steps))
    patience = int(config.early_stopping_patience)
    bad_evals, step, sums = 0, 0, None
    t_train, t_first = time.time(), None
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
    bar = tqdm(total=total_steps, desc=f"fine-tune {task.name}", disable=not is_main, mininterval=2.0,
               dynamic_ncols=True)
    stop = False
    epoch = 0
    signals = workdir_lib.StopSignals()
    nonfinite = ts.NonFiniteGuard(config.nan_policy, int(config.max_consecutive_nonfinite), what=task.name)
    try:
      while step < total_steps and not stop:
        for batch in ft.iterate_batches(train.features, keys, batch_size, rng):
          state, m = train_step(state, fm.to_global_batch(batch, mesh, rules))
          sums = ts.merge_metrics(sums, m)
          step += 1
          if t_first is None:
            jax.block_until_ready(m)
            t_first = time.time() - t_train
          bar.update(1)
          if signals.reached(step):
            break
          ep = epoch + min(1.0, (step - epoch * steps_per_epoch) / steps_per_epoch)
          end_of_epoch = step % steps_per_epoch == 0 or step == total_steps
          if step % log_every == 0 or step == total_steps:
            summary = ts.normalize(sums)
            nonfinite.check(summary, step)
            rec = {"kind": "train", "step": step, "epoch": round(ep, 3), "loss": summary.get("task_loss", math.nan),
                   "learning_rate": float(schedule(step - 1)), "grad_norm": summary.get("grad_norm", math.nan)}
            if "task_accuracy" in summary:
              rec["accuracy"] = summary["task_accuracy"]
            if summary.get("nonfinite_count"):
              rec["nonfinite_count"] = summary["nonfinite_count"]
            log_record(rec)
            bar.set_postfix(loss=f"{rec['loss']:.4f}")
            sums = None
          do_eval = config.do_eval and eval_data and (
              (eval_every > 0 and (step % eval_every == 0 or step == total_steps))
              or (eval_every <= 0 and end_of_epoch))
          if do_eval:
            improved = evaluate_all(state.params, step, ep)
            bad_evals = 0 if improved else bad_evals + 1
            if patience > 0 and bad_evals >= patience:
              _log.info("early stopping at step %d: %d evaluations without a better %s", step, bad_evals,
                        main_metric)
              stop = True
          if step >= total_steps or stop:
            break
        if signals.signum is not None:
          break
        epoch += 1
    finally:
      signals.restore()
      bar.close()
    if signals.signum is not None:
      writer.close()
      raise Interrupted(signals.signum, step, f"stopped by {signal_name(signals.signum)} at step {step} of "
                        f"{total_steps}; fine-tuning does not resume: rerun to start over (best_checkpoint/ "
                        "holds the best evaluation so far)")
    jax.block_until_ready(state.params)
    train_seconds = time.time() - t_train
    timing.update(train_seconds=round(train_seconds, 2), first_step_seconds=round(t_first or 0.0, 2),
                  train_steps=step, train_examples_seen=step * batch_size,
                  steps_per_second=round((step - 1) / max(train_seconds - (t_first or 0.0), 1e-9), 3)
                  if step > 1 else None)
    if timing["steps_per_second"]:
      timing["examples_per_second"] = round(timing["steps_per_second"] * batch_size, 2)
    params = state.params
  elif config.do_eval and eval_data:
    evaluate_all(params, 0, 0.0)

  if best_params is None:   # no evaluation (no dev split, or do_eval=False): keep the last parameters
    best_params = fm.to_host(params)
    if config.save_best_checkpoint and is_main and config.do_train:
      save_best(os.path.join(workdir, BEST_DIR), bert_cfg, best_params, vocab_file,
                dict(info, step=int(total_steps), metrics={}))
  params = jax.device_put(best_params, p_shard)

  # ---- final evaluation and prediction files with the best parameters ----
  results = {"task": task.name, "main_metric": main_metric, "init_checkpoint": init.directory if init else None,
             "best": {k: v for k, v in best.items() if k != "metrics"} if best["value"] > -math.inf else None}
  files: List[str] = []
  for d in eval_data + test_data:
    metrics, preds = evaluate_split(task, d, predict_step, params, eval_batch_size, mesh, rules)
    if metrics:
      results[d.split] = metrics
    if config.do_predict and is_main:
      files += task.write_predictions(workdir, d.split, d.examples, preds)
  timing["total_seconds"] = round(time.time() - t_start, 2)
  results.update(timing=timing, train={k: resolved[k] for k in ("train_examples", "train_features",
                                                                  "steps_per_epoch", "total_steps",
                                                                  "learning_rate", "batch_size")},
                 prediction_files=[os.path.relpath(f, workdir) for f in files])
  if is_main:
    params_dir.write_json_atomic(os.path.join(workdir, "eval_results.json"), results)
    plot_curves(workdir, records, main_metric)
  writer.close()
  _log.info("eval results: %s", {k: v for k, v in results.items() if k not in ("prediction_files",)})
  return results
