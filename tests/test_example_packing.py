"""The best-fit packer: every example placed once, inside its row, within the cap; deterministic per seed;
features packed and outputs unpacked round-trip."""

import numpy as np
import pytest

from bert_jax.input_pipeline import example_packing as ep


def _check_layout(layout, lengths, seq_len, cap):
  assert layout.num_examples == len(lengths)
  assert np.all(layout.offset + layout.length <= seq_len)
  for r in range(layout.num_rows):
    mine = np.flatnonzero(layout.row == r)
    assert 1 <= len(mine) <= cap
    assert sorted(layout.slot[mine].tolist()) == list(range(len(mine)))
    spans = sorted((int(layout.offset[i]), int(layout.offset[i] + layout.length[i])) for i in mine)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))     # no two examples overlap


def test_best_fit_places_every_example_once_within_its_row_and_the_cap():
  rng = np.random.default_rng(0)
  lengths = rng.integers(1, 65, 500)
  layout = ep.best_fit(lengths, 64, max_examples=3, seed=0)
  _check_layout(layout, lengths, 64, 3)
  assert layout.padding_after < layout.padding_before
  assert layout.num_rows >= max(np.ceil(lengths.sum() / 64), np.ceil(500 / 3))


def test_best_fit_is_deterministic_for_a_seed_and_fills_rows_to_within_a_few_percent():
  lengths = np.random.default_rng(1).integers(4, 60, 2000)
  a, b = ep.best_fit(lengths, 128, 8, seed=5), ep.best_fit(lengths, 128, 8, seed=5)
  np.testing.assert_array_equal(a.row, b.row)
  np.testing.assert_array_equal(a.offset, b.offset)
  assert a.padding_after < 0.05 < 0.5 < a.padding_before
  assert a.summary()["rows"] == a.num_rows and "padding" in a.describe()


def test_best_fit_refuses_a_zero_cap_and_an_example_longer_than_the_row():
  with pytest.raises(ValueError, match="max_examples=0"):
    ep.best_fit([3, 4], 8, 0)
  with pytest.raises(ValueError, match="1..8"):
    ep.best_fit([3, 9], 8, 2)


def test_pack_features_and_unpack_outputs_round_trip_tokens_and_per_example_values():
  lengths = np.array([3, 5, 2, 6])
  t = 8
  ids = np.zeros((4, t), np.int32)
  mask = np.zeros((4, t), np.int32)
  for i, m in enumerate(lengths):
    ids[i, :m] = 10 * (i + 1) + np.arange(m)
    mask[i, :m] = 1
  labels = np.array([-100, 7, 8, 9])[:, None] * np.ones((1, t), np.int32)
  feats = {"input_ids": ids, "input_mask": mask, "tags": np.where(mask > 0, labels, -100), "label": np.arange(4)}
  layout = ep.best_fit(lengths, t, 2)
  rows = ep.pack_features(feats, layout, ("input_ids", "input_mask", "tags"), pad_values={"tags": -100})
  assert rows["input_ids"].shape == (layout.num_rows, t) and rows["label"].shape == (layout.num_rows, 2)
  assert set(np.unique(rows["input_mask"])) <= {0, 1, 2}
  assert (rows["tags"][rows["input_mask"] == 0] == -100).all()
  assert rows["example_weight"].sum() == 4
  back = ep.unpack_outputs({"ids": rows["input_ids"]}, layout, token_level=True)["ids"]
  np.testing.assert_array_equal(np.where(mask > 0, back, 0), ids)
  np.testing.assert_array_equal(ep.unpack_outputs({"l": rows["label"]}, layout, token_level=False)["l"], np.arange(4))
