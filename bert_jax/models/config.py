"""BertConfig: the architecture hyper-parameters, a size table, and Google/HF JSON interchange."""

from __future__ import annotations

import dataclasses
import json
import numbers
from typing import Any

import jax.numpy as jnp

from bert_jax import fileio
from bert_jax.models import encoders

# (layers, hidden) of the size table; heads = H / 64, intermediate = 4H (Google's 24 small BERTs use the
# same rule, e.g. BERT-mini is L4/H256/A4).
SIZES = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}

LAYER_NORM_TYPES = ("post", "pre")
ATTENTION_IMPLS = ("auto", "einsum", "xla", "cudnn", "cudnn_dropout", "pallas_flash")   # models/attention.py
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch", "minimal")

# How a run computes, not what it computes: a run's config sets these over a loaded checkpoint's architecture
# (training.train_step.model_config), and a resumed run may change them.
RUNTIME_FIELDS = ("dtype", "param_dtype", "attention_impl", "scan_layers", "remat_policy", "hidden_dropout_prob",
                  "attention_probs_dropout_prob", "local_attention_impl")
# The architecture fields a run config may set over the size table (random init only).
ARCHITECTURE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "encoder",
                       "layer_norm_type", "max_position_embeddings", "hidden_act", "type_vocab_size",
                       "initializer_range", "layer_norm_eps", "embedding_size", "share_layers",
                       # ModernBERT's (models/encoders/modernbert.py)
                       "position_embedding_type", "norm_eps", "norm_bias", "attention_bias", "mlp_bias",
                       "decoder_bias", "classifier_bias", "classifier_activation", "classifier_pooling",
                       "local_attention", "global_attn_every_n_layers", "layer_types", "global_rope_theta",
                       "local_rope_theta")

# Keys of Google's bert_config.json (also a subset of Hugging Face's config.json).
_GOOGLE_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range",
)


_INT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "max_position_embeddings", "type_vocab_size", "embedding_size", "global_attn_every_n_layers",
               "local_attention", "max_examples_per_row")
_FLOAT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps",
                 "norm_eps", "global_rope_theta", "local_rope_theta")
