"""models/crf.py against brute-force enumeration of every tag path, and the BIO/BIOES constraints."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.models import crf


def _path_score(em, path, trans, start, end):
  s = start[path[0]] + end[path[-1]] + sum(em[i, t] for i, t in enumerate(path))
  return s + sum(trans[a, b] for a, b in zip(path[:-1], path[1:]))


def _brute(em, mask, trans, start, end):
  """(log Z, best path) over the masked-in positions of one row, by enumeration."""
  pos = np.flatnonzero(mask)
  k = em.shape[1]
  scores = {p: _path_score(em[pos], p, trans, start, end) for p in itertools.product(range(k), repeat=len(pos))}
  log_z = np.logaddexp.reduce(np.array(list(scores.values())))
  return log_z, pos, max(scores, key=scores.get), scores


def _random(rng, b, t, k):
  return (rng.normal(size=(b, t, k)).astype(np.float32), rng.normal(size=(k, k)).astype(np.float32),
          rng.normal(size=k).astype(np.float32), rng.normal(size=k).astype(np.float32))


def test_log_likelihood_and_viterbi_equal_brute_force_with_padding_and_holes():
  rng = np.random.default_rng(0)
  k, t = 3, 6
  # Rows: full length, padded, sub-token holes + padding, a single position, [CLS]/[SEP]-style edges.
  masks = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0], [0, 1, 0, 1, 1, 0], [0, 0, 1, 0, 0, 0],
                    [0, 1, 1, 1, 1, 0]], np.int32)
  em, trans, start, end = _random(rng, len(masks), t, k)
  tags = rng.integers(0, k, size=(len(masks), t)).astype(np.int32)
  tags[masks == 0] = -100          # ignored labels off the mask, as NER features carry them
  ll = jax.jit(crf.crf_log_likelihood)(em, tags, masks, trans, start, end)
  best = jax.jit(crf.viterbi_decode)(em, masks, trans, start, end)
  for r in range(len(masks)):
    log_z, pos, path, scores = _brute(em[r], masks[r], trans, start, end)
    gold = tuple(int(x) for x in tags[r, pos])
    np.testing.assert_allclose(float(ll[r]), scores[gold] - log_z, rtol=1e-5, atol=1e-5)
    assert tuple(np.asarray(best[r])[pos]) == path
    assert not np.asarray(best[r])[masks[r] == 0].any()


def test_empty_row_has_zero_log_likelihood_and_probabilities_sum_to_one():
  rng = np.random.default_rng(1)
  k, t = 2, 3
  em, trans, start, end = _random(rng, 1, t, k)
  paths = np.array(list(itertools.product(range(k), repeat=t)), np.int32)            # every path, one batch
  n = len(paths)
  mask = np.concatenate([np.ones((n, t)), np.zeros((1, t))])                          # + an empty row
  ll = jax.jit(crf.crf_log_likelihood)(np.repeat(em, n + 1, 0), np.concatenate([paths, paths[:1]]), mask,
                                        trans, start, end)
  assert float(np.sum(np.exp(np.asarray(ll[:n], np.float64)))) == pytest.approx(1.0, abs=1e-5)
  assert float(ll[n]) == 0.0


def test_gradient_is_finite_with_constraints():
  rng = np.random.default_rng(2)
  labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  ps, pt, pe = crf.constraint_penalties(crf.transition_constraints(labels, "BIO"))
  em, trans, start, end = _random(rng, 2, 5, len(labels))
  tags = np.array([[0, 1, 2, 0, 3], [3, 4, 4, 0, -100]])
  mask = tags != -100
  g = jax.jit(jax.grad(lambda e: -jnp.sum(crf.crf_log_likelihood(e, tags, mask, trans + pt, start + ps,
                                                                   end + pe))))(em)
  assert np.isfinite(np.asarray(g)).all()


def test_bio_constraints():
  labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  c = crf.transition_constraints(labels, "BIO")
  i = {l: n for n, l in enumerate(labels)}
  assert list(c.start) == [True, True, False, True, False]          # no sentence starts with I-X
  assert c.end.all()
  assert c.transitions[i["B-PER"], i["I-PER"]] and c.transitions[i["I-PER"], i["I-PER"]]
  assert not c.transitions[i["O"], i["I-PER"]] and not c.transitions[i["B-LOC"], i["I-PER"]]
  assert not c.transitions[i["I-LOC"], i["I-PER"]]
  assert c.transitions[i["I-PER"], i["B-PER"]] and c.transitions[i["O"], i["B-LOC"]]


def test_bioes_constraints_and_constrained_viterbi_never_emits_an_invalid_path():
  labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
  c = crf.transition_constraints(labels, "BIOES")
  i = {l: n for n, l in enumerate(labels)}
  assert list(c.start) == [True, True, False, False, True]
  assert list(c.end) == [True, False, False, True, True]             # an open entity must close with E-X
  assert c.transitions[i["B-PER"], i["E-PER"]] and not c.transitions[i["B-PER"], i["O"]]
  assert not c.transitions[i["E-PER"], i["I-PER"]] and c.transitions[i["E-PER"], i["S-PER"]]
  # Emissions that favour I-PER everywhere: the constrained path must still be valid.
  ps, pt, pe = crf.constraint_penalties(c)
  em = np.zeros((1, 4, 5), np.float32)
  em[..., i["I-PER"]] = 5.0
  z = np.zeros(5, np.float32)
  path = [labels[x] for x in np.asarray(jax.jit(crf.viterbi_decode)(em, np.ones((1, 4)), np.zeros((5, 5)) + pt,
                                                          z + ps, z + pe))[0]]
  assert path == ["B-PER", "I-PER", "I-PER", "E-PER"]
  with pytest.raises(UserError, match="BIO scheme"):
    crf.transition_constraints(["O", "S-PER"], "BIO")


def test_windows_cut_inside_an_entity_lift_the_start_constraint():
  """A sentence split into windows may continue an entity: with per-row start scores the gold path of such a
  window keeps a normal likelihood, while a first window starting with I-X stays forbidden."""
  labels = ["O", "B-LOC", "I-LOC"]
  ps, pt, pe = crf.constraint_penalties(crf.transition_constraints(labels, "BIO"))
  em = np.zeros((2, 3, 3), np.float32)
  tags = np.array([[2, 2, 0], [2, 2, 0]])                     # I-LOC I-LOC O in both rows
  continues = np.array([1.0, 0.0])[:, None]
  start = ps[None] * (1.0 - continues)                          # row 0 continues a sentence, row 1 does not
  ll = np.asarray(jax.jit(crf.crf_log_likelihood)(em, tags, np.ones((2, 3)), pt, start, pe))
  assert ll[0] > -10 and ll[1] < -1000
  best = np.asarray(jax.jit(crf.viterbi_decode)(em + 3.0 * (np.arange(3) == 2), np.ones((2, 3)), pt, start, pe))
  assert best[0, 0] == 2 and best[1, 0] != 2
