"""One shard of raw text -> its masked NSP/SOP instances -> its TFRecord files, alone.

`build_shard` is the unit of work of `create_pretraining_data`: its local driver runs it in worker processes
and `beam_pipeline` runs it on Beam's workers. A shard (sharding.py) draws the random next document from its
own documents, and every random stream is seeded by (random_seed, shard index, dupe round), so a shard's bytes
do not depend on which worker made it, or when. The flags these settings come from are documented in
create_pretraining_data.py.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.input_pipeline import instances as instances_lib
from bert_jax.input_pipeline import masking
from bert_jax.input_pipeline import sharding
from bert_jax.input_pipeline import text_io
from bert_jax.input_pipeline import tfrecord_io
from bert_jax.input_pipeline import tokenization


class NoInstancesError(UserError, ValueError):
  """The input made no instance (too few documents with tokens, only blank lines, ...): the user's input, so
  the CLI prints one `error:` line (local driver and Beam alike); a ValueError for library callers."""


@dataclasses.dataclass
class Config:
  """create_pretraining_data's flags that shape the instances (the same names)."""
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  random_seed: int = 12345
  dupe_factor: int = 10
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  do_lower_case: bool = True
  do_whole_word_mask: bool = False         # Google's flag: the old name of masking_strategy="whole_word"
  masking_strategy: str = "token"          # token | whole_word | span (masking.py)
  span_geo_p: float = 0.2                  # span lengths in words: P(l) ~ p (1-p)^(l-1), l <= span_max_length
  span_max_length: int = 10
  chinese_wwm: bool = False
  pair_mode: str = instances_lib.RANDOM_NEXT
  long_sentence_policy: str = "split"      # "keep" under google_exact
  tokenizer_backend: str = "auto"
  google_exact: bool = False               # Google's rules where ours differ (module docstring)
  allow_invalid_utf8: bool = False         # read on past > 1% of lines that are not UTF-8 (skipped, counted)

  @property
  def word_boundaries(self) -> bool:
    """Whether the words of each token are tracked (and stored as word_continuation)."""
    return self.chinese_wwm or self.do_whole_word_mask or self.masking_strategy != "token"

  def resolved_long_sentence_policy(self) -> str:
    return "keep" if self.google_exact else self.long_sentence_policy


def jieba_segmenter():
  """(name, cut): `cut(line) -> list of words`, jieba's default mode (HMM on). `rjieba` (jieba-rs, Rust: the
  same dictionary and algorithm, ~13x faster; identical words on the 36k lines of the news benchmark) when
  installed, else `jieba` (pure Python)."""
  try:
    import rjieba  # pylint: disable=g-import-not-at-top  # lazy: optional, only for --chinese_wwm
    return "rjieba", rjieba.cut
  except ImportError:
    pass
  try:
    import jieba  # pylint: disable=g-import-not-at-top  # lazy: optional, only for --chinese_wwm
  except ImportError as e:
    raise ImportError("--chinese_wwm needs jieba (pip install jieba; rjieba is a faster drop-in)") from e
  jieba.setLogLevel(60)
  return "jieba", jieba.lcut


def require_jieba(what: str) -> None:
  """UserError naming `what` (the flag or field) when no jieba segmenter is installed: found before any
  work, not as an ImportError traceback from the first shard."""
  try:
    jieba_segmenter()
  except ImportError as e:
    raise UserError(f"{what} segments Chinese words with jieba, which is not installed: pip install jieba "
                    "(or rjieba, a faster drop-in)") from e


def _jieba_continuation(lines: Sequence[str], spans: Sequence[Sequence[tuple]], cut=None) -> List[np.ndarray]:
  """Per line, bool per token: True when the token starts inside a jieba word (Chinese BERT-wwm).
  Each distinct line is segmented once."""
  cut = cut or jieba_segmenter()[1]
  out = []
  seen: Dict[str, np.ndarray] = {}
  for line, sp in zip(lines, spans):
    hit = seen.get(line)
    if hit is None:
      inside = np.ones(len(line) + 1, dtype=bool)   # True: the character continues a word
      pos = 0
      for w in cut(line):
        inside[pos] = False
        pos += len(w)
      starts = np.fromiter((s for s, _ in sp), dtype=np.int64, count=len(sp))
      hit = inside[starts] if len(sp) else np.zeros(0, bool)
      seen[line] = hit
    out.append(hit)
  return out


