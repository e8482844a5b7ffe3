"""The packed-row convention of models/layers.py: input_mask numbers a row's examples (0 = padding)."""

import jax.numpy as jnp
import numpy as np

from bert_jax.models.layers import example_mask, example_positions, padding_mask


def test_example_positions_restart_at_each_example_and_count_from_zero_on_unpacked_rows():
  ids = jnp.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
  np.testing.assert_array_equal(example_positions(ids)[0, :6], [0, 1, 2, 0, 1, 0])
  np.testing.assert_array_equal(example_positions(ids)[1, :5], np.arange(5))


def test_example_mask_is_block_diagonal_and_never_lets_a_query_see_another_example_or_padding():
  ids = jnp.array([[1, 1, 2, 2, 2, 0]])
  mask = np.asarray(example_mask(ids))[0, 0]
  want = np.zeros((6, 6), bool)
  want[:2, :2] = True
  want[2:5, 2:5] = True
  np.testing.assert_array_equal(mask, want)


def test_example_mask_equals_bert_padding_mask_on_unpacked_rows_for_real_queries():
  ids = jnp.array([[1, 1, 1, 0], [1, 1, 1, 1]])
  full = np.asarray(example_mask(ids))
  padded = np.broadcast_to(np.asarray(padding_mask(ids)), full.shape)
  real = np.asarray(ids) > 0
  np.testing.assert_array_equal(full[:, 0][real], padded[:, 0][real])
