"""ELECTRA (Clark et al. 2020): replaced-token detection, the modules of one pre-training objective (its plug-in,
settings, metrics and FLOPs: models/objectives/electra.py).

A small generator (an MLM on its own narrower encoder, reading the discriminator's embeddings) fills the
masked positions with tokens sampled from its softmax (Gumbel-max, no gradient through the sample); the
discriminator (the BertModel under params["bert"], the one fine-tuning, `predict features` and export use)
labels every real token as original (0) or replaced (1). Loss = generator MLM + disc_weight x discriminator
(the paper's lambda = 50).

Parameters:
  bert/{embeddings, encoder, pooler}     the discriminator (its pooler is unused in pre-training: kept so every
                                         fine-tuning head finds the BertModel layout; HF ELECTRA has none)
  generator/embeddings_project           [E, Hg], only when the embedding width E differs from Hg
  generator/encoder/...                  the generator's Transformer (hidden Hg, heads Hg/64, FFN 4Hg)
  generator/generator_predictions/{dense [Hg, E], LayerNorm [E]}, generator/output_bias [V]
                                         HF's ElectraGeneratorPredictions; the decoder is the shared word table
  discriminator_predictions/{dense [H, H], dense_prediction [H, 1]}   HF's ElectraDiscriminatorPredictions
  mlm/...                                only with disc_mlm_weight > 0: BERT's MLM head on the discriminator
                                         (BertForPreTraining's layout, so the checkpoint also reads as a BERT MLM)

Metrics (sums + denominators, models.objectives.normalize_metrics divides): gen_mlm_{loss,correct,weight}_sum
(the generator's MLM accuracy over the masked tokens), disc_{loss,correct,weight}_sum over all real tokens,
disc_replaced_sum (replaced tokens), disc_true_positive_sum, disc_predicted_replaced_sum (recall/precision)
and disc_{replaced,original}_prob_sum (mean P(replaced) on each class: their gap is an AUC-like separation);
with disc_mlm_weight > 0 also disc_mlm_{loss,correct,weight}_sum (the discriminator's MLM on the masked tokens).
"""

from __future__ import annotations

import dataclasses
import logging

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.errors import UserError
from bert_jax.logs import log_once
from bert_jax.models import axes
from bert_jax.models.bert import BertModel
from bert_jax.models.config import BertConfig
from bert_jax.models.encoders import make_encoder
from bert_jax.models.layers import activation, constrain, dense, layer_norm, zeros_init
from bert_jax.models.losses import masked_lm_sums
from bert_jax.models.targets import LanguageModelHead, gather_positions

log = logging.getLogger(__name__)

_SAMPLE_SALT = 0x5A3F   # folds the step's dropout key into an independent key for the generator's samples


@dataclasses.dataclass(frozen=True)
class ElectraSettings:
  """config.electra, resolved. The generator's width is a fraction of the discriminator's (paper: 1/4 - 1/2;
  google/electra-base-generator is 256 / 768 = 1/3, -large 256 / 1024 = 1/4)."""
  generator_hidden_fraction: float = 0.25
  generator_num_layers: int = -1           # -1: as many layers as the discriminator (the paper's choice)
  # -1: Hg / 64 (google-research/electra's fixed head size; see generator_heads); an imported checkpoint whose
  # generator has other heads names its count (convert_info.json's electra.generator_num_attention_heads)
  generator_num_attention_heads: int = -1
  disc_weight: float = 50.0                # lambda of loss = MLM_gen + lambda x BCE_disc
  temperature: float = 1.0                 # sampling temperature of the generator's softmax
  # Annealing: the temperature falls log-linearly from initial_temperature at step 0 to `temperature` at step
  # temperature_anneal_steps (0: constant). A hot start samples near-uniform replacements, which the
  # discriminator can tell from context early, before the generator's samples become plausible.
  initial_temperature: float = 1.0
  temperature_anneal_steps: int = 0
  disc_bias_init: float = 0.0              # the discriminator's output bias at init (HF: 0)
  # A many-way signal beside the binary one: at the masked positions the discriminator also predicts the
  # original token from the corrupted input (COCO-LM's corrective LM, on the masked positions), with BERT's
  # MLM head under params["mlm"]; loss += disc_mlm_weight x its mean cross-entropy. 0: off (the paper's ELECTRA).
  disc_mlm_weight: float = 0.0


