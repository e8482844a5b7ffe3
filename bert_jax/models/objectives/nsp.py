"""Next-sentence prediction (BERT): is segment B the text that follows segment A (label 0) or a random
sentence from another document (label 1)? Google's next_sentence_labels.

Head: params["nsp"] = a 2-way classifier {kernel [H, 2], bias [2]} on the pooled [CLS] vector. Loss: the mean
cross-entropy over the batch. Logs nsp_loss and nsp_accuracy.
"""

from __future__ import annotations

import jax.numpy as jnp

from bert_jax.models.losses import sentence_pair_sums
from bert_jax.models.objectives.base import Objective, register
from bert_jax.models.targets import sentence_pair_head


class SentencePairObjective(Objective):
  """A 2-way classifier over the pooled [CLS] vector, reading next_sentence_labels (NSP, SOP)."""
  pair_labels = True
  trains_pooler = True

  def heads(self, config, encoded, table, masked_lm_positions):
    return {f"{self.name}_logits": sentence_pair_head(config, self.name)(encoded["pooled_output"]).astype(
        jnp.float32)}

  def denominator(self, batch):
    return jnp.asarray(batch["next_sentence_labels"].shape[0], jnp.float32)   # the mean over the sequences

  def sums(self, outputs, batch):
    return sentence_pair_sums(outputs[f"{self.name}_logits"], batch["next_sentence_labels"], self.name)

  def flops(self, config, seq_len, num_predictions):
    h = config.hidden_size
    return 6.0 * (h * h + 2 * h)      # the pooler and the classifier, on [CLS] only


@register("nsp")
class NextSentence(SentencePairObjective):
  title = "NSP"
  param_groups = ("nsp",)
  conversion = {
      "bert": (
          (("nsp", "kernel"), "cls/seq_relationship/output_weights", "cls.seq_relationship.weight", "nsp_kernel"),
          (("nsp", "bias"), "cls/seq_relationship/output_bias", "cls.seq_relationship.bias", "same")),
  }
