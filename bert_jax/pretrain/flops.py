"""Model FLOPs and MFU for BERT pre-training (no TensorFlow).

Model FLOPs per sequence (forward + backward = 3 x forward, 2 FLOPs per multiply-add):
  6 x encoder params x T                           all dense layers of the encoder stack
  + 12 x L x T^2 x H                               attention scores QK^T and probs x V (fwd 4 T^2 H per layer)
  + 6 x P x (H^2 + H x V)                          MLM head (transform + tied decoder) on the P predicted
                                                   positions only (P = max_predictions_per_seq); with
                                                   factorised embeddings (ALBERT, E = embedding_size)
                                                   6 x P x (H x E + E x V), plus 6 x T x E x H for the
                                                   E -> H projection. Shared layers (share_layers) cost
                                                   the same FLOPs as separate ones: each is applied.
  + 6 x (H^2 + 2H)                                 pooler + NSP/SOP classifier on [CLS]
Embedding lookups, LayerNorm, softmax and GELU are not counted (the usual MFU convention).

API:
  encoder_params(cfg) -> int
  flops_per_sequence(cfg, seq_len, num_predictions, targets=("mlm", "nsp")) -> float
  electra_flops_per_sequence(cfg, generator, seq_len, num_predictions) -> float   discriminator (encoder +
                                                   per-token head 6 T (H^2 + H)) + generator (its encoder,
                                                   the E -> Hg projection, its MLM head on P positions)
  peak_flops_per_device(device=None, dtype="bfloat16", override=0.0) -> float (FLOP/s, from PEAK_FLOPS)
  training_flops_per_sequence(cfg, seq_len, num_predictions, targets, electra=None) -> float   ELECTRA's
                                                   (generator included) for its targets, else the above
  mfu(seq_per_sec, cfg, seq_len, num_predictions, num_devices, peak, targets, electra=None) -> float
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax

from bert_jax.models import BertConfig

# Dense peak FLOP/s per device (per chip), from vendor data sheets; keys are lower-case substrings of
# jax's device_kind. CPU: about 170 GFLOP/s, the fp32 matmul peak measured on the 2-core CI machine
# (2 threads); CPUs have no data sheet figure, so an MFU on a CPU is relative to that machine.
PEAK_FLOPS = {
    "bfloat16": {
        "tpu v4": 275e12, "tpu v5 lite": 197e12, "tpu v5e": 197e12, "tpu v5p": 459e12, "tpu v5": 459e12,
        "tpu v6 lite": 918e12, "tpu v6e": 918e12, "tpu v3": 123e12, "tpu v2": 45e12,
        "h200": 989e12, "h100": 989e12, "a100": 312e12, "l4": 121e12, "a10": 125e12, "v100": 125e12,
        "cpu": 170e9,
    },
    "float32": {
        "h200": 67e12, "h100": 67e12, "a100": 19.5e12, "v100": 15.7e12, "cpu": 170e9,
        "tpu v4": 275e12 / 2, "tpu v5 lite": 197e12 / 2, "tpu v5e": 197e12 / 2,
    },
}


def encoder_params(cfg: BertConfig) -> int:
  """Parameters of the Transformer layers that multiply every token (kernels + biases + LayerNorms)."""
  h, i = cfg.hidden_size, cfg.intermediate_size
  per_layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
  return cfg.num_hidden_layers * per_layer


def flops_per_sequence(cfg: BertConfig, seq_len: int, num_predictions: int,
                       targets: Sequence[str] = ("mlm", "nsp")) -> float:
  h, v, layers, e = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers, cfg.embedding_width
  flops = 6.0 * encoder_params(cfg) * seq_len + 12.0 * layers * seq_len ** 2 * h
  if cfg.factorised_embeddings:
    flops += 6.0 * seq_len * e * h
  if "mlm" in targets:
    flops += 6.0 * num_predictions * (h * e + e * v)
  if "lm" in targets:
    flops += 6.0 * seq_len * (h * e + e * v)
  if "nsp" in targets or "sop" in targets:
    flops += 6.0 * (h * h + 2 * h)
  return flops


def electra_flops_per_sequence(cfg: BertConfig, generator: BertConfig, seq_len: int, num_predictions: int,
                               disc_mlm: bool = False) -> float:
  """ELECTRA's training FLOPs per sequence, generator included (models/electra.py): the equal-compute unit of
  experiments/objectives.py. cfg: the discriminator; generator: electra.generator_config(cfg, settings);
  disc_mlm: the discriminator also has BERT's MLM head (settings.disc_mlm_weight > 0)."""
  # The generator reads the shared E-wide embeddings (E = cfg.embedding_width) and projects them to its Hg.
  h, e, t, p, v = cfg.hidden_size, cfg.embedding_width, seq_len, num_predictions, cfg.vocab_size
  disc = flops_per_sequence(cfg, t, p, targets=()) + 6.0 * t * (h * h + h)
  hg = generator.hidden_size
  gen = flops_per_sequence(generator, t, p, targets=()) + 6.0 * p * (hg * e + e * v)
  if hg != e:
    gen += 6.0 * t * e * hg
  if disc_mlm:
    disc += flops_per_sequence(cfg, t, p, targets=("mlm",)) - flops_per_sequence(cfg, t, p, targets=())
  return disc + gen


def peak_flops_per_device(device=None, dtype: str = "bfloat16", override: float = 0.0) -> Optional[float]:
  """Peak FLOP/s of one device for `dtype` from PEAK_FLOPS (None if unknown); `override` > 0 wins."""
  if override and override > 0:
    return float(override)
  device = device or jax.devices()[0]
  kind = (getattr(device, "device_kind", "") or device.platform).lower()
  if device.platform == "cpu":
    kind = "cpu"
  table = PEAK_FLOPS.get(str(dtype), PEAK_FLOPS["bfloat16"])
  for key in sorted(table, key=len, reverse=True):
    if key in kind:
      return table[key]
  return None


def training_flops_per_sequence(cfg: BertConfig, seq_len: int, num_predictions: int,
                                targets: Sequence[str] = ("mlm", "nsp"), electra=None) -> float:
  """What one training sequence costs for these targets: ELECTRA's (generator included, `electra` = the
  plan's ElectraSettings) when the targets hold "electra", else flops_per_sequence."""
  if "electra" in targets:
    from bert_jax.models import electra as electra_lib
    settings = electra if electra is not None else electra_lib.ElectraSettings()
    return electra_flops_per_sequence(cfg, electra_lib.generator_config(cfg, settings), seq_len, num_predictions,
                                      disc_mlm=settings.disc_mlm_weight > 0)
  return flops_per_sequence(cfg, seq_len, num_predictions, targets)


def mfu(seq_per_sec: float, cfg: BertConfig, seq_len: int, num_predictions: int, num_devices: int,
        peak: Optional[float], targets: Sequence[str] = ("mlm", "nsp"), electra=None) -> Optional[float]:
  if not peak:
    return None
  flops = training_flops_per_sequence(cfg, seq_len, num_predictions, targets, electra)
  return seq_per_sec * flops / (peak * num_devices)
