"""Fine-tuning heads on top of BertModel. Parameters: params["bert"] (the encoder) + the head's own."""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import axes
from bert_jax.models.bert import BertModel
from bert_jax.models.config import BertConfig
from bert_jax.models.layers import dense


class BertForSequenceClassification(nn.Module):
  """Pooled [CLS] -> dropout -> dense. logits [B, num_labels] float32; num_labels=1 means regression."""

  config: BertConfig
  num_labels: int
  dropout_rate: Optional[float] = None   # defaults to config.hidden_dropout_prob

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    pooled = nn.Dropout(rate)(enc["pooled_output"], deterministic=deterministic)
    logits = dense(self.config, self.num_labels, (axes.MLP, None), "classifier")(pooled)
    return {"logits": logits.astype(jnp.float32), "pooled_output": enc["pooled_output"]}


class BertForTokenClassification(nn.Module):
  """Per-token tagging (NER): sequence output -> dropout -> dense. logits [B, T, num_labels] float32."""

  config: BertConfig
  num_labels: int
  dropout_rate: Optional[float] = None

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    h = nn.Dropout(rate)(enc["sequence_output"], deterministic=deterministic)
    logits = dense(self.config, self.num_labels, (axes.EMBED, None), "classifier")(h)
    return {"logits": logits.astype(jnp.float32)}


class BertForQuestionAnswering(nn.Module):
  """Extractive QA (SQuAD): sequence output -> dense(2). start/end logits [B, T] float32."""

  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    logits = dense(self.config, 2, (axes.EMBED, None), "qa_outputs")(enc["sequence_output"])
    logits = logits.astype(jnp.float32)
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
