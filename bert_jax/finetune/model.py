"""Fine-tuning model side: the encoder config, the task head, the task losses and the prediction step.
No TensorFlow. State creation and the train step are training.train_step's, with `task_loss` as the loss:

    pre = load_pretrained(init_checkpoint)                       # bert_jax.pretrained (zoo name or dir)
    bert_cfg = build_bert_config(config, vocab_size, pre)
    model = build_model(task, bert_cfg, classifier_dropout)
    params, p_shard = ts.init_params(config, model, mesh)        # random, created on the mesh
    state, shardings = ts.create_train_state(config, model, mesh, tx, params=merged)
    step = ts.make_train_step(config, model, tx, mesh, shardings, loss_fn=task_loss(model, task.kind))
    predict = make_predict_step(model, task.kind, mesh, rules, p_shard)   # (params, batch) -> outputs, sums
"""

from __future__ import annotations

from typing import Dict, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.finetune.tasks import IGNORE_INDEX
from bert_jax.models import BertConfig, crf, heads, losses
from bert_jax.models.config import SIZES
from bert_jax.pretrained import Pretrained
from bert_jax.training import sharding
from bert_jax.training.train_step import LossFn, StepFn, compute_dtype

# Peak fine-tuning learning rate by model size. BERT paper (base/large): best of 5e-5, 4e-5, 3e-5, 2e-5.
# Google's 24 small BERTs were tuned over 3e-4, 1e-4, 5e-5, 3e-5; the small ones land at the high end.
DEFAULT_LEARNING_RATES = {"tiny": 3e-4, "mini": 2e-4, "small": 1e-4, "medium": 5e-5, "base": 3e-5,
                          "large": 2e-5}
HEAD_NAMES = ("classifier", "qa_outputs", "crf")


def size_name(cfg: BertConfig) -> str:
  """The size-table name of an architecture, or the nearest one by hidden size and depth."""
  for name, (layers, hidden) in SIZES.items():
    if (cfg.num_hidden_layers, cfg.hidden_size) == (layers, hidden):
      return name
  h, l = cfg.hidden_size, cfg.num_hidden_layers
  if h <= 128:
    return "tiny"
  if h <= 256:
    return "mini"
  if h <= 512:
    return "small" if l <= 4 else "medium"
  return "base" if h <= 768 else "large"


def default_learning_rate(cfg: BertConfig) -> float:
  return DEFAULT_LEARNING_RATES[size_name(cfg)]


