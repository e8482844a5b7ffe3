r"""Offline pre-training data: raw text -> masked NSP/SOP instances -> TFRecords in Google's schema.

    python -m bert_jax.input_pipeline.create_pretraining_data \
        --input_file='corpus/*.txt' --output_file=out/train.tfrecord --num_output_shards=8 \
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 --max_predictions_per_seq=20 \
        --masked_lm_prob=0.15 --short_seq_prob=0.1 --dupe_factor=10 --random_seed=12345 \
        [--masking_strategy=token|whole_word|span] [--chinese_wwm] [--pair_mode=sop] [--google_exact]

Flags follow google-research/bert's `create_pretraining_data.py` (same names and defaults); additions:
`--num_output_shards`, `--pair_mode nsp|sop`, `--chinese_wwm` (jieba word boundaries, Chinese BERT-wwm),
`--long_sentence_policy split|truncate|keep`, `--tokenizer_backend auto|tokenizers|python`, `--google_exact`.

Corpus scale (README, "Pre-training"): the input is cut into shards (`sharding`: whole small files, or
byte ranges of a big file cut at document boundaries, `--shard_size=256M`). Each shard makes its instances
alone -- pairs with the random next document drawn within the shard, masks -- with seeds from (random_seed,
shard, dupe round), so the output is the same bytes for any `--num_workers` (default: all cores; one
progress bar, one summary) and on Apache Beam (`--runner=DirectRunner|DataflowRunner|FlinkRunner|
SparkRunner` plus Beam's pipeline options; `beam_pipeline`). Memory follows the shard, not the corpus. Shard
s of N is written to `NAME-s-of-N` (one shard: the names given, as before), each file atomically, and
`manifest.json` beside them lists the finished shards, their record counts, the flags, the vocab's hash and
the tool's version: the same command rerun skips finished shards; other flags into the same directory are
refused.

`--google_exact` reproduces Google's tool's rules where ours differ (README, "Deviations from Google's
BERT"): a random next for one-sentence chunks, long sentences kept whole and cut by the pair truncation,
Google's control-character set (Cc/Cf only), replacement tokens from the whole vocab, Google's mask count
`min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))` over all tokens but
[CLS]/[SEP], and up to 10 draws for the random document.
`--output_file` may list several comma-separated files (records go round-robin, as in Google's script).

Input: one sentence per line, a blank line between documents. Output features (see `tfrecord_io`):
input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights,
next_sentence_labels; plus word_continuation with `--chinese_wwm` or `--masking_strategy=whole_word|span` (1
where a token continues the previous token's word, so dynamic re-masking keeps whole words; Google's reader
ignores it). `--do_whole_word_mask` (Google's flag) is the old name of `--masking_strategy=whole_word`; span
masking (SpanBERT: `--span_geo_p=0.2 --span_max_length=10`) is described in masking.py.

Pipeline (each step vectorised or in Rust; see `experiments/bench_input_pipeline.md` for speed):
read (bad UTF-8 lines skipped and counted) -> tokenize all lines at once (code points classified in numpy,
each distinct piece tokenized once by BERT's exact tokenizer) -> pairs with Google's rules
(`instances.create_pairs`) -> numpy assembly + masking (`masking.Masker`) -> direct protobuf encoding ->
TFRecord shards (checksums by google-crc32c). A summary lists every skip.

Measured (experiments/bench_input_pipeline.md, one core, 4.5 MB of Chinese news, max_seq_length=128,
dupe_factor=1), against Google's script run on the same text and core: ~19x its instances per core-second,
~12x with --chinese_wwm (the distinct lines joined and segmented in one call, by `rjieba` (jieba-rs: the
same dictionary and boundaries) when installed, else `jieba`, ~2x Google). The whole command at
dupe_factor=10: ~5 s wall (~7 s with --chinese_wwm) against ~118 s for Google's. No TensorFlow is imported
for local output files.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import multiprocessing
import os
import random
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from bert_jax import cli
from bert_jax import input_warnings
from bert_jax.errors import UserError
from bert_jax.input_pipeline import fileio
from bert_jax.input_pipeline import instances as instances_lib
from bert_jax.input_pipeline import manifest
from bert_jax.input_pipeline import masking
from bert_jax.input_pipeline import sharding
from bert_jax.input_pipeline import text_io
from bert_jax.input_pipeline import tfrecord_io
from bert_jax.input_pipeline import tokenization


@dataclasses.dataclass
class Config:
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
  pair_mode: str = "nsp"
  long_sentence_policy: str = "split"      # "keep" under google_exact
  tokenizer_backend: str = "auto"
  google_exact: bool = False               # Google's rules where ours differ (module docstring)

  @property
  def word_boundaries(self) -> bool:
    """Whether the words of each token are tracked (and stored as word_continuation)."""
    return self.chinese_wwm or self.do_whole_word_mask or self.masking_strategy != "token"

  def resolved_long_sentence_policy(self) -> str:
    return "keep" if self.google_exact else self.long_sentence_policy


@dataclasses.dataclass
class Summary:
  """What a run produced and skipped, over all its shards; `lines()` is printed at the end of the CLI.
  Shards finished by an earlier run (resumed) add their files and counts only."""
  output_files: List[str]
  counts: List[int]
  read: text_io.ReadStats
  corpus: instances_lib.CorpusStats
  pairs: instances_lib.PairStats
  masked: float = 0.0                  # masked tokens
  candidates: float = 0.0              # non-special tokens
  seconds: float = 0.0
  tokenizer_backend: str = ""
  num_shards: int = 1
  resumed_shards: int = 0              # finished by an earlier run (manifest.json), not made again
  resumed_records: int = 0
  skipped_shards: List[str] = dataclasses.field(default_factory=list)

  @property
  def instances(self) -> int:
    return int(sum(self.counts))

  @property
  def masked_fraction(self) -> float:
    return self.masked / max(self.candidates, 1.0)

  def lines(self) -> List[str]:
    out = ["*** Summary ***"]
    out += self.read.summary_lines()
    out += self.corpus.summary_lines()
    out += self.pairs.summary_lines()
    out.append(f"masked: {100 * self.masked_fraction:.2f}% of non-special tokens")
    made = self.instances - self.resumed_records
    out.append(f"shards: {self.num_shards}" + (f" ({self.resumed_shards} finished by an earlier run: "
                                                 f"{self.resumed_records:,} instances, not made again)"
                                                 if self.resumed_shards else ""))
    for line in self.skipped_shards:
      out.append(f"skipped {line}")
    out.append(f"instances written: {made:,} in {self.seconds:.1f} s "
               f"({made / max(self.seconds, 1e-9):,.0f}/s; tokenizer: {self.tokenizer_backend})")
    shown = list(zip(self.output_files, self.counts))
    for f, n in shown if len(shown) <= 20 else shown[:10]:
      out.append(f"  {f}: {n:,}")
    if len(shown) > 20:
      out.append(f"  ... {len(shown) - 10} more files (manifest.json lists them all)")
    return out


def _progress(iterable=None, total=None, desc="", enabled=True):
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


def tokenize_documents(documents: List[List[str]], tokenizer: tokenization.FullTokenizer,
                       cfg: Config, progress: bool = False, chunk_lines: int = 50_000):
  """Token ids per sentence per document (+ per-token continuation flags for whole-word masking)."""
  batch_tok = tokenization.fast_batch_tokenizer(tokenizer, cfg.tokenizer_backend)
  lines = [s for doc in documents for s in doc]
  ids: List = []
  conts: Optional[List] = [] if cfg.word_boundaries else None
  cont_table = masking.continuation_table(tokenizer.vocab)
  cut = jieba_segmenter()[1] if cfg.chinese_wwm else None
  bar = _progress(total=len(lines), desc="tokenize", enabled=progress)
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
    """The shard's entry in manifest.json; `sizes`: the files' bytes (default: looked up)."""
    sizes = [sharding.file_bytes(f) for f in self.files] if sizes is None else [int(n) for n in sizes]
    return {"index": self.index, "pieces": shard.to_json(), "files": [sharding.relative(f, directory) for f in self.files],
            "records": list(self.counts), "bytes": sizes,
            "documents": self.read.documents, "instances": int(sum(self.counts)), "skipped": self.skipped}


def _add_stats(into, other) -> None:
  """into += other, field by field (counts add, lists extend, flags or)."""
  for f in dataclasses.fields(into):
    a, b = getattr(into, f.name), getattr(other, f.name)
    if isinstance(a, bool):
      setattr(into, f.name, a or b)
    elif isinstance(a, (int, float)):
      setattr(into, f.name, a + b)
    elif isinstance(a, list):
      a.extend(b)
    elif hasattr(a, "update"):
      a.update(b)


def make_tokenizer(vocab_file: str, cfg: Config) -> tokenization.FullTokenizer:
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=cfg.do_lower_case,
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
  (~6x the shard's bytes for English at dupe_factor=10), never the corpus. `on_progress(n)` gets the shard's
  bytes in parts as it goes (half after tokenizing, half while writing)."""
  report = on_progress or (lambda n: None)
  read_stats = text_io.ReadStats()
  documents = sharding.read_shard_documents(shard, read_stats, open_fn)
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
  need = 2 if cfg.pair_mode == "nsp" else 1
  if corpus.num_documents < need:
    result.skipped = (f"{corpus.num_documents} document(s) with tokens; "
                      + ("next-sentence pairs need 2 (the random next comes from another document)"
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


# ---- the local driver: shards in worker processes, one progress bar, a manifest to resume from ----------------
_WORKER: Dict = {}


def _init_worker(queue, vocab_file: str, cfg: Config, strict: bool) -> None:
  input_warnings.set_strict(strict)
  _WORKER.update(queue=queue, tokenizer=make_tokenizer(vocab_file, cfg), cfg=cfg)


def _worker_build(shard: sharding.Shard, output_files: List[str]) -> ShardResult:
  queue = _WORKER["queue"]
  seen = len(input_warnings.input_warnings())
  result = build_shard(shard, output_files, _WORKER["tokenizer"], _WORKER["cfg"], on_progress=queue.put)
  result.warnings = input_warnings.input_warnings()[seen:]
  return result


def default_num_workers() -> int:
  """All the cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:   # not Linux
    return os.cpu_count() or 1


def _run_shards(todo, vocab_file, tokenizer, cfg, num_workers: int, bar, on_result) -> None:
  """Builds the shards `todo` ([(shard, files)]) in-process (1 worker) or in `num_workers` processes; calls
  `on_result(result)` in this process as each finishes (in finishing order: the outputs do not depend on it)."""
  if num_workers <= 1 or len(todo) <= 1:
    for shard, files in todo:
      on_result(build_shard(shard, files, tokenizer, cfg, on_progress=bar.update))
    return
  # "spawn": the parent may hold threads (JAX, tf.data) that a fork would copy mid-flight.
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  with concurrent.futures.ProcessPoolExecutor(
      min(num_workers, len(todo)), mp_context=ctx, initializer=_init_worker,
      initargs=(queue, vocab_file, cfg, input_warnings.is_strict())) as pool:
    pending = {pool.submit(_worker_build, shard, files) for shard, files in todo}
    try:
      while pending:
        done, pending = concurrent.futures.wait(pending, timeout=0.2,
                                                return_when=concurrent.futures.FIRST_COMPLETED)
        while not queue.empty():
          bar.update(queue.get())
        for future in done:
          on_result(future.result())
      while not queue.empty():        # the last shards' progress
        bar.update(queue.get())
    except BaseException:
      for future in pending:
        future.cancel()
      raise


def create_pretraining_data(input_files, output_files: Sequence[str], vocab_file: str,
                            cfg: Config = Config(), progress: bool = True, chunk_size: int = 8192,
                            verbose: bool = True, *, shard_bytes: int = sharding.DEFAULT_SHARD_BYTES,
                            num_workers: int = 1, files_per_shard: int = 1) -> Summary:
  """Raw text -> records, shard by shard (`sharding`), in `num_workers` processes, resumable: the
  `manifest.json` beside the outputs lists the finished shards, and a rerun of the same command skips them
  (a rerun with other flags is refused). Returns the `Summary` (also printed when verbose)."""
  del chunk_size  # the write chunk is fixed (8192 rows) so the masks do not depend on it
  # No TensorFlow here (local files are framed by tfrecord_io): the whole command starts in ~1 s.
  t0 = time.perf_counter()
  tokenizer = make_tokenizer(vocab_file, cfg)
  plan = sharding.plan_run(input_files, output_files, vocab_file, cfg, shard_bytes, files_per_shard)
  shards, directory, path = plan.shards, plan.directory, plan.manifest_path
  data, finished = plan.manifest, plan.finished
  todo = plan.todo()
  summary = Summary(output_files=[], counts=[], read=text_io.ReadStats(), corpus=instances_lib.CorpusStats(),
                    pairs=instances_lib.PairStats(), num_shards=len(shards), resumed_shards=len(finished),
                    resumed_records=int(sum(sum(e["records"]) for e in finished.values())))
  if finished and verbose:
    print(f"{path}: {len(finished)} of {len(shards)} shards already written "
          f"({summary.resumed_records:,} records); making the other {len(todo)}")
  results: List[ShardResult] = []
  bar = _progress(total=sum(s.num_bytes for s, _ in todo), desc=f"{len(todo)} shards (bytes of text)",
                  enabled=progress)

  saved = [time.perf_counter()]

  def on_result(result: ShardResult) -> None:
    for message in result.warnings:
      input_warnings.warn_input(message)
    results.append(result)
    data["shards"].append(result.manifest_entry(shards[result.index], directory))
    # At most once a second (1,000 small shards would rewrite it 1,000 times); a shard finished since is still
    # found by a rerun: its files are in place (plan_run counts their records).
    if time.perf_counter() - saved[0] > 1.0:
      manifest.save(path, data)
      saved[0] = time.perf_counter()

  try:
    _run_shards(todo, vocab_file, tokenizer, cfg, num_workers, bar, on_result)
  finally:                            # stopped (an error, Ctrl-C): the finished shards are listed for the rerun
    bar.close()
    data["complete"] = len(data["shards"]) == len(shards)
    manifest.save(path, data)
  for result in sorted(results, key=lambda r: r.index):
    for stats, into in ((result.read, summary.read), (result.corpus, summary.corpus), (result.pairs, summary.pairs)):
      _add_stats(into, stats)
    summary.masked += result.masked
    summary.candidates += result.candidates
    summary.tokenizer_backend = summary.tokenizer_backend or result.tokenizer_backend
    if result.skipped:
      summary.skipped_shards.append(f"shard {result.index} ({shards[result.index].pieces[0][0]}): "
                                    f"{result.skipped}")
  for entry in sorted(data["shards"], key=lambda e: e["index"]):
    summary.output_files += [fileio.join(directory, f) if f == fileio.basename(f) else f for f in entry["files"]]
    summary.counts += list(entry["records"])
  if summary.instances == 0:
    raise ValueError(f"no instances from the input files {plan.files} (empty files: {summary.read.empty_files}; "
                     f"lines that are not UTF-8: {sum(summary.read.bad_utf8_lines.values())}; "
                     f"{'; '.join(summary.skipped_shards) or 'no tokens'})")
  for line in summary.skipped_shards:
    input_warnings.warn_input(f"skipped {line}")
  summary.seconds = time.perf_counter() - t0
  if verbose:
    print("\n".join(summary.lines()))
  return summary


def _bool(s: str) -> bool:
  if s.lower() in ("1", "true", "yes", "y"):
    return True
  if s.lower() in ("0", "false", "no", "n"):
    return False
  raise argparse.ArgumentTypeError(f"expected a boolean, got {s!r}")


RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", "PrismRunner")


def _size(s: str) -> int:
  """"256M" -> 268435456 (K, M, G, T suffixes, powers of 1024; a plain number is bytes)."""
  text = s.strip().upper().rstrip("B")
  scale = 1
  if text and text[-1] in "KMGT":
    scale = 1024 ** ("KMGT".index(text[-1]) + 1)
    text = text[:-1]
  try:
    value = int(float(text) * scale)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a size such as 256M, 1G or 1048576, got {s!r}") from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"expected a size of at least 1 byte, got {s!r}")
  return value


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--input_file", required=True, help="comma-separated globs of raw text files")
  p.add_argument("--output_file", required=True, help="output TFRecord file(s), comma-separated")
  p.add_argument("--vocab_file", required=True)
  # Google's boolean flags accept --flag, --noflag and --flag=true/false.
  for name, default in (("do_lower_case", True), ("do_whole_word_mask", False), ("chinese_wwm", False),
                        ("google_exact", False)):
    p.add_argument(f"--{name}", nargs="?", const=True, default=default, type=_bool)
    p.add_argument(f"--no{name}", dest=name, action="store_false")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--max_predictions_per_seq", type=int, default=20)
  p.add_argument("--random_seed", type=int, default=12345)
  p.add_argument("--dupe_factor", type=int, default=10)
  p.add_argument("--masked_lm_prob", type=float, default=0.15)
  p.add_argument("--masking_strategy", choices=masking.STRATEGIES, default="token",
                 help="token, whole_word (--do_whole_word_mask is its old name) or span (SpanBERT)")
  p.add_argument("--span_geo_p", type=float, default=0.2, help="span: geometric parameter of the span length")
  p.add_argument("--span_max_length", type=int, default=10, help="span: longest span, in words")
  p.add_argument("--short_seq_prob", type=float, default=0.1)
  p.add_argument("--num_output_shards", type=int, default=1)
  p.add_argument("--pair_mode", choices=("nsp", "sop"), default="nsp")
  p.add_argument("--long_sentence_policy", choices=("split", "truncate", "keep"), default=None,
                 help="default: split (keep under --google_exact)")
  p.add_argument("--tokenizer_backend", choices=("auto", "tokenizers", "python"), default="auto")
  p.add_argument("--progress", nargs="?", const=True, default=True, type=_bool)
  p.add_argument("--shard_size", type=_size, default=sharding.DEFAULT_SHARD_BYTES,
                 help="bytes of text per shard, the unit of work (256M by default; K, M, G suffixes)")
  p.add_argument("--num_workers", type=int, default=None, help="worker processes (default: all cores)")
  p.add_argument("--runner", choices=RUNNERS, default=None,
                 help="run the shards as an Apache Beam pipeline (pip install '.[beam]'); Beam's own pipeline "
                      "options (--project, --region, --temp_location, --setup_file, ...) are passed through")
  args, beam_args = p.parse_known_args(argv)
  if beam_args and args.runner is None:
    p.error(f"unrecognized arguments: {' '.join(beam_args)} (Beam pipeline options need --runner)")
  if args.num_workers is not None and args.num_workers < 1:
    p.error(f"--num_workers={args.num_workers}; expected >= 1")
  if args.google_exact and args.long_sentence_policy not in (None, "keep"):
    p.error(f"--google_exact keeps long sentences whole (Google's rule); drop "
            f"--long_sentence_policy={args.long_sentence_policy}")
  if args.do_whole_word_mask and args.masking_strategy == "span":
    p.error("--do_whole_word_mask is the old name of --masking_strategy=whole_word; spans are whole words "
            "already: drop it")
  try:
    masking.span_length_probs(args.span_geo_p, args.span_max_length)
  except ValueError as e:
    p.error(str(e))
  if args.google_exact and args.pair_mode != "nsp":
    p.error("--google_exact reproduces Google's NSP pairs; drop --pair_mode=sop")
  cfg = Config(max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions_per_seq,
               random_seed=args.random_seed, dupe_factor=args.dupe_factor,
               masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob,
               do_lower_case=args.do_lower_case, do_whole_word_mask=args.do_whole_word_mask,
               masking_strategy="whole_word" if args.do_whole_word_mask else args.masking_strategy,
               span_geo_p=args.span_geo_p, span_max_length=args.span_max_length,
               chinese_wwm=args.chinese_wwm, pair_mode=args.pair_mode,
               long_sentence_policy=args.long_sentence_policy or "split",
               tokenizer_backend=args.tokenizer_backend, google_exact=args.google_exact)
  names = sharding.output_file_list(args.output_file)
  if len(names) > 1 and args.num_output_shards > 1:
    p.error("give either several comma-separated --output_file names or --num_output_shards, not both")
  files_per_shard = args.num_output_shards   # one input shard: Google's round-robin over that many files
  if args.runner:
    try:   # lazy: apache_beam is an optional extra (~2 s to import) that only this path needs
      from bert_jax.input_pipeline import beam_pipeline  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise UserError(f"--runner={args.runner} needs Apache Beam ({e}): pip install 'bert_jax[beam]' (or "
                      "pip install apache-beam) in an environment of its own (README, \"Pre-training\")") from e
    beam_pipeline.run(args.input_file, names, args.vocab_file, cfg, runner=args.runner, beam_args=beam_args,
                      shard_bytes=args.shard_size, files_per_shard=files_per_shard)
    return 0
  create_pretraining_data(args.input_file, names, args.vocab_file, cfg, progress=args.progress,
                          shard_bytes=args.shard_size, files_per_shard=files_per_shard,
                          num_workers=args.num_workers or default_num_workers())
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback); --strict
