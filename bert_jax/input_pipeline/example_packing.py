"""Packing whole examples into rows: several short examples share one `max_seq_length` row, and each keeps its
own [CLS]/[SEP], token types, positions and attention block (models/layers.py's packed-row convention:
`input_mask` numbers a row's examples, 0 = padding, k >= 1 = the row's k-th example).

    layout = best_fit(lengths, seq_len=128, max_examples=8, seed=0)    # which row and slot each example takes
    rows = pack_features(features, layout, token_keys=("input_ids", "input_mask", "segment_ids"))
    outputs = unpack_outputs(row_outputs, layout, token_level=False)   # back to one entry per example, in order

Greedy best fit (Graphcore's packed BERT and Krell et al. 2021 call it "best-fit decreasing"): examples go in
decreasing length (ties in a seeded random order), each into the open row with the least room that still fits
it; a row closes when it holds `max_examples` examples. Pure NumPy (no TensorFlow): fine-tuning and
prediction use it.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PackedLayout:
  """Where each of N examples lies: row `row[n]`, slot `slot[n]` (0-based; input_mask holds slot + 1), tokens
  `offset[n] : offset[n] + length[n]` of that row."""

  row: np.ndarray       # int64 [N]
  slot: np.ndarray      # int64 [N]
  offset: np.ndarray    # int64 [N]
  length: np.ndarray    # int64 [N]
  num_rows: int
  seq_len: int
  max_examples: int

  @property
  def num_examples(self) -> int:
    return int(self.row.shape[0])

  @property
  def padding_before(self) -> float:
    """Share of the tokens of one padded row per example that are padding."""
    n = self.num_examples
    return 1.0 - float(self.length.sum()) / max(1, n * self.seq_len)

  @property
  def padding_after(self) -> float:
    """Share of the tokens of the packed rows that are padding."""
    return 1.0 - float(self.length.sum()) / max(1, self.num_rows * self.seq_len)

  def summary(self) -> dict:
    """What a plan / summary reports: examples, rows, examples per row and the padding share before and after."""
    return {"examples": self.num_examples, "rows": self.num_rows,
            "examples_per_row": round(self.num_examples / max(1, self.num_rows), 2),
            "padding_before": round(self.padding_before, 4), "padding_after": round(self.padding_after, 4)}

  def describe(self) -> str:
    s = self.summary()
    return (f"{s['examples']} examples in {s['rows']} rows ({s['examples_per_row']} per row, at most "
            f"{self.max_examples}); padding {100 * s['padding_before']:.1f}% -> {100 * s['padding_after']:.1f}%")


def lengths_of(input_mask: np.ndarray) -> np.ndarray:
  """Real tokens per unpacked row [N] (right padding: real tokens first, as every featurizer here writes)."""
  return (np.asarray(input_mask) > 0).sum(axis=-1).astype(np.int64)


def best_fit(lengths: Sequence[int], seq_len: int, max_examples: int, seed: int = 0) -> PackedLayout:
  """Greedy best-fit-decreasing packing of examples of `lengths` tokens into rows of `seq_len` tokens, at most
  `max_examples` per row; deterministic for `seed` (which orders examples of equal length). Raises ValueError
  on a length outside 1..seq_len or a cap below 1 (the plans check both first, as a user's error)."""
  lengths = np.asarray(lengths, np.int64)
  if max_examples < 1:
    raise ValueError(f"max_examples={max_examples}; expected >= 1 examples per row")
  if lengths.size and (lengths.min() < 1 or lengths.max() > seq_len):
    raise ValueError(f"example lengths must lie in 1..{seq_len}, got {lengths.min()}..{lengths.max()}")
  n = lengths.shape[0]
  order = np.random.default_rng(seed).permutation(n)
  order = order[np.argsort(-lengths[order], kind="stable")]       # longest first, seeded among equals
  # open rows by the room they have left: room -> row ids (a stack, so the newest row of that room is taken)
  by_room = [[] for _ in range(seq_len + 1)]
  room, count = [], []
  row = np.zeros(n, np.int64)
  slot = np.zeros(n, np.int64)
  offset = np.zeros(n, np.int64)
  for i in order:
    need = int(lengths[i])
    r = -1
    for left in range(need, seq_len + 1):       # best fit: the least room that holds the example
      if by_room[left]:
        r = by_room[left].pop()
        break
    if r < 0:
      r = len(room)
      room.append(seq_len)
      count.append(0)
    row[i], slot[i], offset[i] = r, count[r], seq_len - room[r]
    room[r] -= need
    count[r] += 1
    if count[r] < max_examples and room[r] > 0:
      by_room[room[r]].append(r)
  return PackedLayout(row, slot, offset, lengths, len(room), int(seq_len), int(max_examples))


def pack_features(features: Mapping[str, np.ndarray], layout: PackedLayout, token_keys: Sequence[str],
                  pad_values: Optional[Mapping[str, int]] = None) -> Dict[str, np.ndarray]:
  """Per-example features [N, ...] -> packed rows. token_keys ([N, T] each, real tokens first) are laid end to
  end: [R, T], padding `pad_values[key]` (0 unless given); input_mask becomes the example ids (slot + 1).
  Every other key is per example and goes to its slot: [N, ...] -> [R, K, ...] (empty slots 0). Adds
  `example_weight` [R, K] (1 where a slot holds an example), which the losses weigh examples by."""
  pad_values = dict(pad_values or {})
  r, k, t = layout.num_rows, layout.max_examples, layout.seq_len
  # token index arrays: for every real token of every example, its (row, column) and its source (example, column)
  src_col = np.concatenate([np.arange(m) for m in layout.length]) if layout.num_examples else np.zeros(0, np.int64)
  src_ex = np.repeat(np.arange(layout.num_examples), layout.length)
  dst_row = np.repeat(layout.row, layout.length)
  dst_col = np.repeat(layout.offset, layout.length) + src_col
  out: Dict[str, np.ndarray] = {}
  for key, value in features.items():
    value = np.asarray(value)
    if key in token_keys:
      packed = np.full((r, t) + value.shape[2:], pad_values.get(key, 0), value.dtype)
      if key == "input_mask":
        packed[dst_row, dst_col] = (layout.slot + 1)[src_ex].astype(value.dtype)
      else:
        packed[dst_row, dst_col] = value[src_ex, src_col]
    else:
      packed = np.zeros((r, k) + value.shape[1:], value.dtype)
      packed[layout.row, layout.slot] = value
    out[key] = packed
  weight = np.zeros((r, k), np.float32)
  weight[layout.row, layout.slot] = 1.0
  out["example_weight"] = weight
  return out


def unpack_outputs(outputs: Mapping[str, np.ndarray], layout: PackedLayout, token_level: bool) -> Dict[str, np.ndarray]:
  """Per-row outputs back to one entry per example, in the examples' order. Sentence level: [R, K, ...] ->
  [N, ...]. Token level: [R, T, ...] -> [N, T, ...], each example's tokens at 0..length-1, zeros after."""
  out = {}
  for key, value in outputs.items():
    value = np.asarray(value)
    if not token_level:
      out[key] = value[layout.row, layout.slot]
      continue
    t = layout.seq_len
    unpacked = np.zeros((layout.num_examples, t) + value.shape[2:], value.dtype)
    src_col = (np.concatenate([np.arange(m) for m in layout.length]) if layout.num_examples
               else np.zeros(0, np.int64))
    ex = np.repeat(np.arange(layout.num_examples), layout.length)
    unpacked[ex, src_col] = value[np.repeat(layout.row, layout.length), np.repeat(layout.offset, layout.length) + src_col]
    out[key] = unpacked
  return out
