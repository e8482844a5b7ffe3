"""Pre-training batches for the training loop: from TFRecords (ours or Google's) or raw text, per host.

    from bert_jax.input_pipeline import pretrain_dataset
    from bert_jax.input_pipeline.data_plan import resolve_data_plan
    plan = resolve_data_plan(config, "vocab.txt", process_count=1)   # configs/pretrain.py's config, checked
    it = pretrain_dataset.open_dataset(plan.data, 128, 20)   # phase 0's length and predictions; evaluation=True
    it = pretrain_dataset.make_pretraining_dataset(          # or one stream of PretrainData: data.input_files,
        plan.data, max_seq_length=128, max_predictions_per_seq=20,   # data.seed, data.per_host_batch_size
        is_training=True)                                    # input_format="auto" | "text" | "tfrecord"
    batch = next(it)          # dict of numpy arrays (below)
    state = it.state()        # {"step": 1234, ...}: save it with the model checkpoint (JSON-able)
    it = pretrain_dataset.make_pretraining_dataset(plan.data, 128, 20, start_step=state["step"])  # same next batch
    # or: it.save_state(path) / pretrain_dataset.load_state(path)["step"]

Batch (numpy): input_ids, input_mask, segment_ids int32 [B, max_seq_length]; masked_lm_positions,
masked_lm_ids int32 [B, max_predictions_per_seq]; masked_lm_weights float32 [B, P];
next_sentence_labels int32 [B] (Google's [B, 1] squeezed; 1 = random next / swapped).

Behaviour:
  - Sources. `input_format="tfrecord"`: Google's schema (`tfrecord_io.parse_spec`), e.g. the output of
    `create_pretraining_data` or Google's own files. `"text"`: one sentence per line, blank line between
    documents; tokenized once at start-up (exact BERT tokenization, cached), then each epoch makes fresh
    NSP/SOP pairs (Google's rules, `instances.create_pairs`) and fresh masks. `"auto"` picks "text" for
    .txt files, else "tfrecord".
  - Masking (`data.masking`). "auto": "static" for records that carry masks (a non-zero `masked_lm_weights` in the
    first record), "dynamic" for raw text and for records without masks; the choice and its reason are
    logged once. "static": the positions, ids and weights stored in the records, exactly (Google's
    `run_pretraining.py`; TFRecords only). "dynamic": a fresh mask every time an example is seen
    (RoBERTa-style): stored masks are undone and the sequence is re-masked (`masking.Masker`, the configured
    rate / 80-10-10). `data.masking_strategy`: "token", "whole_word" or "span" (SpanBERT spans of whole words,
    lengths from the truncated geometric law of `span_geo_p` / `span_max_length`; masking.py). Words are a
    token plus its "##" pieces, joined with the records' `word_continuation` (written by
    `create_pretraining_data` with --chinese_wwm or a word strategy) or jieba's words for raw text with
    `chinese_whole_word_mask`; records that carry word_continuation are re-masked by whole words at least,
    so WWM records stay WWM.
  - `data.google_exact`: Google's tool's rules for raw text (pairs, long sentences, control characters) and
    for dynamic masks (count rounding, candidates, replacement pool); see create_pretraining_data.
  - Per host: hosts get whole files, split by `process_index`/`process_count` (defaults:
    `jax.process_index()` / `jax.process_count()`) when there are at least as many files as hosts (the plan
    warns when the count is not a multiple of the hosts'), else records (or documents) are split
    round-robin; either way the hosts' streams are disjoint.
  - Order of records: each epoch the host's files are shuffled and read `cycle_length` (8) at a time, a
    window's files interleaved and shuffled together (`shuffle_buffer`); windows follow one another.
  - Determinism: the order (file shuffle, record shuffle buffer, interleave) is a function of
    (seed, epoch) and the dynamic mask of batch k is a function of (seed, k), so the same arguments give the
    same batches, independent of thread timing.
  - Resume: batch k is records [k * B, (k + 1) * B) of the deterministic stream, so `start_step=k` continues
    with exactly the batch an uninterrupted run would have produced. Records: whole epochs and whole windows
    of files are skipped by their record counts (from the manifests beside the files, written by
    create_pretraining_data; else counted once from the TFRecord headers), and only the remainder of one
    window is read, so start-up does not grow with k. Raw text: the epoch's pairs are remade, not read.
  - `is_training=False`: no shuffling, one pass (masking as for training: "auto" unless asked otherwise).
  - `data.shuffle_buffer=0`: no shuffling at all, also when training: files one after the other, records (or
    documents and their pairs) in file order; what `inspect` uses to show examples in order.
  - `drop_remainder=True` (default) keeps shapes static; pass False to see every record at evaluation.

Throughput on one core, max_seq_length=128, batch 256 (experiments/bench_input_pipeline.md): ~55,000
sequences/s with dynamic masking from records, ~97,000 with static masks, ~77,000 from raw text with fresh
pairs and masks each epoch.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import json
import logging
import random
import weakref
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import jax
import numpy as np

from bert_jax import lean_imports
from bert_jax.errors import UserError
from bert_jax.logs import log_once
from bert_jax.input_pipeline import shard_builder
from bert_jax import fileio
from bert_jax.input_pipeline.data_plan import PretrainData
from bert_jax.input_pipeline import instances as instances_lib
from bert_jax.input_pipeline import manifest
from bert_jax.input_pipeline import masking as masking_lib
from bert_jax.input_pipeline import packing
from bert_jax.input_pipeline import text_io
from bert_jax.input_pipeline import tfrecord_io
from bert_jax.input_pipeline import tokenization

BATCH_KEYS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
              "masked_lm_weights", "next_sentence_labels")
_TEXT_SUFFIXES = (".txt", ".text", ".txt.gz", ".text.gz")   # raw text (gzip'd: text_io decompresses it)
_MAX_EPOCHS = 1 << 31
MASKING_MODES = ("auto", "static", "dynamic")

log = logging.getLogger(__name__)


class _TensorFlow:
  """`tf`, imported at its first use: TensorFlow takes ~6 CPU-s to import, which the training loop spends on
  its data thread while another thread compiles the step; the plan and `inspect` import this module first.
  tf.data runs on the host: TensorFlow is kept off the GPUs that JAX uses."""

  def __getattr__(self, name):
    tensorflow = lean_imports.tensorflow()  # lazy: see the class docstring (and bert_jax/lean_imports.py)
    try:
      tensorflow.config.set_visible_devices([], "GPU")
    except Exception:  # noqa: BLE001 - already initialised, or no GPU build
      pass
    globals()["tf"] = tensorflow
    return getattr(tensorflow, name)


tf = _TensorFlow()


def _mix(*xs: int) -> int:
  """A 63-bit seed from integers (stable across runs and platforms)."""
  return int(np.random.SeedSequence([int(x) & 0xFFFFFFFF for x in xs]).generate_state(2, np.uint64)[0]
             >> np.uint64(1))


def parse_pretraining_examples(serialized: tf.Tensor, max_seq_length: int, max_predictions_per_seq: int,
                               with_continuation: bool = False) -> Dict[str, tf.Tensor]:
  """Parses a batch (or one) of serialized Examples in Google's schema; int64 -> int32, labels [B]."""
  spec = tfrecord_io.parse_spec(max_seq_length, max_predictions_per_seq, with_continuation)
  if serialized.shape.rank == 0:
    parsed = tf.io.parse_single_example(serialized, spec)
  else:
    parsed = tf.io.parse_example(serialized, spec)
  out = {}
  for k, v in parsed.items():
    out[k] = tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
  out["next_sentence_labels"] = tf.squeeze(out["next_sentence_labels"], axis=-1)
  return out


