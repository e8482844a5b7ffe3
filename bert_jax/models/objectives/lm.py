"""Causal language modelling: each token predicts the next one, under a causal encoder mask (UER's `lm`).

Head: params["lm"], BERT's LanguageModelHead over every position. Loss: the mean cross-entropy over the real
next tokens of the whole batch. Logs lm_loss and lm_accuracy. It stands alone: the encoder's causal mask would
hide the right context the bidirectional objectives read.
"""

from __future__ import annotations

import jax.numpy as jnp

from bert_jax.models.losses import causal_lm_sums
from bert_jax.models.objectives.base import Objective, register
from bert_jax.models.objectives.mlm import lm_head_flops
from bert_jax.models.targets import LanguageModelHead


@register("lm")
class CausalLM(Objective):
  title = "LM"
  causal = True
  alone = ("stands alone: it needs a causal encoder mask and cannot be combined with bidirectional targets "
           "(e.g. MLM, NSP, SOP)")
  curves = (("lm_loss", "lm_accuracy", "LM"),)
  param_groups = ("lm",)

  def heads(self, config, encoded, table, masked_lm_positions):
    return {"lm_logits": LanguageModelHead(config, name="lm")(encoded["sequence_output"], table)}

  def denominator(self, batch):
    return jnp.sum(batch["input_mask"][:, 1:].astype(jnp.float32)) + 1e-5

  def sums(self, outputs, batch):
    return causal_lm_sums(outputs["lm_logits"], batch["input_ids"], batch["input_mask"])

  def flops(self, config, seq_len, num_predictions):
    return lm_head_flops(config, seq_len)
