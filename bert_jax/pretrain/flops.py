"""Model FLOPs and MFU for BERT pre-training (no TensorFlow).

Model FLOPs per sequence (forward + backward = 3 x forward, 2 FLOPs per multiply-add):
  the encoder stack                                its family's count (models/encoders/, EncoderFamily.
                                                   flops_per_sequence). BERT's Transformer: 6 x params x T
                                                   for the dense layers + 12 x L x T^2 x H for attention's
                                                   QK^T and probs x V (fwd 4 T^2 H per layer); shared layers
                                                   (share_layers) cost the same as separate ones, each is
                                                   applied. The LSTM: its gates' matmuls. A family that
                                                   states no count: 6 x its parameters x T, attention not
                                                   counted (logged once).
  + 6 x T x E x H                                  with factorised embeddings (ALBERT, E = embedding_size):
                                                   the E -> H projection, whatever the encoder.
  + each objective's heads (models/objectives/, its `flops`), e.g. MLM's transform + tied decoder on the P
    predicted positions only, 6 x P x (H x E + E x V) (P = max_predictions_per_seq), NSP's / SOP's pooler +
    classifier on [CLS], 6 x (H^2 + 2H); an objective that is a model of its own (ELECTRA: discriminator
    encoder + per-token head 6 T (H^2 + H), generator encoder, E -> Hg projection and MLM head on P positions)
    counts all of its FLOPs (its `model_flops`).
Embedding lookups, LayerNorm, softmax and GELU are not counted (the usual MFU convention).

API:
  encoder_params(cfg) -> int                       the encoder's parameters as each token applies them
  flops_per_sequence(cfg, seq_len, num_predictions, targets=DEFAULT_TARGETS) -> float   targets: names or
                                                   the plan's resolved objectives (with their settings)
  peak_flops_per_device(device=None, dtype="bfloat16", override=0.0) -> float (FLOP/s, from PEAK_FLOPS)
  mfu(seq_per_sec, cfg, seq_len, num_predictions, num_devices, peak, targets) -> float
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax

from bert_jax.models import BertConfig, BertForPreTraining, objectives
from bert_jax.models.objectives.base import ObjectiveLike, encoder_params  # noqa: F401  (this module's API)

DEFAULT_TARGETS = BertForPreTraining.targets   # BERT's objectives, the pre-training model's default

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


def flops_per_sequence(cfg: BertConfig, seq_len: int, num_predictions: int,
                       targets: Sequence[ObjectiveLike] = DEFAULT_TARGETS) -> float:
  """Training FLOPs per sequence of the pre-training model of `targets` (names or resolved objectives): the
  encoder plus each objective's heads, or all of a model an objective builds itself (ELECTRA's generator
  included). What one training sequence costs; the MFU's numerator."""
  return objectives.sequence_flops(cfg, seq_len, num_predictions, targets)


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


def mfu(seq_per_sec: float, cfg: BertConfig, seq_len: int, num_predictions: int, num_devices: int,
        peak: Optional[float], targets: Sequence[ObjectiveLike] = DEFAULT_TARGETS) -> Optional[float]:
  if not peak:
    return None
  flops = flops_per_sequence(cfg, seq_len, num_predictions, targets)
  return seq_per_sec * flops / (peak * num_devices)
