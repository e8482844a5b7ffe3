"""Sequence packing for masked-LM-only pre-training: one stream across documents (RoBERTa's FULL-SENTENCES
inputs, Liu et al. 2019; `data.packing=stream`, alias data.pack_sequences=true), or whole documents packed
best-fit into rows, each its own attention block (`data.packing=documents`, below `pack_whole_documents`).

The stream:

Every row is exactly `max_seq_length` real tokens, `[CLS] t_1 ... t_{T-2} [SEP]`, with no padding: the
documents of an epoch are laid end to end in one token stream (sentences contiguous, in their order, a
`[SEP]` between two documents), and the stream is cut into consecutive windows of `T - 2` tokens. A window
may start or end inside a sentence (the sentence continues in the next row) and may cross one or more
document boundaries. The last window of an epoch wraps around to the start of the stream, so it is full as
well and no token of the corpus is dropped (`PackStats.wrapped_tokens` counts the repeated ones).

There is no sentence pair and no NSP/SOP label (`next_sentence_labels` is all 0; use `targets=("mlm",)`),
and `segment_ids` are all 0. Masking is applied later by the same dynamic masker as for pairs
(`masking.Masker`); `[CLS]` and `[SEP]` (including the document separators) are never selected.

Why: at a fixed number of steps, a packed batch carries ~126 predicted-on context tokens per row, while
BERT's pairs are shorter than `max_seq_length` for `short_seq_prob` of the rows and for every document
shorter than the target (most reviews are ~50 characters): measured in experiments/budget_recipe.md.

    packed = packing.pack_documents(corpus, max_seq_length=128, document_order=order)
    rows = packing.assemble(corpus, packed.take(np.arange(0, 4096)), 128, cls_id, sep_id)
"""

from __future__ import annotations

import dataclasses
import random
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax.input_pipeline import example_packing
from bert_jax.input_pipeline import instances as instances_lib

# Stands for the [SEP] between two documents inside the stream (the real id is filled in by `assemble`).
DOCUMENT_SEPARATOR = -1


@dataclasses.dataclass
class PackStats:
  """What packing did to an epoch's documents (for the run's summary)."""
  rows: int = 0
  tokens: int = 0                  # corpus tokens in the stream (without separators)
  document_separators: int = 0     # [SEP]s inserted between documents
  wrapped_tokens: int = 0          # stream tokens repeated to fill the last row

  def summary_lines(self) -> List[str]:
    return [f"packed rows: {self.rows:,} ({self.tokens:,} tokens, {self.document_separators:,} document "
            f"separators, {self.wrapped_tokens:,} tokens repeated to fill the last row)"]


@dataclasses.dataclass
class PackedRows:
  """An epoch's packed rows as windows into one token stream.

  stream: int32 [S], the epoch's token ids, document after document, DOCUMENT_SEPARATOR between documents
  (and after the last one, which the wrap-around joins to the first); starts: int64 [N], row r holds
  stream[(starts[r] + i) % S] for i in [0, row_tokens); continuation: bool [S] or None (whole-word masking).
  """
  stream: np.ndarray
  starts: np.ndarray
  row_tokens: int
  continuation: Optional[np.ndarray] = None

  def __len__(self):
    return len(self.starts)

  def take(self, idx) -> "PackedRows":
    return dataclasses.replace(self, starts=self.starts[idx])


