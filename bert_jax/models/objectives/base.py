"""The contract of a pre-training objective, and the one registry of them (`OBJECTIVES`).

An objective is one class in one module (mlm.py, nsp.py, sop.py, lm.py, electra.py) that carries everything
about it; nothing else in bert_jax spells its name:

  heads(config, encoded, table, masked_lm_positions) -> {"<name>_logits": ...}
        the Flax modules it adds on top of BertModel, called inside BertForPreTraining's compact __call__ (so
        each head's parameters sit under its own top-level group, e.g. params["mlm"]); encoded is BertModel's
        output ("sequence_output" [B, T, H], "pooled_output" [B, H]), table the word embeddings [V, E]
  denominator(batch) -> scalar         its global normaliser over the FULL batch (train_step.LossFn)
  sums(outputs, batch) -> dict         its metric sums: <name>_loss_sum, <name>_correct_sum and
                                       <name>_weight_sum | <name>_count (models.losses.normalize_metrics
                                       divides them into <name>_loss / <name>_accuracy in metrics.jsonl)
  derived_metrics(sums) -> dict        metrics beyond loss / accuracy (ELECTRA's precision and recall)
  curves                               (loss key, accuracy key, title) of its loss_curve.png panels and of
                                       the progress bar
  flops(config, seq_len, num_predictions) -> float   its heads' training FLOPs per sequence
  model(config) / model_flops(...)     an objective that is a model of its own (ELECTRA's generator +
                                       discriminator) builds it and counts all of its FLOPs; None otherwise
  data needs                           masked_positions (masked_lm_positions / ids / weights), pair_labels
                                       (next_sentence_labels, so the data makes sentence pairs), pair_mode (the
                                       pair kind it forces on the data, e.g. SOP's swapped segments), causal
                                       (the encoder sees earlier tokens only), alone (why it trains by itself),
                                       trains_pooler (it reads the pooled [CLS] vector)
  settings_type / settings_ranges      its config subtree config.<name> (a frozen dataclass, each field's
                                       range), resolved by the pre-training plan
  state_settings                       the settings that shape the checkpointed parameters
  param_groups / conversion            its top-level parameter groups, and how checkpoint conversion names
                                       their tensors (Google TF and Hugging Face names, per layout)

Register one with one line: `@register("name")` on the class (or `OBJECTIVES["name"] = cls`). The registry is
the single list: config validation, help texts and error messages read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Sequence, Tuple, Type, Union

import flax.linen as nn
import jax

from bert_jax.models import encoders, losses
from bert_jax.models.config import BertConfig

OBJECTIVES: Dict[str, Type["Objective"]] = {}


def register(name: str) -> Callable[[type], type]:
  """Class decorator: OBJECTIVES[name] = cls, with cls.name = name."""
  def add(cls):
    cls.name = name
    OBJECTIVES[name] = cls
    return cls
  return add


def objective_names() -> Tuple[str, ...]:
  """The registered objectives' names, in registration order."""
  return tuple(OBJECTIVES)


