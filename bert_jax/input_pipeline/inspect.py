r"""Look at the batches a pre-training config feeds the model: decoded examples and batch statistics.

    python -m bert_jax.input_pipeline.inspect --config=configs/pretrain.py:size=tiny,runlocal \
        --config.data.input_files=corpus.txt --config.data.vocab_file=vocab.txt \
        --num_batches=2 [--show=4] [--output=batches.jsonl] [--config.data.shuffle_buffer=0]

The config is resolved into the data plan that `train.py`'s run plan is built from
(`bert_jax.input_pipeline.data_plan`, with the vocab in `data.vocab_file`): a bad or unknown field is one
`error: ...` line, exit 2, as with `train.py`. The batches come from that plan's data (`PretrainData`),
opened as the training loop opens them (phase 0, one host): raw text or TFRecords, `data.masking`
(auto/static/dynamic), `data.google_exact`, whole-word options. With `--config.data.shuffle_buffer=0`
nothing is shuffled: examples come in file order.

Printed per example: segment A and B as WordPiece tokens, each prediction marked where it stands:
  {M:orig}      replaced by [MASK] (orig = the label, masked_lm_ids)
  {R:tok>orig}  replaced by the random token `tok`
  {K:orig}      kept unchanged (still predicted)
and the NSP/SOP label. Per batch and in total: selection rate (predictions / non-special real tokens),
the [MASK]/random/kept split, the NSP random share, the padding share, whole-word adjacency (share of
predictions next to another prediction: high for whole-word masking, ~2 x 15% = 0.3 for token masking)
and predictions per sequence.

`--output=FILE.jsonl` writes one JSON object per example: input_ids, input_mask, segment_ids,
masked_lm_positions, masked_lm_ids, masked_lm_weights, next_sentence_labels (integer lists, as the
features of Google's records) plus batch, index and tokens (the decoded input_ids).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Dict, List, Optional

import numpy as np
from absl import flags
from ml_collections import config_flags

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.input_pipeline import checks, instances, pretrain_dataset, tokenization
from bert_jax.input_pipeline.data_plan import DataPlan, resolve_data_plan

FIELDS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
          "masked_lm_weights", "next_sentence_labels")


def resolve(config) -> DataPlan:
  """The data plan of a pre-training config as one host reads it, with the vocab in data.vocab_file."""
  vocab_file = config.data.vocab_file
  if not vocab_file:
    raise UserError("config.data.vocab_file is empty: pass --config.data.vocab_file=vocab.txt (needed to decode)")
  checks.check_vocab(vocab_file, "config.data.vocab_file")
  return resolve_data_plan(config, vocab_file, process_count=1)


def open_batches(plan: DataPlan) -> pretrain_dataset.PretrainingIterator:
  """The training batches of the plan's first phase (seed data.seed), as the training loop opens them."""
  phase = plan.phases[0]
  return pretrain_dataset.open_dataset(plan.data, phase.max_seq_length, phase.max_predictions_per_seq,
                                       phase_index=phase.index)


class Vocab:
  """Ids <-> tokens and the special ids, from a vocab file."""

  def __init__(self, vocab_file: str):
    self.vocab = tokenization.load_vocab(vocab_file)
    self.inv = tokenization.readable_tokens(self.vocab)   # a byte-level BPE's pieces decoded where whole
    self.mask_id = self.vocab[tokenization.MASK]
    self.special = np.zeros(max(self.vocab.values()) + 1, bool)
    for tok in tokenization.SPECIAL_TOKENS:
      self.special[self.vocab[tok]] = True

  def token(self, i: int) -> str:
    return self.inv.get(int(i), f"<id {int(i)}>")


def prediction_kinds(batch: Dict[str, np.ndarray], mask_id: int) -> np.ndarray:
  """int8 [B, P]: 0 padding slot, 1 [MASK], 2 random replacement, 3 kept unchanged."""
  pos, lab = batch["masked_lm_positions"], batch["masked_lm_ids"]
  w = batch["masked_lm_weights"] > 0
  shown = np.take_along_axis(batch["input_ids"], pos, axis=1)
  kind = np.where(shown == mask_id, 1, np.where(shown == lab, 3, 2))
  return np.where(w, kind, 0).astype(np.int8)


