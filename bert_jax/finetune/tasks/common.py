"""Shared pieces of the fine-tuning task readers: errors, skip reports, example sets, file reading, and
[CLS] a [SEP] b [SEP] packing into numpy arrays. Tokenisation is the tokenizer's own (`FullTokenizer.encode`,
`.tokenize_with_offsets`; `tokenization.fast_batch_tokenizer` for many texts).

Conventions for every task's features (a dict of numpy arrays, one row per model input):
  input_ids, input_mask, segment_ids   int32 [N, max_seq_length]  (Google's names; padding id 0)
  example_index                        int32 [N]  row of the ExampleSet the feature came from
plus the task's labels (see each task module). Bad input is reported with file and line number:
`on_error="raise"` raises TaskDataError (a UserError), `on_error="skip"` counts the row in
`ExampleSet.skipped` and reports the counts as an input warning (`bert_jax.input_warnings.warn_input`;
`--strict` makes it an error).
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import logging
import os
import sys
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from bert_jax import errors, lean_imports
from bert_jax.input_warnings import warn_input

IGNORE_INDEX = -100  # label id of positions that carry no loss (sub-tokens, [CLS], [SEP], padding)

_log = logging.getLogger(__name__)


class TaskDataError(errors.UserError, ValueError):
  """Bad input data; the message names the file (or TFDS split) and line / example. A UserError (the entry
  points print one `error:` line) and, as before, a ValueError."""

  def __init__(self, source: str, line: Optional[int], message: str):
    self.source, self.line, self.reason = source, line, message
    where = f"{source}:{line}" if line is not None else source
    super().__init__(f"{where}: {message}")


class PredictInputError(errors.UserError, ValueError):
  """A bad input to a fine-tuned model's prediction on raw text (an empty NER text, SQuAD questions without
  contexts): a UserError, so the command line prints one `error:` line; a ValueError, as before."""


@dataclasses.dataclass
class SkipReport:
  """Counted, reported skips: reason -> count, with the first few locations/ids per reason."""
  source: str = ""
  counts: Dict[str, int] = dataclasses.field(default_factory=lambda: collections.Counter())
  samples: Dict[str, List[str]] = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
  max_samples: int = 10

  def add(self, reason: str, where: str):
    self.counts[reason] += 1
    if len(self.samples[reason]) < self.max_samples:
      self.samples[reason].append(where)

  @property
  def total(self) -> int:
    return int(sum(self.counts.values()))

  def summary(self) -> str:
    if not self.total:
      return f"{self.source}: nothing skipped"
    parts = [f"{self.source}: skipped {self.total}"]
    for reason, n in sorted(self.counts.items()):
      parts.append(f"  {n} x {reason} (e.g. {', '.join(self.samples[reason])})")
    return "\n".join(parts)

  def one_line(self) -> str:
    """'<source>: skipped N row(s): n x reason (e.g. file:line, ...); ...' for a warning line."""
    parts = [f"{n} x {reason} (e.g. {', '.join(self.samples[reason][:3])})"
             for reason, n in sorted(self.counts.items())]
    return f"{self.source}: skipped {self.total} row(s): " + "; ".join(parts)

  def to_dict(self) -> dict:
    return {"source": self.source, "total": self.total, "counts": dict(self.counts),
            "samples": {k: list(v) for k, v in self.samples.items()}}


class ErrorPolicy:
  """Raises or records a skip, according to `on_error` ("raise" | "skip")."""

  def __init__(self, on_error: str, report: SkipReport):
    if on_error not in ("raise", "skip"):
      raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    self.on_error, self.report = on_error, report

  def __call__(self, source: str, line: Optional[int], reason: str, detail: str = "", hint: str = ""):
    """Handles one bad row: raise TaskDataError, or count it under `reason`."""
    if self.on_error == "raise":
      msg = reason + (f": {detail}" if detail else "")
      if hint:
        msg += f" ({hint})"
      raise TaskDataError(source, line, msg)
    self.report.add(reason, f"{source}:{line}" if line is not None else source)


@dataclasses.dataclass
class ExampleSet:
  """The examples of one split, where they came from, and what was skipped while reading them."""
  examples: list
  source: str
  split: str
  skipped: SkipReport

  def __len__(self):
    return len(self.examples)

  def __iter__(self):
    return iter(self.examples)

  def __getitem__(self, i):
    return self.examples[i]

  def log_summary(self):
    if self.skipped.total:
      _log.warning("%s", self.skipped.summary())


def finish(examples: list, source: str, split: str, report: SkipReport) -> ExampleSet:
  """The ExampleSet; skipped rows (on_error="skip") are reported as an input warning (`warn_input`:
  a UserError under --strict)."""
  es = ExampleSet(examples, source, split, report)
  if report.total:
    _log.info("%s", report.summary())
    warn_input(report.one_line())
  return es


# --------------------------------------------------------------------------------------------------------
# Files.
# --------------------------------------------------------------------------------------------------------
def find_file(directory: str, names: Sequence[str], what: str) -> str:
  for name in names:
    p = os.path.join(directory, name)
    if os.path.exists(p):
      return p
  raise FileNotFoundError(f"{what}: none of {list(names)} in {directory}")


def read_utf8(path: str) -> str:
  """The text of a UTF-8 file (a BOM is dropped); invalid bytes are an error naming the file and line."""
  with open(path, "rb") as f:
    raw = f.read()
  try:
    return raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise TaskDataError(path, raw[:e.start].count(b"\n") + 1, "not valid UTF-8") from None


def read_tsv_lines(path: str) -> Iterator[Tuple[int, List[str]]]:
  """(1-based line number, tab-separated fields) for each non-empty line; quotes are literal (QUOTE_NONE,
  as Google's GLUE readers); a UTF-8 BOM is dropped."""
  with open(path, "rb") as f:
    raw = f.read()
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = raw[:e.start].count(b"\n") + 1
    raise TaskDataError(path, line, f"not valid UTF-8 (byte {e.start})") from None
  for n, line in enumerate(text.split("\n"), start=1):
    line = line.rstrip("\r")
    if not line.strip():
      continue
    yield n, line.split("\t")


def read_csv_lines(path: str, delimiter: str = ",") -> Iterator[Tuple[int, List[str]]]:
  """(line number where the record starts, fields) with standard CSV quoting."""
  csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.reader(f, delimiter=delimiter)
    start = 1
    try:
      for row in reader:
        if row and any(x.strip() for x in row):
          yield start, row
        start = reader.line_num + 1
    except csv.Error as e:
      raise TaskDataError(path, reader.line_num, f"CSV parse error: {e}") from None
    except UnicodeDecodeError as e:
      raise TaskDataError(path, start, f"not valid UTF-8 ({e.reason})") from None


# --------------------------------------------------------------------------------------------------------
# Packing.
# --------------------------------------------------------------------------------------------------------
def special_ids(tokenizer) -> Tuple[int, int]:
  vocab = tokenizer.vocab
  for t in ("[CLS]", "[SEP]"):
    if t not in vocab:
      raise ValueError(f"the vocab has no {t} token, which fine-tuning inputs need")
  return vocab["[CLS]"], vocab["[SEP]"]


TRUNCATIONS = ("head", "tail", "head_tail")


def truncate_seq_pair(a: list, b: list, max_length: int):
  """Google's _truncate_seq_pair: pop from the end of the longer list until the total fits."""
  while len(a) + len(b) > max_length:
    if len(a) > len(b):
      a.pop()
    else:
      b.pop()


def pair_lengths(la: int, lb: int, max_length: int) -> Tuple[int, int]:
  """The lengths truncate_seq_pair leaves, without popping: the longer text loses tokens until the two are
  equal, then they alternate, B first."""
  excess = la + lb - max_length
  if excess <= 0:
    return la, lb
  # cut the longer down to the shorter first, then alternate (B first when they are equal)
  gap = abs(la - lb)
  first = min(gap, excess)
  if la > lb:
    la -= first
  else:
    lb -= first
  rest = excess - first
  lb -= (rest + 1) // 2
  la -= rest // 2
  return la, lb


def keep_tokens(ids: Sequence[int], n: int, truncation: str = "head", head_fraction: float = 0.25) -> List[int]:
  """`ids` cut to `n` tokens: the first n (head, Google's), the last n (tail), or the first
  round(n * head_fraction) and the rest from the end (head_tail; Sun et al. 2019, "How to Fine-Tune BERT for
  Text Classification?", keep 128 + 382 of 510, a quarter from the head, for long reviews)."""
  ids = list(ids)
  if len(ids) <= n:
    return ids
  if n <= 0:
    return []
  if truncation == "head":
    return ids[:n]
  if truncation == "tail":
    return ids[len(ids) - n:]
  if truncation == "head_tail":
    h = min(n, max(0, int(round(n * head_fraction))))
    return ids[:h] + ids[len(ids) - (n - h):]
  raise ValueError(f"truncation={truncation!r}; expected one of {', '.join(TRUNCATIONS)}")


def pack_pair(ids_a: List[int], ids_b: Optional[List[int]], cls_id: int, sep_id: int, max_seq_length: int,
              truncation: str = "head", head_fraction: float = 0.25):
  """[CLS] a [SEP] (b [SEP]) -> (input_ids, segment_ids), not padded. Too long: Google's rule says how many
  tokens each text keeps (the longer loses first), and `truncation` which ones (keep_tokens)."""
  if ids_b is not None:
    na, nb = pair_lengths(len(ids_a), len(ids_b), max_seq_length - 3)
    a = keep_tokens(ids_a, na, truncation, head_fraction)
    b = keep_tokens(ids_b, nb, truncation, head_fraction)
    ids = [cls_id] + a + [sep_id] + b + [sep_id]
    seg = [0] * (len(a) + 2) + [1] * (len(b) + 1)
  else:
    a = keep_tokens(ids_a, max_seq_length - 2, truncation, head_fraction)
    ids = [cls_id] + a + [sep_id]
    seg = [0] * len(ids)
  return ids, seg


def to_padded_arrays(rows: Sequence[Sequence[int]], max_seq_length: int, pad: int = 0) -> np.ndarray:
  out = np.full((len(rows), max_seq_length), pad, dtype=np.int32)
  for i, r in enumerate(rows):
    if len(r) > max_seq_length:
      raise ValueError(f"row {i} has {len(r)} > max_seq_length={max_seq_length} tokens")
    out[i, :len(r)] = r
  return out


def model_inputs(id_rows, seg_rows, max_seq_length) -> Dict[str, np.ndarray]:
  input_ids = to_padded_arrays(id_rows, max_seq_length)
  segment_ids = to_padded_arrays(seg_rows, max_seq_length)
  input_mask = np.zeros_like(input_ids)
  for i, r in enumerate(id_rows):
    input_mask[i, :len(r)] = 1
  return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}


