"""Masked language modelling (BERT): predict the original token at each masked position.

Head: params["mlm"] = BERT's LanguageModelHead (transform dense + LayerNorm, the decoder tied to the word
embeddings, output_bias [V]) on the P = max_predictions_per_seq gathered positions only. Loss: the weighted
mean cross-entropy over the predicted tokens of the whole batch (sum / (sum of masked_lm_weights + 1e-5), as
Google's run_pretraining.py). Logs mlm_loss and mlm_accuracy.
"""

from __future__ import annotations

import jax.numpy as jnp

from bert_jax.models.losses import masked_lm_sums
from bert_jax.models.objectives.base import Objective, register
from bert_jax.models.targets import LanguageModelHead, gather_positions


def lm_head_flops(config, positions: int) -> float:
  """Training FLOPs of the tied LM head on `positions` tokens: 6 x positions x (H x E + E x V) (E = H without
  factorised embeddings)."""
  h, e, v = config.hidden_size, config.embedding_width, config.vocab_size
  return 6.0 * positions * (h * e + e * v)


@register("mlm")
class MaskedLM(Objective):
  title = "MLM"
  masked_positions = True
  row_weighted = True
  curves = (("mlm_loss", "mlm_accuracy", "MLM"),)
  param_groups = ("mlm",)
  conversion = {
      "bert": (
          (("mlm", "transform", "kernel"), "cls/predictions/transform/dense/kernel",
           "cls.predictions.transform.dense.weight", "dense_kernel"),
          (("mlm", "transform", "bias"), "cls/predictions/transform/dense/bias",
           "cls.predictions.transform.dense.bias", "same"),
          (("mlm", "LayerNorm", "scale"), "cls/predictions/transform/LayerNorm/gamma",
           "cls.predictions.transform.LayerNorm.weight", "same"),
          (("mlm", "LayerNorm", "bias"), "cls/predictions/transform/LayerNorm/beta",
           "cls.predictions.transform.LayerNorm.bias", "same"),
          (("mlm", "output_bias"), "cls/predictions/output_bias", "cls.predictions.bias", "same")),
      # Hugging Face AlbertForPreTraining's names (its MLM head is `predictions`, outside `albert.`)
      "albert": (
          (("mlm", "transform", "kernel"), "cls/predictions/transform/dense/kernel", "predictions.dense.weight",
           "dense_kernel"),
          (("mlm", "transform", "bias"), "cls/predictions/transform/dense/bias", "predictions.dense.bias", "same"),
          (("mlm", "LayerNorm", "scale"), "cls/predictions/transform/LayerNorm/gamma",
           "predictions.LayerNorm.weight", "same"),
          (("mlm", "LayerNorm", "bias"), "cls/predictions/transform/LayerNorm/beta", "predictions.LayerNorm.bias",
           "same"),
          (("mlm", "output_bias"), "cls/predictions/output_bias", "predictions.bias", "same")),
  }

  def heads(self, config, encoded, table, masked_lm_positions):
    hidden = gather_positions(encoded["sequence_output"], masked_lm_positions)
    return {"mlm_logits": LanguageModelHead(config, name="mlm")(hidden, table)}

  def denominator(self, batch):
    return jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5

  def sums(self, outputs, batch):
    return masked_lm_sums(outputs["mlm_logits"], batch["masked_lm_ids"], batch["masked_lm_weights"], prefix="mlm")

  def flops(self, config, seq_len, num_predictions):
    return lm_head_flops(config, num_predictions)
