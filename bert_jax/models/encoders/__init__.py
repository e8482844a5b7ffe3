"""Encoder families as plug-ins: the one registry of `BertConfig.encoder` (`config.model.encoder`) values.

An encoder maps the embeddings [B, T, H] and input_mask [B, T] to hidden states [B, T, H]:

    encoder = encoders.make_encoder(config, deterministic)    # named "encoder": params under bert/encoder/
    hidden = encoder(x, input_mask, causal=False)            # causal: the 'lm' target's left-to-right mask

A family is one module holding one `EncoderFamily` subclass, registered with one line:

    @encoders.register
    class MixerFamily(encoders.EncoderFamily):
      name = "mixer"                 # the BertConfig.encoder value; saved in model_config.json
      module = MixerEncoder          # flax Module(config, deterministic) with the call above

It carries everything about itself: its module, its config rules (`check_config`, run as a BertConfig is built
and so as a run's config is resolved), what it supports (`scans`, `shares`) and the names its parameters have
in Google's, Hugging Face's and UER's checkpoints (`checkpoint_names`), or the statement that it has none.
The built-in families (transformer.py: BERT's post-/pre-LN Transformer, with albert.py's cross-layer sharing;
lstm.py: a bidirectional LSTM) are imported by `bert_jax.models`, so they are registered whenever the models
are; a family defined elsewhere (tests/test_encoders_plugin.py) registers the same way.

This module imports nothing from bert_jax: `models/config.py` validates `encoder` against it, and the families'
modules import the config, so the registry sits below both.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple, Type


class LayerParam(NamedTuple):
  """One module of an encoder layer under each checkpoint format's names, relative to the layer's scope
  (bert_jax.convert expands them into whole-model tables).

  kind says which parameters the module has and how each format lays them out (convert/mapping.py):
    "qkv"         kernel [H, heads, head_dim] + bias [heads, head_dim]  (flattened to heads*head_dim there)
    "out"         kernel [heads, head_dim, H] + bias [H]
    "dense"       kernel [in, out] + bias [out]
    "layer_norm"  scale + bias (Google's gamma / beta, Hugging Face's weight / bias, UER's gamma / beta)
  """
  ours: Tuple[str, ...]      # module path under the layer, e.g. ("attention", "query")
  google: str                # Google TF1 scope under the layer's, e.g. "attention/self/query"
  hf: str                    # Hugging Face module under the layer's, e.g. "attention.self.query"
  uer: Optional[str]         # UER-py module under the layer's (None: UER has no such model)
  kind: str


class EncoderFamily:
  """What a family states about itself; subclass it, set `name` and `module`, override what differs."""

  name: str = ""                 # BertConfig.encoder's value; a saved model_config.json keeps it
  module: Optional[Type] = None  # flax Module class: module(config, deterministic=..., name=...)
  scans: bool = False            # identical layers nn.scan can fold into one (BertConfig.scan_layers)
  shares: bool = False           # ALBERT's cross-layer sharing applies (BertConfig.share_layers)

  @classmethod
  def check_config(cls, config: Any) -> None:
    """The family's own rules on a BertConfig; each raises ValueError("BertConfig.<field>=...; expected ...")."""

  @classmethod
  def checkpoint_names(cls, config: Any) -> Tuple[LayerParam, ...]:
    """The names one layer's parameters have in Google's, Hugging Face's and UER's BERT checkpoints; raises
    ValueError saying why when no checkpoint format holds this family (or this config of it)."""
    raise ValueError(f"encoder={cls.name!r} has no counterpart in Google's, Hugging Face's or UER's checkpoints")


# name -> family, in registration order: the one list (register() adds to it; config, errors and help read it).
FAMILIES: Dict[str, Type[EncoderFamily]] = {}


def register(family: Type[EncoderFamily]) -> Type[EncoderFamily]:
  """Adds `family` under family.name (usable as a class decorator); a name taken by another class is refused."""
  if not (isinstance(family, type) and issubclass(family, EncoderFamily)):
    raise TypeError(f"register() takes an EncoderFamily subclass, got {family!r}")
  if not family.name or family.module is None:
    raise TypeError(f"{family.__name__} sets no name or no module; an encoder family needs both")
  known = FAMILIES.get(family.name)
  if known is not None and known is not family:
    raise ValueError(f"encoder family {family.name!r} is already registered ({known.__module__}.{known.__name__})")
  FAMILIES[family.name] = family
  return family


def names() -> Tuple[str, ...]:
  """The registered families' names, in registration order (what BertConfig.encoder accepts)."""
  return tuple(FAMILIES)


def family(name: str) -> Type[EncoderFamily]:
  """The family registered as `name`; ValueError listing the registered names otherwise."""
  if not isinstance(name, str) or name not in FAMILIES:
    raise ValueError(f"BertConfig.encoder={name!r}; expected one of the registered encoder families {names()}")
  return FAMILIES[name]


def check_config(config: Any) -> None:
  """BertConfig's encoder rules: a registered family, the layer options it supports, then its own rules."""
  fam = family(config.encoder)
  for option, flag, what in (("scan_layers", "scans", "scan over layers"), ("share_layers", "shares",
                                                                           "share one layer")):
    if getattr(config, option) and not getattr(fam, flag):
      able = " or ".join(f"encoder={n!r}" for n, f in FAMILIES.items() if getattr(f, flag))
      raise ValueError(f"BertConfig.{option}=True needs {able or 'a family that can ' + what} (got encoder="
                       f"{config.encoder!r}, which cannot {what}); set {option}=False")
  fam.check_config(config)


def checkpoint_names(config: Any) -> Tuple[LayerParam, ...]:
  """config's family's per-layer checkpoint names (EncoderFamily.checkpoint_names)."""
  return family(config.encoder).checkpoint_names(config)


def make_encoder(config: Any, deterministic: bool, name: str = "encoder"):
  """The flax module of config.encoder's family."""
  return family(config.encoder).module(config, deterministic=deterministic, name=name)
