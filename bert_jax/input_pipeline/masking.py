"""Masked-LM selection and 80/10/10 replacement, vectorised in numpy over a batch of sequences.

One implementation serves static masking (offline, `create_pretraining_data`) and dynamic masking (a fresh
mask per epoch inside tf.data via `tf.numpy_function`, seeded per batch so it is deterministic and
resumable). Semantics follow google-research/bert `create_masked_lm_predictions`:

  - candidates: every real token except [CLS], [SEP], [PAD] and [MASK] (the tokenizer never emits the
    latter; padding is outside `input_mask` anyway);
  - number to predict per sequence: `min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))`
    with n = the number of candidates and *stochastic* rounding, so the expected selection rate is exactly
    `masked_lm_prob` (Google rounds `len(tokens) * p` with [CLS]/[SEP] counted, which selects 15.2-15.4%
    of the real tokens at p = 0.15);
  - positions are a uniformly random subset; with whole-word masking, words (a start token plus its
    continuations) are visited in random order and a word is taken whole if it still fits under the
    number to predict, else skipped (Google's greedy rule, run for all rows at once);
  - span masking (`strategy="span"`, SpanBERT, Joshi et al. 2020): repeatedly draw a span length l in words
    from the truncated geometric law P(l) = p (1-p)^(l-1) / Z, l = 1..span_max_length (p = span_geo_p = 0.2,
    at most 10: mean 3.8 words), then a start word uniformly among the free words where l free words in a
    row fit, and take those words whole, until the number to predict is reached. Words are tokens plus their
    continuations (the `continuation` flags: "##" pieces, jieba words, or the records' word_continuation);
    without flags a word is a token. Our rules where SpanBERT's differ: a span never overlaps an earlier one
    or runs past the sequence (SpanBERT clips such spans, so its lengths drift from the law; here every span
    before the first one the budget cuts has exactly its drawn length, `select_spans` returns both), a span
    stops at the first word that would exceed the number to predict (SpanBERT cuts inside a word) and the
    budget left is then filled by further spans that start on a free word that fits (so the count is the
    number to predict, and the rate masked_lm_prob as with token masking, unless no free word fits; stopping
    at the cut selected ~14.5% instead of 15% with 1.7 tokens per word), a span's start word always fits the
    budget left, and when fragmentation leaves no room for l words the span takes the longest free run;
  - each selected position: 80% [MASK], 10% a random token, 10% unchanged; with span masking the draw is per
    span, as SpanBERT does (a whole span is [MASK]ed, or each of its tokens replaced by a random token, or it
    is left unchanged), so the token shares stay 80/10/10 in expectation. Random tokens are drawn from the
    non-special ids (Google draws from the whole vocab, [CLS]/[PAD] included);
  - outputs sorted by position, padded to max_predictions_per_seq with position 0, id 0, weight 0.

`MaskingConfig(google_exact=True)` restores Google's rules where they differ: the count is
`min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))` with len(tokens) the real
tokens including [CLS]/[SEP] (Python's round: half to even), candidates are every real token but [CLS]/[SEP]
([UNK] included), and random replacements come from the whole vocab.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Sequence

import numpy as np

from bert_jax.input_pipeline import tokenization


STRATEGIES = ("token", "whole_word", "span")


def span_length_probs(geo_p: float, max_length: int) -> np.ndarray:
  """float64 [max_length]: P(span length = l) for l = 1..max_length, p (1-p)^(l-1) renormalised (SpanBERT's
  truncated geometric law; p = 0.2, at most 10 gives a mean of 3.8)."""
  if not 0 < geo_p <= 1:
    raise ValueError(f"span_geo_p={geo_p}; expected 0 < p <= 1")
  if int(max_length) != max_length or max_length < 1:
    raise ValueError(f"span_max_length={max_length}; expected an integer >= 1")
  lengths = np.arange(1, int(max_length) + 1)
  w = geo_p * (1.0 - geo_p) ** (lengths - 1)
  return w / w.sum()


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
  vocab_size: int
  mask_id: int
  special_ids: Sequence[int]              # never selected, never used as random replacements
  masked_lm_prob: float = 0.15
  max_predictions_per_seq: int = 20
  mask_token_prob: float = 0.8            # of the selected: replaced by [MASK]
  random_token_prob: float = 0.1          # of the selected: replaced by a random token (rest unchanged)
  strategy: str = "token"                 # token | whole_word | span (STRATEGIES)
  span_geo_p: float = 0.2                 # span: geometric parameter of the span length in words (SpanBERT)
  span_max_length: int = 10               # span: lengths truncated to 1..span_max_length words
  whole_word_mask: bool = False           # alias of strategy="whole_word" (Google's flag name)
  google_exact: bool = False              # Google's count rounding, candidates and replacement pool
  google_excluded_ids: Sequence[int] = ()  # never selected when google_exact: [CLS], [SEP] (and [PAD])

  def __post_init__(self):
    if self.strategy not in STRATEGIES:
      raise ValueError(f"masking strategy {self.strategy!r}; expected one of {STRATEGIES}")
    if self.whole_word_mask and self.strategy == "span":
      raise ValueError("whole_word_mask is an alias of strategy='whole_word'; span masking keeps whole words "
                       "already")
    span_length_probs(self.span_geo_p, self.span_max_length)   # raises ValueError on a bad law

  @property
  def resolved_strategy(self) -> str:
    """The strategy with the whole_word_mask alias applied."""
    return "whole_word" if self.whole_word_mask else self.strategy

  @property
  def uses_words(self) -> bool:
    """Whether word boundaries (continuation flags) change the selection."""
    return self.resolved_strategy in ("whole_word", "span")

  @classmethod
  def from_vocab(cls, vocab, **kwargs) -> "MaskingConfig":
    missing = [t for t in tokenization.SPECIAL_TOKENS if t not in vocab]
    if missing:
      raise ValueError(f"vocab lacks {missing}")
    # A tokenizer.json's vocab also names its other special tokens (tokenization.JsonVocab): never masked.
    specials = sorted({int(vocab[t]) for t in tokenization.SPECIAL_TOKENS} |
                      set(getattr(vocab, "special_token_ids", ())))
    excluded = tuple(sorted({int(vocab[t]) for t in (tokenization.CLS, tokenization.SEP, tokenization.PAD)}))
    return cls(vocab_size=max(vocab.values()) + 1, mask_id=int(vocab[tokenization.MASK]),
               special_ids=tuple(specials), google_excluded_ids=excluded, **kwargs)


def continuation_table(vocab) -> np.ndarray:
  """bool [vocab_size]: True for "##" WordPiece continuation tokens (whole-word masking of English); for a
  tokenizer.json's vocab its own table (tokenization.JsonVocab: a BPE piece continues a word unless it starts
  with a leading-space marker, "Ġ" or "▁", or with a CJK character)."""
  if getattr(vocab, "continuation", None) is not None:
    return vocab.continuation
  table = np.zeros(max(vocab.values()) + 1, dtype=bool)
  for tok, i in vocab.items():
    if tok.startswith("##") and len(tok) > 2:
      table[i] = True
  return table


class Masker:
  """Applies `MaskingConfig` to batches; `__call__(input_ids, input_mask, rng, continuation=None)`."""

  def __init__(self, config: MaskingConfig):
    self.config = config
    special = np.zeros(config.vocab_size, dtype=bool)
    special[list(config.special_ids)] = True
    self._random_pool = np.flatnonzero(~special).astype(np.int32)
    if config.google_exact:
      # Google: candidates are all tokens but [CLS]/[SEP]; replacements from the whole vocab.
      special = np.zeros(config.vocab_size, dtype=bool)
      special[list(config.google_excluded_ids)] = True
      self._random_pool = np.arange(config.vocab_size, dtype=np.int32)
    self._is_special = special
    if self._random_pool.size == 0:
      raise ValueError("vocab has no non-special token to use as a random replacement")
    self._span_probs = span_length_probs(config.span_geo_p, config.span_max_length)

  def select(self, input_ids: np.ndarray, input_mask: np.ndarray, rng: np.random.Generator,
             continuation: Optional[np.ndarray] = None):
    """Returns (selected bool [B, T], num_to_predict int [B])."""
    cand, k = self._candidates(input_ids, input_mask, rng)
    strategy = self.config.resolved_strategy
    if strategy == "span":
      return self._select_spans(cand, continuation, k, rng)[0], k
    if strategy == "whole_word" and continuation is not None:
      return self._select_words(cand, np.asarray(continuation, dtype=bool), k, rng), k
    return self._select_tokens(cand, k, rng), k

  def select_spans(self, input_ids: np.ndarray, input_mask: np.ndarray, rng: np.random.Generator,
                   continuation: Optional[np.ndarray] = None):
    """Span masking with its bookkeeping: (selected bool [B, T], span_id int32 [B, T] (the row-local index of
    the span that took the token, -1 if none), drawn_lengths int32 [B, S] (the length in words drawn for
    each span, 0 past a row's last))."""
    cand, k = self._candidates(input_ids, input_mask, rng)
    return self._select_spans(cand, continuation, k, rng)

  def _candidates(self, input_ids, input_mask, rng):
    """(candidates bool [B, T], number to predict int [B]) by the rules of the module docstring."""
    cfg = self.config
    ids = np.asarray(input_ids)
    b, t = ids.shape
    cand = (np.asarray(input_mask) > 0) & ~self._is_special[np.clip(ids, 0, cfg.vocab_size - 1)]
    n_cand = cand.sum(axis=1)
    if cfg.google_exact:
      # int(round(len(tokens) * p)) over the real tokens incl. [CLS]/[SEP]; np.rint rounds half to even
      # like Python 3's round.
      n_real = (np.asarray(input_mask) > 0).sum(axis=1)
      k = np.rint(n_real * cfg.masked_lm_prob).astype(np.int64)
    else:
      expected = n_cand * cfg.masked_lm_prob
      k = np.floor(expected + rng.random(b)).astype(np.int64)
    k = np.minimum(np.maximum(k, 1), cfg.max_predictions_per_seq)
    k = np.minimum(k, n_cand)
    return cand, k

  def _select_tokens(self, cand, k, rng):
    cfg = self.config
    b, t = cand.shape
    keys = rng.random((b, t), dtype=np.float32)
    keys[~cand] = 2.0
    p = min(cfg.max_predictions_per_seq, t)
    part = np.argpartition(keys, p - 1, axis=1)[:, :p] if p < t else np.tile(np.arange(t), (b, 1))
    part_keys = np.take_along_axis(keys, part, axis=1)
    chosen = np.take_along_axis(part, np.argsort(part_keys, axis=1), axis=1)   # P smallest keys, sorted
    take = np.arange(p)[None, :] < k[:, None]
    selected = np.zeros((b, t), dtype=bool)
    rows = np.broadcast_to(np.arange(b)[:, None], chosen.shape)
    selected[rows[take], chosen[take]] = True
    return selected

  @staticmethod
  def _words(cand, cont):
    """(word index of each token int [B, T] (-1 off the candidates), words per row [B], tokens per word
    [B, T]): a word is a candidate token plus the candidate continuation tokens that follow it."""
    b, t = cand.shape
    starts = cand & ~(cont & np.concatenate([np.zeros((b, 1), bool), cand[:, :-1]], axis=1))
    word = np.cumsum(starts, axis=1) - 1                      # word index of each token (row-local)
    word = np.where(cand, word, -1)
    n_words = starts.sum(axis=1)
    flat = (np.arange(b)[:, None] * t + word)[cand]
    word_len = np.bincount(flat, minlength=b * t).reshape(b, t)   # [B, max words <= T]
    return word, n_words, word_len

  def _select_spans(self, cand, cont, k, rng):
    """Span selection (module docstring), vectorised over rows: one span per row per round."""
    b, t = cand.shape
    cont = np.zeros((b, t), bool) if cont is None else np.asarray(cont, dtype=bool)
    word, n_words, word_len = self._words(cand, cont)
    slot = np.arange(t)[None, :]                              # word slots 0..T-1 (row-local)
    free = slot < n_words[:, None]
    count = np.zeros(b, dtype=np.int64)
    done = (k <= 0) | (n_words == 0)
    word_span = np.full((b, t), -1, dtype=np.int32)
    lengths = np.arange(1, self._span_probs.size + 1)
    drawn = []
    for r in range(int(k.max(initial=0)) + 1):  # every round adds >= 1 token to each live row, or ends it
      if done.all():
        break
      live = ~done
      want = rng.choice(lengths, size=b, p=self._span_probs)
      drawn.append(np.where(live, want, 0))
      # run[w]: free words in a row starting at slot w (next taken/absent slot minus w).
      nxt = np.minimum.accumulate(np.where(free, t, slot)[:, ::-1], axis=1)[:, ::-1]
      run = nxt - slot
      left = k - count
      fits = free & (word_len <= left[:, None])               # a start word must fit the budget left
      room = np.where(fits, run, 0).max(axis=1)
      span = np.minimum(want, room)
      keys = rng.random((b, t), dtype=np.float32)
      keys[~(fits & (run >= span[:, None]))] = 2.0
      start = np.argmin(keys, axis=1)
      inside = live[:, None] & (room > 0)[:, None] & (slot >= start[:, None]) & (slot < (start + span)[:, None])
      tokens = np.cumsum(np.where(inside, word_len, 0), axis=1)
      take = inside & (tokens <= left[:, None])                # a prefix of the span's words
      word_span[take] = r
      free &= ~take
      got = np.where(take, word_len, 0).sum(axis=1)
      count += got
      # A span the budget cuts (its next word would pass it) does not end the row: later rounds fill what is
      # left with spans that start on a word that fits, so the count reaches k as token masking's does.
      done |= (count >= k) | (got == 0)
    span_id = np.where(cand, np.take_along_axis(word_span, np.maximum(word, 0), axis=1), -1).astype(np.int32)
    drawn = np.stack(drawn, axis=1).astype(np.int32) if drawn else np.zeros((b, 0), np.int32)
    return span_id >= 0, span_id, drawn

  def _select_words(self, cand, cont, k, rng):
    b, t = cand.shape
    word, n_words, word_len = self._words(cand, cont)
    keys = rng.random((b, t), dtype=np.float32)
    keys[np.arange(t)[None, :] >= n_words[:, None]] = 2.0
    order = np.argsort(keys, axis=1)
    len_sorted = np.take_along_axis(word_len, order, axis=1)
    count = np.zeros(b, dtype=np.int64)
    take_sorted = np.zeros((b, t), dtype=bool)
    max_words = int(n_words.max()) if b else 0
    for j in range(max_words):  # Google's greedy: skip a word that does not fit, go on to the next
      lj = len_sorted[:, j]
      fits = (lj > 0) & (count + lj <= k)
      take_sorted[:, j] = fits
      count += np.where(fits, lj, 0)
      if j % 8 == 7 and np.all((count >= k) | (j + 1 >= n_words)):
        break
    word_taken = np.zeros((b, t), dtype=bool)
    np.put_along_axis(word_taken, order, take_sorted, axis=1)
    selected = cand & np.take_along_axis(word_taken, np.maximum(word, 0), axis=1)
    return selected

  def __call__(self, input_ids: np.ndarray, input_mask: np.ndarray, rng: np.random.Generator,
               continuation: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """Masks a batch. Returns input_ids (masked copy), masked_lm_positions, masked_lm_ids (int32 [B, P]),
    masked_lm_weights (float32 [B, P])."""
    cfg = self.config
    ids = np.asarray(input_ids)
    b, t = ids.shape
    p = cfg.max_predictions_per_seq
    span_id = None
    if cfg.resolved_strategy == "span":
      selected, span_id, _ = self.select_spans(ids, input_mask, rng, continuation)
    else:
      selected, _ = self.select(ids, input_mask, rng, continuation)
    n_sel = selected.sum(axis=1)
    # Positions in ascending order: a stable sort puts selected (False in ~selected) first.
    order = np.argsort(~selected, axis=1, kind="stable")
    if t < p:
      order = np.concatenate([order, np.zeros((b, p - t), order.dtype)], axis=1)
    positions = order[:, :p]
    valid = np.arange(p)[None, :] < n_sel[:, None]
    positions = np.where(valid, positions, 0).astype(np.int32)
    labels = np.where(valid, np.take_along_axis(ids, positions, axis=1), 0).astype(np.int32)
    if span_id is None:
      u = rng.random((b, p), dtype=np.float32)
    else:   # one draw per span (SpanBERT): every token of a span gets its span's draw
      u_span = rng.random((b, t + 1), dtype=np.float32)
      u = np.take_along_axis(u_span, np.maximum(np.take_along_axis(span_id, positions, axis=1), 0), axis=1)
    random_ids = self._random_pool[rng.integers(0, self._random_pool.size, size=(b, p))]
    new = np.where(u < cfg.mask_token_prob, cfg.mask_id,
                   np.where(u < cfg.mask_token_prob + cfg.random_token_prob, random_ids, labels))
    out_ids = np.array(ids, dtype=np.int32, copy=True)
    rows = np.broadcast_to(np.arange(b)[:, None], positions.shape)
    out_ids[rows[valid], positions[valid]] = new[valid]
    return {"input_ids": out_ids, "masked_lm_positions": positions, "masked_lm_ids": labels,
            "masked_lm_weights": valid.astype(np.float32)}


def unmask(input_ids: np.ndarray, masked_lm_positions: np.ndarray, masked_lm_ids: np.ndarray,
           masked_lm_weights: np.ndarray) -> np.ndarray:
  """Restores the original ids of a statically masked batch (e.g. Google's records) for re-masking."""
  ids = np.array(input_ids, dtype=np.int32, copy=True)
  valid = np.asarray(masked_lm_weights) > 0
  rows = np.broadcast_to(np.arange(ids.shape[0])[:, None], valid.shape)
  ids[rows[valid], np.asarray(masked_lm_positions)[valid]] = np.asarray(masked_lm_ids)[valid]
  return ids