def annealed_temperature(settings: ElectraSettings, step):
  """The sampling temperature at (0-based) `step`, a scalar or traced int (None: the final temperature)."""
  final = float(settings.temperature)
  steps = int(settings.temperature_anneal_steps)
  if step is None or steps <= 0:
    return final
  frac = jnp.clip(jnp.asarray(step, jnp.float32) / steps, 0.0, 1.0)
  start = float(settings.initial_temperature)
  return jnp.exp((1.0 - frac) * jnp.log(start) + frac * jnp.log(final))


def generator_heads(hidden: int) -> int:
  """The default head count of a generator of width `hidden`: hidden / 64 (google-research/electra's
  get_generator_config: max(1, hidden // 64)), lowered until it divides `hidden` (where that code's would not
  divide it, it could not build the generator)."""
  heads = max(1, hidden // 64)
  while hidden % heads:
    heads -= 1
  return heads


def generator_config(disc: BertConfig, settings: ElectraSettings) -> BertConfig:
  """The generator's architecture: hidden Hg = round(fraction x H), heads Hg/64 (at least 1, dividing Hg),
  FFN 4Hg, the discriminator's vocab, positions, activation and runtime fields.

  When fraction x H is not a whole number, the rounded Hg is used and a warning (once) names
  electra.generator_hidden_fraction, model.hidden_size and Hg; so is a head size other than 64 forced by an Hg
  that 64 does not divide (Hg >= 64). A generator deeper than the discriminator
  (electra.generator_num_layers > model.num_hidden_layers) is a UserError."""
  fraction = float(settings.generator_hidden_fraction)
  if not 0.0 < fraction <= 1.0:
    raise UserError(f"config.electra.generator_hidden_fraction={fraction:g}; expected > 0 and <= 1")
  exact = disc.hidden_size * fraction
  hidden = max(1, int(round(exact)))
  if abs(exact - hidden) > 1e-5 * disc.hidden_size:   # 1e-5: a fraction written as %.6g (1/3 = 0.333333) is exact
    log_once(log, f"ELECTRA generator width: config.electra.generator_hidden_fraction={fraction:g} x "
               f"model.hidden_size={disc.hidden_size} = {exact:g} is not a whole number; the generator uses "
               f"hidden size {hidden} (fraction {hidden / disc.hidden_size:.6g})", logging.WARNING)
  requested_heads = int(settings.generator_num_attention_heads)
  if requested_heads > 0:
    if hidden % requested_heads:
      raise UserError(f"config.electra.generator_num_attention_heads={requested_heads} does not divide the "
                      f"generator's hidden size {hidden} (config.electra.generator_hidden_fraction={fraction:g} x "
                      f"model.hidden_size={disc.hidden_size}); expected a divisor of {hidden}, or -1")
    heads = requested_heads
  else:
    heads = generator_heads(hidden)
  if requested_heads <= 0 and hidden >= 64 and hidden % 64:
    log_once(log, f"ELECTRA generator heads: hidden size {hidden} (config.electra.generator_hidden_fraction="
               f"{fraction:g} x model.hidden_size={disc.hidden_size}) is not a multiple of 64; the generator uses "
               f"{heads} heads of size {hidden // heads}", logging.WARNING)
  requested = int(settings.generator_num_layers)
  if requested > disc.num_hidden_layers:
    raise UserError(f"config.electra.generator_num_layers={requested} exceeds the discriminator's "
                    f"model.num_hidden_layers={disc.num_hidden_layers}; expected 1 .. {disc.num_hidden_layers} "
                    "or -1 (as deep as the discriminator)")
  layers = disc.num_hidden_layers if requested <= 0 else requested
  # embedding_size 0: the generator has no tables of its own; it projects the shared E-wide embeddings itself.
  return disc.replace(hidden_size=hidden, num_attention_heads=heads, intermediate_size=4 * hidden,
                      num_hidden_layers=layers, embedding_size=0, share_layers=False)


class GeneratorHead(nn.Module):
  """HF ElectraGeneratorPredictions + the tied decoder: hidden [B, P, Hg], table [V, E] -> logits [B, P, V]
  float32 (dense Hg -> E, activation, LayerNorm, x table^T + output_bias)."""

  config: BertConfig

  @nn.compact
  def __call__(self, hidden: jax.Array, table: jax.Array) -> jax.Array:
    cfg = self.config
    width = table.shape[-1]
    h = dense(cfg, width, (axes.MLP, axes.EMBED), "dense", bias_axis=axes.EMBED)(hidden)
    h = activation(cfg.hidden_act)(h)
    h = layer_norm(cfg, "LayerNorm")(h)
    h = constrain(h, (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_EMBED))   # see targets.LanguageModelHead
    logits = jnp.einsum("bph,vh->bpv", h.astype(cfg.compute_dtype), table.astype(cfg.compute_dtype),
                        preferred_element_type=jnp.float32)
    return logits


class ElectraGenerator(nn.Module):
  """embedding_output [B, T, E] (the shared embeddings of the masked input, before the discriminator's E -> H
  projection when it has one), input_mask [B, T],
  masked_lm_positions [B, P], table [V, E] -> MLM logits [B, P, V] float32."""

  config: BertConfig       # the generator's architecture (generator_config)

  @nn.compact
  def __call__(self, embedding_output, input_mask, masked_lm_positions, table, deterministic: bool = True):
    cfg = self.config
    x = embedding_output
    if x.shape[-1] != cfg.hidden_size:
      x = dense(cfg, cfg.hidden_size, (axes.EMBED, axes.MLP), "embeddings_project", bias_axis=axes.MLP)(x)
    x = make_encoder(cfg, deterministic)(x, input_mask)
    hidden = gather_positions(x, masked_lm_positions)
    logits = GeneratorHead(cfg, name="generator_predictions")(hidden, table)
    bias = self.param("output_bias", zeros_init((axes.VOCAB,)), (cfg.vocab_size,), cfg.parameter_dtype)
    return logits + bias.astype(jnp.float32)


class DiscriminatorHead(nn.Module):
  """HF ElectraDiscriminatorPredictions: sequence_output [B, T, H] -> logits [B, T] float32
  (dense H -> H, activation, dense H -> 1; that last bias starts at bias_init)."""

  config: BertConfig
  bias_init: float = 0.0

  @nn.compact
  def __call__(self, sequence_output):
    cfg = self.config
    h = dense(cfg, cfg.hidden_size, (axes.EMBED, axes.MLP), "dense", bias_axis=axes.MLP)(sequence_output)
    h = activation(cfg.hidden_act)(h)
    out = dense(cfg, 1, (axes.MLP, None), "dense_prediction", bias_value=self.bias_init)
    return out(h)[..., 0].astype(jnp.float32)


class ElectraDiscriminator(nn.Module):
  """The discriminator alone (HF ElectraForPreTraining; params bert + discriminator_predictions, the names
  ElectraForPreTraining uses): input_ids, input_mask, segment_ids [B, T] -> {"sequence_output" [B, T, H],
  "pooled_output" [B, H], "disc_logits" [B, T] float32 (> 0: replaced)}."""

  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    logits = DiscriminatorHead(self.config, name="discriminator_predictions")(enc["sequence_output"])
    return {"sequence_output": enc["sequence_output"], "pooled_output": enc["pooled_output"], "disc_logits": logits}


def scatter_at(ids, positions, values, weights):
  """ids [B, T] with values [B, P] written at positions [B, P] where weights > 0 (padded predictions, weight 0,
  change nothing even when they repeat a real position): a scatter-add of differences, exact for int ids."""
  ids = jnp.asarray(ids)
  current = jnp.take_along_axis(ids, positions, axis=1)
  delta = jnp.where(weights > 0, values.astype(ids.dtype) - current, 0)
  rows = jnp.arange(ids.shape[0])[:, None]
  return ids.at[rows, positions].add(delta)


def gumbel_sample(key, logits, temperature: float):
  """One token id per row of logits [..., V] from softmax(logits / temperature) (Gumbel-max); no gradient."""
  logits = jax.lax.stop_gradient(logits.astype(jnp.float32)) / temperature
  u = jax.random.uniform(key, logits.shape, jnp.float32, minval=1e-9, maxval=1.0)
  return jnp.argmax(logits - jnp.log(-jnp.log(u)), axis=-1).astype(jnp.int32)


class ElectraForPreTraining(nn.Module):
  """Generator + discriminator (module docstring).

  __call__(input_ids (masked) [B, T], input_mask, segment_ids [B, T], masked_lm_positions [B, P],
  masked_lm_ids [B, P] (the original tokens), masked_lm_weights [B, P]) -> {
      "generator_logits" [B, P, V], "disc_logits" [B, T], "disc_labels" [B, T] int32 (1 = replaced),
      "replaced_ids" [B, T], "sequence_output" [B, T, H], "pooled_output" [B, H],
      "mlm_logits" [B, P, V] (the discriminator's MLM; only with disc_mlm_weight > 0)}.
  Samples with the "sample" rng stream at the temperature of `step` (annealed_temperature; None: the final
  one); without the stream (init, or a caller that wants no noise) it takes the generator's argmax.
  masked_lm_ids / weights default to "unchanged" / 1 (shape-only init).
  """

  config: BertConfig                     # the discriminator
  generator: BertConfig                  # generator_config(config, settings)
  settings: ElectraSettings = ElectraSettings()   # lambda, temperature schedule, bias init, discriminator MLM

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, masked_lm_positions=None, masked_lm_ids=None,
               masked_lm_weights=None, deterministic: bool = True, step=None):
    if masked_lm_positions is None:
      raise ValueError("ELECTRA needs masked_lm_positions [batch, max_predictions_per_seq]")
    positions = masked_lm_positions.astype(jnp.int32)
    weights = jnp.ones(positions.shape, jnp.float32) if masked_lm_weights is None else masked_lm_weights
    if masked_lm_ids is None:
      masked_lm_ids = jnp.take_along_axis(input_ids, positions, axis=1)
    bert = BertModel(self.config, name="bert")
    emb = bert(input_ids, input_mask, segment_ids, deterministic=deterministic, embeddings_only=True)
    gen_logits = ElectraGenerator(self.generator, name="generator")(
        emb["embedding_output"], input_mask, positions, emb["word_embeddings"], deterministic=deterministic)
    if self.has_rng("sample"):
      sampled = gumbel_sample(self.make_rng("sample"), gen_logits, annealed_temperature(self.settings, step))
    else:
      sampled = jnp.argmax(jax.lax.stop_gradient(gen_logits), axis=-1).astype(jnp.int32)
    original = scatter_at(input_ids, positions, masked_lm_ids, weights)
    replaced = jax.lax.stop_gradient(scatter_at(original, positions, sampled, weights))
    labels = ((replaced != original) & (input_mask > 0)).astype(jnp.int32)
    enc = bert(replaced, input_mask, segment_ids, deterministic=deterministic)
    disc_logits = DiscriminatorHead(self.config, self.settings.disc_bias_init,
                                    name="discriminator_predictions")(enc["sequence_output"])
    out = {"generator_logits": gen_logits, "disc_logits": disc_logits, "disc_labels": labels,
           "replaced_ids": replaced, "sequence_output": enc["sequence_output"],
           "pooled_output": enc["pooled_output"]}
    if self.settings.disc_mlm_weight > 0:
      hidden = gather_positions(enc["sequence_output"], positions)
      out["mlm_logits"] = LanguageModelHead(self.config, name="mlm")(hidden, emb["word_embeddings"])
    return out

  # ---- the objective's own loss (train_step.pretraining_loss takes it from here) -----------------------
  def loss_parts(self):
    """(denominators(batch), forward(params, batch, rng, denominators)) of train_step.LossFn: generator MLM
    over the masked tokens of the whole batch + disc_weight x the discriminator's mean binary cross-entropy
    over all real tokens of the whole batch (global denominators: gradient accumulation stays exact).
    The train step puts the 0-based step into the denominators ("step"): it sets the annealed temperature."""
    disc_weight = float(self.settings.disc_weight)
    disc_mlm_weight = float(self.settings.disc_mlm_weight)

    def denominators(batch):
      return {"gen_mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5,
              "disc": jnp.sum((batch["input_mask"] > 0).astype(jnp.float32)) + 1e-5}

    def forward(params, batch, rng, denoms):
      deterministic = rng is None
      # Evaluation draws its samples from a fixed key, so two evaluations of the same params agree.
      rngs = ({"sample": jax.random.key(0)} if deterministic else
              {"dropout": rng, "sample": jax.random.fold_in(rng, _SAMPLE_SALT)})
      out = self.apply({"params": params}, batch["input_ids"], batch["input_mask"], batch.get("segment_ids"),
                       batch["masked_lm_positions"], batch["masked_lm_ids"], batch["masked_lm_weights"],
                       deterministic=deterministic, step=None if deterministic else denoms.get("step"),
                       rngs=rngs)
      sums = electra_sums(out, batch)
      loss = sums["gen_mlm_loss_sum"] / denoms["gen_mlm"] + disc_weight * sums["disc_loss_sum"] / denoms["disc"]
      if "disc_mlm_loss_sum" in sums:
        loss = loss + disc_mlm_weight * sums["disc_mlm_loss_sum"] / denoms["gen_mlm"]
      return loss, sums

    return denominators, forward