def batch_statistics(batch: Dict[str, np.ndarray], vocab: Vocab) -> Dict[str, float]:
  """Counts over a batch (sums, so batches can be added) and the derived shares (`shares`)."""
  ids, mask = batch["input_ids"], batch["input_mask"] > 0
  pos, w = batch["masked_lm_positions"], batch["masked_lm_weights"] > 0
  kinds = prediction_kinds(batch, vocab.mask_id)
  # Non-special real tokens: the originals at predicted positions count too ([MASK] is special).
  orig = ids.copy()
  rows = np.broadcast_to(np.arange(ids.shape[0])[:, None], pos.shape)
  orig[rows[w], pos[w]] = batch["masked_lm_ids"][w]
  candidates = mask & ~vocab.special[np.clip(orig, 0, vocab.special.size - 1)]
  selected = np.zeros(ids.shape, bool)
  selected[rows[w], pos[w]] = True
  left = np.zeros_like(selected)
  left[:, 1:] = selected[:, :-1]
  right = np.zeros_like(selected)
  right[:, :-1] = selected[:, 1:]
  return {"sequences": ids.shape[0], "tokens": int(ids.size), "real_tokens": int(mask.sum()),
          "candidates": int(candidates.sum()), "predictions": int(w.sum()),
          "mask": int((kinds == 1).sum()), "random": int((kinds == 2).sum()), "kept": int((kinds == 3).sum()),
          "adjacent": int((selected & (left | right)).sum()),
          "nsp_label_1": int(np.asarray(batch["next_sentence_labels"]).sum())}


def shares(counts: Dict[str, float]) -> Dict[str, float]:
  n = max(counts["predictions"], 1)
  return {"selection_rate": counts["predictions"] / max(counts["candidates"], 1),
          "mask_share": counts["mask"] / n, "random_share": counts["random"] / n, "kept_share": counts["kept"] / n,
          "nsp_random_share": counts["nsp_label_1"] / max(counts["sequences"], 1),
          "padding_share": 1.0 - counts["real_tokens"] / max(counts["tokens"], 1),
          "whole_word_adjacency": counts["adjacent"] / n,
          "predictions_per_sequence": counts["predictions"] / max(counts["sequences"], 1)}


def add_counts(total: Optional[Dict], counts: Dict) -> Dict:
  return dict(counts) if total is None else {k: total[k] + counts[k] for k in total}


def format_statistics(s: Dict[str, float]) -> str:
  return (f"selection {100 * s['selection_rate']:.2f}% of non-special tokens "
          f"({s['predictions_per_sequence']:.1f}/sequence); [MASK]/random/kept "
          f"{100 * s['mask_share']:.1f}/{100 * s['random_share']:.1f}/{100 * s['kept_share']:.1f}%; "
          f"NSP label 1 {100 * s['nsp_random_share']:.1f}%; padding {100 * s['padding_share']:.1f}%; "
          f"whole-word adjacency {100 * s['whole_word_adjacency']:.1f}%")


def describe_example(batch: Dict[str, np.ndarray], i: int, vocab: Vocab,
                     pair_task: str = instances.RANDOM_NEXT) -> str:
  """Segment A / B with each prediction marked ({M:orig} {R:tok>orig} {K:orig}) and the pair label."""
  ids, seg, mask = batch["input_ids"][i], batch["segment_ids"][i], batch["input_mask"][i] > 0
  kinds = prediction_kinds({k: v[i:i + 1] for k, v in batch.items()}, vocab.mask_id)[0]
  marks = {}
  for k, p, lab in zip(kinds, batch["masked_lm_positions"][i], batch["masked_lm_ids"][i]):
    if k == 1:
      marks[int(p)] = f"{{M:{vocab.token(lab)}}}"
    elif k == 2:
      marks[int(p)] = f"{{R:{vocab.token(ids[p])}>{vocab.token(lab)}}}"
    elif k == 3:
      marks[int(p)] = f"{{K:{vocab.token(lab)}}}"
  parts: Dict[int, List[str]] = {0: [], 1: []}
  for j in np.flatnonzero(mask):
    parts[int(seg[j])].append(marks.get(int(j), vocab.token(ids[j])))
  label = int(np.asarray(batch["next_sentence_labels"][i]).reshape(-1)[0])
  meaning = {instances.RANDOM_NEXT: ("actual next", "random next"),
             instances.SWAPPED: ("in order", "swapped")}.get(pair_task, ("0", "1"))
  return (f"  A: {' '.join(parts[0])}\n  B: {' '.join(parts[1])}\n"
          f"  {pair_task.upper()} label {label} ({meaning[label]}); {int(mask.sum())} tokens, "
          f"{int((batch['masked_lm_weights'][i] > 0).sum())} predictions")