def check_max_seq_length(max_seq_length: int, minimum: int = 3):
  if max_seq_length < minimum:
    raise ValueError(f"max_seq_length={max_seq_length} is too small (needs >= {minimum})")


def as_text(v, source: str = "<tfds>") -> str:
  if isinstance(v, (bytes, bytearray)):
    try:
      return bytes(v).decode("utf-8")
    except UnicodeDecodeError:
      raise TaskDataError(source, None, "text is not valid UTF-8") from None
  if isinstance(v, np.ndarray) and v.shape == ():
    return as_text(v.item(), source)
  return str(v)


def bool_or_none(v, what: str):
  """A tri-state config value: True / False, or None for "auto" / "" (decided from the data)."""
  if isinstance(v, bool) or v is None:
    return v
  s = str(v).strip().lower()
  if s in ("auto", ""):
    return None
  if s in ("true", "1", "yes"):
    return True
  if s in ("false", "0", "no"):
    return False
  raise ValueError(f"{what}={v!r}; expected auto, true or false")


def load_tfds(name: str, split: str, data_dir: Optional[str], download: bool = False):
  """(iterator of numpy examples, DatasetInfo) of a TFDS split; TensorFlow/TFDS are imported here only.

  download=False (default) never touches the network: the dataset must already be prepared in `data_dir`.
  """
  lean_imports.tensorflow()  # TFDS pulls in TensorFlow: imported first without Keras (bert_jax/lean_imports.py)
  import tensorflow_datasets as tfds  # lazy: needed only for TFDS splits
  try:
    ds, info = tfds.load(name, split=split, data_dir=data_dir, with_info=True, download=download,
                         shuffle_files=False)
  except (AssertionError, FileNotFoundError) as e:
    raise FileNotFoundError(f"TFDS {name} split {split!r} is not prepared in data_dir={data_dir!r} "
                            f"(pass download=True to let TFDS fetch it): {e}") from e
  return tfds.as_numpy(ds), info