@dataclasses.dataclass(frozen=True)
class Objective:
  """One pre-training objective with its resolved settings (module docstring). Frozen and hashable: it is a
  field of the pre-training model and of the plan."""
  settings: Any = None

  name: ClassVar[str] = ""
  title: ClassVar[str] = ""                                 # how the plan table and plots name it
  settings_type: ClassVar[Optional[type]] = None            # the dataclass of config.<name>; None: no subtree
  settings_ranges: ClassVar[Mapping[str, dict]] = {}        # field -> input_pipeline.checks.check_range kwargs
  state_settings: ClassVar[Tuple[str, ...]] = ()            # settings fields that shape the checkpoint
  masked_positions: ClassVar[bool] = False                  # reads masked_lm_positions / ids / weights
  pair_labels: ClassVar[bool] = False                       # reads next_sentence_labels (sentence pairs)
  row_weighted: ClassVar[bool] = False                      # its loss counts only rows with masked_lm_weights
                                                            # > 0 (batch-size warmup zeroes a row's weights)
  pair_mode: ClassVar[str] = ""                             # the pair kind it forces ("": data.pair_mode's)
  trains_pooler: ClassVar[bool] = False                     # reads the pooled [CLS] vector (trains the pooler)
  causal: ClassVar[bool] = False                            # the encoder sees earlier tokens only
  alone: ClassVar[str] = ""                                 # why it cannot be combined ("": it can)
  curves: ClassVar[Tuple[Tuple[str, str, str], ...]] = ()   # (loss key, accuracy key, title)
  param_groups: ClassVar[Tuple[str, ...]] = ()              # top-level parameter groups it adds
  # Conversion names of its parameters, per checkpoint layout ("bert", "albert", ...): tuples of (path under
  # params, Google TF name, Hugging Face name, transform) that convert.mapping turns into its table entries.
  conversion: ClassVar[Mapping[str, Tuple[Tuple[Tuple[str, ...], str, str, str], ...]]] = {}

  def __post_init__(self):
    if self.settings is None and self.settings_type is not None:
      object.__setattr__(self, "settings", self.settings_type())

  # ---- the model --------------------------------------------------------------------------------------
  def heads(self, config: BertConfig, encoded: Mapping[str, jax.Array], table: jax.Array,
            masked_lm_positions: Optional[jax.Array]) -> Dict[str, jax.Array]:
    """Its outputs from BertModel's (module docstring); called inside BertForPreTraining's compact method."""
    return {}

  def model(self, config: BertConfig) -> Optional[nn.Module]:
    """A model of its own (it then stands alone and brings its loss_parts), or None: heads on BertModel."""
    return None

  # ---- loss and metrics -------------------------------------------------------------------------------
  def denominator(self, batch: Mapping[str, jax.Array]) -> jax.Array:
    raise NotImplementedError(f"objective {self.name!r} has no denominator")

  def sums(self, outputs: Mapping[str, jax.Array], batch: Mapping[str, jax.Array]) -> Dict[str, jax.Array]:
    raise NotImplementedError(f"objective {self.name!r} has no metric sums")

  @property
  def loss_sum_key(self) -> str:
    return f"{self.name}_loss_sum"

  @classmethod
  def derived_metrics(cls, sums: Mapping[str, float]) -> Dict[str, float]:
    """Host-side metrics beyond <prefix>_loss / _accuracy from a window's sums ({} when its keys are absent)."""
    return {}

  # ---- cost -------------------------------------------------------------------------------------------
  def flops(self, config: BertConfig, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs per sequence of its heads (forward + backward = 3 x forward, 2 per multiply-add)."""
    return 0.0

  def model_flops(self, config: BertConfig, seq_len: int, num_predictions: int) -> Optional[float]:
    """All training FLOPs per sequence of the model it builds itself (model()); None: encoder + heads."""
    return None

  def describe(self) -> str:
    """Its name in the plan table, with its settings when it has any."""
    return self.name


ObjectiveLike = Union[str, Objective]


def resolve(targets: Sequence[ObjectiveLike]) -> Tuple[Objective, ...]:
  """Names (default settings) or Objective instances -> instances, checked together: a non-empty list of
  registered objectives, at most one that reads next_sentence_labels, and one that stands alone alone.
  ValueError names the rule (the plan adds the config field)."""
  targets = tuple(targets)
  names = tuple(t.name if isinstance(t, Objective) else t for t in targets)
  unknown = [t for t in names if t not in OBJECTIVES]
  if unknown or not targets:
    raise ValueError(f"unknown pre-training targets {unknown or list(names)}; expected a non-empty subset of "
                     f"{objective_names()} (the registered objectives)")
  out = tuple(t if isinstance(t, Objective) else OBJECTIVES[t]() for t in targets)
  for o in out:
    if o.alone and len(out) > 1:
      raise ValueError(f"targets={names}: the {o.name!r} target {o.alone}")
  pairs = [o.name for o in out if o.pair_labels]
  if len(pairs) > 1:
    raise ValueError(f"targets {' and '.join(map(repr, pairs))} both read next_sentence_labels; pick one")
  return out


def validate_targets(targets: Sequence[ObjectiveLike]) -> tuple:
  """The targets' names, checked (resolve)."""
  return tuple(o.name for o in resolve(targets))


def encoder_params(config: BertConfig) -> int:
  """Parameters of the encoder stack as a token's forward pass applies them (its family's params: a shared layer
  counts once per application)."""
  return encoders.family(config.encoder).params(config)


def encoder_flops(config: BertConfig, seq_len: int) -> float:
  """Training FLOPs per sequence of BertModel's encoder: its family's count (EncoderFamily.flops_per_sequence;
  a Transformer's is 6 x params x T + 12 x L x T^2 x H), plus 6 x T x E x H for a factorised E -> H embedding
  projection, which belongs to the embeddings and so is counted here whatever the family."""
  h, e = config.hidden_size, config.embedding_width
  flops = encoders.family(config.encoder).flops_per_sequence(config, seq_len)
  if config.factorised_embeddings:
    flops += 6.0 * seq_len * e * h
  return flops


def sequence_flops(config: BertConfig, seq_len: int, num_predictions: int,
                   objectives: Sequence[ObjectiveLike]) -> float:
  """Training FLOPs per sequence of the pre-training model of `objectives` (a model of its own counts all of
  its FLOPs; else the encoder plus each objective's heads)."""
  objectives = resolve(objectives)
  for o in objectives:
    own = o.model_flops(config, seq_len, num_predictions)
    if own is not None:
      return own
  flops = encoder_flops(config, seq_len)
  for o in objectives:
    flops += o.flops(config, seq_len, num_predictions)
  return flops


def normalize_metrics(sums: Mapping[str, float]) -> dict:
  """losses.normalize_metrics (each <prefix>_loss / _accuracy) plus every registered objective's derived
  metrics."""
  out = losses.normalize_metrics(sums)
  for cls in OBJECTIVES.values():
    out.update(cls.derived_metrics(sums))
  return out


def all_curves() -> Tuple[Tuple[str, str, str], ...]:
  """Every registered objective's plot curves, in registration order (MLM first)."""
  seen, out = set(), []
  for cls in OBJECTIVES.values():
    for c in cls.curves:
      if c[0] not in seen:
        seen.add(c[0])
        out.append(c)
  return tuple(out)


def state_fields() -> Tuple[str, ...]:
  """The config fields of the objectives' settings that shape a checkpoint's parameters ("<name>.<field>")."""
  return tuple(f"{name}.{f}" for name, cls in OBJECTIVES.items() for f in cls.state_settings)


def sum_loss(objectives: Sequence[Objective], sums: Mapping[str, jax.Array],
             denominators: Mapping[str, jax.Array]) -> jax.Array:
  """The optimised loss: the objectives' loss sums, each over its global denominator (Google BERT's sum of
  the weighted-mean MLM loss and the mean NSP loss), added in the targets' order."""
  return sum(sums[o.loss_sum_key] / denominators[o.name] for o in objectives)

