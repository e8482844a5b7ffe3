"""Causal language modelling: each token predicts the next one, under a causal encoder mask (UER's `lm`).

Head: params["lm"], BERT's LanguageModelHead over every position. Loss: the mean cross-entropy over the real
next tokens of the whole batch. Logs lm_loss and lm_accuracy. It stands alone: the encoder's causal mask would
hide the right context the bidirectional objectives read.
"""

from __future__ import annotations

import jax.numpy as jnp

from bert_jax.models.losses import masked_lm_sums
from bert_jax.models.objectives.base import Objective, register
from bert_jax.models.objectives.mlm import lm_head_flops
from bert_jax.models.targets import LanguageModelHead


def next_token_weights(input_mask):
  """[B, T] example ids -> float32 [B, T-1]: 1 where token t+1 is real and of token t's example (on a packed row
  the first token of an example is not predicted from the one before it; on unpacked rows: input_mask[:, 1:])."""
  ids = input_mask.astype(jnp.int32)
  return ((ids[:, 1:] > 0) & (ids[:, 1:] == ids[:, :-1])).astype(jnp.float32)


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
    return jnp.sum(next_token_weights(batch["input_mask"])) + 1e-5

  def sums(self, outputs, batch):
    # = losses.causal_lm_sums on unpacked rows; the weights keep a packed row's examples apart
    return masked_lm_sums(outputs["lm_logits"][:, :-1], batch["input_ids"][:, 1:],
                          next_token_weights(batch["input_mask"]), prefix="lm")

  def flops(self, config, seq_len, num_predictions):
    return lm_head_flops(config, seq_len)
