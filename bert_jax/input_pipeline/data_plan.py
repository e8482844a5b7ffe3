"""The data part of a pre-training run plan: `resolve_data_plan(config, vocab_file, process_count)`.

    data_plan = resolve_data_plan(config, vocab_file, process_count)   # UserError for the first data mistake
    data_plan.phases                 # (Phase(index, start, end, max_seq_length, max_predictions_per_seq), ...)
    data_plan.data                   # PretrainData: what pretrain_dataset.open_dataset reads

`training.plan.resolve_pretrain` builds its plan's phases and data with this (after choosing the vocab:
the work dir's, the config's or the init checkpoint's), and `python -m bert_jax.input_pipeline.inspect`
shows the batches of the same `data` the training loop opens. Each data rule is written here once:

  - ranges and choices of the data fields (lengths, masking rate, pair mode, shuffle buffer, batch size);
  - `data.phases`: fractions positive and summing to 1; each phase (or data.max_seq_length) >= 5 tokens
    ([CLS] A [SEP] B [SEP]) and, with a target that reads masked positions (MLM, ELECTRA), 1 <= predictions <=
    length (the position embeddings are the model's business: pretrain.plan checks the lengths against them);
  - packed rows (data.packing=stream or documents; data.pack_sequences=true is stream) only with targets that
    read no sentence pairs (no NSP / SOP), and documents with at most data.max_examples_per_row >= 1 per row;
  - the masking strategy: data.masking_strategy (token | whole_word | span) with data.do_whole_word_mask, the
    name of Google's flag, as an alias of whole_word (true with span is an error: spans are whole words
    already) and data.chinese_whole_word_mask (jieba word boundaries) turning token into whole_word; the
    span law's data.span_geo_p in (0, 1] and data.span_max_length >= 1;
  - every input glob matches a non-empty file; raw text is UTF-8 (a file with more than 1% of lines that do
    not decode is refused, naming its likely encoding and the `iconv` fix, unless data.allow_invalid_utf8)
    and, counted as the reader keeps it (those lines dropped), has at least 2 documents per host for NSP
    pairs (1 for SOP); TFRecords (their first record, read without TensorFlow)
    have every phase's length and prediction count;
  - a record glob matches one record set's lengths (a folder may hold wiki_128 and wiki_512 records side by
    side, each with its manifest);
  - warnings (`data_layout_warnings`, logged once): record files fewer than the hosts, or not a multiple of
    them (hosts get whole files), and raw text above 1 GB per host (tokenized in memory at every start-up).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import List, Sequence, Tuple

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.input_pipeline import checks, instances, manifest, masking, shard_builder, text_io, tfrecord_io
from bert_jax.models.objectives import OBJECTIVES

_log = logging.getLogger("bert_jax")


@dataclasses.dataclass(frozen=True)
class Phase:
  """A run segment with one sequence length: steps [start, end)."""
  index: int
  start: int
  end: int
  max_seq_length: int
  max_predictions_per_seq: int

  def __str__(self):
    return (f"phase {self.index}: steps [{self.start}, {self.end}), length {self.max_seq_length}, "
            f"{self.max_predictions_per_seq} predictions")


@dataclasses.dataclass(frozen=True)
class PretrainData:
  """A pre-training run's data arguments; the training loop and `inspect` open batches only from this
  (`pretrain_dataset.open_dataset`)."""
  input_files: str                  # comma-separated globs: raw text or TFRecords
  eval_input_files: str             # "" = no evaluation
  vocab_file: str
  per_host_batch_size: int          # global batch / process count
  masking: str                      # auto | static | dynamic
  google_exact: bool
  do_lower_case: bool
  masking_strategy: str             # token | whole_word | span (aliases resolved: resolve_masking_strategy)
  span_geo_p: float                 # span: P(length l words) ~ p (1-p)^(l-1), l <= span_max_length
  span_max_length: int
  chinese_whole_word_mask: bool     # word boundaries from jieba (whole_word and span)
  masked_lm_prob: float
  short_seq_prob: float
  pair_mode: str                    # nsp | sop (sop when the targets hold sop)
  pack_sequences: bool
  shuffle_buffer: int
  seed: int
  allow_invalid_utf8: bool = False  # raw text: read on past > 1% of lines that are not UTF-8 (skip, count)
  packing: str = "pairs"            # pairs | stream (= pack_sequences) | documents (input_pipeline/packing.py)
  max_examples_per_row: int = 0     # documents: at most this many documents (pieces) per row; else 0


@dataclasses.dataclass(frozen=True)
class DataPlan:
  phases: Tuple[Phase, ...]
  data: PretrainData


def phase_fields(config, phase: Phase) -> Tuple[str, str]:
  """The config fields that set `phase`'s length and prediction count (for error messages)."""
  if config.data.phases:
    return (f"config.data.phases[{phase.index}] length",
            f"config.data.phases[{phase.index}] max_predictions_per_seq")
  return "config.data.max_seq_length", "config.data.max_predictions_per_seq"


