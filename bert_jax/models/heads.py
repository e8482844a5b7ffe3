"""Fine-tuning heads on top of BertModel. Parameters: params["bert"] (the encoder) + the head's own.

Sentence-level heads take `pooling` (POOLINGS): "cls" = BERT's pooler (dense + tanh on [CLS], the default),
"first" = the raw [CLS] vector, "mean" / "max" = over the real tokens (input_mask), "last" = the last real
token ([SEP]). The sentence-embedding heads (finetune task=embedding, predict features, export) also take
"splade" (SPARSE_POOLINGS): the masked-LM head (params["mlm"], the pre-training one) at every token, then
SPLADE's max over the real tokens of log(1 + relu(logits)): a vocabulary-sized vector [B, V]; and "lexical": a
learned weight per token, relu(dense(hidden)) (uniCOIL's term weight, params["term_weight"]), summed per
vocabulary entry over the text's own tokens: [B, V] with no expansion, term frequency at init; "lexical_log" is
log(1 + that sum), SPLADE's saturation (a term's tenth occurrence adds less than its first). On packed rows
(config.max_examples_per_row = K > 0) every pooling reads each example's own tokens and the sentence-level
heads answer per example: logits [B, K, labels]. Heads whose inputs go beyond (input_ids, input_mask,
segment_ids) list them in
`extra_input_keys`; the caller passes them by keyword.
"""

from __future__ import annotations

from typing import Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import axes, crf
from bert_jax.models.bert import BertModel
from bert_jax.models.config import BertConfig
from bert_jax.models.layers import dense, example_slots, example_starts, zeros_init

POOLINGS = ("cls", "first", "mean", "max", "last")
SPARSE_POOLINGS = ("splade", "lexical", "lexical_log")   # sentence embeddings only: vocabulary-sized vectors
MLM_POOLINGS = ("splade",)                 # ... that read the pre-training masked-LM head (params["mlm"])
LEXICAL_POOLINGS = ("lexical", "lexical_log")   # ... that weigh the text's own tokens (params["term_weight"])


def splade_pool(token_logits, input_mask):
  """SPLADE's sentence vector (Formal et al. 2021; sentence-transformers' SpladePooling, max / relu):
  token_logits [B, T, V] (the MLM head at every token), input_mask [B, T] -> [B, V] float32, the max over the
  real tokens of log(1 + relu(logits)). Every weight is >= 0; a vocabulary entry the text neither holds nor
  implies is 0."""
  w = jnp.log1p(jax.nn.relu(token_logits.astype(jnp.float32)))
  return jnp.max(jnp.where(input_mask.astype(bool)[..., None], w, 0.0), axis=1)


def lexical_pool(token_weights, input_ids, input_mask, vocab_size: int, saturate: bool = False):
  """The "lexical" sentence vector: token_weights [B, T] (one weight >= 0 per token), input_ids [B, T],
  input_mask [B, T] -> [B, V] float32, per vocabulary entry the sum of the weights of the text's tokens with that
  id (0 for an id the text lacks); `saturate` ("lexical_log") takes log(1 + sum)."""
  w = jnp.where(input_mask.astype(bool), token_weights.astype(jnp.float32), 0.0)
  rows = jnp.arange(input_ids.shape[0])[:, None]
  v = jnp.zeros((input_ids.shape[0], vocab_size), jnp.float32).at[rows, input_ids].add(w)
  return jnp.log1p(v) if saturate else v


def pool(enc: dict, input_mask, pooling: str = "cls", max_examples: int = 0):
  """The sentence vector [B, H] of BertModel's outputs (sequence_output [B, T, H], pooled_output [B, H]),
  mask-aware over input_mask [B, T]; on packed rows (max_examples = K > 0) one per example, [B, K, H]."""
  if pooling == "cls":
    return enc["pooled_output"]
  x = enc["sequence_output"]
  if max_examples:
    return _pool_examples(x, input_mask, pooling, max_examples)
  if pooling == "first":
    return x[:, 0]
  m = input_mask.astype(bool)[..., None]                           # [B, T, 1]
  if pooling == "mean":
    xs = jnp.sum(jnp.where(m, x.astype(jnp.float32), 0.0), axis=1)
    return (xs / jnp.maximum(jnp.sum(m, axis=1), 1)).astype(x.dtype)
  if pooling == "max":
    return jnp.max(jnp.where(m, x, jnp.asarray(-1e4, x.dtype)), axis=1)
  if pooling == "last":
    last = jnp.maximum(jnp.sum(input_mask.astype(jnp.int32), axis=1) - 1, 0)
    return jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]
  raise ValueError(f"pooling={pooling!r}; expected one of {POOLINGS}")