def read_google_tfrecord(input_files, max_seq_length: int = 128, max_predictions_per_seq: int = 20
                         ) -> tf.data.Dataset:
  """All records of Google-schema TFRecord files, in file order, parsed (one example per element)."""
  files = text_io.expand_globs(input_files)
  ds = tf.data.TFRecordDataset(files)
  return ds.map(lambda s: parse_pretraining_examples(s, max_seq_length, max_predictions_per_seq))


def _has_feature(path: str, name: str) -> bool:
  for raw in tf.data.TFRecordDataset([path]).take(1):
    ex = tf.train.Example.FromString(raw.numpy())
    return name in ex.features.feature
  return False


def _first_record_has_masks(path: str) -> bool:
  """True when the first record stores at least one masked position (a non-zero masked_lm_weights)."""
  for raw in tf.data.TFRecordDataset([path]).take(1):
    feats = tf.train.Example.FromString(raw.numpy()).features.feature
    w = feats.get("masked_lm_weights")
    return w is not None and any(v != 0 for v in w.float_list.value)
  return False


def resolve_masking(masking: Optional[str], input_format: str, files: Sequence[str]) -> Tuple[str, str]:
  """(mode, reason): "auto"/None -> static for records with stored masks, dynamic otherwise."""
  masking = "auto" if masking is None else masking
  if masking not in MASKING_MODES:
    raise UserError(f"config.data.masking={masking!r}; expected one of {MASKING_MODES}")
  if input_format == "text":
    if masking == "static":
      raise UserError("config.data.masking='static' needs TFRecords with stored masks; raw text has none "
                      f"({files[0]}): use 'auto' or 'dynamic'")
    return "dynamic", "raw text has no stored masks" if masking == "auto" else "asked for (data.masking)"
  if masking != "auto":
    return masking, "asked for (data.masking)"
  if _first_record_has_masks(files[0]):
    return "static", f"the records carry masked_lm_* features ({files[0]}): training on the stored masks"
  return "dynamic", f"the records carry no masked positions ({files[0]})"