def resolve_phases(config) -> Tuple[Phase, ...]:
  """config.data.phases ((fraction, max_seq_length, max_predictions), ...) -> Phases over num_train_steps;
  empty = one phase with data.max_seq_length. Each phase's lengths are checked (module docstring)."""
  total, d = int(config.num_train_steps), config.data
  spec = tuple(d.phases or ())
  if not spec:
    phases = (Phase(0, 0, total, int(d.max_seq_length), int(d.max_predictions_per_seq)),)
  else:
    for i, phase in enumerate(spec):
      if not isinstance(phase, (tuple, list)) or len(phase) != 3:
        raise UserError(f"config.data.phases[{i}]={phase!r}; expected (fraction of steps, max_seq_length, "
                        "max_predictions_per_seq)")
    fractions = [float(p[0]) for p in spec]
    if any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
      raise UserError(f"config.data.phases={spec}: the fractions {fractions} must be positive and sum to 1")
    phases, start, acc = [], 0, 0.0
    for i, (frac, length, preds) in enumerate(spec):
      acc += float(frac)
      end = total if i == len(spec) - 1 else int(round(acc * total))
      phases.append(Phase(i, start, end, int(length), int(preds)))
      start = end
    phases = tuple(p for p in phases if p.end > p.start)
  for p in phases:
    name, what = phase_fields(config, p)
    if p.max_seq_length < 5:
      raise UserError(f"{name}={p.max_seq_length}; expected >= 5 ([CLS] A [SEP] B [SEP])")
    predicting = [t for t in tuple(config.targets) if t in OBJECTIVES and OBJECTIVES[t].masked_positions]
    if predicting:
      if p.max_predictions_per_seq < 1:
        raise UserError(f"{what}={p.max_predictions_per_seq} with the {predicting[0]!r} target: no token would be "
                        f"predicted ({predicting[0]}_loss stays 0); expected >= 1, e.g. 20 for length 128 (15%)")
      if p.max_predictions_per_seq > p.max_seq_length:
        raise UserError(f"{what}={p.max_predictions_per_seq} exceeds the sequence length {p.max_seq_length}")
  return phases


def _check_fields(config) -> None:
  checks.check_range(config, "batch_size", lo=1, integer=True)
  checks.check_range(config, "num_train_steps", lo=1, integer=True)
  checks.check_range(config, "data.shuffle_buffer", lo=0, integer=True)
  checks.check_range(config, "data.max_seq_length", lo=5, integer=True)   # [CLS] A [SEP] B [SEP]
  checks.check_range(config, "data.masked_lm_prob", lo=0, hi=1, lo_open=True)
  checks.check_range(config, "data.short_seq_prob", lo=0, hi=1)
  checks.check_choice(config, "data.pair_mode", instances.PAIR_MODES)