def electra_sums(outputs, batch) -> dict:
  """Metric sums of one (micro-)batch: the generator's MLM and the discriminator's per-token binary task."""
  sums = masked_lm_sums(outputs["generator_logits"], batch["masked_lm_ids"], batch["masked_lm_weights"],
                        prefix="gen_mlm")
  w = (batch["input_mask"] > 0).astype(jnp.float32)   # > 0: a packed row numbers its examples 1, 2, ...
  logits = outputs["disc_logits"]
  y = outputs["disc_labels"].astype(jnp.float32)
  # Binary cross-entropy from logits, stable for large |logits|: softplus(l) - y l.
  nll = jnp.maximum(logits, 0.0) - logits * y + jnp.log1p(jnp.exp(-jnp.abs(logits)))
  pred = (logits > 0).astype(jnp.float32)
  prob = jax.nn.sigmoid(logits)
  sums.update(
      disc_loss_sum=jnp.sum(nll * w), disc_correct_sum=jnp.sum((pred == y) * w), disc_weight_sum=jnp.sum(w),
      disc_replaced_sum=jnp.sum(y * w), disc_true_positive_sum=jnp.sum(pred * y * w),
      disc_predicted_replaced_sum=jnp.sum(pred * w), disc_replaced_prob_sum=jnp.sum(prob * y * w),
      disc_original_prob_sum=jnp.sum(prob * (1.0 - y) * w))
  if "mlm_logits" in outputs:   # settings.disc_mlm_weight > 0: the discriminator's own MLM
    sums.update(masked_lm_sums(outputs["mlm_logits"], batch["masked_lm_ids"], batch["masked_lm_weights"],
                               prefix="disc_mlm"))
  return sums