_BOOL_FIELDS = ("norm_bias", "attention_bias", "mlp_bias", "decoder_bias", "classifier_bias")


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Architecture of a BERT-family encoder. Field names follow Google's bert_config.json."""

  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"                 # exact erf GELU as in BERT; "gelu_new"/"gelu_tanh" = tanh approx.
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  encoder: str = "transformer"             # the encoder family, by its registered name (models/encoders/)
  layer_norm_type: str = "post"            # "post" (BERT) | "pre" (pre-LN Transformer)
  dtype: str = "float32"                   # compute dtype; "bfloat16" on accelerators
  param_dtype: str = "float32"             # parameters (master weights) stay float32
  attention_impl: str = "auto"             # auto | einsum | xla | cudnn | cudnn_dropout | pallas_flash
  scan_layers: bool = False                # nn.scan over layers: O(1) compile time in depth
  remat_policy: str = "none"               # rematerialisation: none | full | dots | dots_no_batch | minimal
  embedding_size: int = 0                  # E of factorised embeddings (ALBERT): tables [V, E] + a dense E -> H
                                           # (also when E = H, as ALBERT); 0 = BERT: [V, H], no projection
  share_layers: bool = False               # one layer's parameters for every layer (ALBERT cross-layer sharing)
  # ModernBERT (encoder="modernbert", models/encoders/modernbert.py): Hugging Face ModernBertConfig's names and
  # defaults; only that family reads them, so BERT, ALBERT, ELECTRA and the lstm are unchanged by them.
  position_embedding_type: str = ""        # "" = the family's own: absolute (BERT's learned table) | rotary
  norm_eps: float = 1e-5                   # the LayerNorms' eps (BERT's layer_norm_eps is not read)
  norm_bias: bool = False                  # LayerNorms with a bias
  attention_bias: bool = False             # Wqkv and Wo with biases
  mlp_bias: bool = False                   # the GeGLU's Wi and Wo with biases
  decoder_bias: bool = True                # the tied MLM decoder's bias [V]
  classifier_bias: bool = False            # the prediction head's dense bias (MLM and task heads)
  classifier_activation: str = "gelu"      # the prediction head's activation
  classifier_pooling: str = "cls"          # sentence vector of pooled_output: cls | mean, then the head
  local_attention: int = 128               # sliding window in tokens in all (128: +-64), an even number
  global_attn_every_n_layers: int = 3      # layer i is global when i % n == 0 (unless layer_types says)
  layer_types: tuple = ()                  # per layer full_attention | sliding_attention; () = from n above
  global_rope_theta: float = 160000.0      # rotary theta of the global (full_attention) layers
  local_rope_theta: float = 10000.0        # rotary theta of the sliding-window layers
  local_attention_impl: str = "auto"       # sliding layers: auto | blocked (linear in T) | dense (masked T x T) | jax
  max_examples_per_row: int = 0            # packed rows (input_mask numbers each row's examples, layers.py): up
                                           # to K examples per row, pooled outputs [B, K, H]; 0 = one per row

  def __post_init__(self):
    # A JSON list (config.json's layer_types) becomes a tuple: the config is hashed (cached parameter counts).
    if isinstance(self.layer_types, list):
      object.__setattr__(self, "layer_types", tuple(self.layer_types))
    # One spelling of "the family's own positions": Hugging Face's BERT config.json says "absolute", our own
    # configs leave it "", and the two must compare equal (an imported config against a converted one).
    family = encoders.FAMILIES.get(self.encoder)
    if family is not None and self.position_embedding_type == family.positions:
      object.__setattr__(self, "position_embedding_type", "")
    if not isinstance(self.layer_types, tuple):
      raise ValueError(f"BertConfig.layer_types={self.layer_types!r}; expected a list of 'full_attention' / "
                       "'sliding_attention', one per layer")
    for name in _BOOL_FIELDS:
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"BertConfig.{name}={getattr(self, name)!r}; expected true or false")
    # Types first: a JSON config's "vocab_size": "30522" or a null reached the model as a TypeError traceback.
    for name in _INT_FIELDS:
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"BertConfig.{name}={value!r}; expected an integer")
      may_be_zero = name in ("num_hidden_layers", "embedding_size", "max_examples_per_row")
      if value < (0 if may_be_zero else 1):
        raise ValueError(f"BertConfig.{name}={value}; expected {'>= 0' if may_be_zero else '>= 1'}")
    for name in _FLOAT_FIELDS:
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"BertConfig.{name}={value!r}; expected a number")
    if not isinstance(self.hidden_act, str):
      raise ValueError(f"BertConfig.hidden_act={self.hidden_act!r}; expected a name such as 'gelu'")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(
          f"hidden_size={self.hidden_size} is not a multiple of num_attention_heads="
          f"{self.num_attention_heads}")
    for name, allowed in (("layer_norm_type", LAYER_NORM_TYPES), ("attention_impl", ATTENTION_IMPLS),
                          ("remat_policy", REMAT_POLICIES)):
      if getattr(self, name) not in allowed:
        raise ValueError(f"BertConfig.{name}={getattr(self, name)!r}; expected one of {allowed}")
    if self.embedding_size < 0:
      raise ValueError(f"BertConfig.embedding_size={self.embedding_size}; expected 0 (= hidden_size) or > 0")
    # A registered family, the layer options it supports (scan_layers, share_layers) and its own rules; on a
    # family without a layer stack scan_layers did nothing, so it is refused rather than ignored.
    encoders.check_config(self)
    for name in ("dtype", "param_dtype"):
      jnp.dtype(getattr(self, name))  # raises TypeError on an unknown dtype name

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_attention_heads

  @property
  def embedding_width(self) -> int:
    """E: the width of the embedding tables and of the MLM head's transform (H unless factorised)."""
    return self.embedding_size or self.hidden_size

  @property
  def factorised_embeddings(self) -> bool:
    """Whether the embeddings are projected from E to H (ALBERT; set by embedding_size > 0)."""
    return self.embedding_size > 0

  @property
  def packed(self) -> bool:
    """Rows may hold several examples (max_examples_per_row > 0): block-diagonal attention, positions that
    restart per example, one pooled vector per example."""
    return self.max_examples_per_row > 0

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def parameter_dtype(self):
    return jnp.dtype(self.param_dtype)

  # ---- construction -------------------------------------------------------------------------------
  @classmethod
  def from_size(cls, size: str, **overrides: Any) -> "BertConfig":
    """A config from the size table (tiny .. large); heads = H/64, FFN = 4H."""
    if size not in SIZES:
      raise ValueError(f"unknown model size {size!r}; expected one of {tuple(SIZES)}")
    layers, hidden = SIZES[size]
    fields = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                  intermediate_size=4 * hidden)
    fields.update(overrides)
    return cls(**fields)

  @classmethod
  def from_dict(cls, d: dict) -> "BertConfig":
    """Accepts our own dicts, Google's bert_config.json and Hugging Face's config.json (extra keys ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    fields = {k: v for k, v in d.items() if k in names}
    if "layer_norm_eps" not in d and "layer_norm_epsilon" in d:
      fields["layer_norm_eps"] = d["layer_norm_epsilon"]
    # ModernBertConfig's newer spellings: hidden_activation, and rope_parameters {layer type: {rope_theta}}
    # (older configs: global_rope_theta / local_rope_theta, read above as our own fields).
    if "hidden_act" not in d and "hidden_activation" in d:
      fields["hidden_act"] = d["hidden_activation"]
    rope = d.get("rope_parameters")
    if isinstance(rope, dict):
      for layer_type, name in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
        theta = (rope.get(layer_type) or {}).get("rope_theta") if isinstance(rope.get(layer_type), dict) else None
        if theta is not None:
          fields[name] = theta
    return cls(**fields)

  def to_dict(self) -> dict:
    """The fields, without max_examples_per_row: how a run batches its rows, never part of a saved model
    (a packed run's checkpoint loads as one example per row; each run sets its own)."""
    d = dataclasses.asdict(self)
    del d["max_examples_per_row"]
    return d

  def replace(self, **changes: Any) -> "BertConfig":
    return dataclasses.replace(self, **changes)

  @classmethod
  def from_json_file(cls, path: str) -> "BertConfig":
    with open(path, encoding="utf-8") as f:
      try:
        d = json.load(f)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not a valid JSON model config ({e})") from e
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size") if k not in d]
    if missing:
      raise ValueError(f"{path}: model config lacks required keys {missing}")
    try:
      return cls.from_dict(d)
    except (ValueError, TypeError) as e:
      raise ValueError(f"{path}: {e}") from e

  from_google_json = from_json_file

  def to_google_dict(self) -> dict:
    return {k: getattr(self, k) for k in _GOOGLE_KEYS}

  def to_google_json(self, path: str) -> None:
    fileio.write_json_atomic(path, self.to_google_dict())

  def to_json_file(self, path: str) -> None:
    fileio.write_json_atomic(path, self.to_dict())
