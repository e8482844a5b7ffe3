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
and so as a run's config is resolved), what it supports (`scans`, `shares`), what it costs (`params` and
`flops_per_sequence`, the encoder's part of the pre-training FLOPs and so of the MFU; a family that states
neither is counted from its initialised parameters, below) and the names its parameters have in Google's,
Hugging Face's and UER's checkpoints (`checkpoint_names`), or the statement that it has none.
The built-in families (transformer.py: BERT's post-/pre-LN Transformer, with albert.py's cross-layer sharing;
lstm.py: a bidirectional LSTM) are imported by `bert_jax.models`, so they are registered whenever the models
are; a family defined elsewhere (tests/test_encoders_plugin.py) registers the same way.

This module imports nothing from bert_jax.models (only the top-level bert_jax.logs): `models/config.py` validates
`encoder` against it, and the families' modules import the config, so the registry sits below both.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any, Dict, NamedTuple, Optional, Tuple, Type

import jax
import jax.numpy as jnp

from bert_jax.logs import log_once

log = logging.getLogger(__name__)

# The length the default parameter count traces the module at: parameter shapes do not depend on the length in
# any family here, and 8 tokens keep the abstract trace small (a family whose parameters do states `params`).
_PARAM_TRACE_LENGTH = 8


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
  packs: bool = False            # keeps each example of a packed row to itself (BertConfig.max_examples_per_row:
                                 # layers.example_mask / example_positions); a family that does not say so is
                                 # refused packed rows rather than trusted to not mix them
  # flax Module(config, deterministic=, name="embeddings") with BertEmbeddings' interface (__call__(input_ids,
  # segment_ids, project=True) -> [B, T, H]; embedding_table() -> [V, E]); None: BERT's embeddings (word +
  # learned position + token type). ModernBERT's has no position table and no token types.
  embeddings: Optional[Type] = None
  positions: str = "absolute"    # how the family encodes positions (BertConfig.position_embedding_type's value)

  @classmethod
  def pool(cls, config: Any, sequence_output: jax.Array, input_mask: jax.Array, deterministic: bool
           ) -> Optional[Dict[str, jax.Array]]:
    """The sentence-level outputs BertModel adds to sequence_output [B, T, H], built inside BertModel (its
    modules are BertModel's children): {"pooled_output": [B, H], ...}. None: BERT's pooler (dense + tanh on
    [CLS], params bert/pooler). A family may add "token_output" [B, T, H], the per-token features its task
    heads read instead of sequence_output (ModernBERT's prediction head)."""
    return None

  @classmethod
  def lm_head(cls, config: Any) -> Optional[Dict[str, Any]]:
    """How the MLM head (models/targets.LanguageModelHead) is built for this family: None = BERT's (dense with
    bias, hidden_act, LayerNorm(layer_norm_eps) with bias, output_bias); else a dict with dense_bias, act,
    norm_eps, norm_bias and decoder_bias."""
    return None

  @classmethod
  def check_config(cls, config: Any) -> None:
    """The family's own rules on a BertConfig; each raises ValueError("BertConfig.<field>=...; expected ...")."""

  @classmethod
  def checkpoint_names(cls, config: Any) -> Tuple[LayerParam, ...]:
    """The names one layer's parameters have in Google's, Hugging Face's and UER's BERT checkpoints; raises
    ValueError saying why when no checkpoint format holds this family (or this config of it)."""
    raise ValueError(f"encoder={cls.name!r} has no counterpart in Google's, Hugging Face's or UER's checkpoints")

  # ---- cost: the encoder's part of the model FLOPs (objectives/base.py's encoder_flops, pretrain/flops.py) ----
  @classmethod
  def params(cls, config: Any) -> int:
    """The encoder's parameters as one token's forward pass applies them: a layer that share_layers applies L
    times counts L times, since it costs the FLOPs of L layers.

    Default: counted from the module's abstract parameters (jax.eval_shape of its init, nothing computed), for
    the unshared stack when config.share_layers."""
    return abstract_param_count(cls.module, config.replace(share_layers=False) if config.share_layers else config)

  @classmethod
  def flops_per_sequence(cls, config: Any, seq_len: int) -> float:
    """Training FLOPs of the encoder for one sequence of `seq_len` tokens (forward + backward = 3 x forward,
    2 FLOPs per multiply-add). Embeddings (and a factorised E -> H projection) and heads are counted elsewhere.

    Default: 2 FLOPs per parameter per token forward, so 6 x params x T for training. Work without parameters
    (attention's QK^T and AV, 12 x L x T^2 x H for a Transformer) is not counted, so a family with such work
    states its own count, or its MFU is an underestimate; the default says so once per family in the log."""
    log_once(log, f"encoder={cls.name!r} states no flops_per_sequence: its FLOPs are counted as 6 per parameter "
                  "per token (2 forward, 4 backward); attention and other work without parameters is not counted, "
                  "so its MFU is a lower bound")
    return 6.0 * cls.params(config) * seq_len


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
  if getattr(config, "max_examples_per_row", 0) and not fam.packs:
    able = " or ".join(f"encoder={n!r}" for n, f in FAMILIES.items() if f.packs)
    raise ValueError(f"BertConfig.max_examples_per_row={config.max_examples_per_row} (packed rows) needs {able} "
                     f"(encoder={config.encoder!r} would run across the examples of a row); turn packing off")
  fam.check_config(config)
  if config.position_embedding_type not in ("", fam.positions):
    able = " or ".join(f"encoder={n!r}" for n, f in FAMILIES.items() if f.positions == config.position_embedding_type)
    raise ValueError(f"BertConfig.position_embedding_type={config.position_embedding_type!r}; encoder="
                     f"{config.encoder!r} has {fam.positions} positions (expected {fam.positions!r} or unset"
                     + (f"; {able} has {config.position_embedding_type} ones)" if able else ")"))


def checkpoint_names(config: Any) -> Tuple[LayerParam, ...]:
  """config's family's per-layer checkpoint names (EncoderFamily.checkpoint_names)."""
  return family(config.encoder).checkpoint_names(config)


def make_encoder(config: Any, deterministic: bool, name: str = "encoder"):
  """The flax module of config.encoder's family."""
  return family(config.encoder).module(config, deterministic=deterministic, name=name)


@functools.lru_cache(maxsize=64)
def abstract_param_count(module: Type, config: Any) -> int:
  """Number of parameters `module(config)` creates, from jax.eval_shape of its init on [1, 8, H] embeddings
  (shapes only, no arrays). Cached: the loop asks at every logging step, and a trace took 0.12-1.2 s on the
  2-core CPU (tiny to large, transformer and lstm modules; 5-13 us once cached)."""
  x = jax.ShapeDtypeStruct((1, _PARAM_TRACE_LENGTH, config.hidden_size), jnp.float32)
  input_mask = jax.ShapeDtypeStruct((1, _PARAM_TRACE_LENGTH), jnp.int32)
  encoder = module(config, deterministic=True)
  rngs = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
  variables = jax.eval_shape(lambda x, m: encoder.init(rngs, x, m), x, input_mask)
  # Partitioned boxes (logical axis names) are pytree nodes, so the leaves are the shapes themselves.
  return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(variables.get("params", {})))