def _pool_examples(x, input_mask, pooling: str, max_examples: int):
  """pool() on packed rows: x [B, T, H] -> [B, K, H], each example over its own tokens (layers.example_slots)."""
  starts, _ = example_starts(input_mask, max_examples)
  if pooling == "first":
    return jnp.take_along_axis(x, starts[..., None], axis=1)
  slots = example_slots(input_mask, max_examples)                            # [B, T, K]
  counts = jnp.sum(slots, axis=1)                                            # [B, K]
  if pooling == "mean":
    xs = jnp.einsum("btk,bth->bkh", slots.astype(jnp.float32), x.astype(jnp.float32))
    return (xs / jnp.maximum(counts, 1)[..., None]).astype(x.dtype)
  if pooling == "max":
    return jnp.max(jnp.where(slots[..., None], x[:, :, None], jnp.asarray(-1e4, x.dtype)), axis=1)
  if pooling == "last":
    last = starts + jnp.maximum(counts.astype(jnp.int32) - 1, 0)
    return jnp.take_along_axis(x, last[..., None], axis=1)
  raise ValueError(f"pooling={pooling!r}; expected one of {POOLINGS}")


def token_features(enc: dict):
  """The per-token vectors a token-level head reads [B, T, H]: the encoder family's token_output where it has
  one (ModernBERT's prediction head on every token, as transformers' ModernBertForTokenClassification), else
  sequence_output."""
  return enc.get("token_output", enc["sequence_output"])


class BertForSequenceClassification(nn.Module):
  """Pooled sentence vector -> dropout -> dense. logits [B, num_labels] float32; num_labels=1 means regression
  (and multi-label classification reads the logits as independent sigmoids). Packed rows: logits
  [B, K, num_labels], one per example slot (empty slots answer too; their weight is 0)."""

  config: BertConfig
  num_labels: int
  dropout_rate: Optional[float] = None   # defaults to config.hidden_dropout_prob
  pooling: str = "cls"                   # POOLINGS

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    vec = pool(enc, input_mask, self.pooling, self.config.max_examples_per_row)
    pooled = nn.Dropout(rate)(vec, deterministic=deterministic)
    logits = dense(self.config, self.num_labels, (axes.MLP, None), "classifier")(pooled)
    return {"logits": logits.astype(jnp.float32), "pooled_output": vec}


