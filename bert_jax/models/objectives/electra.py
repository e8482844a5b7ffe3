"""ELECTRA's replaced-token detection (Clark et al. 2020) as an objective: a model of its own.

The generator and discriminator modules are models/electra.py's; this module is what a run needs to know about
them: the settings (config.electra, ElectraSettings), the model it builds, its metrics and plot curves (the
generator's MLM and the discriminator's per-token task), its FLOPs (generator included: the equal-compute unit
of experiments/objectives.py) and what it reads (masked positions; no sentence pairs). It stands alone.
"""

from __future__ import annotations

from bert_jax.models.electra import ElectraForPreTraining, ElectraSettings, generator_config
from bert_jax.models.objectives.base import Objective, encoder_flops, register
from bert_jax.models.objectives.mlm import lm_head_flops


@register("electra")
class Electra(Objective):
  title = "ELECTRA"
  settings_type = ElectraSettings
  settings_ranges = {
      "generator_hidden_fraction": dict(lo=0, hi=1, lo_open=True),
      "generator_num_layers": dict(lo=1, allow=(-1,), integer=True),
      "generator_num_attention_heads": dict(lo=1, allow=(-1,), integer=True),
      "disc_weight": dict(lo=0, lo_open=True),
      "temperature": dict(lo=0, lo_open=True),
      "initial_temperature": dict(lo=0, lo_open=True),
      "temperature_anneal_steps": dict(lo=0, integer=True),
      "disc_bias_init": dict(lo=-50, hi=50),
      "disc_mlm_weight": dict(lo=0),
  }
  # the generator's width and depth shape its parameters; a discriminator MLM adds params["mlm"]
  state_settings = ("generator_hidden_fraction", "generator_num_layers", "disc_mlm_weight")
  masked_positions = True
  alone = "stands alone (generator MLM + replaced-token detection: a model of its own)"
  curves = (("gen_mlm_loss", "gen_mlm_accuracy", "ELECTRA generator MLM"),
            ("disc_loss", "disc_accuracy", "ELECTRA discriminator"))
  param_groups = ("generator", "discriminator_predictions")
  conversion = {
      # google-research/electra's and HF ElectraForPreTraining's discriminator head, and the generator's MLM head
      # (HF ElectraForMaskedLM's names, in the generator's own folder); the encoders are the family's names
      "electra": (
          (("discriminator_predictions", "dense", "kernel"), "discriminator_predictions/dense/kernel",
           "discriminator_predictions.dense.weight", "dense_kernel"),
          (("discriminator_predictions", "dense", "bias"), "discriminator_predictions/dense/bias",
           "discriminator_predictions.dense.bias", "same"),
          (("discriminator_predictions", "dense_prediction", "kernel"), "discriminator_predictions/dense_1/kernel",
           "discriminator_predictions.dense_prediction.weight", "dense_kernel"),
          (("discriminator_predictions", "dense_prediction", "bias"), "discriminator_predictions/dense_1/bias",
           "discriminator_predictions.dense_prediction.bias", "same"),
          (("generator", "generator_predictions", "dense", "kernel"), "generator_predictions/dense/kernel",
           "generator_predictions.dense.weight", "dense_kernel"),
          (("generator", "generator_predictions", "dense", "bias"), "generator_predictions/dense/bias",
           "generator_predictions.dense.bias", "same"),
          (("generator", "generator_predictions", "LayerNorm", "scale"), "generator_predictions/LayerNorm/gamma",
           "generator_predictions.LayerNorm.weight", "same"),
          (("generator", "generator_predictions", "LayerNorm", "bias"), "generator_predictions/LayerNorm/beta",
           "generator_predictions.LayerNorm.bias", "same"),
          (("generator", "output_bias"), "generator_predictions/output_bias", "generator_lm_head.bias", "same")),
  }

  def model(self, config):
    return ElectraForPreTraining(config, generator_config(config, self.settings), self.settings)

  @classmethod
  def derived_metrics(cls, sums):
    """The discriminator's replaced fraction, recall, precision and mean P(replaced) on each class."""
    if "disc_replaced_sum" not in sums:
      return {}
    pos, real = float(sums["disc_replaced_sum"]), float(sums["disc_weight_sum"])
    return {
        "disc_replaced_fraction": pos / max(real, 1e-9),
        "disc_recall": float(sums["disc_true_positive_sum"]) / max(pos, 1e-9),
        "disc_precision": float(sums["disc_true_positive_sum"]) / max(float(sums["disc_predicted_replaced_sum"]),
                                                                      1e-9),
        "disc_replaced_prob": float(sums["disc_replaced_prob_sum"]) / max(pos, 1e-9),
        "disc_original_prob": float(sums["disc_original_prob_sum"]) / max(real - pos, 1e-9)}

  def model_flops(self, config, seq_len, num_predictions):
    return electra_flops_per_sequence(config, generator_config(config, self.settings), seq_len, num_predictions,
                                      disc_mlm=self.settings.disc_mlm_weight > 0)

  def describe(self):
    e = self.settings
    temperature = f"{e.temperature:g}" if e.temperature_anneal_steps <= 0 else (
        f"{e.initial_temperature:g} -> {e.temperature:g} over {e.temperature_anneal_steps} steps")
    bias = f", disc bias {e.disc_bias_init:g} at init" if e.disc_bias_init else ""
    mlm = f", discriminator MLM x {e.disc_mlm_weight:g}" if e.disc_mlm_weight else ""
    return (f"{self.name} (generator H x {e.generator_hidden_fraction:g}, lambda {e.disc_weight:g}, "
            f"temperature {temperature}{bias}{mlm})")


def electra_flops_per_sequence(config, generator, seq_len: int, num_predictions: int,
                               disc_mlm: bool = False) -> float:
  """ELECTRA's training FLOPs per sequence, generator included. config: the discriminator; generator:
  electra.generator_config(config, settings); disc_mlm: the discriminator also has BERT's MLM head."""
  # The generator reads the shared E-wide embeddings (E = config.embedding_width) and projects them to its Hg.
  h, e, t, p, v = config.hidden_size, config.embedding_width, seq_len, num_predictions, config.vocab_size
  disc = encoder_flops(config, t) + 6.0 * t * (h * h + h)    # + the per-token discriminator head
  hg = generator.hidden_size
  gen = encoder_flops(generator, t) + 6.0 * p * (hg * e + e * v)   # its MLM head: Hg -> E, tied E x V decoder
  if hg != e:
    gen += 6.0 * t * e * hg
  if disc_mlm:
    disc += lm_head_flops(config, p)
  return disc + gen