def pack_documents(corpus: instances_lib.TokenizedCorpus, max_seq_length: int,
                   document_order: Optional[Sequence[int]] = None, rng: Optional[random.Random] = None,
                   stats: Optional[PackStats] = None) -> PackedRows:
  """Lays the documents (in `document_order`, default corpus order) end to end and cuts full rows.

  Returns `ceil(S / (max_seq_length - 2))` rows, S = tokens + one separator per document, in stream order,
  or shuffled with `rng` (training: otherwise a batch holds consecutive windows of the same documents).
  """
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length must be >= 3 to hold [CLS] token [SEP], got {max_seq_length}")
  if corpus.num_documents == 0 or corpus.tokens.size == 0:
    raise ValueError("no documents with tokens to pack")
  order = np.asarray(document_order if document_order is not None else np.arange(corpus.num_documents),
                     dtype=np.int64)
  so, do = corpus.sentence_offsets, corpus.document_offsets
  tok_start = so[do[order]]                        # a document's sentences are contiguous in `tokens`
  tok_len = so[do[order + 1]] - tok_start
  seg_len = tok_len + 1                            # + the separator after each document
  seg_first = np.concatenate([[0], np.cumsum(seg_len)[:-1]])
  size = int(seg_len.sum())
  within = np.arange(size) - np.repeat(seg_first, seg_len)
  src = np.repeat(tok_start, seg_len) + within
  is_sep = within == np.repeat(tok_len, seg_len)
  stream = np.where(is_sep, DOCUMENT_SEPARATOR, corpus.tokens[np.where(is_sep, 0, src)]).astype(np.int32)
  cont = None
  if corpus.continuation is not None:
    cont = np.where(is_sep, False, corpus.continuation[np.where(is_sep, 0, src)])
  row_tokens = max_seq_length - 2
  n_rows = -(-size // row_tokens)
  if stats is not None:
    stats.rows += n_rows
    stats.tokens += int(tok_len.sum())
    stats.document_separators += len(order)
    stats.wrapped_tokens += n_rows * row_tokens - size
  starts = np.arange(n_rows, dtype=np.int64) * row_tokens
  if rng is not None:
    starts = np.random.default_rng(rng.getrandbits(63)).permutation(starts)
  return PackedRows(stream=stream, starts=starts,
                    row_tokens=row_tokens, continuation=cont)


def assemble(corpus, rows: PackedRows, max_seq_length: int, cls_id: int, sep_id: int,
             pad_id: int = 0) -> Dict[str, np.ndarray]:
  """`[CLS] window [SEP]` rows: the same keys and shapes as `instances.assemble` ([N, T] int32 input_ids,
  input_mask (all 1), segment_ids (all 0); next_sentence_labels (all 0) and lengths (all T) [N]; continuation
  bool [N, T] when the stream has it). `corpus` and `pad_id` are unused (packed rows have no padding); they
  keep the signature of `instances.assemble`."""
  del corpus, pad_id
  n, t = len(rows), max_seq_length
  if rows.row_tokens != t - 2:
    raise ValueError(f"rows were packed for max_seq_length {rows.row_tokens + 2}, asked for {t}")
  idx = (rows.starts[:, None] + np.arange(t - 2)[None, :]) % rows.stream.size
  body = rows.stream[idx]
  ids = np.empty((n, t), np.int32)
  ids[:, 0] = cls_id
  ids[:, -1] = sep_id
  ids[:, 1:-1] = np.where(body == DOCUMENT_SEPARATOR, sep_id, body)
  out = {"input_ids": ids, "input_mask": np.ones((n, t), np.int32), "segment_ids": np.zeros((n, t), np.int32),
         "next_sentence_labels": np.zeros(n, np.int32), "lengths": np.full(n, t, np.int32)}
  if rows.continuation is not None:
    cont = np.zeros((n, t), bool)
    cont[:, 1:-1] = rows.continuation[idx]
    cont[:, 1] = False            # a row's first token starts a word for masking purposes
    out["continuation"] = cont
  return out


# ---- data.packing=documents ------------------------------------------------------------------------------------
# Each document is its own example, `[CLS] its tokens [SEP]` (a document longer than a row is cut into row-sized
# pieces, each an example), and the examples are packed best-fit into rows (example_packing.best_fit, at most
# `max_examples` per row). A row's input_mask numbers its examples (models/layers.py's packed-row convention),
# so with BertConfig.max_examples_per_row set (the pre-training plan does) no token attends outside its
# document and positions restart at each [CLS]. Rows are nearly full, like the stream's, but no example sees
# another document (NeoBERT's and ModernBERT's pre-training inputs). MLM-only, as the stream.
@dataclasses.dataclass
class DocumentRows:
  """An epoch's packed document rows: input_ids, input_mask (example ids) int32 [N, T], continuation bool
  [N, T] or None."""
  input_ids: np.ndarray
  input_mask: np.ndarray
  continuation: Optional[np.ndarray] = None
  layout: Optional[example_packing.PackedLayout] = None

  def __len__(self):
    return int(self.input_ids.shape[0])

  def take(self, idx) -> "DocumentRows":
    return dataclasses.replace(self, input_ids=self.input_ids[idx], input_mask=self.input_mask[idx],
                               continuation=None if self.continuation is None else self.continuation[idx])


def pack_whole_documents(corpus: instances_lib.TokenizedCorpus, max_seq_length: int, max_examples: int,
                         cls_id: int, sep_id: int, document_order: Optional[Sequence[int]] = None,
                         rng: Optional[random.Random] = None, seed: int = 0) -> DocumentRows:
  """Whole documents (pieces of at most max_seq_length - 2 tokens) as `[CLS] piece [SEP]` examples, packed
  best-fit into rows of max_seq_length; rows shuffled with `rng` (training), else in packing order."""
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length must be >= 3 to hold [CLS] token [SEP], got {max_seq_length}")
  order = np.asarray(document_order if document_order is not None else np.arange(corpus.num_documents), np.int64)
  so, do = corpus.sentence_offsets, corpus.document_offsets
  body = max_seq_length - 2
  starts, lengths = [], []
  for d in order:
    a, b = int(so[do[d]]), int(so[do[d + 1]])
    for s in range(a, b, body):
      starts.append(s)
      lengths.append(min(body, b - s))
  if not starts:
    raise ValueError("no documents with tokens to pack")
  starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
  pack_seed = rng.getrandbits(63) if rng is not None else seed
  layout = example_packing.best_fit(lengths + 2, max_seq_length, max_examples, seed=pack_seed)
  ids = np.zeros((layout.num_rows, max_seq_length), np.int32)
  mask = np.zeros_like(ids)
  cont = np.zeros(ids.shape, bool) if corpus.continuation is not None else None
  for i in range(len(starts)):
    r, o, n = layout.row[i], layout.offset[i], lengths[i]
    ids[r, o] = cls_id
    ids[r, o + 1:o + 1 + n] = corpus.tokens[starts[i]:starts[i] + n]
    ids[r, o + 1 + n] = sep_id
    mask[r, o:o + n + 2] = layout.slot[i] + 1
    if cont is not None:
      cont[r, o + 1:o + 1 + n] = corpus.continuation[starts[i]:starts[i] + n]
      cont[r, o + 1] = False          # a piece's first token starts a word for masking purposes
  rows = DocumentRows(ids, mask, cont, layout)
  if rng is not None:
    rows = rows.take(np.random.default_rng(rng.getrandbits(63)).permutation(len(rows)))
  return rows


def assemble_documents(corpus, rows: DocumentRows, max_seq_length: int, cls_id: int, sep_id: int,
                       pad_id: int = 0) -> Dict[str, np.ndarray]:
  """Packed document rows with the keys and shapes of `instances.assemble` (segment_ids and
  next_sentence_labels all 0, lengths = real tokens). The ids were written by pack_whole_documents; the other
  arguments keep assemble's signature."""
  del corpus, cls_id, sep_id, pad_id
  if rows.input_ids.shape[1] != max_seq_length:
    raise ValueError(f"rows were packed for max_seq_length {rows.input_ids.shape[1]}, asked for {max_seq_length}")
  n = len(rows)
  out = {"input_ids": rows.input_ids, "input_mask": rows.input_mask, "segment_ids": np.zeros_like(rows.input_ids),
         "next_sentence_labels": np.zeros(n, np.int32), "lengths": (rows.input_mask > 0).sum(1).astype(np.int32)}
  if rows.continuation is not None:
    out["continuation"] = rows.continuation
  return out