def _chinese_wwm_vectorised(batch_tok, lines: Sequence[str], cut, cont_table: np.ndarray):
  """(ids, continuation) per line for Chinese whole-word masking, vectorised over all lines: a token
  continues a word when it starts inside a jieba word (or is a "##" piece). The distinct lines are joined
  with "\n" and segmented in one call (jieba never joins characters across a newline); the token offsets
  come from `encode_joined`."""
  joined, ids, starts, bounds, text_starts = batch_tok.encode_joined(lines)
  n = len(lines)
  ends = np.append(text_starts[1:] - 1, len(joined)).tolist()
  plain = [joined[a:b] for a, b in zip(text_starts.tolist(), ends)]   # odd lines are "" in `joined`
  distinct = dict.fromkeys(plain)
  if len(distinct) == n:
    seg_text, line_start_in_seg = joined, text_starts
  else:                                                # segment each distinct line once
    index = {line: i for i, line in enumerate(distinct)}
    seg_text = "\n".join(distinct)
    seg_starts = np.concatenate([[0], np.cumsum([len(x) + 1 for x in distinct])[:-1]]).astype(np.int64)
    line_start_in_seg = seg_starts[np.fromiter(map(index.__getitem__, plain), np.int64, n)]
  word_len = np.fromiter(map(len, cut(seg_text)), np.int64)
  if int(word_len.sum()) != len(seg_text):             # a segmenter that does not cover every character
    spans = batch_tok.encode_batch_with_offsets(lines)
    jc = _jieba_continuation(lines, spans[1], cut)
    arrs = [np.asarray(x, np.int32) for x in spans[0]]
    return arrs, [c | cont_table[a] for a, c in zip(arrs, jc)]
  inside = np.ones(len(seg_text) + 1, dtype=bool)      # True: the character continues a word
  inside[np.cumsum(word_len) - word_len] = False
  ok = starts >= 0
  line_of = np.clip(np.searchsorted(text_starts, starts, side="right") - 1, 0, max(n - 1, 0))
  pos = line_start_in_seg[line_of] + (starts - text_starts[line_of]) if n else starts
  cont = np.where(ok, inside[np.where(ok, pos, 0)], False) | cont_table[ids]
  if not ok.all():                                     # texts that took the exact path: per-text jieba
    for i in np.unique(np.searchsorted(bounds, np.flatnonzero(~ok), side="right") - 1):
      line = lines[i]
      toks, spans = batch_tok.tokenizer.tokenize_with_offsets(line)
      del toks
      cont[bounds[i]:bounds[i + 1]] = (_jieba_continuation([line], [spans], cut)[0]
                                       | cont_table[ids[bounds[i]:bounds[i + 1]]])
  b = bounds.tolist()
  return [ids[b[i]:b[i + 1]] for i in range(n)], [cont[b[i]:b[i + 1]] for i in range(n)]


def progress_bar(iterable=None, total=None, desc="", enabled=True):
  """A tqdm bar on stderr, or a no-op when not `enabled`."""
  if not enabled:
    return iterable if iterable is not None else _NullBar()
  try:
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top  # lazy: optional, progress bars only
  except ImportError:
    return iterable if iterable is not None else _NullBar()
  return tqdm(iterable, total=total, desc=desc, unit_scale=True, dynamic_ncols=True, file=sys.stderr)


class _NullBar:
  def update(self, n=1):
    pass

  def close(self):
    pass


def tokenize_documents(documents: List[List[str]], tokenizer: tokenization.FullTokenizer,
                       cfg: Config, progress: bool = False, chunk_lines: int = 50_000):
  """Token ids per sentence per document (+ per-token continuation flags for whole-word masking)."""
  batch_tok = tokenization.fast_batch_tokenizer(tokenizer, cfg.tokenizer_backend)
  lines = [s for doc in documents for s in doc]
  ids: List = []
  conts: Optional[List] = [] if cfg.word_boundaries else None
  cont_table = masking.continuation_table(tokenizer.vocab)
  cut = jieba_segmenter()[1] if cfg.chinese_wwm else None
  bar = progress_bar(total=len(lines), desc="tokenize", enabled=progress)
  for start in range(0, len(lines), chunk_lines):
    chunk = lines[start:start + chunk_lines]
    if cfg.chinese_wwm and hasattr(batch_tok, "encode_joined"):
      chunk_ids, chunk_conts = _chinese_wwm_vectorised(batch_tok, chunk, cut, cont_table)
      ids.extend(chunk_ids)
      conts.extend(chunk_conts)
    elif cfg.chinese_wwm:
      chunk_ids, spans = batch_tok.encode_batch_with_offsets(chunk)
      jc = _jieba_continuation(chunk, spans, cut)
      for x, c in zip(chunk_ids, jc):
        arr = np.asarray(x, dtype=np.int32)
        conts.append(c | cont_table[arr])
        ids.append(arr)
    else:
      if hasattr(batch_tok, "encode_arrays"):
        chunk_ids = batch_tok.encode_arrays(chunk)
      else:
        chunk_ids = [np.asarray(x, dtype=np.int32) for x in batch_tok.encode_batch(chunk)]
      ids.extend(chunk_ids)
      if conts is not None:
        conts.extend(cont_table[arr] for arr in chunk_ids)
    if cfg.google_exact:
      # Lines with Cn/Co/Cs characters: Google's tokenizer keeps them (our fast paths drop them).
      base = len(ids) - len(chunk)
      for j in tokenization.google_control_differences(chunk):
        arr = np.asarray(tokenizer.encode(chunk[j]) if tokenizer.control_chars == "google" else
                         _google_tokenizer(tokenizer).encode(chunk[j]), dtype=np.int32)
        ids[base + j] = arr
        if conts is not None:
          conts[base + j] = cont_table[arr]
    bar.update(len(chunk))
  bar.close()
  docs_ids, docs_cont, k = [], [] if conts is not None else None, 0
  for doc in documents:
    docs_ids.append(ids[k:k + len(doc)])
    if conts is not None:
      docs_cont.append(conts[k:k + len(doc)])
    k += len(doc)
  return docs_ids, docs_cont, batch_tok.backend