def resolve_masking_strategy(config) -> str:
  """data.masking_strategy with its aliases applied (module docstring); UserError for a conflict."""
  d = config.data
  strategy = str(d.get("masking_strategy", "token"))
  checks.check_choice(config, "data.masking_strategy", masking.STRATEGIES)
  if bool(d.get("do_whole_word_mask", False)):
    if strategy == "span":
      raise UserError("config.data.do_whole_word_mask=true with config.data.masking_strategy='span': "
                      "do_whole_word_mask is the old name of masking_strategy='whole_word', and spans are made "
                      "of whole words already; drop do_whole_word_mask")
    strategy = "whole_word"
  if strategy == "token" and bool(d.get("chinese_whole_word_mask", False)):
    strategy = "whole_word"
  if strategy == "span":
    checks.check_range(config, "data.span_geo_p", lo=0, hi=1, lo_open=True)
    checks.check_range(config, "data.span_max_length", lo=1, integer=True)
  return strategy


# Raw text above this per host: recommend records. Every host reads and tokenizes all of its text in memory at
# each start-up, before the first step; records are made once (on every core, or on Beam) and streamed.
RAW_TEXT_RECORDS_ADVICE_BYTES = 1 << 30


def data_layout_warnings(field: str, files: Sequence[str], process_count: int,
                         raw_text_limit: int = RAW_TEXT_RECORDS_ADVICE_BYTES) -> List[str]:
  """Warnings about how `files` spread over `process_count` hosts (module docstring); [] when none."""
  out = []
  if checks.is_raw_text(files):
    per_host = sum(fileio.size(f) for f in files) / process_count
    if per_host > raw_text_limit:
      out.append(f"{field}: {per_host / 1e9:.1f} GB of raw text per host is read and tokenized in memory by "
                 "every host at every start-up; prepare records once with python -m "
                 "bert_jax.input_pipeline.create_pretraining_data (README, \"Pre-training\")")
  elif process_count > 1 and len(files) < process_count:
    out.append(f"{field}: {len(files)} record file(s) for {process_count} hosts: every host reads every file "
               f"and keeps 1/{process_count} of the records; write at least {process_count} files "
               "(create_pretraining_data --shard_size or --num_output_shards) so hosts get whole files")
  elif len(files) % process_count:
    extra = len(files) % process_count
    out.append(f"{field}: {len(files)} record files for {process_count} hosts: hosts get whole files, so "
               f"{extra} host(s) get one file more and their epochs are longer; a multiple of {process_count} "
               "files evens them")
  return out


def utf8_rule(config) -> text_io.Utf8Rule:
  """What the raw-text reader does with lines that are not UTF-8 (text_io.Utf8Rule), from the config."""
  return text_io.Utf8Rule(allow=bool(config.data.get("allow_invalid_utf8", False)),
                          flag="--config.data.allow_invalid_utf8=true")


def _check_input_files(config, pair_mode: str, pack: bool, process_count: int) -> None:
  d = config.data
  for key in ("input_files", "eval_input_files"):
    if key == "eval_input_files" and not str(d.eval_input_files).strip():
      continue
    files = checks.check_input_files(d[key], f"config.data.{key}")
    for message in data_layout_warnings(f"config.data.{key}", files, process_count):
      _log.warning("%s", message)
    if checks.is_raw_text(files):   # a .txt that is UTF-16 or a renamed TFRecord: not text
      checks.check_is_text(files, f"config.data.{key}={d[key]!r}")
    if not checks.is_raw_text(files):
      continue
    # packed rows need no pairs from documents, but the encoding rule holds for them too
    need = 0 if pack else instances.MIN_DOCUMENTS[pair_mode] * process_count
    stats = text_io.ReadStats()
    found = checks.count_documents_upto(files, need, utf8_rule(config), stats)
    if pack:
      continue
    if found < need:
      why = ("next-sentence pairs take the random next sentence from another document"
             if pair_mode == instances.RANDOM_NEXT else "each process reads its own documents")
      dropped = sum(stats.bad_utf8_lines.values())
      left = f" once {dropped:,} lines that are not UTF-8 are skipped" if dropped else ""
      raise UserError(f"config.data.{key}={d[key]!r}: {found} document(s){left}, need at least {need} "
                      f"({why}{f', x {process_count} processes' if process_count > 1 else ''}); separate "
                      f"documents with a blank line, or use --config.data.pair_mode={instances.SWAPPED}")