class RecordSchemaError(UserError, ValueError):
  """Records whose first example does not match the configured schema (another max_seq_length, not
  pre-training records, an empty file): the user's data or config, so the entry points print one `error:`
  line; a ValueError for library callers."""


def _check_records(path: str, max_seq_length: int, max_predictions_per_seq: int) -> None:
  """Fails early, naming the file, when its first record does not match the expected schema."""
  for raw in tf.data.TFRecordDataset([path]).take(1):
    try:
      ex = tf.train.Example.FromString(raw.numpy())
    except Exception as e:  # pylint: disable=broad-except
      raise RecordSchemaError(f"{path}: first record is not a tf.train.Example ({e})") from e
    feats = ex.features.feature
    want = tfrecord_io.feature_lengths(max_seq_length, max_predictions_per_seq)
    for name, n in want.items():
      if name not in feats:
        raise RecordSchemaError(f"{path}: records lack feature {name!r} (Google's pre-training schema expected: "
                                f"{sorted(want)})")
      kind = feats[name].WhichOneof("kind")
      got = len(getattr(feats[name], kind).value) if kind else 0
      if got != n:
        raise RecordSchemaError(f"{path}: feature {name!r} has {got} values, expected {n} (check max_seq_length="
                                f"{max_seq_length} / max_predictions_per_seq={max_predictions_per_seq})")
    return
  raise RecordSchemaError(f"{path}: no records (empty TFRecord file)")


class CorruptRecordsError(UserError, ValueError):
  """A TFRecord file that does not read (truncated by a copy, corrupted on disk): the user's data, so the
  entry points print one `error:` line (and a supervisor does not restart into the same bytes)."""


_LIVE_ITERATORS: "weakref.WeakSet[PretrainingIterator]" = weakref.WeakSet()


@atexit.register
def _close_live_iterators() -> None:
  """Drops the tf.data iterators still alive at exit. A partly read iterator whose pipeline runs a
  numpy_function (the raw-text pairs, dynamic masks) left to the interpreter's own teardown hung the process
  for ever after the script's last line (TensorFlow's threads wait for the GIL there); dropped here, while
  the interpreter is whole, it stops as a `del` would."""
  for it in list(_LIVE_ITERATORS):
    it.close()
  gc.collect()


class PretrainingIterator:
  """Iterator of numpy batches with a resumable position (`state()`, `save_state()`); `close()` stops its
  tf.data pipeline (done at exit for any still open)."""

  def __init__(self, dataset: tf.data.Dataset, start_step: int, config: Dict, files: Sequence[str] = ()):
    self.dataset = dataset
    self._it = iter(dataset.as_numpy_iterator())
    self.step = int(start_step)
    self.config = config
    self.files = list(files)
    _LIVE_ITERATORS.add(self)

  def close(self) -> None:
    """Releases the tf.data iterator (its threads and buffers); the iterator is spent afterwards."""
    self._it = iter(())
    self.dataset = None

  def __iter__(self):
    return self

  def __next__(self) -> Dict[str, np.ndarray]:
    try:
      batch = next(self._it)
    except tf.errors.DataLossError as e:
      what = str(getattr(e, "message", e)).split("}}")[-1].split("[Op:")[0].strip() or type(e).__name__
      shown = ", ".join(self.files[:3]) + (f" and {len(self.files) - 3} more" if len(self.files) > 3 else "")
      raise CorruptRecordsError(f"config.data.input_files: a TFRecord file does not read ({what}) while making "
                                f"batch {self.step + 1}; files: {shown}; re-create or replace the damaged file "
                                "(e.g. a truncated copy)") from None
    self.step += 1
    return batch

  def state(self) -> Dict:
    """JSON-able position: pass `start_step=state["step"]` (same other arguments) to resume."""
    return {"step": self.step, **self.config}

  def save_state(self, path: str) -> None:
    fileio.makedirs(fileio.dirname(path))
    with fileio.open_file(path, "w") as f:
      json.dump(self.state(), f)