def _google_tokenizer(tokenizer: tokenization.FullTokenizer) -> tokenization.FullTokenizer:
  return tokenization.FullTokenizer(tokenizer.vocab_file, do_lower_case=tokenizer.do_lower_case,
                                    control_chars="google")


@dataclasses.dataclass
class ShardResult:
  """What one shard produced (returned by `build_shard`, from a worker process or a Beam worker)."""
  index: int
  files: List[str]
  counts: List[int]
  read: text_io.ReadStats
  corpus: instances_lib.CorpusStats
  pairs: instances_lib.PairStats
  masked: float = 0.0                  # masked tokens
  candidates: float = 0.0              # non-special tokens
  tokenizer_backend: str = ""
  skipped: str = ""                    # why the shard made no instances ("" when it made some)
  warnings: List[str] = dataclasses.field(default_factory=list)

  def manifest_entry(self, shard: sharding.Shard, directory: str, sizes: Optional[Sequence[int]] = None) -> Dict:
    """The shard's entry in the manifest; `sizes`: the files' bytes (default: looked up)."""
    sizes = [sharding.file_bytes(f) for f in self.files] if sizes is None else [int(n) for n in sizes]
    return {"index": self.index, "pieces": shard.to_json(), "files": [sharding.relative(f, directory) for f in self.files],
            "records": list(self.counts), "bytes": sizes,
            "documents": self.read.documents, "instances": int(sum(self.counts)), "skipped": self.skipped}


def make_tokenizer(vocab_file: str, cfg: Config) -> tokenization.FullTokenizer:
  if cfg.google_exact and tokenization.bpe_json(vocab_file):
    raise UserError(f"--google_exact reproduces Google's WordPiece tokenizer; {vocab_file} is a tokenizer.json "
                    "(its own tokenizer decides): drop --google_exact or pass a WordPiece vocab.txt")
  tokenizer = tokenization.load_tokenizer(vocab_file, do_lower_case=cfg.do_lower_case,
                                          control_chars="google" if cfg.google_exact else "all")
  instances_lib.special_ids_from_vocab(tokenizer.vocab)   # a vocab without [CLS]/[SEP]/[MASK]: fail first
  return tokenizer


def _masker(tokenizer, cfg: Config) -> masking.Masker:
  return masking.Masker(masking.MaskingConfig.from_vocab(
      tokenizer.vocab, masked_lm_prob=cfg.masked_lm_prob,
      max_predictions_per_seq=cfg.max_predictions_per_seq,
      strategy="whole_word" if cfg.masking_strategy == "token" and cfg.word_boundaries else cfg.masking_strategy,
      span_geo_p=cfg.span_geo_p, span_max_length=cfg.span_max_length, google_exact=cfg.google_exact))


def _concat_pairs(parts: Sequence[instances_lib.Pairs], perm_seed: int) -> instances_lib.Pairs:
  """The dupe rounds' pairs in one shuffled `Pairs`, stored as int32 (a shard's token offsets fit): 28 bytes
  an instance instead of 52, permuted one field at a time so the peak holds one field twice, not all."""
  fields = [f.name for f in dataclasses.fields(instances_lib.Pairs)]
  out = {k: np.concatenate([getattr(p, k).astype(np.int32, copy=False) for p in parts]) for k in fields}
  perm = np.random.default_rng(perm_seed).permutation(len(out[fields[0]]))
  for k in fields:
    out[k] = out[k][perm]
  return instances_lib.Pairs(**out)


