"""Sentence-order prediction (ALBERT): are two consecutive segments of one document in order (label 0) or
swapped (label 1)? The data makes SOP pairs (data.pair_mode "sop") whatever data.pair_mode says.

Head: params["sop"], NSP's 2-way classifier on the pooled [CLS] vector. Logs sop_loss and sop_accuracy.
"""

from __future__ import annotations

from bert_jax.models.objectives.base import register
from bert_jax.models.objectives.nsp import SentencePairObjective


@register("sop")
class SentenceOrder(SentencePairObjective):
  title = "SOP"
  pair_mode = "sop"       # input_pipeline.instances' pair kind: consecutive segments, swapped half the time
  param_groups = ("sop",)
  conversion = {
      # Hugging Face AlbertForPreTraining's sop_classifier, Google ALBERT's cls/seq_relationship: [2, H] in both
      # (torch Linear's weight; Google's output_weights), our kernel [H, 2]
      "albert": (
          (("sop", "kernel"), "cls/seq_relationship/output_weights", "sop_classifier.classifier.weight",
           "nsp_kernel"),
          (("sop", "bias"), "cls/seq_relationship/output_bias", "sop_classifier.classifier.bias", "same")),
  }
