"""BertModel: embedding + encoder + pooler (the pre-training heads are models/objectives/, the model that
carries them models/pretraining.py)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from bert_jax.models import axes
from bert_jax.models.config import BertConfig
from bert_jax.models.embeddings import BertEmbeddings
from bert_jax.models.encoders import family, make_encoder
from bert_jax.models.layers import dense, example_starts


class BertModel(nn.Module):
  """The encoder stack shared by pre-training and every task head.

  __call__(input_ids, input_mask, segment_ids [B, T]) -> {
      "sequence_output": [B, T, H], "pooled_output": [B, H] (dense + tanh on [CLS]),
      "word_embeddings": [V, H] (the embedding table, for tied decoders)}
  Packed rows (config.max_examples_per_row = K > 0; input_mask numbers the examples): pooled_output is
  [B, K, H], read at each example's own [CLS], and "example_valid" [B, K] says which slots hold an example.

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
    # packed rows restart BERT's positions per example (a family that packs with its own embeddings takes it too)
    packed = {"input_mask": input_mask} if cfg.packed else {}
    if embeddings_only:   # ELECTRA's generator reads the shared embeddings [B, T, E] and runs its own encoder
      return {"embedding_output": embeddings(input_ids, segment_ids, project=False, **packed),
              "word_embeddings": embeddings.embedding_table()}
    x = embeddings(input_ids, segment_ids, **packed)
    x = make_encoder(cfg, deterministic)(x, input_mask, causal=causal)
    pooled = fam.pool(cfg, x, input_mask, deterministic)
    if pooled is not None:   # the family's own pooling (a family that pools so does not pack: EncoderFamily.packs)
      return {"sequence_output": x, **pooled, "word_embeddings": embeddings.embedding_table()}
    out = {"sequence_output": x, "word_embeddings": embeddings.embedding_table()}
    if cfg.packed:
      starts, out["example_valid"] = example_starts(input_mask, cfg.max_examples_per_row)
      first = jnp.take_along_axis(x, starts[..., None], axis=1)                      # [B, K, H]
    else:
      first = x[:, 0]
    out["pooled_output"] = jnp.tanh(dense(cfg, cfg.hidden_size, (axes.EMBED, axes.MLP), "pooler",
                                          bias_axis=axes.MLP)(first))
    return out