def build_bert_config(config, vocab_size: int, init: Optional[Pretrained] = None) -> BertConfig:
  """The encoder config: the checkpoint's architecture (or the size table) + the run's runtime fields."""
  m = config.model
  runtime = dict(hidden_dropout_prob=float(m.hidden_dropout_prob),
                 attention_probs_dropout_prob=float(m.attention_probs_dropout_prob),
                 dtype=compute_dtype(m.dtype), attention_impl=m.attention_impl, scan_layers=bool(m.scan_layers),
                 remat_policy=m.remat_policy)
  if init is not None:
    ckpt_vocab = init.config.vocab_size
    if vocab_size != ckpt_vocab:
      raise ValueError(f"vocab size mismatch: the vocab file has {vocab_size} tokens but the checkpoint "
                       f"{init.directory} was trained with vocab_size={ckpt_vocab}; use the checkpoint's own "
                       "vocab.txt (leave vocab_file empty)")
    return init.config.replace(**runtime)
  arch = {k: int(m[k]) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "intermediate_size") if int(m[k]) > 0}
  if "hidden_size" in arch and "num_attention_heads" not in arch:
    arch["num_attention_heads"] = max(1, arch["hidden_size"] // 64)
  if "hidden_size" in arch and "intermediate_size" not in arch:
    arch["intermediate_size"] = 4 * arch["hidden_size"]
  return BertConfig.from_size(m.size, vocab_size=int(vocab_size),
                              max_position_embeddings=int(m.max_position_embeddings), **arch, **runtime)


def build_model(task, bert_cfg: BertConfig, classifier_dropout: float = -1.0) -> nn.Module:
  """The head of `task.head`; the task carries the head options (`pooling` for sentence-level heads, `crf`
  and `scheme` for tagging; data.make_task sets them from the config, Predictor from finetune_info.json)."""
  rate = None if classifier_dropout is None or classifier_dropout < 0 else float(classifier_dropout)
  pooling = getattr(task, "pooling", "cls")
  if task.head == "sequence_classification":
    return heads.BertForSequenceClassification(bert_cfg, task.num_labels, dropout_rate=rate, pooling=pooling)
  if task.head == "multiple_choice":
    return heads.BertForMultipleChoice(bert_cfg, dropout_rate=rate, pooling=pooling)
  if task.head == "token_classification":
    if getattr(task, "crf", False):
      return heads.BertForTokenClassificationCRF(bert_cfg, tuple(task.label_list), task.scheme, dropout_rate=rate)
    return heads.BertForTokenClassification(bert_cfg, task.num_labels, dropout_rate=rate)
  if task.head == "question_answering":
    return heads.BertForQuestionAnswering(bert_cfg)
  raise ValueError(f"unknown head {task.head!r}")


# --------------------------------------------------------------------------------------------------------
# Task losses and the prediction step.
# --------------------------------------------------------------------------------------------------------
def _apply(model, params, batch, rng):
  extra = {k: batch[k] for k in getattr(model, "extra_input_keys", ())}
  return model.apply({"params": params}, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                     deterministic=rng is None, rngs=None if rng is None else {"dropout": rng}, **extra)


# Head outputs that are not per-example rows (CRF scores): the loss reads them, prediction drops them.
_NON_ROW_OUTPUTS = ("pooled_output", "crf_transitions", "crf_start", "crf_end")


def _task_weights(kind: str, batch):
  """Loss weight of each labelled unit: examples ([B]) or, for NER, tokens ([B, T]); padded rows weigh 0."""
  w = batch["example_weight"].astype(jnp.float32)
  if kind == "classification":
    return w * (batch["label_ids"] >= 0)
  if kind == "multilabel":   # label_ids [B, K] multi-hot, -1 rows unlabelled
    return w * (batch["label_ids"][:, 0] >= 0)
  if kind == "regression":
    return w * jnp.isfinite(batch["label_ids"].astype(jnp.float32))
  if kind == "ner":
    return (batch["label_ids"] != IGNORE_INDEX).astype(jnp.float32) * w[:, None]
  if kind == "squad":
    return w
  raise ValueError(f"unknown task kind {kind!r}")


def task_sums(kind: str, outputs, batch) -> dict:
  """{task_loss_sum, task_weight_sum[, task_correct_sum]} of a batch, weighted so padded rows count for
  nothing (models.losses.normalize_metrics turns them into task_loss / task_accuracy)."""
  w = _task_weights(kind, batch)
  if kind == "ner" and "crf_transitions" in outputs:
    # CRF: the sentence NLL summed, over the same denominator as the softmax head (labelled words), so the
    # loss reads per word. Accuracy from the Viterbi path when decoded (eval), else from the emissions.
    labels = batch["label_ids"]
    label_mask = labels != IGNORE_INDEX
    ll = crf.crf_log_likelihood(outputs["logits"], labels, label_mask, outputs["crf_transitions"],
                                outputs["crf_start"], outputs["crf_end"])
    pred = outputs["crf_tags"] if "crf_tags" in outputs else jnp.argmax(outputs["logits"], -1)
    correct = (pred == labels).astype(jnp.float32)
    return {"task_loss_sum": -jnp.sum(ll * batch["example_weight"].astype(jnp.float32)),
            "task_weight_sum": jnp.sum(w), "task_correct_sum": jnp.sum(correct * w)}
  if kind == "multilabel":
    # Mean binary cross-entropy over the labels of an example; "correct" = exact match at probability 0.5.
    y = jnp.maximum(batch["label_ids"], 0).astype(jnp.float32)
    z = outputs["logits"]
    bce = jnp.maximum(z, 0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z)))
    exact = jnp.all((z > 0) == (y > 0.5), axis=-1).astype(jnp.float32)
    return {"task_loss_sum": jnp.sum(jnp.mean(bce, axis=-1) * w), "task_weight_sum": jnp.sum(w),
            "task_correct_sum": jnp.sum(exact * w)}
  if kind in ("classification", "ner"):
    labels = batch["label_ids"]
    nll = losses.cross_entropy(outputs["logits"], jnp.maximum(labels, 0))
    correct = (jnp.argmax(outputs["logits"], -1) == labels).astype(jnp.float32)
    return {"task_loss_sum": jnp.sum(nll * w), "task_weight_sum": jnp.sum(w),
            "task_correct_sum": jnp.sum(correct * w)}
  if kind == "regression":
    labels = batch["label_ids"].astype(jnp.float32)
    err = outputs["logits"][:, 0] - jnp.where(jnp.isfinite(labels), labels, 0.0)
    return {"task_loss_sum": jnp.sum(jnp.square(err) * w), "task_weight_sum": jnp.sum(w)}
  # SQuAD (Google's run_squad): mean of the start and end cross-entropies over the window's positions.
  nll = 0.5 * (losses.cross_entropy(outputs["start_logits"], batch["start_positions"])
               + losses.cross_entropy(outputs["end_logits"], batch["end_positions"]))
  return {"task_loss_sum": jnp.sum(nll * w), "task_weight_sum": jnp.sum(w)}


