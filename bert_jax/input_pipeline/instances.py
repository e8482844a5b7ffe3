"""Pre-training sentence pairs with google-research/bert `create_pretraining_data.py` semantics, on ids.

A corpus is tokenized once into a `TokenizedCorpus`: every token of every document in one flat int32 array,
with sentence and document boundaries as offsets. A segment is then a contiguous slice of that array, so an
instance is just four numbers (A start/end, B start/end) and all instances are assembled into
`[num_instances, max_seq_length]` arrays with a few vectorised numpy gathers. The per-instance Python work
is the decision logic below, so record creation runs at tens of thousands of instances/s per core.

Semantics (Google's, per document, `max_num_tokens = max_seq_length - 3`):
  - target length = max_num_tokens, or with probability `short_seq_prob` uniform in [2, max_num_tokens];
  - sentences are added to a chunk until it reaches the target or the document ends; A takes the first
    `a_end` sentences (uniform in [1, len(chunk) - 1]);
  - NSP: with probability 0.5 B is taken from a random *other* document (uniform over the others, starting
    at a random sentence, filled to the remaining target) and the chunk's unused sentences are put back;
    otherwise B is the rest of the chunk. Label 1 = random next, 0 = actual next;
  - SOP (ALBERT): B is always the actual next segment; with probability 0.5 A and B are swapped (label 1);
  - the pair is truncated to max_num_tokens, one token at a time from the longer segment, each time from
    the front or the back with probability 0.5 (done here in closed form: the per-segment deletion counts
    follow Google's loop exactly and the front/back split is Binomial(n, 1/2));
  - `[CLS] A [SEP] B [SEP]`, segment_ids 0 for `[CLS] A [SEP]` and 1 for `B [SEP]`.

Deviations, each counted in `PairStats`:
  - A chunk of a single sentence (a one-sentence document, or a sentence longer than the target): Google
    always makes it a random-next pair, which pushes the random-next rate above 50% (most with
    `short_seq_prob` targets of a few tokens). Here such a sentence is split at a random token into A and B,
    and the usual 50% coin decides; a one-token sentence in a one-sentence chunk still gets a random B.
  - The random document is drawn uniformly among the *other* documents (Google retries up to 10 times and
    can, rarely, pick the same one).
  - A sentence longer than max_num_tokens is split into pieces of max_num_tokens tokens
    (`long_sentence_policy="split"`, counted) rather than cut to fit by truncation; "truncate" drops the
    tokens past the limit (counted); "keep" is Google's behaviour (the sentence stays whole and the pair
    truncation above cuts it, from the front or the back at random).

`create_pairs(..., google_exact=True)` restores Google's rules for the first two as well: a one-sentence
chunk always gets a random next, and the random document is drawn up to 10 times from all documents (it may
end up the same document). With `build_corpus(long_sentence_policy="keep")` the pairs then follow Google's
`create_instances_from_document` exactly (up to the random stream).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax.input_pipeline import tokenization

# The pair kinds (data.pair_mode, create_pretraining_data --pair_mode), named as the objective whose label they
# hold in next_sentence_labels (models/objectives/nsp.py, sop.py):
RANDOM_NEXT = "nsp"   # B is A's actual next text (0) or a random text from another document (1): BERT's NSP
SWAPPED = "sop"       # B is A's next text in order (0) or swapped with A (1): ALBERT's SOP
PAIR_MODES = (RANDOM_NEXT, SWAPPED)
# Documents a pair kind needs: a random next comes from another document.
MIN_DOCUMENTS = {RANDOM_NEXT: 2, SWAPPED: 1}


@dataclasses.dataclass
class TokenizedCorpus:
  """Documents of sentences of token ids, stored flat.

  tokens: int32 [num_tokens]; sentence_offsets: int64 [num_sentences + 1] (sentence s is
  tokens[sentence_offsets[s]:sentence_offsets[s + 1]]); document_offsets: int64 [num_documents + 1]
  (document d holds sentences document_offsets[d]..document_offsets[d + 1] - 1); continuation:
  optional bool [num_tokens], True where a token continues the previous token's word (whole-word masking).
  """
  tokens: np.ndarray
  sentence_offsets: np.ndarray
  document_offsets: np.ndarray
  continuation: Optional[np.ndarray] = None

  @property
  def num_documents(self) -> int:
    return len(self.document_offsets) - 1

  @property
  def num_sentences(self) -> int:
    return len(self.sentence_offsets) - 1

  def document(self, d: int) -> List[np.ndarray]:
    s0, s1 = self.document_offsets[d], self.document_offsets[d + 1]
    return [self.tokens[self.sentence_offsets[s]:self.sentence_offsets[s + 1]] for s in range(s0, s1)]

  def select_documents(self, doc_indices: Sequence[int]) -> "TokenizedCorpus":
    """A corpus holding only the given documents (in the given order)."""
    sent_ranges = [(self.document_offsets[d], self.document_offsets[d + 1]) for d in doc_indices]
    sents = np.concatenate([np.arange(a, b) for a, b in sent_ranges]) if sent_ranges else np.zeros(0, int)
    starts, ends = self.sentence_offsets[sents], self.sentence_offsets[sents + 1]
    lengths = ends - starts
    tok_idx = (np.repeat(starts - np.cumsum(np.concatenate([[0], lengths[:-1]])), lengths)
               + np.arange(lengths.sum())) if len(sents) else np.zeros(0, int)
    doc_counts = np.array([b - a for a, b in sent_ranges], dtype=np.int64)
    return TokenizedCorpus(
        tokens=self.tokens[tok_idx],
        sentence_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        document_offsets=np.concatenate([[0], np.cumsum(doc_counts)]).astype(np.int64),
        continuation=None if self.continuation is None else self.continuation[tok_idx])


@dataclasses.dataclass
class CorpusStats:
  """What tokenization dropped or changed (printed in the summary)."""
  documents_in: int = 0
  sentences_in: int = 0
  empty_sentences: int = 0          # lines with no tokens after cleaning (e.g. only control characters)
  empty_documents: int = 0          # documents left with no sentence
  single_sentence_documents: int = 0
  long_sentences: int = 0           # sentences longer than max_num_tokens
  long_sentence_tokens_dropped: int = 0
  long_sentences_kept: bool = False  # long_sentence_policy="keep" (Google's)
  unk_tokens: int = 0
  tokens: int = 0

  def summary_lines(self) -> List[str]:
    out = [f"documents: {self.documents_in:,} in, {self.documents_in - self.empty_documents:,} kept; "
           f"sentences: {self.sentences_in:,}; tokens: {self.tokens:,} "
           f"([UNK] {100.0 * self.unk_tokens / max(self.tokens, 1):.2f}%)"]
    if self.empty_sentences:
      out.append(f"skipped lines with no tokens: {self.empty_sentences:,}")
    if self.empty_documents:
      out.append(f"skipped documents with no tokens: {self.empty_documents:,}")
    if self.single_sentence_documents:
      out.append(f"single-sentence documents: {self.single_sentence_documents:,} (kept; see the pair "
                 "counts for how their pairs were made)")
    if self.long_sentences:
      msg = (f"dropped {self.long_sentence_tokens_dropped:,} tokens past the limit"
             if self.long_sentence_tokens_dropped else "split into pieces of max_seq_length - 3 tokens"
             if not self.long_sentences_kept else "kept whole; the pair truncation cuts them (Google)")
      out.append(f"sentences longer than max_seq_length - 3: {self.long_sentences:,} ({msg})")
    return out


def build_corpus(documents: Sequence[Sequence[Sequence[int]]], max_num_tokens: int,
                 continuation: Optional[Sequence[Sequence[Sequence[bool]]]] = None,
                 long_sentence_policy: str = "split", unk_id: Optional[int] = None,
                 stats: Optional[CorpusStats] = None) -> TokenizedCorpus:
  """Flattens documents of token-id sentences; drops empty sentences/documents; handles long sentences.

  long_sentence_policy: "split" (pieces of max_num_tokens), "truncate" (keep the first max_num_tokens
  tokens) or "keep" (Google's: whole, cut later by the pair truncation).
  """
  if long_sentence_policy not in ("split", "truncate", "keep"):
    raise ValueError(f"long_sentence_policy must be 'split', 'truncate' or 'keep', got "
                     f"{long_sentence_policy!r}")
  stats = stats if stats is not None else CorpusStats()
  pieces, cont_pieces, sent_lens, doc_counts = [], [], [], []
  for d, doc in enumerate(documents):
    stats.documents_in += 1
    n_sent = 0
    for s, sent in enumerate(doc):
      stats.sentences_in += 1
      arr = np.asarray(sent, dtype=np.int32)
      if arr.size == 0:
        stats.empty_sentences += 1
        continue
      cont = None if continuation is None else np.asarray(continuation[d][s], dtype=bool)
      if arr.size > max_num_tokens:
        stats.long_sentences += 1
        if long_sentence_policy == "keep":
          stats.long_sentences_kept = True
          pieces.append(arr)
          if cont is not None:
            cont_pieces.append(cont)
          sent_lens.append(arr.size)
          n_sent += 1
          continue
        if long_sentence_policy == "truncate":
          stats.long_sentence_tokens_dropped += arr.size - max_num_tokens
          arr = arr[:max_num_tokens]
          cont = None if cont is None else cont[:max_num_tokens]
      for start in range(0, arr.size, max_num_tokens):
        piece = arr[start:start + max_num_tokens]
        pieces.append(piece)
        if cont is not None:
          c = cont[start:start + max_num_tokens].copy()
          c[0] = False  # a piece starts a word for masking purposes
          cont_pieces.append(c)
        sent_lens.append(piece.size)
        n_sent += 1
    if n_sent == 0:
      stats.empty_documents += 1
      continue
    if n_sent == 1:
      stats.single_sentence_documents += 1
    doc_counts.append(n_sent)
  tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
  stats.tokens += int(tokens.size)
  if unk_id is not None:
    stats.unk_tokens += int(np.count_nonzero(tokens == unk_id))
  return TokenizedCorpus(
      tokens=tokens,
      sentence_offsets=np.concatenate([[0], np.cumsum(sent_lens, dtype=np.int64)]).astype(np.int64),
      document_offsets=np.concatenate([[0], np.cumsum(doc_counts, dtype=np.int64)]).astype(np.int64),
      continuation=(np.concatenate(cont_pieces) if cont_pieces else np.zeros(0, bool))
      if continuation is not None else None)


@dataclasses.dataclass
class PairStats:
  instances: int = 0
  random_next: int = 0
  single_sentence_chunks_split: int = 0   # one-sentence chunks split inside the sentence (see module doc)
  single_token_forced_random: int = 0     # one-token one-sentence chunks: B from another document
  single_token_skipped_sop: int = 0       # SOP cannot use a one-token one-sentence chunk
  single_sentence_chunks_random: int = 0  # google_exact: one-sentence chunks given a random next (Google)
  random_same_document: int = 0           # google_exact: 10 draws all hit the chunk's own document
  truncated_pairs: int = 0

  def summary_lines(self) -> List[str]:
    out = [f"pairs: {self.instances:,} (label 1: {100.0 * self.random_next / max(self.instances, 1):.2f}%)"]
    if self.single_sentence_chunks_split:
      out.append(f"one-sentence chunks split inside the sentence: {self.single_sentence_chunks_split:,}")
    if self.single_token_forced_random:
      out.append(f"one-token chunks given a random B (no true next): {self.single_token_forced_random:,}")
    if self.single_token_skipped_sop:
      out.append(f"skipped one-token chunks (SOP needs two segments): {self.single_token_skipped_sop:,}")
    if self.single_sentence_chunks_random:
      out.append(f"one-sentence chunks given a random next (Google): {self.single_sentence_chunks_random:,}")
    if self.random_same_document:
      out.append(f"random next taken from the same document (Google's 10 draws): "
                 f"{self.random_same_document:,}")
    out.append(f"pairs truncated to fit: {self.truncated_pairs:,}")
    return out


@dataclasses.dataclass
class Pairs:
  """Instances as segment spans into `TokenizedCorpus.tokens` (int64 arrays [num_instances])."""
  a_start: np.ndarray
  a_end: np.ndarray
  b_start: np.ndarray
  b_end: np.ndarray
  next_sentence_labels: np.ndarray   # int32: NSP 1 = random next; SOP 1 = swapped
  document: np.ndarray               # document index of segment A
  b_document: np.ndarray             # document index of segment B

  def __len__(self):
    return len(self.a_start)

  def take(self, idx) -> "Pairs":
    return Pairs(*(getattr(self, f.name)[idx] for f in dataclasses.fields(self)))


def _truncation_counts(la: int, lb: int, max_num_tokens: int):
  """Tokens Google's `truncate_seq_pair` removes from A and from B (always from the longer one)."""
  excess = la + lb - max_num_tokens
  da = db = 0
  if excess <= 0:
    return 0, 0
  if la > lb:
    k = min(excess, la - lb)
    da += k
  else:
    k = min(excess, lb - la)
    db += k
  excess -= k
  if excess > 0:  # now equal lengths: B loses first (ties go to B), then they alternate
    db += (excess + 1) // 2
    da += excess // 2
  return da, db


def create_pairs(corpus: TokenizedCorpus, max_seq_length: int, short_seq_prob: float = 0.1,
                 pair_mode: str = RANDOM_NEXT, dupe_factor: int = 1, rng: Optional[random.Random] = None,
                 stats: Optional[PairStats] = None, shuffle: bool = True,
                 document_order: Optional[Sequence[int]] = None, google_exact: bool = False) -> Pairs:
  """Google's pair creation over every document, `dupe_factor` times; returns spans, shuffled.

  pair_mode: one of PAIR_MODES, RANDOM_NEXT (BERT next-sentence prediction) or SWAPPED (ALBERT sentence-order
    prediction).
  google_exact: one-sentence chunks always get a random next and the random document takes up to 10 draws
    from all documents (Google's `create_instances_from_document`); NSP only.
  """
  if pair_mode not in PAIR_MODES:
    raise ValueError(f"pair_mode must be one of {PAIR_MODES}, got {pair_mode!r}")
  rng = rng if rng is not None else random.Random(12345)
  stats = stats if stats is not None else PairStats()
  max_num_tokens = max_seq_length - 3
  if max_num_tokens < 2:
    raise ValueError(f"max_seq_length must be >= 5 to hold [CLS] A [SEP] B [SEP], got {max_seq_length}")
  n_docs = corpus.num_documents
  if n_docs == 0:
    raise ValueError("no documents with tokens to make pairs from")
  if google_exact and pair_mode != RANDOM_NEXT:
    raise ValueError(f"google_exact reproduces Google's NSP pairs; it cannot be combined with "
                     f"pair_mode={pair_mode!r}")
  if n_docs < MIN_DOCUMENTS[pair_mode]:
    raise ValueError("next-sentence prediction needs at least 2 documents (random next comes from another "
                     f"document); separate documents with a blank line, or use pair_mode={SWAPPED!r}")
  so = corpus.sentence_offsets.tolist()
  do = corpus.document_offsets.tolist()
  out = ([], [], [], [], [], [], [])
  a_s, a_e, b_s, b_e, lab, docs, bdocs = out
  rand, randint, getrandbits = rng.random, rng.randint, rng.getrandbits
  order = list(document_order) if document_order is not None else list(range(n_docs))
  is_nsp = pair_mode == RANDOM_NEXT

  for _ in range(dupe_factor):
    for d in order:
      s_first, s_last = do[d], do[d + 1]          # sentences s_first .. s_last - 1
      target = max_num_tokens
      if rand() < short_seq_prob:
        target = randint(2, max_num_tokens)
      chunk_start = s_first
      cur_len = 0
      i = s_first
      while i < s_last:
        cur_len += so[i + 1] - so[i]
        if i == s_last - 1 or cur_len >= target:
          n_chunk = i - chunk_start + 1
          a0 = so[chunk_start]
          is_random = False
          if n_chunk >= 2:
            a_end_sent = chunk_start + randint(1, n_chunk - 1)
            a1 = so[a_end_sent]
            b0, b1 = a1, so[i + 1]
            if is_nsp and rand() < 0.5:
              is_random = True
          elif google_exact:                         # Google: len(current_chunk) == 1 -> random next
            a_end_sent = chunk_start + 1
            is_random = True
            a1 = so[i + 1]
            stats.single_sentence_chunks_random += 1
          else:
            a_end_sent = chunk_start + 1
            sent_len = so[i + 1] - so[i]
            if sent_len >= 2:
              if is_nsp and rand() < 0.5:
                is_random = True
                a1 = so[i + 1]                       # Google: A = the whole sentence
              else:
                a1 = a0 + randint(1, sent_len - 1)   # split the sentence: A | B
                b0, b1 = a1, so[i + 1]
                stats.single_sentence_chunks_split += 1
            elif is_nsp:
              is_random = True
              a1 = so[i + 1]
              stats.single_token_forced_random += 1
            else:
              stats.single_token_skipped_sop += 1
              chunk_start, cur_len = i + 1, 0
              i += 1
              continue
          bd = d
          if is_random:
            target_b = target - (a1 - a0)
            if google_exact:
              for _ in range(10):
                r = randint(0, n_docs - 1)
                if r != d:
                  break
              stats.random_same_document += r == d
            else:
              r = randint(0, n_docs - 2)
              r = r + 1 if r >= d else r
            bd = r
            rs0, rs1 = do[r], do[r + 1]
            j = randint(rs0, rs1 - 1)
            b0 = so[j]
            while True:
              b1 = so[j + 1]
              j += 1
              if b1 - b0 >= target_b or j >= rs1:
                break
            # Put back the chunk's sentences B did not use.
            i -= (i + 1) - a_end_sent
          la, lb = a1 - a0, b1 - b0
          if la + lb > max_num_tokens:
            da, db = _truncation_counts(la, lb, max_num_tokens)
            if da:
              front = bin(getrandbits(da)).count("1")
              a0 += front
              a1 -= da - front
            if db:
              front = bin(getrandbits(db)).count("1")
              b0 += front
              b1 -= db - front
            stats.truncated_pairs += 1
          label = 1 if is_random else 0
          if not is_nsp and rand() < 0.5:
            a0, a1, b0, b1 = b0, b1, a0, a1
            label = 1
          a_s.append(a0)
          a_e.append(a1)
          b_s.append(b0)
          b_e.append(b1)
          lab.append(label)
          docs.append(d)
          bdocs.append(bd)
          chunk_start = i + 1
          cur_len = 0
        i += 1

  pairs = Pairs(np.asarray(a_s, np.int64), np.asarray(a_e, np.int64), np.asarray(b_s, np.int64),
                np.asarray(b_e, np.int64), np.asarray(lab, np.int32), np.asarray(docs, np.int64),
                np.asarray(bdocs, np.int64))
  stats.instances += len(pairs)
  stats.random_next += int(pairs.next_sentence_labels.sum())
  if shuffle and len(pairs):
    perm = list(range(len(pairs)))
    rng.shuffle(perm)
    pairs = pairs.take(np.asarray(perm))
  return pairs


def assemble(corpus: TokenizedCorpus, pairs: Pairs, max_seq_length: int, cls_id: int, sep_id: int,
             pad_id: int = 0) -> Dict[str, np.ndarray]:
  """`[CLS] A [SEP] B [SEP]` rows, vectorised over all pairs.

  Returns int32 input_ids/input_mask/segment_ids [N, T], next_sentence_labels [N], lengths [N], and
  continuation bool [N, T] when the corpus has it ([CLS]/[SEP]/padding are never continuations).
  """
  n, t = len(pairs), max_seq_length
  la = (pairs.a_end - pairs.a_start)[:, None]
  lb = (pairs.b_end - pairs.b_start)[:, None]
  if n and int((la + lb).max()) > t - 3:
    raise ValueError(f"a pair has {int((la + lb).max())} tokens, more than max_seq_length - 3 = {t - 3}")
  pos = np.arange(t, dtype=np.int64)[None, :]
  in_a = (pos >= 1) & (pos <= la)
  in_b = (pos >= la + 2) & (pos <= la + lb + 1)
  src = np.where(in_a, pairs.a_start[:, None] + pos - 1, pairs.b_start[:, None] + pos - la - 2)
  is_tok = in_a | in_b
  src = np.where(is_tok, src, 0)
  toks = corpus.tokens[src] if corpus.tokens.size else np.zeros((n, t), np.int32)
  ids = np.where(is_tok, toks, pad_id).astype(np.int32)
  ids[:, 0] = cls_id
  rows = np.arange(n)
  ids[rows, la[:, 0] + 1] = sep_id
  length = la[:, 0] + lb[:, 0] + 3
  ids[rows, length - 1] = sep_id
  input_mask = (pos < length[:, None]).astype(np.int32)
  segment_ids = ((pos >= la + 2) & (pos < length[:, None])).astype(np.int32)
  out = {"input_ids": ids, "input_mask": input_mask, "segment_ids": segment_ids,
         "next_sentence_labels": pairs.next_sentence_labels.astype(np.int32),
         "lengths": length.astype(np.int32)}
  if corpus.continuation is not None:
    cont = corpus.continuation[src] & is_tok
    # A segment's first token starts a word even when truncation cut the word's front off.
    cont[rows, 1] = False
    cont[rows, la[:, 0] + 2] = False
    out["continuation"] = cont
  return out


def special_ids_from_vocab(vocab) -> Dict[str, int]:
  """{"pad", "unk", "cls", "sep", "mask"} ids, with a clear error naming a missing token."""
  out = {}
  for name, token in (("pad", tokenization.PAD), ("unk", tokenization.UNK), ("cls", tokenization.CLS),
                      ("sep", tokenization.SEP), ("mask", tokenization.MASK)):
    if token not in vocab:
      raise ValueError(f"vocab lacks {token}")
    out[name] = int(vocab[token])
  return out
