"""BERT's input embeddings: word + learned position + segment (token type), LayerNorm, dropout; with
factorised embeddings (ALBERT, `embedding_size` E < H) the tables are [*, E] and a dense E -> H follows.
On packed rows (config.packed) positions restart at each example (layers.example_positions), so every example
reads the position rows it would read alone."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import axes
from bert_jax.models.config import BertConfig
from bert_jax.models.layers import constrain, dense, example_positions, kernel_init, layer_norm


class BertEmbeddings(nn.Module):
  """input_ids, segment_ids [B, T] -> embeddings [B, T, H]; `word_embeddings.embedding` [V, E] is tied to MLM.

  E = config.embedding_width; when E != H, `projection` (kernel [E, H], ALBERT's embedding_hidden_mapping_in)
  maps the normalised [B, T, E] sum to H.
  """

  config: BertConfig
  deterministic: bool = True

  def setup(self):
    cfg = self.config
    embed = lambda n, names, name: nn.Embed(  # noqa: E731
        n, cfg.embedding_width, dtype=cfg.compute_dtype, param_dtype=cfg.parameter_dtype,
        embedding_init=kernel_init(cfg, names), name=name)
    self.word_embeddings = embed(cfg.vocab_size, (axes.VOCAB, axes.EMBED), "word_embeddings")
    self.position_embeddings = embed(cfg.max_position_embeddings, (None, axes.EMBED), "position_embeddings")
    self.token_type_embeddings = embed(cfg.type_vocab_size, (None, axes.EMBED), "token_type_embeddings")
    self.layer_norm = layer_norm(cfg, "LayerNorm")
    self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
    # E is small (128) and replicated; H keeps the `embed` axis like every other H-sized kernel side.
    self.projection = (dense(cfg, cfg.hidden_size, (None, axes.EMBED), "projection")
                       if cfg.factorised_embeddings else None)

  def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, project: bool = True,
               input_mask=None) -> jax.Array:
    """project=False: the [B, T, E] sum before the E -> H projection (ELECTRA's generator reads it, as
    google-research/electra's generator has its own E -> Hg projection). input_mask [B, T]: the example ids
    packed rows restart positions by (config.packed; unpacked rows number positions 0..T-1 as BERT)."""
    length = input_ids.shape[-1]
    if length > self.config.max_position_embeddings:
      raise ValueError(f"sequence length {length} exceeds max_position_embeddings="
                       f"{self.config.max_position_embeddings}")
    x = self.word_embeddings(input_ids)
    if self.config.packed and input_mask is not None:
      positions = example_positions(input_mask)
    else:
      positions = jnp.arange(length)[None, :]
    x = x + self.position_embeddings(positions)
    x = x + self.token_type_embeddings(segment_ids)
    x = self.layer_norm(x)
    x = self.dropout(x, deterministic=self.deterministic)
    if self.projection is not None and project:
      x = self.projection(x)
    return constrain(x, (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_EMBED))

  def embedding_table(self) -> jax.Array:
    """The word-embedding matrix [V, E] (float32 params; E = H unless factorised), for the tied decoders."""
    return self.word_embeddings.embedding