def _set_glob(manifest_path: str, flags) -> str:
  """out/wiki_128* for the set whose --output_file was out/wiki_128.tfrecord (its files, not its manifest)."""
  first = (flags.get("output_file") or ["?"])[0]
  return fileio.join(fileio.dirname(manifest_path), first.rsplit(".", 1)[0] + "*")


def _check_one_record_set(where: str, files: Sequence[str]) -> None:
  """A glob over a folder where record sets of other lengths sit side by side (create_pretraining_data keeps
  a manifest per output prefix: wiki_128.tfrecord, wiki_512.tfrecord) matches all of them; the first file's
  length would pass and the others fail inside tf.data. UserError naming the sets and a glob per prefix."""
  sets = manifest.record_sets(files)
  lengths = {(f.get("max_seq_length"), f.get("max_predictions_per_seq")) for f in sets.values()}
  if len(lengths) > 1:
    named = "; ".join(f"{p} (max_seq_length={f.get('max_seq_length')}, max_predictions_per_seq="
                      f"{f.get('max_predictions_per_seq')}: {_set_glob(p, f)})"
                      for p, f in sorted(sets.items()))
    raise UserError(f"{where} matches records of {len(sets)} record sets with different lengths: {named}; "
                    "give the glob of one set")


def _check_record_lengths(config, phases: Sequence[Phase]) -> None:
  """TFRecords serve one length: the first record of the first file of data.input_files (and
  eval_input_files) against every phase, so records of length 128 under a 128-then-512 schedule stop before
  training, not when the 512 phase starts (after 90% of the steps)."""
  d = config.data
  for key in ("input_files", "eval_input_files"):
    if not str(d[key]).strip():
      continue
    files = text_io.expand_globs(d[key])
    if checks.is_raw_text(files):
      continue
    _check_one_record_set(f"config.data.{key}={d[key]!r}", files)
    try:
      record = tfrecord_io.first_record(files[0])
      lengths = tfrecord_io.example_lengths(record) if record is not None else {}
    except ValueError as e:
      raise UserError(f"config.data.{key}={d[key]!r}: {files[0]}: not pre-training TFRecords ({e})") from e
    where = f"config.data.{key}={d[key]!r}: {files[0]}"
    if record is None:
      raise UserError(f"{where} holds no records")
    missing = [k for k in tfrecord_io.FEATURE_ORDER if k not in lengths]
    if missing:
      raise UserError(f"{where}: its records lack the feature(s) {missing} (Google's pre-training schema: "
                      f"{list(tfrecord_io.FEATURE_ORDER)})")
    seq, preds = lengths["input_ids"], lengths["masked_lm_positions"]
    want = tfrecord_io.feature_lengths(seq, preds)
    odd = {k: lengths[k] for k in want if lengths[k] != want[k]}
    if odd:
      raise UserError(f"{where}: feature lengths {odd} do not match input_ids ({seq}) and masked_lm_positions "
                      f"({preds}); not records of Google's pre-training schema")
    for p in phases:
      if seq != p.max_seq_length or preds != p.max_predictions_per_seq:
        name, what = phase_fields(config, p)
        several = ("; records serve one length: train each phase of config.data.phases on records of its "
                   "own length (one run each, as Google's run_pretraining.py) or on raw text"
                   if len(phases) > 1 else
                   f"; set --config.data.max_seq_length={seq} --config.data.max_predictions_per_seq={preds}")
        raise UserError(f"{where} holds records of max_seq_length={seq}, "
                        f"max_predictions_per_seq={preds}; {name}={p.max_seq_length} and {what}="
                        f"{p.max_predictions_per_seq}{several}")


