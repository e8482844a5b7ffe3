"""The pre-training model of a run's objectives: BertForPreTraining (BertModel + each objective's heads) or a
model an objective builds itself (ELECTRA's generator + discriminator), by `pretraining_model`.

Both bring their loss as `loss_parts()` -> (denominators(batch), forward(params, batch, rng, denominators)),
engine.train_step's LossFn, so the step never asks which objectives it trains.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp

from bert_jax.models.bert import BertModel
from bert_jax.models.config import BertConfig
from bert_jax.models.objectives import base as objectives
from bert_jax.models.objectives.base import ObjectiveLike


class BertForPreTraining(nn.Module):
  """BertModel + pre-training objectives chosen by name or instance (UER-style: any encoder, any target).

  __call__(input_ids, input_mask, segment_ids [B, T], masked_lm_positions [B, P]) -> dict with
  "sequence_output", "pooled_output" and each objective's outputs (models/objectives/): "mlm_logits"
  [B, P, V] (only at the masked positions), "nsp_logits" / "sop_logits" [B, 2], "lm_logits" [B, T, V]; all
  logits float32. Each objective's parameters sit under its own top-level group (params["mlm"], ...).
  """

  config: BertConfig
  targets: Sequence[ObjectiveLike] = ("mlm", "nsp")

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, masked_lm_positions=None,
               deterministic: bool = True):
    cfg = self.config
    resolved = objectives.resolve(self.targets)
    enc = BertModel(cfg, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic,
                                      causal=any(o.causal for o in resolved))
    table = enc.pop("word_embeddings")
    out = dict(enc)
    for o in resolved:
      if o.masked_positions and masked_lm_positions is None:
        raise ValueError(f"the {o.name!r} target needs masked_lm_positions [batch, max_predictions_per_seq]")
      out.update(o.heads(cfg, enc, table, masked_lm_positions))
    return out

  def loss_parts(self):
    """(denominators, forward) of train_step.LossFn: the sum over the objectives of each one's loss sum over
    its global denominator (Google BERT: the weighted-mean MLM loss + the mean NSP loss)."""
    resolved = objectives.resolve(self.targets)
    reads_positions = any(o.masked_positions for o in resolved)

    def denominators(batch):
      return {o.name: o.denominator(batch) for o in resolved}

    def forward(params, batch, rng, denoms):
      deterministic = rng is None
      out = self.apply({"params": params}, batch["input_ids"], batch["input_mask"], batch.get("segment_ids"),
                       batch.get("masked_lm_positions") if reads_positions else None,
                       deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})
      sums = pretraining_sums(resolved, out, batch)
      return objectives.sum_loss(resolved, sums, denoms), sums

    return denominators, forward


def pretraining_sums(targets: Sequence[ObjectiveLike], outputs, batch) -> dict:
  """Every objective's metric sums of one (micro-)batch, from BertForPreTraining's outputs."""
  sums = {}
  for o in objectives.resolve(targets):
    sums.update(o.sums(outputs, batch))
  return sums


def pretraining_loss(outputs, batch, targets: Sequence[ObjectiveLike]):
  """(loss, metric sums + loss_sum / loss_count) of one batch on its own (each objective normalised by this
  batch's denominator): the sum of the targets' losses, as in Google BERT."""
  resolved = objectives.resolve(targets)
  sums = pretraining_sums(resolved, outputs, batch)
  loss = objectives.sum_loss(resolved, sums, {o.name: o.denominator(batch) for o in resolved})
  return loss, dict(sums, loss_sum=loss, loss_count=jnp.ones((), jnp.float32))


def pretraining_model(config: BertConfig, targets: Sequence[ObjectiveLike]) -> nn.Module:
  """The pre-training model of `targets` (names or resolved objectives): the model an objective builds itself
  (ELECTRA), else BertForPreTraining with each objective's heads."""
  resolved = objectives.resolve(targets)
  for o in resolved:
    own = o.model(config)
    if own is not None:
      return own
  return BertForPreTraining(config, targets=resolved)


def is_pretraining_model(model: nn.Module) -> bool:
  """A pre-training model (it brings its loss and reads masked_lm_positions), not a fine-tuning head."""
  return callable(getattr(model, "loss_parts", None))
