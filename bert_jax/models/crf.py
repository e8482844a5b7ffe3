"""Linear-chain CRF for tagging: the log-likelihood (forward algorithm in log space), Viterbi decoding and the
BIO / BIOES transition constraints, as pure JAX functions (jit-able, any mesh: the transition tables are
tiny and replicated).

    allowed = transition_constraints(["O", "B-PER", "I-PER"], "BIO")   # Constraints of booleans
    ll = crf_log_likelihood(emissions, tags, mask, transitions, start, end)   # [B]
    best = viterbi_decode(emissions, mask, transitions, start, end)          # [B, T] int32, 0 where masked
    ll = packed_log_likelihood(emissions, tags, mask, example_ids, transitions, start, end)   # [B, E] packed rows
    best = packed_viterbi_decode(emissions, mask, example_ids, transitions, start, end)       # [B, T]

Shapes: emissions [B, T, K] float32 (the per-position tag scores), tags / mask [B, T], transitions [K, K]
(score of tag i followed by tag j), start / end [K] or per row [B, K] (score of the first / last tag; per row
when some rows are windows in the middle of a sentence, which may start inside an entity). `mask` may have holes
(sub-tokens after a word's first one, [CLS], [SEP], padding): the chain runs over the masked-in positions
only, in order, so with first-sub-token masks the CRF links words, consistent with how the softmax head labels
word pieces. A row with no masked-in position has log-likelihood 0 and decodes to all zeros.

Packed rows (several examples per row; example_ids [B, T] numbers them 1..E, 0 = padding, as input_mask does in
models/layers.py) keep each example its own chain: start / end are per example [B, E, K], the start and end
scores fall on each example's own first / last masked-in position, no transition links two examples, and each
example has its own log-partition and Viterbi path. The E examples of a row are laid out as E rows of the
unpacked functions, each keeping only its example's positions ([B * E, T]), so the numbers are the unpacked
ones (tests/test_packing_equality.py).

Constraints are applied by adding `NEG` to the scores of forbidden transitions (not -inf, so no NaN appears
in the gradients); a forbidden path then has probability ~e^-10000 = 0.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError

NEG = -1e4   # score added to a forbidden transition / start / end
SCHEMES = ("BIO", "BIOES")


@dataclasses.dataclass(frozen=True)
class Constraints:
  start: np.ndarray        # [K] bool: the tag may begin a sentence
  transitions: np.ndarray  # [K, K] bool: tag i may be followed by tag j
  end: np.ndarray          # [K] bool: the tag may end a sentence


def _split_tag(tag: str):
  if tag == "O":
    return "O", ""
  prefix, sep, kind = tag.partition("-")
  if not sep or len(prefix) != 1:
    return None, tag     # not a scheme tag: unconstrained
  return prefix.upper(), kind


def transition_constraints(label_list: Sequence[str], scheme: str = "BIO") -> Constraints:
  """Which starts, transitions and ends are valid for tags named `B-X`, `I-X` (and `E-X`, `S-X` for BIOES)
  and `O`. BIO (IOB2): I-X follows only B-X or I-X, and no sentence starts with I-X. BIOES additionally:
  B-X and I-X must be followed by I-X or E-X (so a sentence cannot end on them), and E-X, S-X, O are followed
  by O, B-* or S-*. Tags outside the scheme (no `P-` prefix) are left unconstrained."""
  scheme = scheme.upper()
  if scheme not in SCHEMES:
    raise UserError(f"ner_scheme={scheme!r}; expected one of {SCHEMES}")
  parts = [_split_tag(t) for t in label_list]
  allowed_prefixes = set("BIO") if scheme == "BIO" else set("BIOES")
  for t, (p, _) in zip(label_list, parts):
    if p is not None and p not in allowed_prefixes:
      raise UserError(f"tag {t!r} does not belong to the {scheme} scheme (prefixes {sorted(allowed_prefixes)}); "
                      "set --config.ner_scheme to the files' scheme (BIO or BIOES)")
  k = len(label_list)
  start = np.ones(k, bool)
  end = np.ones(k, bool)
  trans = np.ones((k, k), bool)
  for j, (pj, kj) in enumerate(parts):
    if pj in ("I", "E"):
      start[j] = False                       # an entity cannot start inside or at its end
    if scheme == "BIOES" and pj in ("B", "I"):
      end[j] = False                         # an open entity must close with E-X
  for i, (pi, ki) in enumerate(parts):
    for j, (pj, kj) in enumerate(parts):
      if pi is None or pj is None:
        continue
      if scheme == "BIO":
        ok = pj != "I" or (pi in ("B", "I") and ki == kj)
      else:
        if pi in ("B", "I"):                 # inside an entity: continue or close the same type
          ok = pj in ("I", "E") and ki == kj
        else:                                # outside (after O, E-X, S-X): no continuation
          ok = pj in ("O", "B", "S")
      trans[i, j] = ok
  return Constraints(start, trans, end)


def constraint_penalties(constraints: Constraints):
  """(start [K], transitions [K, K], end [K]) float32 arrays: 0 where allowed, NEG where forbidden."""
  f = lambda a: np.where(a, 0.0, NEG).astype(np.float32)  # noqa: E731
  return f(constraints.start), f(constraints.transitions), f(constraints.end)


def _compact(mask):
  """Per row, the positions with mask=1 first (in order), then the others: (order [B, T], lengths [B])."""
  mask = mask.astype(bool)
  order = jnp.argsort(jnp.logical_not(mask).astype(jnp.int32), axis=1, stable=True)
  return order, jnp.sum(mask, axis=1).astype(jnp.int32)


def _gather(x, order):
  if x.ndim == 3:
    return jnp.take_along_axis(x, order[:, :, None], axis=1)
  return jnp.take_along_axis(x, order, axis=1)


def crf_log_likelihood(emissions, tags, mask, transitions, start, end):
  """log p(tags | emissions) per row [B] float32 (0 for rows with no masked-in position). The gold path is
  read at the masked-in positions only; tags elsewhere are ignored (may be -100)."""
  emissions = jnp.asarray(emissions, jnp.float32)
  b, t, k = emissions.shape
  transitions = jnp.asarray(transitions, jnp.float32)
  start, end = (jnp.broadcast_to(jnp.asarray(x, jnp.float32), (b, k)) for x in (start, end))
  order, lengths = _compact(jnp.asarray(mask))
  tags = jnp.asarray(tags)
  em = _gather(emissions, order)                                    # [B, T, K], valid prefix of `lengths`
  tg = jnp.clip(_gather(tags, order), 0, k - 1)                     # [B, T]
  valid = jnp.arange(t)[None, :] < lengths[:, None]                 # [B, T]
  # Gold score: start + emissions + transitions between consecutive valid positions + end.
  em_gold = jnp.take_along_axis(em, tg[:, :, None], axis=2)[..., 0]                  # [B, T]
  score = jnp.take_along_axis(start, tg[:, :1], axis=1)[:, 0] + jnp.sum(jnp.where(valid, em_gold, 0.0), axis=1)
  tr_gold = transitions[tg[:, :-1], tg[:, 1:]]                                        # [B, T-1]
  score = score + jnp.sum(jnp.where(valid[:, 1:], tr_gold, 0.0), axis=1)
  last = jnp.take_along_axis(tg, jnp.maximum(lengths - 1, 0)[:, None], axis=1)[:, 0]
  score = score + jnp.take_along_axis(end, last[:, None], axis=1)[:, 0]
  # Partition function: alpha_t(j) = logsumexp_i(alpha_{t-1}(i) + trans(i, j)) + em_t(j), frozen past the end.
  alpha0 = start + em[:, 0]

  def step(alpha, xs):
    em_t, valid_t = xs
    nxt = jax.nn.logsumexp(alpha[:, :, None] + transitions[None], axis=1) + em_t
    return jnp.where(valid_t[:, None], nxt, alpha), None

  alpha, _ = jax.lax.scan(step, alpha0, (jnp.swapaxes(em[:, 1:], 0, 1), jnp.swapaxes(valid[:, 1:], 0, 1)))
  log_z = jax.nn.logsumexp(alpha + end, axis=1)
  return jnp.where(lengths > 0, score - log_z, 0.0)


def viterbi_decode(emissions, mask, transitions, start, end):
  """The highest-scoring tag path [B, T] int32 at the masked-in positions (0 elsewhere)."""
  emissions = jnp.asarray(emissions, jnp.float32)
  b, t, k = emissions.shape
  transitions = jnp.asarray(transitions, jnp.float32)
  start, end = (jnp.broadcast_to(jnp.asarray(x, jnp.float32), (b, k)) for x in (start, end))
  mask = jnp.asarray(mask)
  order, lengths = _compact(mask)
  em = _gather(emissions, order)
  valid = jnp.arange(t)[None, :] < lengths[:, None]
  delta0 = start + em[:, 0]

  def forward(delta, xs):
    em_t, valid_t = xs
    cand = delta[:, :, None] + transitions[None]                    # [B, K(prev), K(next)]
    best_prev = jnp.argmax(cand, axis=1).astype(jnp.int32)           # [B, K]
    nxt = jnp.max(cand, axis=1) + em_t
    # Past the end the score is frozen and the back-pointer is the identity (the tag stays put).
    keep = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32)[None], best_prev.shape)
    return jnp.where(valid_t[:, None], nxt, delta), jnp.where(valid_t[:, None], best_prev, keep)

  delta, back = jax.lax.scan(forward, delta0, (jnp.swapaxes(em[:, 1:], 0, 1), jnp.swapaxes(valid[:, 1:], 0, 1)))
  last_tag = jnp.argmax(delta + end, axis=1).astype(jnp.int32)   # [B]

  def backward(tag, bp):                                            # bp [B, K]: best previous of each tag
    prev = jnp.take_along_axis(bp, tag[:, None], axis=1)[:, 0]
    return prev, tag

  first, path_rev = jax.lax.scan(backward, last_tag, back, reverse=True)
  path = jnp.concatenate([first[:, None], jnp.swapaxes(path_rev, 0, 1)], axis=1)   # [B, T] compacted
  path = jnp.where(valid, path, 0)
  # Scatter back to the original positions.
  out = jnp.zeros((b, t), jnp.int32)
  out = out.at[jnp.arange(b)[:, None], order].set(path)
  return jnp.where(mask.astype(bool), out, 0)


def example_chain_mask(mask, example_ids, num_examples: int):
  """[B, T] chain mask and example ids -> bool [B * E, T]: row b * E + e keeps the masked-in positions of
  example e + 1 of row b (E = num_examples)."""
  b, t = mask.shape
  slots = jnp.asarray(example_ids).astype(jnp.int32)[:, None, :] == jnp.arange(1, num_examples + 1)[None, :, None]
  return (slots & jnp.asarray(mask).astype(bool)[:, None, :]).reshape(b * num_examples, t)


def packed_log_likelihood(emissions, tags, mask, example_ids, transitions, start, end):
  """log p(tags | emissions) of each example of packed rows [B, E] float32 (0 for an empty slot); start / end
  [B, E, K] (module docstring)."""
  b, e, k = start.shape
  rows = lambda x: jnp.repeat(jnp.asarray(x), e, axis=0)   # noqa: E731  row b -> rows b * E .. b * E + E - 1
  ll = crf_log_likelihood(rows(emissions), rows(tags), example_chain_mask(mask, example_ids, e), transitions,
                          start.reshape(b * e, k), end.reshape(b * e, k))
  return ll.reshape(b, e)


def packed_viterbi_decode(emissions, mask, example_ids, transitions, start, end):
  """The highest-scoring tag path of each example of packed rows, laid back in the rows: [B, T] int32 (0 off
  the mask); start / end [B, E, K] (module docstring)."""
  b, e, k = start.shape
  t = mask.shape[1]
  paths = viterbi_decode(jnp.repeat(jnp.asarray(emissions), e, axis=0), example_chain_mask(mask, example_ids, e),
                         transitions, start.reshape(b * e, k), end.reshape(b * e, k))
  return jnp.sum(paths.reshape(b, e, t), axis=1)    # each position lies in one example's row (0 in the others)