def load_state(path: str) -> Dict:
  with fileio.open_file(path) as f:
    return json.load(f)


def _default_process(process_index, process_count):
  if process_index is None or process_count is None:
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} not in [0, {process_count})")
  return int(process_index), int(process_count)


def _make_mask_fn(vocab, max_seq_length, max_predictions_per_seq, masked_lm_prob, masking_strategy,
                  seed, stored_continuation: bool, process_index: int = 0, google_exact: bool = False,
                  span_geo_p: float = 0.2, span_max_length: int = 10):
  piece_cont = masking_strategy != "token"       # "##" pieces continue a word
  if stored_continuation and masking_strategy == "token":
    masking_strategy = "whole_word"             # records written with word boundaries stay whole-word
  cfg = masking_lib.MaskingConfig.from_vocab(vocab, masked_lm_prob=masked_lm_prob,
                                             max_predictions_per_seq=max_predictions_per_seq,
                                             strategy=masking_strategy, span_geo_p=span_geo_p,
                                             span_max_length=span_max_length, google_exact=google_exact)
  masker = masking_lib.Masker(cfg)
  cont_table = masking_lib.continuation_table(vocab)
  whole_word_mask = cfg.uses_words

  def np_mask(step, input_ids, input_mask, positions, ids, weights, stored_cont):
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x6D61736B, process_index, int(step) & 0xFFFFFFFF,
                                 int(step) >> 32])
    original = masking_lib.unmask(input_ids, positions, ids, weights)
    cont = None
    if whole_word_mask:
      cont = (cont_table[np.clip(original, 0, cont_table.size - 1)] if piece_cont
              else np.zeros(original.shape, bool))
      if stored_continuation:
        cont = cont | (stored_cont > 0)
    out = masker(original, input_mask, rng, cont)
    return (out["input_ids"], out["masked_lm_positions"], out["masked_lm_ids"], out["masked_lm_weights"])

  def tf_mask(step, batch):
    stored = batch.get(tfrecord_io.CONTINUATION_FEATURE, tf.zeros_like(batch["input_ids"]))
    ids, pos, lab, w = tf.numpy_function(
        np_mask, [step, batch["input_ids"], batch["input_mask"], batch["masked_lm_positions"],
                  batch["masked_lm_ids"], batch["masked_lm_weights"], stored],
        [tf.int32, tf.int32, tf.int32, tf.float32], stateful=False)
    out = dict(batch)
    out.pop(tfrecord_io.CONTINUATION_FEATURE, None)
    b = batch["input_ids"].shape[0]
    out["input_ids"] = tf.ensure_shape(ids, [b, max_seq_length])
    out["masked_lm_positions"] = tf.ensure_shape(pos, [b, max_predictions_per_seq])
    out["masked_lm_ids"] = tf.ensure_shape(lab, [b, max_predictions_per_seq])
    out["masked_lm_weights"] = tf.ensure_shape(w, [b, max_predictions_per_seq])
    return out

  return tf_mask