def task_loss(model, kind: str) -> LossFn:
  """The fine-tuning objective for training.train_step's step factory: the weighted mean task loss of the
  full batch (its weight sum is the global denominator, so gradient accumulation is exact)."""

  def denominators(batch):
    return {"weight": jnp.maximum(jnp.sum(_task_weights(kind, batch)), 1e-6)}

  def forward(params, batch, rng, denoms):
    sums = task_sums(kind, _apply(model, params, batch, rng), batch)
    return sums["task_loss_sum"] / denoms["weight"], sums

  return LossFn(denominators, forward)


def make_predict_step(model, kind: Optional[str], mesh, rules, p_shard) -> StepFn:
  """predict(params, batch) -> {"outputs": the head's outputs (logits / start_logits, end_logits), float32,
  "sums": task sums as in training (only with `kind`; the batch then carries the label keys)}; replicated."""

  def predict_step(params, batch):
    full = _apply(model, params, batch, None)
    out = {k: v for k, v in full.items() if k not in _NON_ROW_OUTPUTS}
    return {"outputs": out, "sums": task_sums(kind, full, batch) if kind is not None else {}}

  jitted = jax.jit(predict_step, in_shardings=(p_shard, sharding.batch_sharding(mesh, rules)),
                   out_shardings=sharding.replicated(mesh))
  return StepFn(jitted, mesh, rules)


def to_host(tree):
  """Device arrays -> host numpy. Multi-host: gathers the global value (replicated or sharded) on every host."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return multihost_utils.process_allgather(tree, tiled=True)


def to_global_batch(batch: Dict[str, np.ndarray], mesh, rules):
  """Single process: the host arrays (jit shards them). Multi-host: every host holds the same global
  batch and contributes the rows of its devices."""
  if jax.process_count() == 1:
    return batch
  s = sharding.batch_sharding(mesh, rules)
  out = {}
  for k, v in batch.items():
    n = v.shape[0] // jax.process_count()
    i = jax.process_index()
    out[k] = jax.make_array_from_process_local_data(s, v[i * n:(i + 1) * n], v.shape)
  return out