def resolve_data_plan(config, vocab_file: str, process_count: int) -> DataPlan:
  """The phases and data arguments of a configs/pretrain.py config, read with `vocab_file` (already checked)
  by `process_count` hosts; UserError for the first data mistake (module docstring)."""
  _check_fields(config)
  phases = resolve_phases(config)
  d, targets = config.data, tuple(config.targets)
  mode, cap = resolve_packing(d)
  pack = mode != "pairs"
  known = [OBJECTIVES[t] for t in targets if t in OBJECTIVES]
  if pack and any(o.pair_labels for o in known):
    rest = [o.name for o in known if not o.pair_labels] or [n for n, c in OBJECTIVES.items() if c.masked_positions][:1]
    spelled = "(" + ", ".join(f'"{t}"' for t in rest) + ",)"
    field = "data.pack_sequences=true" if mode == "stream" and d.get("pack_sequences", False) else \
        f"data.packing={mode}"
    raise UserError(f"config.{field} makes rows without sentence pairs: set "
                    f"--config.targets='{spelled}' (got targets={targets})")
  # an objective may force its pair kind on the data (SOP's swapped segments); else data.pair_mode's
  pair_mode = next((o.pair_mode for o in known if o.pair_mode), d.pair_mode)
  strategy = resolve_masking_strategy(config)
  _check_input_files(config, pair_mode, pack, process_count)
  _check_record_lengths(config, phases)
  if bool(d.get("chinese_whole_word_mask", False)) and checks.is_raw_text(text_io.expand_globs(d.input_files)):
    shard_builder.require_jieba("config.data.chinese_whole_word_mask=true")   # raw text is segmented at start-up
  return DataPlan(phases, PretrainData(
      input_files=str(d.input_files), eval_input_files=str(d.eval_input_files), vocab_file=vocab_file,
      per_host_batch_size=int(config.batch_size) // process_count, masking=str(d.get("masking", "auto")),
      google_exact=bool(d.get("google_exact", False)), do_lower_case=bool(d.do_lower_case),
      masking_strategy=strategy, span_geo_p=float(d.get("span_geo_p", 0.2)),
      span_max_length=int(d.get("span_max_length", 10)), chinese_whole_word_mask=bool(d.chinese_whole_word_mask),
      masked_lm_prob=float(d.masked_lm_prob), short_seq_prob=float(d.short_seq_prob), pair_mode=pair_mode,
      pack_sequences=mode == "stream", shuffle_buffer=int(d.shuffle_buffer), seed=int(config.seed),
      allow_invalid_utf8=utf8_rule(config).allow, packing=mode, max_examples_per_row=cap))


PACKINGS = ("pairs", "stream", "documents")


def resolve_packing(d) -> Tuple[str, int]:
  """(data.packing's mode, the cap of documents per row for `documents`, else 0) of a config's `data`; the
  older data.pack_sequences=true means stream. UserError for an unknown mode, a conflict or a cap below 1."""
  mode = str(d.get("packing", "pairs"))
  if mode not in PACKINGS:
    raise UserError(f"config.data.packing={mode!r}; expected one of {', '.join(PACKINGS)}")
  if bool(d.get("pack_sequences", False)):
    if mode == "documents":
      raise UserError("config.data.pack_sequences=true (the stream) contradicts config.data.packing=documents; "
                      "set only data.packing")
    mode = "stream"
  if mode != "documents":
    return mode, 0
  cap = d.get("max_examples_per_row", 8)
  if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
    raise UserError(f"config.data.max_examples_per_row={cap!r}; expected an integer >= 1 (documents per row)")
  return mode, int(cap)
