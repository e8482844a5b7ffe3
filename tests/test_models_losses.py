"""Loss and metric functions against small NumPy references."""

import numpy as np
import pytest

from bert_jax.models import losses
from bert_jax.models.pretraining import pretraining_loss


def _np_ce(logits, labels):
  z = logits - logits.max(-1, keepdims=True)
  logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  return -np.take_along_axis(logp, labels[..., None], -1)[..., 0]


def test_masked_lm_loss_and_accuracy_use_masked_lm_weights():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(4, 5, 11)).astype(np.float32)
  ids = rng.integers(0, 11, (4, 5))
  ids[0, 0] = logits[0, 0].argmax()   # at least one correct prediction
  weights = np.array([[1, 1, 1, 0, 0]] * 4, np.float32)
  weights[3] = 0
  m = losses.masked_lm_sums(logits, ids, weights)
  nll = _np_ce(logits, ids)
  np.testing.assert_allclose(m["mlm_loss_sum"], (nll * weights).sum(), rtol=1e-5)
  np.testing.assert_allclose(m["mlm_correct_sum"], ((logits.argmax(-1) == ids) * weights).sum())
  assert m["mlm_weight_sum"] == 9
  # Changing logits at zero-weight positions changes nothing.
  logits2 = logits.copy()
  logits2[:, 3:] += 100 * rng.normal(size=(4, 2, 11))
  m2 = losses.masked_lm_sums(logits2, ids, weights)
  np.testing.assert_allclose(m2["mlm_loss_sum"], m["mlm_loss_sum"], rtol=1e-5)


@pytest.mark.parametrize("target", ["nsp", "sop"])
def test_sentence_pair_loss_matches_numpy(target):
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(6, 2)).astype(np.float32)
  labels = rng.integers(0, 2, (6, 1))     # Google's TFRecords store next_sentence_labels as [B, 1]
  m = losses.sentence_pair_sums(logits, labels, target)
  np.testing.assert_allclose(m[f"{target}_loss_sum"], _np_ce(logits, labels[:, 0]).sum(), rtol=1e-5)
  assert m[f"{target}_correct_sum"] == (logits.argmax(-1) == labels[:, 0]).sum()
  assert m[f"{target}_count"] == 6


def test_causal_lm_loss_predicts_next_real_token():
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(2, 6, 9)).astype(np.float32)
  ids = rng.integers(0, 9, (2, 6))
  mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
  m = losses.causal_lm_sums(logits, ids, mask)
  nll = _np_ce(logits[:, :-1], ids[:, 1:])
  np.testing.assert_allclose(m["lm_loss_sum"], (nll * mask[:, 1:]).sum(), rtol=1e-5)
  assert m["lm_weight_sum"] == 5 + 2


def test_pretraining_loss_is_weighted_mlm_mean_plus_nsp_mean():
  rng = np.random.default_rng(3)
  out = {"mlm_logits": rng.normal(size=(3, 4, 7)).astype(np.float32),
         "nsp_logits": rng.normal(size=(3, 2)).astype(np.float32)}
  batch = {"masked_lm_ids": rng.integers(0, 7, (3, 4)), "masked_lm_weights": np.ones((3, 4), np.float32),
           "next_sentence_labels": rng.integers(0, 2, (3,))}
  batch["masked_lm_weights"][:, 2:] = 0
  loss, m = pretraining_loss(out, batch, ("mlm", "nsp"))
  mlm = (_np_ce(out["mlm_logits"], batch["masked_lm_ids"]) * batch["masked_lm_weights"]).sum() / (6 + 1e-5)
  nsp = _np_ce(out["nsp_logits"], batch["next_sentence_labels"]).mean()
  np.testing.assert_allclose(loss, mlm + nsp, rtol=1e-5)
  norm = losses.normalize_metrics({k: float(v) for k, v in m.items()})
  np.testing.assert_allclose(norm["mlm_loss"], mlm * (6 + 1e-5) / 6, rtol=1e-5)
  assert 0 <= norm["nsp_accuracy"] <= 1 and "mlm_accuracy" in norm