def example_records(batch: Dict[str, np.ndarray], batch_index: int, vocab: Vocab) -> List[Dict]:
  """One JSON-able dict per example: the Google-schema features as integer lists (+ batch, index, tokens)."""
  out = []
  for i in range(batch["input_ids"].shape[0]):
    rec = {"batch": batch_index, "index": i}
    for k in FIELDS:
      rec[k] = [int(round(float(x))) for x in np.asarray(batch[k][i]).reshape(-1)]
    rec["tokens"] = [vocab.token(x) for x, m in zip(batch["input_ids"][i], batch["input_mask"][i]) if m]
    out.append(rec)
  return out


def check_output(path: str) -> None:
  """--output before any batch is read: not a directory, in a directory that can be made and written to
  (UserError naming the flag: one `error:` line, where a traceback came after all the reading)."""
  with fileio.storage_errors_as_user_errors(f"--output={path!r}"):
    if fileio.isdir(path):
      raise UserError(f"--output={path!r} is a directory; give a file name such as "
                      f"{fileio.join(path, 'batches.jsonl')}")
    directory = fileio.dirname(path)
    fileio.makedirs(directory)
    if not fileio.is_remote(directory) and not os.access(directory, os.W_OK):
      raise UserError(f"--output={path!r}: its directory {directory} is not writable")


def write_jsonl_atomic(path: str, records: List[Dict]) -> None:
  """temp file + fsync + rename (fileio: local or gs://), so a reader never sees half a file."""
  fileio.write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def inspect_batches(plan: DataPlan, num_batches: int, show: int = 2, output: Optional[str] = None,
                    out=None) -> Dict[str, float]:
  """Prints `show` decoded examples and the statistics of each of `num_batches` batches, then the totals;
  writes every example to `output` (JSONL) when given. Returns the total shares."""
  out = sys.stdout if out is None else out
  vocab = Vocab(plan.data.vocab_file)
  data = open_batches(plan)
  pair_task = plan.data.pair_mode
  total, records = None, []
  for b in range(num_batches):
    try:
      batch = next(data)
    except StopIteration:
      print(f"(the data ended after {b} batches)", file=out)
      break
    counts = batch_statistics(batch, vocab)
    total = add_counts(total, counts)
    print(f"=== batch {b}: {counts['sequences']} sequences x {batch['input_ids'].shape[1]} tokens", file=out)
    for i in range(min(show, batch["input_ids"].shape[0])):
      print(f"example {i}:\n{describe_example(batch, i, vocab, pair_task)}", file=out)
    print(f"batch {b}: {format_statistics(shares(counts))}", file=out)
    if output:
      records.extend(example_records(batch, b, vocab))
  if total is None:
    return {}
  result = shares(total)
  print(f"=== all {total['sequences']} sequences: {format_statistics(result)}", file=out)
  print("legend: {M:orig} [MASK], {R:tok>orig} random token, {K:orig} kept; orig = masked_lm_ids", file=out)
  if output:
    write_jsonl_atomic(output, records)
    print(f"wrote {len(records)} examples to {output}", file=out)
  return result


def main(argv=None) -> int:
  """Command line (see the module docstring); flags live in their own FlagValues, so it can run in-process."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  argv = list(sys.argv if argv is None else ["inspect"] + list(argv))
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "Pre-training config, e.g. configs/pretrain.py:size=tiny.",
                                  flag_values=fv, lock_config=True, sys_argv=argv)
  flags.DEFINE_integer("num_batches", 1, "Batches to read.", flag_values=fv)
  flags.DEFINE_integer("show", 2, "Examples printed per batch.", flag_values=fv)
  flags.DEFINE_string("output", None, "Write every example as one JSON object per line to this file.",
                      flag_values=fv)
  try:
    rest = cli.parse_flags(fv, argv)     # a bad flag or unknown --config.FIELD: UserError, as train.py says it
    if len(rest) > 1:
      raise UserError(f"unexpected arguments: {rest[1:]}")
    if fv.config is None:
      raise UserError("--config is required, e.g. --config=configs/pretrain.py:size=tiny,runlocal")
    if fv.num_batches < 1:
      raise UserError(f"--num_batches={fv.num_batches}; expected >= 1")
    if fv.output:
      check_output(fv.output)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    inspect_batches(resolve(fv.config), fv.num_batches, fv.show, fv.output)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    return UserError.exit_code
  return 0


if __name__ == "__main__":
  sys.exit(main())
