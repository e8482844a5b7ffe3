"""BertModel: embedding + encoder + pooler (the pre-training heads are models/objectives/, the model that
carries them models/pretraining.py)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from bert_jax.models import axes
from bert_jax.models.config import BertConfig
from bert_jax.models.embeddings import BertEmbeddings
from bert_jax.models.encoders import family, make_encoder
from bert_jax.models.layers import dense


class BertModel(nn.Module):
  """The encoder stack shared by pre-training and every task head.

  __call__(input_ids, input_mask, segment_ids [B, T]) -> {
      "sequence_output": [B, T, H], "pooled_output": [B, H] (dense + tanh on [CLS]),
      "word_embeddings": [V, H] (the embedding table, for tied decoders)}

  The encoder family (config.encoder) may bring its own embeddings and pooling (EncoderFamily.embeddings /
  pool: ModernBERT's have no position table and pool through its prediction head); BERT's otherwise.
  """

  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True,
               causal: bool = False, embeddings_only: bool = False):
    cfg = self.config
    if segment_ids is None:
      segment_ids = jnp.zeros_like(input_ids)
    fam = family(cfg.encoder)
    embeddings = (fam.embeddings or BertEmbeddings)(cfg, deterministic=deterministic, name="embeddings")
    if embeddings_only:   # ELECTRA's generator reads the shared embeddings [B, T, E] and runs its own encoder
      return {"embedding_output": embeddings(input_ids, segment_ids, project=False),
              "word_embeddings": embeddings.embedding_table()}
    x = embeddings(input_ids, segment_ids)
    x = make_encoder(cfg, deterministic)(x, input_mask, causal=causal)
    pooled = fam.pool(cfg, x, input_mask, deterministic)
    if pooled is not None:
      return {"sequence_output": x, **pooled, "word_embeddings": embeddings.embedding_table()}
    first = x[:, 0]
    pooled = jnp.tanh(dense(cfg, cfg.hidden_size, (axes.EMBED, axes.MLP), "pooler", bias_axis=axes.MLP)(first))
    return {"sequence_output": x, "pooled_output": pooled, "word_embeddings": embeddings.embedding_table()}
