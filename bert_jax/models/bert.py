"""BertModel (embedding + encoder + pooler) and BertForPreTraining (BertModel + a list of targets)."""

from __future__ import annotations

from typing import Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import axes
from bert_jax.models.config import BertConfig
from bert_jax.models.embeddings import BertEmbeddings
from bert_jax.models.encoders import make_encoder
from bert_jax.models.layers import dense
from bert_jax.models.targets import (TARGETS, LanguageModelHead, gather_positions,
                                     sentence_pair_head)


class BertModel(nn.Module):
  """The encoder stack shared by pre-training and every task head.

  __call__(input_ids, input_mask, segment_ids [B, T]) -> {
      "sequence_output": [B, T, H], "pooled_output": [B, H] (dense + tanh on [CLS]),
      "word_embeddings": [V, H] (the embedding table, for tied decoders)}
  """

  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True,
               causal: bool = False, embeddings_only: bool = False):
    cfg = self.config
    if segment_ids is None:
      segment_ids = jnp.zeros_like(input_ids)
    embeddings = BertEmbeddings(cfg, deterministic=deterministic, name="embeddings")
    if embeddings_only:   # ELECTRA's generator reads the shared embeddings [B, T, E] and runs its own encoder
      return {"embedding_output": embeddings(input_ids, segment_ids, project=False),
              "word_embeddings": embeddings.embedding_table()}
    x = embeddings(input_ids, segment_ids)
    x = make_encoder(cfg, deterministic)(x, input_mask, causal=causal)
    first = x[:, 0]
    pooled = jnp.tanh(dense(cfg, cfg.hidden_size, (axes.EMBED, axes.MLP), "pooler", bias_axis=axes.MLP)(first))
    return {"sequence_output": x, "pooled_output": pooled, "word_embeddings": embeddings.embedding_table()}


def validate_targets(targets: Sequence[str]) -> tuple:
  targets = tuple(targets)
  unknown = [t for t in targets if t not in TARGETS]
  if unknown or not targets:
    raise ValueError(f"unknown pre-training targets {unknown or targets}; expected a non-empty subset of "
                     f"{TARGETS}")
  if "lm" in targets and len(targets) > 1:
    raise ValueError(f"targets={targets}: the causal 'lm' target needs a causal encoder mask and cannot be "
                     "combined with bidirectional targets (mlm/nsp/sop)")
  if "electra" in targets and len(targets) > 1:
    raise ValueError(f"targets={targets}: 'electra' (generator MLM + replaced-token detection) stands alone")
  if "nsp" in targets and "sop" in targets:
    raise ValueError("targets 'nsp' and 'sop' both read next_sentence_labels; pick one")
  return targets


class BertForPreTraining(nn.Module):
  """BertModel + pre-training targets chosen by name (UER-style: any encoder with any target).

  __call__(input_ids, input_mask, segment_ids [B, T], masked_lm_positions [B, P]) -> dict with
  "sequence_output", "pooled_output" and per target: "mlm_logits" [B, P, V] (only at the masked positions),
  "nsp_logits" / "sop_logits" [B, 2], "lm_logits" [B, T, V]; all logits float32.
  """

  config: BertConfig
  targets: Sequence[str] = ("mlm", "nsp")

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, masked_lm_positions=None,
               deterministic: bool = True):
    cfg = self.config
    targets = validate_targets(self.targets)
    enc = BertModel(cfg, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic,
                                      causal="lm" in targets)
    table = enc.pop("word_embeddings")
    out = dict(enc)
    if "mlm" in targets:
      if masked_lm_positions is None:
        raise ValueError("the 'mlm' target needs masked_lm_positions [batch, max_predictions_per_seq]")
      hidden = gather_positions(enc["sequence_output"], masked_lm_positions)
      out["mlm_logits"] = LanguageModelHead(cfg, name="mlm")(hidden, table)
    for t in ("nsp", "sop"):
      if t in targets:
        out[f"{t}_logits"] = sentence_pair_head(cfg, t)(enc["pooled_output"]).astype(jnp.float32)
    if "lm" in targets:
      out["lm_logits"] = LanguageModelHead(cfg, name="lm")(enc["sequence_output"], table)
    return out
