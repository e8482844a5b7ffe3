r"""Offline pre-training data: raw text -> masked NSP/SOP instances -> TFRecords in Google's schema.

    python -m bert_jax.input_pipeline.create_pretraining_data \
        --input_file='corpus/*.txt' --output_file=out/train.tfrecord --num_output_shards=8 \
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 --max_predictions_per_seq=20 \
        --masked_lm_prob=0.15 --short_seq_prob=0.1 --dupe_factor=10 --random_seed=12345 \
        [--masking_strategy=token|whole_word|span] [--chinese_wwm] [--pair_mode=sop] [--google_exact]

Flags follow google-research/bert's `create_pretraining_data.py` (same names and defaults); additions:
`--num_output_shards`, `--pair_mode nsp|sop`, `--chinese_wwm` (jieba word boundaries, Chinese BERT-wwm),
`--long_sentence_policy split|truncate|keep`, `--tokenizer_backend auto|tokenizers|python`, `--google_exact`.

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
import dataclasses
import os
import random
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax import cli
from bert_jax.input_pipeline import instances as instances_lib
from bert_jax.input_pipeline import masking
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
  """What a run produced and skipped; `lines()` is printed at the end of the CLI."""
  output_files: List[str]
  counts: List[int]
  read: text_io.ReadStats
  corpus: instances_lib.CorpusStats
  pairs: instances_lib.PairStats
  masked_fraction: float = 0.0
  seconds: float = 0.0
  tokenizer_backend: str = ""

  @property
  def instances(self) -> int:
    return int(sum(self.counts))

  def lines(self) -> List[str]:
    out = ["*** Summary ***"]
    out += self.read.summary_lines()
    out += self.corpus.summary_lines()
    out += self.pairs.summary_lines()
    out.append(f"masked: {100 * self.masked_fraction:.2f}% of non-special tokens")
    out.append(f"instances written: {self.instances:,} in {self.seconds:.1f} s "
               f"({self.instances / max(self.seconds, 1e-9):,.0f}/s; tokenizer: {self.tokenizer_backend})")
    for f, n in zip(self.output_files, self.counts):
      out.append(f"  {f}: {n:,}")
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


def output_file_list(output_file: str, num_output_shards: int = 1) -> List[str]:
  """Comma-separated output files, or one name expanded to `name-00000-of-0000N.ext` shards."""
  files = [f.strip() for f in output_file.split(",") if f.strip()]
  if not files:
    raise ValueError("--output_file is empty")
  if num_output_shards > 1:
    if len(files) != 1:
      raise ValueError("give either several comma-separated --output_file names or --num_output_shards, "
                       "not both")
    root, ext = os.path.splitext(files[0])
    files = [f"{root}-{i:05d}-of-{num_output_shards:05d}{ext}" for i in range(num_output_shards)]
  return files


def create_pretraining_data(input_files, output_files: Sequence[str], vocab_file: str,
                            cfg: Config = Config(), progress: bool = True, chunk_size: int = 8192,
                            verbose: bool = True) -> Summary:
  """Runs the whole offline pipeline; returns the `Summary` (also printed when verbose)."""
  # No TensorFlow here (local files are framed by tfrecord_io): the whole command starts in ~1 s.
  t0 = time.perf_counter()
  files = text_io.expand_globs(input_files)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=cfg.do_lower_case,
                                         control_chars="google" if cfg.google_exact else "all")
  read_stats = text_io.ReadStats()
  documents = text_io.read_documents(files, read_stats)
  if not documents:
    raise ValueError(f"no text in the input files {files} (empty files: {read_stats.empty_files}; "
                     f"lines that are not UTF-8: {sum(read_stats.bad_utf8_lines.values())})")
  docs_ids, docs_cont, backend = tokenize_documents(documents, tokenizer, cfg, progress)
  del documents
  corpus_stats = instances_lib.CorpusStats()
  corpus = instances_lib.build_corpus(docs_ids, cfg.max_seq_length - 3, continuation=docs_cont,
                                      long_sentence_policy=cfg.resolved_long_sentence_policy(),
                                      unk_id=tokenizer.vocab[tokenization.UNK], stats=corpus_stats)
  del docs_ids, docs_cont
  if corpus.num_documents == 0:
    raise ValueError(f"no tokens in the input files {files}")
  rng = random.Random(cfg.random_seed)
  doc_order = list(range(corpus.num_documents))
  rng.shuffle(doc_order)  # Google shuffles the documents once
  pair_stats = instances_lib.PairStats()
  pairs = instances_lib.create_pairs(corpus, cfg.max_seq_length, cfg.short_seq_prob, cfg.pair_mode,
                                     cfg.dupe_factor, rng, pair_stats, shuffle=True,
                                     document_order=doc_order, google_exact=cfg.google_exact)
  special = instances_lib.special_ids_from_vocab(tokenizer.vocab)
  masker = masking.Masker(masking.MaskingConfig.from_vocab(
      tokenizer.vocab, masked_lm_prob=cfg.masked_lm_prob,
      max_predictions_per_seq=cfg.max_predictions_per_seq,
      strategy="whole_word" if cfg.masking_strategy == "token" and cfg.word_boundaries else cfg.masking_strategy,
      span_geo_p=cfg.span_geo_p, span_max_length=cfg.span_max_length, google_exact=cfg.google_exact))
  np_rng = np.random.default_rng(cfg.random_seed)
  n_masked = n_cand = 0
  writer = tfrecord_io.ShardedWriter(output_files)
  bar = _progress(total=len(pairs), desc="write", enabled=progress)
  with writer:
    for start in range(0, len(pairs), chunk_size):
      part = pairs.take(np.arange(start, min(start + chunk_size, len(pairs))))
      batch = instances_lib.assemble(corpus, part, cfg.max_seq_length, special["cls"], special["sep"],
                                     special["pad"])
      masked = masker(batch["input_ids"], batch["input_mask"], np_rng, batch.get("continuation"))
      n_masked += float(masked["masked_lm_weights"].sum())
      n_cand += float(batch["lengths"].sum() - 3 * len(part))   # non-special tokens
      batch.update(masked)
      arrays = tfrecord_io.google_example_arrays(
          batch, include_continuation=cfg.word_boundaries)
      writer.write(tfrecord_io.encode_examples(arrays))
      bar.update(len(part))
    counts = list(writer.counts)
  bar.close()
  summary = Summary(output_files=list(output_files), counts=counts, read=read_stats, corpus=corpus_stats,
                    pairs=pair_stats, masked_fraction=n_masked / max(n_cand, 1.0),
                    seconds=time.perf_counter() - t0, tokenizer_backend=backend)
  if verbose:
    print("\n".join(summary.lines()))
  return summary


def _bool(s: str) -> bool:
  if s.lower() in ("1", "true", "yes", "y"):
    return True
  if s.lower() in ("0", "false", "no", "n"):
    return False
  raise argparse.ArgumentTypeError(f"expected a boolean, got {s!r}")


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
  args = p.parse_args(argv)
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
  outputs = output_file_list(args.output_file, args.num_output_shards)
  create_pretraining_data(args.input_file, outputs, args.vocab_file, cfg, progress=args.progress)
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback); --strict
