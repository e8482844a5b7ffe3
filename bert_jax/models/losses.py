"""Loss sums shared by the pre-training objectives (models/objectives/) and the tasks. Metrics leave as sums
plus denominators; `normalize_metrics` divides.

Sums make the metrics exact under data parallelism and gradient accumulation: add the sums of all
micro-batches / devices, divide once when writing.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-example softmax cross-entropy in float32. logits [..., C], labels [...] int -> [...]."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return -jnp.take_along_axis(logp, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]


def masked_lm_sums(logits, masked_lm_ids, masked_lm_weights, prefix: str = "mlm") -> dict:
  """logits [B, P, V], ids [B, P], weights [B, P] (0 on padded predictions) -> weighted sums."""
  w = masked_lm_weights.astype(jnp.float32)
  nll = cross_entropy(logits, masked_lm_ids)
  correct = (jnp.argmax(logits, axis=-1) == masked_lm_ids).astype(jnp.float32)
  return {f"{prefix}_loss_sum": jnp.sum(nll * w), f"{prefix}_correct_sum": jnp.sum(correct * w),
          f"{prefix}_weight_sum": jnp.sum(w)}


def sentence_pair_sums(logits, labels, prefix: str) -> dict:
  """NSP / SOP: logits [B, 2], labels [B] (or [B, 1] as in Google's TFRecords)."""
  labels = labels.reshape(labels.shape[0]).astype(jnp.int32)
  nll = cross_entropy(logits, labels)
  correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
  return {f"{prefix}_loss_sum": jnp.sum(nll), f"{prefix}_correct_sum": jnp.sum(correct),
          f"{prefix}_count": jnp.asarray(labels.shape[0], jnp.float32)}


def causal_lm_sums(logits, input_ids, input_mask) -> dict:
  """Next-token prediction: logits[:, t] predicts input_ids[:, t + 1] where that token is real."""
  return masked_lm_sums(logits[:, :-1], input_ids[:, 1:], input_mask[:, 1:], prefix="lm")


def normalize_metrics(sums: Mapping[str, float]) -> dict:
  """{x_loss_sum, x_correct_sum, x_weight_sum|x_count} -> {x_loss, x_accuracy}; `loss` = mean total loss.
  An objective's further metrics are its own (objectives.normalize_metrics adds them)."""
  out = {}
  for key in sums:
    if key.endswith("_loss_sum"):
      prefix = key[: -len("_loss_sum")]
      denom = sums.get(f"{prefix}_weight_sum", sums.get(f"{prefix}_count"))
      denom = max(float(denom), 1e-9)
      out[f"{prefix}_loss"] = float(sums[key]) / denom
      if f"{prefix}_correct_sum" in sums:
        out[f"{prefix}_accuracy"] = float(sums[f"{prefix}_correct_sum"]) / denom
  if "loss_sum" in sums:
    out["loss"] = float(sums["loss_sum"]) / max(float(sums.get("loss_count", 1.0)), 1e-9)
  return out