class BertForMultipleChoice(nn.Module):
  """Each (context, question + choice) row encoded, pooled, scored by one shared dense(1); softmax over the
  choices happens in the loss (as transformers' BertForMultipleChoice).

  input_ids, input_mask, segment_ids [B, C, T]; choice_mask [B, C] (1 = a real choice; padded choices get
  logit -1e9) -> logits [B, C] float32."""

  config: BertConfig
  dropout_rate: Optional[float] = None
  pooling: str = "cls"
  extra_input_keys = ("choice_mask",)

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True, choice_mask=None):
    if input_ids.ndim == 2:   # [B, T] (e.g. the shape-only init of the step factory): one choice per row
      input_ids, input_mask = input_ids[:, None], input_mask[:, None]
      segment_ids = None if segment_ids is None else segment_ids[:, None]
    b, c, t = input_ids.shape
    flat = lambda x: None if x is None else x.reshape(b * c, t)  # noqa: E731
    enc = BertModel(self.config, name="bert")(flat(input_ids), flat(input_mask), flat(segment_ids),
                                              deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    vec = nn.Dropout(rate)(pool(enc, flat(input_mask), self.pooling), deterministic=deterministic)
    scores = dense(self.config, 1, (axes.MLP, None), "classifier")(vec).astype(jnp.float32).reshape(b, c)
    if choice_mask is not None:
      scores = jnp.where(choice_mask.astype(bool), scores, -1e9)
    return {"logits": scores}


class BertForTokenClassification(nn.Module):
  """Per-token tagging (NER): sequence output -> dropout -> dense. logits [B, T, num_labels] float32."""

  config: BertConfig
  num_labels: int
  dropout_rate: Optional[float] = None

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    h = nn.Dropout(rate)(token_features(enc), deterministic=deterministic)
    logits = dense(self.config, self.num_labels, (axes.EMBED, None), "classifier")(h)
    return {"logits": logits.astype(jnp.float32)}


class BertForTokenClassificationCRF(nn.Module):
  """Tagging with a linear-chain CRF over the emissions of BertForTokenClassification.

  word_mask [B, T] marks the positions the chain runs over (each word's first sub-token); window_continues /
  window_continued [B] (1 = the row is a window after / before another window of the same sentence) lift the
  start / end constraints there, since a sentence split into windows may be cut inside an entity. Outputs:
  "logits" [B, T, K] (emissions), "crf_transitions" [K, K], "crf_start" / "crf_end" [K] (the learned scores
  plus the scheme's constraints: models.crf.NEG where forbidden; the loss reads them) and, when deterministic,
  "crf_tags" [B, T] int32 (Viterbi path, 0 off the mask); crf_start / crf_end are [B, K]. Packed rows
  (config.max_examples_per_row = E; input_mask numbers the examples): window_continues / window_continued and
  crf_start / crf_end are per example ([B, E], [B, E, K]) and each example is its own chain (crf.packed_*).
  Params: bert, classifier, crf/{transitions, start, end} (replicated: K x K is tiny)."""

  config: BertConfig
  label_list: Sequence[str]
  scheme: str = "BIO"
  dropout_rate: Optional[float] = None
  extra_input_keys = ("word_mask", "window_continues", "window_continued")

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True, word_mask=None,
               window_continues=None, window_continued=None):
    k = len(self.label_list)
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    h = nn.Dropout(rate)(token_features(enc), deterministic=deterministic)
    logits = dense(self.config, k, (axes.EMBED, None), "classifier")(h).astype(jnp.float32)
    pen_start, pen_trans, pen_end = crf.constraint_penalties(crf.transition_constraints(self.label_list,
                                                                                        self.scheme))
    scores = CrfTransitions(k, name="crf")()
    trans = scores["transitions"] + pen_trans
    # per row [B] (packed: per example [B, E]) -> [B, 1] ([B, E, 1]), broadcast against the [K] scores
    slots = (input_ids.shape[0],) + ((self.config.max_examples_per_row,) if self.config.packed else ())
    lift = lambda flag: (jnp.zeros(slots) if flag is None else flag.astype(jnp.float32))[..., None]  # noqa: E731
    start = scores["start"] + pen_start * (1.0 - lift(window_continues))    # [B, K] (packed [B, E, K])
    end = scores["end"] + pen_end * (1.0 - lift(window_continued))          # [B, K] (packed [B, E, K])
    out = {"logits": logits, "crf_transitions": trans, "crf_start": start, "crf_end": end}
    if deterministic:
      mask = (input_mask > 0) if word_mask is None else word_mask
      out["crf_tags"] = (crf.packed_viterbi_decode(logits, mask, input_mask, trans, start, end) if self.config.packed
                         else crf.viterbi_decode(logits, mask, trans, start, end))
    return out


class CrfTransitions(nn.Module):
  """The CRF's learned scores, initialised to 0 (the constraints are added outside, not learned)."""

  num_tags: int

  @nn.compact
  def __call__(self):
    k = self.num_tags
    return {"transitions": self.param("transitions", zeros_init((None, None)), (k, k), jnp.float32),
            "start": self.param("start", zeros_init((None,)), (k,), jnp.float32),
            "end": self.param("end", zeros_init((None,)), (k,), jnp.float32)}


class BertForQuestionAnswering(nn.Module):
  """Extractive QA (SQuAD): sequence output -> dense(2). start/end logits [B, T] float32."""

  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    logits = dense(self.config, 2, (axes.EMBED, None), "qa_outputs")(token_features(enc))
    logits = logits.astype(jnp.float32)
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