def build_shard(shard: sharding.Shard, output_files: Sequence[str], tokenizer: tokenization.FullTokenizer,
                cfg: Config, *, open_fn=fileio.open_file, open_writer=tfrecord_io.ShardedWriter,
                on_progress: Optional[Callable[[int], None]] = None, chunk_size: int = 8192) -> ShardResult:
  """One shard -> its records in `output_files` (round-robin), alone: pairs take their random next document
  from this shard, and every random stream is seeded by (cfg.random_seed, shard.index, dupe round), so the
  bytes do not depend on which worker ran it, or when. Memory: the shard's text, its token ids and its pairs
  (~6x the shard's bytes for English at dupe_factor=10), never the corpus. `onprogress_bar(n)` gets the shard's
  bytes in parts as it goes (half after tokenizing, half while writing)."""
  report = on_progress or (lambda n: None)
  read_stats = text_io.ReadStats()
  documents = sharding.read_shard_documents(shard, read_stats, open_fn,
                                            text_io.Utf8Rule(allow=cfg.allow_invalid_utf8))
  docs_ids, docs_cont, backend = tokenize_documents(documents, tokenizer, cfg, False)
  del documents
  tokenized = shard.num_bytes // 2
  report(tokenized)
  corpus_stats, pair_stats = instances_lib.CorpusStats(), instances_lib.PairStats()
  corpus = instances_lib.build_corpus(docs_ids, cfg.max_seq_length - 3, continuation=docs_cont,
                                      long_sentence_policy=cfg.resolved_long_sentence_policy(),
                                      unk_id=tokenizer.vocab[tokenization.UNK], stats=corpus_stats)
  del docs_ids, docs_cont
  result = ShardResult(shard.index, [], [], read_stats, corpus_stats, pair_stats, tokenizer_backend=backend)
  need = instances_lib.MIN_DOCUMENTS[cfg.pair_mode]
  if corpus.num_documents < need:
    result.skipped = (f"{corpus.num_documents} document(s) with tokens; "
                      + ("next-sentence pairs need 2 (the random next comes from another document; a blank line "
                            "separates documents, or use --pair_mode=sop)"
                         if need == 2 else "nothing to pair"))
    report(shard.num_bytes - tokenized)
    return result
  if corpus.tokens.size >= 2**31:     # the pairs' offsets are int32
    raise UserError(f"shard {shard.index} holds {corpus.tokens.size:,} tokens; use a smaller --shard_size")
  parts = []
  for dupe_round in range(cfg.dupe_factor):
    rng = random.Random(sharding.shard_seed(cfg.random_seed, shard.index, dupe_round, sharding.PAIRS))
    order = list(range(corpus.num_documents))
    rng.shuffle(order)
    part = instances_lib.create_pairs(corpus, cfg.max_seq_length, cfg.short_seq_prob, cfg.pair_mode, 1, rng,
                                      pair_stats, shuffle=False, document_order=order, google_exact=cfg.google_exact)
    parts.append(instances_lib.Pairs(*(getattr(part, f.name).astype(np.int32)
                                       for f in dataclasses.fields(instances_lib.Pairs))))
    del part
  pairs = _concat_pairs(parts, sharding.shard_seed(cfg.random_seed, shard.index, 0, sharding.SHUFFLE))
  del parts
  special = instances_lib.special_ids_from_vocab(tokenizer.vocab)
  masker = _masker(tokenizer, cfg)
  np_rng = np.random.default_rng(sharding.shard_seed(cfg.random_seed, shard.index, 0, sharding.MASKS))
  writer = open_writer(list(output_files))
  done, left = 0, shard.num_bytes - tokenized
  with writer:
    for start in range(0, len(pairs), chunk_size):
      part = pairs.take(np.arange(start, min(start + chunk_size, len(pairs))))
      batch = instances_lib.assemble(corpus, part, cfg.max_seq_length, special["cls"], special["sep"],
                                     special["pad"])
      masked = masker(batch["input_ids"], batch["input_mask"], np_rng, batch.get("continuation"))
      result.masked += float(masked["masked_lm_weights"].sum())
      result.candidates += float(batch["lengths"].sum() - 3 * len(part))   # non-special tokens
      batch.update(masked)
      arrays = tfrecord_io.google_example_arrays(batch, include_continuation=cfg.word_boundaries)
      writer.write(tfrecord_io.encode_examples(arrays))
      now = left * min(start + chunk_size, len(pairs)) // len(pairs)
      report(now - done)
      done = now
    result.counts = list(writer.counts)
  result.files = list(output_files)
  return result