class _RecordStream:
  """This host's serialized records, epoch by epoch, in windows of `cycle_length` whole files.

  Epoch e: the host's files in an order shuffled by (seed, e), taken `cycle_length` at a time; a window's
  files are interleaved record by record and shuffled (buffer `shuffle_buffer`, seeded by (seed, e, window)).
  A window is self-contained, so `epoch_records(e, first_window=w)` starts at window w without reading
  windows 0..w-1: a resume at step k skips whole files by their record counts (the manifests, else counted
  once) and reads only the remainder of one window (`resume`).
  """

  def __init__(self, files: List[str], is_training: bool, seed: int, process_index: int, process_count: int,
               shuffle_buffer: int, cycle_length: int):
    self.shard_files = len(files) >= process_count    # hosts get whole files (else records round-robin)
    self.host_files = files[process_index::process_count] if self.shard_files else list(files)
    if shuffle_buffer == 0:     # no shuffling at all: the files one after the other, records in file order
      is_training, cycle_length = False, 1
    self.is_training, self.seed, self.shuffle_buffer = is_training, seed, shuffle_buffer
    self.process_index, self.process_count = process_index, process_count
    self.window = max(1, min(cycle_length, len(self.host_files)))

  def file_order(self, epoch):
    """Indices into host_files for `epoch` (a tensor; eager for the resume arithmetic)."""
    n = len(self.host_files)
    if not (self.is_training and n > 1):
      return tf.range(n, dtype=tf.int64)
    return tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64),
        seed=tf.stack([tf.constant(self.seed & 0x7FFFFFFF, tf.int64), tf.cast(epoch, tf.int64)]))

  def epoch_records(self, epoch, first_window: int = 0) -> tf.data.Dataset:
    names = tf.gather(tf.constant(self.host_files), self.file_order(epoch))
    windows = tf.data.Dataset.from_tensor_slices(names).batch(self.window).enumerate()
    if first_window:
      windows = windows.skip(first_window)
    epoch = tf.cast(epoch, tf.int64)

    def window_records(index, window_names):
      ds = tf.data.Dataset.from_tensor_slices(window_names).interleave(
          tf.data.TFRecordDataset, cycle_length=self.window, block_length=1,
          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      if not self.shard_files and self.process_count > 1:
        ds = ds.shard(self.process_count, self.process_index)
      if self.is_training and self.shuffle_buffer > 1:
        ds = ds.shuffle(self.shuffle_buffer, seed=epoch * 1_000_003 + index * 7919 + (self.seed & 0xFFFFFF),
                        reshuffle_each_iteration=False)
      return ds

    return windows.flat_map(window_records)

  def window_counts(self, counts: List[int], epoch: int) -> List[int]:
    """This host's records in each window of `epoch`."""
    order = self.file_order(epoch).numpy().tolist()
    out = []
    for w in range(0, len(order), self.window):
      total = sum(counts[i] for i in order[w:w + self.window])
      if not self.shard_files and self.process_count > 1:
        total = (total - self.process_index + self.process_count - 1) // self.process_count
      out.append(total)
    return out

  def resume(self, skip: int, num_epochs: int) -> tf.data.Dataset:
    """The stream from record `skip` on: whole epochs and whole windows skipped by their counts."""
    counts = _file_record_counts(self.host_files)
    per_epoch = sum(self.window_counts(counts, 0))
    if per_epoch == 0:
      raise ValueError(f"no records for host {self.process_index} in {self.host_files}")
    first_epoch, skip = divmod(skip, per_epoch)
    first_window = 0
    for n in self.window_counts(counts, first_epoch):
      if skip < n:
        break
      skip -= n
      first_window += 1
    ds = self.epoch_records(first_epoch, first_window).skip(skip)
    if first_epoch + 1 < num_epochs:
      ds = ds.concatenate(tf.data.Dataset.range(first_epoch + 1, num_epochs).flat_map(self.epoch_records))
    return ds


def _file_record_counts(files: List[str]) -> List[int]:
  """Records per file: from the manifests beside them when they list them all (no file is opened), else
  counted once (local files from the TFRecord headers alone, remote ones through tf.data)."""
  counts = manifest.record_counts(files)
  if counts is not None:
    return counts
  log_once(log, f"no complete manifest lists {files[0]}" + (f" and {len(files) - 1} more" if len(files) > 1 else "")
            + ": counting the records of every file once to resume")
  return [manifest.count_tfrecords(f) if not fileio.is_remote(f) else
          int(tf.data.TFRecordDataset([f]).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())
          for f in files]


EVAL_SEED_OFFSET = 7919   # evaluation draws its pairs and masks apart from training's, the same each time


def open_dataset(data: PretrainData, max_seq_length: int, max_predictions_per_seq: int, *, phase_index: int = 0,
                 evaluation: bool = False, start_step: int = 0, process_index: Optional[int] = None,
                 process_count: Optional[int] = None) -> "PretrainingIterator":
  """This host's batches of one phase: training (`data.input_files`, shuffled, repeated, resumable at
  `start_step`) or evaluation (`data.eval_input_files`, in order, repeated so a loop takes exactly the batches
  it wants). The seed of phase i is data.seed + 1000 i, so each phase pairs and masks afresh."""
  read = dataclasses.replace(data, input_files=data.eval_input_files if evaluation else data.input_files,
                             seed=data.seed + 1000 * phase_index + (EVAL_SEED_OFFSET if evaluation else 0))
  return make_pretraining_dataset(read, max_seq_length, max_predictions_per_seq, is_training=not evaluation,
                                  process_index=process_index, process_count=process_count,
                                  num_epochs=1 << 20 if evaluation else None, start_step=start_step)


def make_pretraining_dataset(
    data: PretrainData,
    max_seq_length: int,
    max_predictions_per_seq: int,
    *,
    is_training: bool = True,
    input_format: str = "auto",
    process_index: Optional[int] = None,
    process_count: Optional[int] = None,
    num_epochs: Optional[int] = None,
    cycle_length: int = 8,
    start_step: int = 0,
    drop_remainder: bool = True,
    prefetch: int = 2,
) -> PretrainingIterator:
  """Per-host iterator of batches of `data.input_files` (seed `data.seed`, `data.per_host_batch_size` rows);
  see the module docstring for the full contract. What to read and how to mask is `data` alone (the plan's,
  configs/pretrain.py's fields resolved: masking aliases applied, NSP or SOP pairs); the arguments here say
  how this reader runs.

  Args:
    data: the plan's PretrainData (`resolve_data_plan(...).data`; `open_dataset` picks a phase's or the
      evaluation files and seed from it). data.masking "auto": "static" for records carrying masks, else
      "dynamic" (logged once); data.vocab_file is needed for dynamic masking and for text input.
    input_format: "auto" (text for .txt files), "tfrecord" or "text".
    num_epochs: None = repeat forever when training, one pass when not.
    cycle_length: files read together (interleaved) in each window of an epoch.
    start_step: number of batches this host already consumed (resume).
  """
  d, strategy = data, data.masking_strategy
  if strategy not in masking_lib.STRATEGIES:
    raise ValueError(f"data.masking_strategy={strategy!r}; expected one of {masking_lib.STRATEGIES}")
  files = text_io.expand_globs(d.input_files)
  if input_format == "auto":
    input_format = "text" if all(f.endswith(_TEXT_SUFFIXES) for f in files) else "tfrecord"
  if input_format not in ("tfrecord", "text"):
    raise ValueError(f"input_format must be 'auto', 'tfrecord' or 'text', got {input_format!r}")
  packing_mode = "stream" if d.pack_sequences else d.packing     # the plan resolved the two (data_plan)
  if packing_mode != "pairs" and input_format != "text":   # packing.py works on raw text only
    field = "data.pack_sequences" if packing_mode == "stream" else f"data.packing={packing_mode}"
    raise UserError(f"{field} packs raw text (.txt) input; TFRecords hold fixed pairs already")
  if not files:
    raise UserError(f"data.input_files={d.input_files!r} matches no file")
  if input_format == "tfrecord":
    for f in files[:1]:
      _check_records(f, max_seq_length, max_predictions_per_seq)
  mode, why = resolve_masking(d.masking, input_format, files)
  stored_cont = input_format == "tfrecord" and _has_feature(files[0], tfrecord_io.CONTINUATION_FEATURE)
  detail = ""
  if mode == "static":
    detail = "; data.masked_lm_prob and the masking strategy do not apply"
  else:
    kind = {"span": f"spans of whole words, geometric p={d.span_geo_p}, at most {d.span_max_length}",
            "whole_word": "whole words"}.get(strategy, "whole words" if stored_cont else "")
    pieces = "jieba" if d.chinese_whole_word_mask and not stored_cont else "## pieces"
    if strategy == "token":
      pieces = ""
    source = " + ".join(x for x in (pieces, "the records' word_continuation" if stored_cont else "") if x)
    detail = f"; {kind} ({source})" if kind else ""
  log_once(log, f"masking: {mode} ({why}{detail}){'; google_exact' if d.google_exact else ''} [{files[0]}"
            f"{f' + {len(files) - 1} more' if len(files) > 1 else ''}]")
  if mode == "dynamic" and not d.vocab_file:
    raise ValueError("dynamic masking needs data.vocab_file (to know [MASK] and the vocab size)")
  process_index, process_count = _default_process(process_index, process_count)
  if num_epochs is None:
    num_epochs = _MAX_EPOCHS if is_training else 1
  vocab = tokenization.load_vocab(d.vocab_file) if d.vocab_file else None
  batch_size = d.per_host_batch_size
  config = {"seed": d.seed, "batch_size": batch_size, "process_index": process_index,
            "process_count": process_count, "input_format": input_format, "masking": mode}

  if input_format == "text":
    ds, stored_cont = _text_pairs_dataset(files, d.vocab_file, d.do_lower_case, max_seq_length, d.short_seq_prob,
                                          d.pair_mode, d.seed, is_training, process_index, process_count,
                                          num_epochs, start_step * batch_size,
                                          d.chinese_whole_word_mask and mode == "dynamic", d.pack_sequences,
                                          d.google_exact, shuffle=is_training and d.shuffle_buffer != 0,
                                          allow_invalid_utf8=d.allow_invalid_utf8,
                                          pack_documents=getattr(d, "max_examples_per_row", 0)
                                          if packing_mode == "documents" else 0)
  else:
    stream = _RecordStream(files, is_training, d.seed, process_index, process_count, d.shuffle_buffer,
                           cycle_length)
    if start_step:
      ds = stream.resume(start_step * batch_size, num_epochs)
    else:
      ds = tf.data.Dataset.range(0, num_epochs).flat_map(stream.epoch_records)
  ds = ds.batch(batch_size, drop_remainder=drop_remainder)
  if input_format == "tfrecord":
    ds = ds.map(lambda s: parse_pretraining_examples(s, max_seq_length, max_predictions_per_seq,
                                                     stored_cont),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if mode == "dynamic":
    mask_fn = _make_mask_fn(vocab, max_seq_length, max_predictions_per_seq, d.masked_lm_prob, strategy, d.seed,
                            stored_cont, process_index, d.google_exact, d.span_geo_p, d.span_max_length)
    ds = ds.enumerate(start=start_step).map(mask_fn, num_parallel_calls=tf.data.AUTOTUNE,
                                            deterministic=True)
  ds = ds.map(lambda b: {k: b[k] for k in BATCH_KEYS})
  ds = ds.prefetch(prefetch)
  return PretrainingIterator(ds, start_step, config, files if input_format == "tfrecord" else ())


def _text_pairs_dataset(files, vocab_file, do_lower_case, max_seq_length, short_seq_prob, pair_mode, seed,
                        is_training, process_index, process_count, num_epochs, skip_records,
                        chinese_wwm: bool = False, pack_sequences: bool = False,
                        google_exact: bool = False, shuffle: Optional[bool] = None,
                        allow_invalid_utf8: bool = False, pack_documents: int = 0):
  """Raw text -> unmasked instances, fresh pairs each epoch (masked later like records); `pack_sequences`: the
  cross-document stream instead; `pack_documents` > 0: whole documents packed best-fit, at most that many per
  row (packing.pack_whole_documents).

  With `chinese_wwm` the rows also carry jieba word-continuation flags (as the stored feature of
  records), which the dynamic masker uses for whole-word masking. `shuffle` (default: is_training) shuffles
  the documents and the pairs of each epoch; False keeps file order.
  """
  shuffle = is_training if shuffle is None else shuffle
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case,
                                         control_chars="google" if google_exact else "all")
  read_stats = text_io.ReadStats()
  documents = text_io.read_documents(files, read_stats, text_io.Utf8Rule(
      allow=allow_invalid_utf8, flag="--config.data.allow_invalid_utf8=true"))
  documents = documents[process_index::process_count]
  if not documents:
    raise ValueError(f"no documents for host {process_index}/{process_count} in {files}")
  docs_ids, docs_cont, _ = shard_builder.tokenize_documents(
      documents, tokenizer, shard_builder.Config(do_lower_case=do_lower_case, chinese_wwm=chinese_wwm,
                                       google_exact=google_exact))
  corpus = instances_lib.build_corpus(docs_ids, max_seq_length - 3, continuation=docs_cont,
                                      long_sentence_policy="keep" if google_exact else "split",
                                      unk_id=tokenizer.vocab[tokenization.UNK])
  need = 0 if pack_sequences else instances_lib.MIN_DOCUMENTS[pair_mode]
  if corpus.num_documents < need:   # here, not in create_pairs inside tf.data (an InvalidArgumentError)
    # The plan counted documents by their lines; documents whose lines hold no token are dropped here.
    raise UserError(f"data.input_files: {corpus.num_documents} document(s) with tokens for host "
                    f"{process_index}/{process_count} in {files[:3]}{' ...' if len(files) > 3 else ''}, need "
                    f"at least {need}; separate documents with a blank line, or use "
                    f"--config.data.pair_mode={instances_lib.SWAPPED}")
  special = instances_lib.special_ids_from_vocab(tokenizer.vocab)
  t = max_seq_length

  def epoch_pairs(epoch: int):
    rng = random.Random(_mix(seed, epoch, 0x70616972))
    order = list(range(corpus.num_documents))
    if shuffle:
      rng.shuffle(order)
    if pack_documents:   # MLM-only rows of whole documents, each its own attention block (packing.py)
      return packing.pack_whole_documents(corpus, max_seq_length, pack_documents, special["cls"], special["sep"],
                                          order, rng if shuffle else None, seed=_mix(seed, epoch, 0x646f6373))
    if pack_sequences:   # MLM-only full-length rows across documents (packing.py, RoBERTa FULL-SENTENCES)
      return packing.pack_documents(corpus, max_seq_length, order, rng if shuffle else None)
    return instances_lib.create_pairs(corpus, max_seq_length, short_seq_prob, pair_mode, 1, rng,
                                      shuffle=shuffle, document_order=order, google_exact=google_exact)

  # Which epoch and offset the resumed stream starts at (pairs are cheap to recreate, rows are not).
  first_epoch, first_offset = 0, skip_records
  while first_offset and first_epoch < num_epochs:
    n = len(epoch_pairs(first_epoch))
    if first_offset < n:
      break
    first_offset -= n
    first_epoch += 1

  chunk = 4096
  cache: Dict[int, instances_lib.Pairs] = {}

  def np_rows(epoch, index):
    # Rows [index * chunk, (index + 1) * chunk) of an epoch's pairs (after the resume offset); empty past
    # the end. Pairs of the current epoch are cached; older epochs are dropped.
    epoch, index = int(epoch), int(index)
    if epoch not in cache:
      cache.clear()
      cache[epoch] = epoch_pairs(epoch)
    pairs = cache[epoch]
    s0 = (first_offset if epoch == first_epoch else 0) + index * chunk
    part = pairs.take(np.arange(min(s0, len(pairs)), min(s0 + chunk, len(pairs))))
    assemble = (packing.assemble_documents if pack_documents else
                packing.assemble if pack_sequences else instances_lib.assemble)
    rows = assemble(corpus, part, t, special["cls"], special["sep"], special["pad"])
    cont = rows["continuation"] if chinese_wwm else np.zeros_like(rows["input_ids"])
    return (rows["input_ids"], rows["input_mask"], rows["segment_ids"], rows["next_sentence_labels"],
            cont.astype(np.int32))

  def chunk_rows(epoch, index):
    ids, mask, seg, nsl, cont = tf.numpy_function(
        np_rows, [epoch, index], [tf.int32, tf.int32, tf.int32, tf.int32, tf.int32], stateful=False)
    n = tf.shape(nsl)[0]
    zeros = tf.zeros([n, 1], tf.int32)
    out = {"input_ids": tf.ensure_shape(ids, [None, t]), "input_mask": tf.ensure_shape(mask, [None, t]),
           "segment_ids": tf.ensure_shape(seg, [None, t]), "masked_lm_positions": zeros,
           "masked_lm_ids": zeros, "masked_lm_weights": tf.zeros([n, 1], tf.float32),
           "next_sentence_labels": tf.ensure_shape(nsl, [None])}
    if chinese_wwm:
      out[tfrecord_io.CONTINUATION_FEATURE] = tf.ensure_shape(cont, [None, t])
    return out

  def epoch_rows(epoch):
    chunks = tf.data.Dataset.range(1 << 40).map(lambda i: chunk_rows(epoch, i))
    return chunks.take_while(lambda c: tf.shape(c["next_sentence_labels"])[0] > 0).unbatch()

  # (Not Dataset.from_generator: its Python thread can deadlock interpreter shutdown.)
  ds = tf.data.Dataset.range(first_epoch, num_epochs).flat_map(epoch_rows)
  return ds, chinese_wwm
