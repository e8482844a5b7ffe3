r"""Offline pre-training data: raw text -> masked NSP/SOP instances -> TFRecords in Google's schema.

    python -m bert_jax.input_pipeline.create_pretraining_data \
        --input_file='corpus/*.txt' --output_file=out/train.tfrecord --num_output_shards=8 \
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 --max_predictions_per_seq=20 \
        --masked_lm_prob=0.15 --short_seq_prob=0.1 --dupe_factor=10 --random_seed=12345 \
        [--masking_strategy=token|whole_word|span] [--chinese_wwm] [--pair_mode=sop] [--google_exact]

Flags follow google-research/bert's `create_pretraining_data.py` (same names and defaults); additions:
`--num_output_shards`, `--shard_size`, `--num_workers`, `--allow_invalid_utf8`, `--pair_mode nsp|sop`,
`--chinese_wwm` (jieba word boundaries, Chinese BERT-wwm), `--long_sentence_policy split|truncate|keep`,
`--tokenizer_backend auto|tokenizers|python`, `--google_exact`.

Corpus scale (docs/data.md, "A whole corpus"): the input is cut into shards (`sharding`: whole small files, or
byte ranges of a big file cut at document boundaries), planned from the corpus alone: 64 shards when each
keeps at least 4M of text, never more than 256M (`--shard_size` sets it). Each shard makes its instances
alone -- pairs with the random next document drawn within the shard, masks -- with seeds from (random_seed,
shard, dupe round), so the output is the same bytes for any `--num_workers` (default: all cores; one
progress bar, one summary) and on Apache Beam (`--runner=DirectRunner|DataflowRunner|FlinkRunner|
SparkRunner` plus Beam's pipeline options; `beam_pipeline`). Memory follows the shard, not the corpus.
`--num_output_shards=M` is the number of files written in total, `NAME-00000-of-0000M` (default: one per
shard; a one-shard run keeps the name as given). Each file is written atomically, and `NAME.manifest.json`
beside them (one per output prefix, so record sets of several lengths share a folder) lists the finished
shards, their record counts, the flags, the vocab's hash and the tool's version: the same command rerun
skips finished shards; other flags into the same prefix are refused. A file with more than 1% of lines that
are not UTF-8 is refused (the error names its likely encoding and the `iconv` fix) unless
`--allow_invalid_utf8`.

`--google_exact` reproduces Google's tool's rules where ours differ (docs/data.md, "Masking, Google-exact
mode and deviations from Google's BERT"): a random next for one-sentence chunks, long sentences kept whole
and cut by the pair truncation, Google's control-character set (Cc/Cf only), replacement tokens from the
whole vocab, Google's mask count
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
import difflib
import math
import multiprocessing
import os
import time
from typing import Dict, List, Optional, Sequence

from bert_jax import cli
from bert_jax import input_warnings
from bert_jax.errors import UserError
from bert_jax.input_pipeline import checks
from bert_jax import fileio
from bert_jax.input_pipeline import instances as instances_lib
from bert_jax.input_pipeline import manifest
from bert_jax.input_pipeline import masking
from bert_jax.input_pipeline import shard_builder
from bert_jax.input_pipeline import sharding
from bert_jax.input_pipeline import text_io
from bert_jax.input_pipeline.shard_builder import (Config, NoInstancesError, ShardResult, build_shard, make_tokenizer,
                                                   progress_bar)


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
  plan: str = ""                       # the shard plan in words (sharding.RunPlan.describe)
  workers: int = 1                     # worker processes that ran (1: in this process; 0: nothing to make)
  resumed_shards: int = 0              # finished by an earlier run (the manifest), not made again
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
    out.append(f"shards: {self.plan or self.num_shards}; {self.workers} worker(s) ran"
               + (f"; {self.resumed_shards} finished by an earlier run ({self.resumed_records:,} instances, "
                  "not made again)" if self.resumed_shards else ""))
    for line in self.skipped_shards:
      out.append(f"skipped {line}")
    out.append(f"instances written: {made:,} in {self.seconds:.1f} s "
               f"({made / max(self.seconds, 1e-9):,.0f}/s; tokenizer: {self.tokenizer_backend})")
    shown = list(zip(self.output_files, self.counts))
    for f, n in shown if len(shown) <= 20 else shown[:10]:
      out.append(f"  {f}: {n:,}")
    if len(shown) > 20:
      out.append(f"  ... {len(shown) - 10} more files (the manifest lists them all)")
    return out




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


def _run_shards(todo, vocab_file, tokenizer, cfg, num_workers: int, bar, on_result) -> int:
  """Builds the shards `todo` ([(shard, files)]) in-process (1 worker) or in `num_workers` processes; calls
  `on_result(result)` in this process as each finishes (in finishing order: the outputs do not depend on it).
  Returns the number of workers that ran (at most one per shard)."""
  if num_workers <= 1 or len(todo) <= 1:
    for shard, files in todo:
      on_result(build_shard(shard, files, tokenizer, cfg, on_progress=bar.update))
    return min(len(todo), 1)
  # "spawn": the parent may hold threads (JAX, tf.data) that a fork would copy mid-flight.
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  workers = min(num_workers, len(todo))
  with concurrent.futures.ProcessPoolExecutor(
      workers, mp_context=ctx, initializer=_init_worker,
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
  return workers


def create_pretraining_data(input_files, output_files: Sequence[str], vocab_file: str,
                            cfg: Config = Config(), progress: bool = True, chunk_size: int = 8192,
                            verbose: bool = True, *, shard_bytes: Optional[int] = None,
                            num_workers: int = 1, num_output_shards: Optional[int] = None) -> Summary:
  """Raw text -> records, shard by shard (`sharding`), in `num_workers` processes, resumable: the manifest
  of the output prefix (`NAME.manifest.json` beside the first output file) lists the finished shards, and a
  rerun of the same command skips them (a rerun with other flags is refused). `shard_bytes` None: planned
  from the corpus (`sharding.auto_shard_bytes`); `num_output_shards`: the files written in total (None: one
  per shard). Returns the `Summary` (also printed when verbose)."""
  del chunk_size  # the write chunk is fixed (8192 rows) so the masks do not depend on it
  # No TensorFlow here (local files are framed by tfrecord_io): the whole command starts in ~1 s.
  t0 = time.perf_counter()
  tokenizer = make_tokenizer(vocab_file, cfg)
  plan = sharding.plan_run(input_files, output_files, vocab_file, cfg, shard_bytes, num_output_shards)
  shards, directory, path = plan.shards, plan.directory, plan.manifest_path
  data, finished = plan.manifest, plan.finished
  todo = plan.todo()
  summary = Summary(output_files=[], counts=[], read=text_io.ReadStats(), corpus=instances_lib.CorpusStats(),
                    pairs=instances_lib.PairStats(), num_shards=len(shards), plan=plan.describe(),
                    resumed_shards=len(finished),
                    resumed_records=int(sum(sum(e["records"]) for e in finished.values())))
  if finished and verbose:
    print(f"{path}: {len(finished)} of {len(shards)} shards already written "
          f"({summary.resumed_records:,} records); making the other {len(todo)}")
  results: List[ShardResult] = []
  bar = progress_bar(total=sum(s.num_bytes for s, _ in todo), desc=f"{len(todo)} shards (bytes of text)",
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
    summary.workers = _run_shards(todo, vocab_file, tokenizer, cfg, num_workers, bar, on_result)
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
    raise NoInstancesError(f"no instances from the input files {plan.files} (empty or only blank lines: {summary.read.empty_files}; "
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


def _check_close_to_ours(p, unknown: Sequence[str]) -> None:
  """An error naming the first flag in `unknown` that looks like one of ours mistyped."""
  ours = [o for a in p._actions for o in a.option_strings if o.startswith("--")]  # pylint: disable=protected-access
  for flag in unknown:
    name = flag.split("=", 1)[0]
    close = difflib.get_close_matches(name, ours, n=1, cutoff=0.8) if name.startswith("--") else []
    if close:
      p.error(f"unrecognized argument {name} (did you mean {close[0]}?)")


def _check_beam_args(p, runner: str, unknown: Sequence[str]) -> None:
  """Flags neither ours nor Beam's: an error when one looks like ours mistyped (Beam would drop it and the
  records would silently use the default) or under the DirectRunner (nothing forwards them); a warning on
  the other runners, whose job services may take flags of their own."""
  if not unknown:
    return
  _check_close_to_ours(p, unknown)
  if runner == "DirectRunner":
    p.error(f"unrecognized arguments: {' '.join(unknown)} (neither this tool's flags nor Beam's pipeline "
            "options)")
  input_warnings.warn_input(f"--runner={runner}: {' '.join(unknown)} are neither this tool's flags nor Beam's "
                            "pipeline options; Beam may drop them")


def _check_files(input_file: str, output_files: Sequence[str], vocab_file: str) -> None:
  """The user's files before any work: a glob matching nothing, input files all empty, a missing vocab or one
  without BERT's special tokens, an output name that is an input file or a directory or whose directory cannot
  be made are each a UserError naming the flag (one `error:` line), not a traceback."""
  with fileio.storage_errors_as_user_errors(f"--vocab_file={vocab_file!r}"):
    checks.check_vocab(vocab_file, "--vocab_file")
  with fileio.storage_errors_as_user_errors(f"--input_file={input_file!r}"):
    try:
      files = text_io.expand_globs(input_file)
    except FileNotFoundError as e:
      raise UserError(f"--input_file: {e}") from e
    sizes = [fileio.size(f) for f in files]
  if not any(sizes):
    raise UserError(f"--input_file={input_file!r}: every file is empty ({', '.join(files[:5])}"
                    f"{', ...' if len(files) > 5 else ''})")
  with fileio.storage_errors_as_user_errors(f"--input_file={input_file!r}"):
    checks.check_is_text(files, f"--input_file={input_file!r}")
  inputs = {fileio.abspath(f) for f in files}
  for name in output_files:
    with fileio.storage_errors_as_user_errors(f"--output_file={name!r}"):
      _check_output(name, input_file, inputs)


def _check_output(name: str, input_file: str, inputs) -> None:
  if fileio.abspath(name) in inputs:
    raise UserError(f"--output_file={name!r} is also an input file (--input_file={input_file!r}): it would be "
                    "overwritten; write the records elsewhere")
  if fileio.isdir(name):
    raise UserError(f"--output_file={name!r} is a directory; give a file name such as "
                    f"{fileio.join(name, 'train.tfrecord')}")
  directory = fileio.dirname(name)
  try:   # a URL path's errors (no such bucket, no network, no permission) are the caller's one `error:` line
    fileio.makedirs(directory)
  except OSError as e:
    raise UserError(f"--output_file={name!r}: cannot create its directory ({e})") from e


def main(argv=None) -> int:
  p = checks.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
  p.add_argument("--num_output_shards", type=int, default=None,
                 help="files written in total, NAME-00000-of-0000N (default: one per shard; the shards are "
                      "fewer when the corpus plan had more)")
  p.add_argument("--pair_mode", choices=instances_lib.PAIR_MODES, default=instances_lib.RANDOM_NEXT)
  p.add_argument("--long_sentence_policy", choices=("split", "truncate", "keep"), default=None,
                 help="default: split (keep under --google_exact)")
  p.add_argument("--tokenizer_backend", choices=("auto", "tokenizers", "python"), default="auto")
  p.add_argument("--progress", nargs="?", const=True, default=True, type=_bool)
  p.add_argument("--shard_size", type=_size, default=None,
                 help="bytes of text per shard, the unit of work (K, M, G suffixes); default: planned from the "
                      "corpus, 64 shards of 4M to 256M")
  p.add_argument("--allow_invalid_utf8", nargs="?", const=True, default=False, type=_bool,
                 help="read on past files with more than 1%% of lines that are not UTF-8, skipping and "
                      "counting them (default: refused, naming the iconv fix)")
  p.add_argument("--num_workers", type=int, default=None, help="worker processes (default: all cores)")
  p.add_argument("--runner", choices=RUNNERS, default=None,
                 help="run the shards as an Apache Beam pipeline (pip install '.[beam]'); Beam's own pipeline "
                      "options (--project, --region, --temp_location, --setup_file, ...) are passed through")
  args, beam_args = p.parse_known_args(argv)
  if beam_args and args.runner is None:
    _check_close_to_ours(p, beam_args)
    p.error(f"unrecognized arguments: {' '.join(beam_args)} (Beam pipeline options need --runner)")
  if args.runner:   # before any output directory is made
    try:   # lazy: apache_beam is an optional extra (~2 s to import) that only this path needs
      from bert_jax.input_pipeline import beam_pipeline  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise UserError(f"--runner={args.runner} needs Apache Beam ({e}): pip install 'bert_jax[beam]' (or "
                      "pip install apache-beam) in an environment of its own (docs/data.md, \"Apache Beam\")") from e
    _check_beam_args(p, args.runner, beam_pipeline.unknown_options(beam_args))
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
    p.error(f"--{e}")     # "span_geo_p=0.0; expected ...": the flag's name
  if args.google_exact and args.pair_mode != instances_lib.RANDOM_NEXT:
    p.error("--google_exact reproduces Google's NSP pairs; drop --pair_mode=sop")
  for name, lo, why in (("max_seq_length", 5, " ([CLS] A [SEP] B [SEP])"), ("max_predictions_per_seq", 1, ""),
                        ("dupe_factor", 1, ""), ("num_output_shards", 1, "")):
    if getattr(args, name) is not None and getattr(args, name) < lo:
      p.error(f"--{name}={getattr(args, name)}; expected >= {lo}{why}")
  for name, lo_open in (("masked_lm_prob", True), ("short_seq_prob", False)):
    value = getattr(args, name)
    if not (math.isfinite(value) and (value > 0 if lo_open else value >= 0) and value <= 1):
      p.error(f"--{name}={value}; expected {'0 <' if lo_open else '0 <='} p <= 1")
  try:
    names = sharding.output_file_list(args.output_file)
  except ValueError as e:
    p.error(str(e))
  _check_files(args.input_file, names, args.vocab_file)
  if args.chinese_wwm:
    shard_builder.require_jieba("--chinese_wwm")
  cfg = Config(max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions_per_seq,
               random_seed=args.random_seed, dupe_factor=args.dupe_factor,
               masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob,
               do_lower_case=args.do_lower_case, do_whole_word_mask=args.do_whole_word_mask,
               masking_strategy="whole_word" if args.do_whole_word_mask else args.masking_strategy,
               span_geo_p=args.span_geo_p, span_max_length=args.span_max_length,
               chinese_wwm=args.chinese_wwm, pair_mode=args.pair_mode,
               long_sentence_policy=args.long_sentence_policy or "split",
               tokenizer_backend=args.tokenizer_backend, google_exact=args.google_exact,
               allow_invalid_utf8=args.allow_invalid_utf8)
  if len(names) > 1 and args.num_output_shards is not None:
    p.error("give either several comma-separated --output_file names or --num_output_shards, not both")
  if args.runner:
    beam_pipeline.run(args.input_file, names, args.vocab_file, cfg, runner=args.runner, beam_args=beam_args,
                      shard_bytes=args.shard_size, num_output_shards=args.num_output_shards)
    return 0
  create_pretraining_data(args.input_file, names, args.vocab_file, cfg, progress=args.progress,
                          shard_bytes=args.shard_size, num_output_shards=args.num_output_shards,
                          num_workers=args.num_workers or default_num_workers())
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback); --strict
