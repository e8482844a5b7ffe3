"""Shared pieces of the fine-tuning task readers: errors, skip reports, example sets, file reading,
tokenisation with character offsets, and [CLS] a [SEP] b [SEP] packing into numpy arrays.

Conventions for every task's features (a dict of numpy arrays, one row per model input):
  input_ids, input_mask, segment_ids   int32 [N, max_seq_length]  (Google's names; padding id 0)
  example_index                        int32 [N]  row of the ExampleSet the feature came from
plus the task's labels (see each task module). Bad input is reported with file and line number:
`on_error="raise"` raises TaskDataError, `on_error="skip"` counts the row in `ExampleSet.skipped`.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import logging
import os
import re
import sys
import unicodedata
import weakref
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from bert_jax.input_pipeline.tokenization import is_chinese_char

IGNORE_INDEX = -100  # label id of positions that carry no loss (sub-tokens, [CLS], [SEP], padding)

_log = logging.getLogger(__name__)


class TaskDataError(ValueError):
  """Bad input data; the message names the file (or TFDS split) and line / example."""

  def __init__(self, source: str, line: Optional[int], message: str):
    self.source, self.line, self.reason = source, line, message
    where = f"{source}:{line}" if line is not None else source
    super().__init__(f"{where}: {message}")


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
  es = ExampleSet(examples, source, split, report)
  if report.total:
    _log.warning("%s", report.summary())
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
# Tokenisation.
# --------------------------------------------------------------------------------------------------------
def _is_whitespace(ch):
  return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch):
  return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punct(ch):
  cp = ord(ch)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


def _strip_accents(text):
  text = unicodedata.normalize("NFD", text)
  return "".join(c for c in text if unicodedata.category(c) != "Mn")


def _do_lower_case(tokenizer) -> bool:
  basic = getattr(tokenizer, "basic_tokenizer", None)
  if basic is not None and hasattr(basic, "do_lower_case"):
    return bool(basic.do_lower_case)
  return bool(getattr(tokenizer, "do_lower_case", True))


def _wordpiece(tokenizer, word: str) -> List[str]:
  wp = tokenizer.wordpiece_tokenizer
  if hasattr(wp, "tokenize_word"):
    return wp.tokenize_word(word)
  return wp.tokenize(word)


def tokenize_with_char_spans(tokenizer, text: str) -> Tuple[List[str], List[Tuple[int, int]]]:
  """WordPiece tokens of `text` (equal to `tokenizer.tokenize(text)`) and each token's exact [start, end)
  character range in the ORIGINAL `text`.

  Works with any Google-style FullTokenizer (`.basic_tokenizer.do_lower_case`, `.wordpiece_tokenizer`).
  Each original character is normalised on its own (lower-case, NFD, accents dropped); characters that
  normalise to nothing (combining accents, control characters) are attached to the preceding character, so
  a span always covers the complete original text of its token: "Café" -> "cafe" spans all of "Café",
  and "##s" in "1990s" spans just "s". An [UNK] spans its whole (punctuation-split) word.
  Words are cached per tokenizer, so repeated contexts and words cost one dict lookup each.
  """
  lower = _do_lower_case(tokenizer)
  cache = _word_cache(tokenizer)
  tokens: List[str] = []
  spans: List[Tuple[int, int]] = []
  for ws, we in _word_bounds(text):
    word = text[ws:we]
    rel = cache.get(word)
    if rel is None:
      rel = _word_pieces(tokenizer, word, lower)
      if len(cache) < 2_000_000:
        cache[word] = rel
    for tok, s, e in rel:
      tokens.append(tok)
      spans.append((ws + s, ws + e))
  return tokens, spans


_WORD_CACHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_ASCII_WORD = re.compile(r"[^ \t\n\r]+")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CHAR_CLASS: Dict[str, int] = {}
_KEEP, _SPACE, _DROP, _CJK = 0, 1, 2, 3


def _word_cache(tokenizer) -> Dict[str, list]:
  try:
    cache = _WORD_CACHES.get(tokenizer)
    if cache is None:
      cache = _WORD_CACHES[tokenizer] = {}
    return cache
  except TypeError:  # not weak-referenceable: no caching
    return {}


def _char_class(ch: str) -> int:
  c = _CHAR_CLASS.get(ch)
  if c is None:
    cp = ord(ch)
    if cp == 0 or cp == 0xFFFD or _is_control(ch):
      c = _DROP
    elif _is_whitespace(ch) or ch.isspace():
      # BERT turns Zs into spaces, then splits with str.split(), which also splits on U+2028/U+2029.
      c = _SPACE
    elif is_chinese_char(cp):
      c = _CJK
    else:
      c = _KEEP
    _CHAR_CLASS[ch] = c
  return c


def _word_bounds(text: str):
  """[start, end) of BERT's words: whitespace splits, a CJK ideograph is a word of its own, dropped
  (control) characters never start a word but stay inside one (cleaning happens before splitting)."""
  if text.isascii() and not _ASCII_CONTROL.search(text):
    return [(m.start(), m.end()) for m in _ASCII_WORD.finditer(text)]
  out = []
  start = -1
  for i, ch in enumerate(text):
    c = _char_class(ch)
    if c == _KEEP:
      if start < 0:
        start = i
    elif c == _DROP:
      continue
    else:
      if start >= 0:
        out.append((start, i))
        start = -1
      if c == _CJK:
        out.append((i, i + 1))
  if start >= 0:
    out.append((start, len(text)))
  # Trailing dropped characters belong to their word (only matters for spans, not tokens).
  return out


def _word_pieces(tokenizer, word: str, lower: bool) -> List[Tuple[str, int, int]]:
  """(token, start, end) of one whitespace-free word, offsets relative to the word."""
  # Normalised characters with the original [start, end) each came from.
  norm_chars: List[str] = []
  norm_src: List[List[int]] = []
  if word.isascii() and not _ASCII_CONTROL.search(word):
    norm_chars = list(word.lower() if lower else word)
    norm_src = [[i, i + 1] for i in range(len(word))]
  else:
    for i, ch in enumerate(word):
      if _char_class(ch) == _DROP:
        n = ""
      else:
        n = _strip_accents(ch.lower()) if lower else ch
      if not n:
        if norm_src:
          norm_src[-1][1] = i + 1  # attach to the previous character
        continue
      for c in n:
        norm_chars.append(c)
        norm_src.append([i, i + 1])
    if lower and norm_chars:
      # Word-level lower-casing differs from per-character in rare cases (final sigma); use the word-level
      # characters when the lengths agree so tokens equal tokenizer.tokenize exactly.
      whole = _strip_accents("".join(ch for ch in word if _char_class(ch) != _DROP).lower())
      if len(whole) == len(norm_chars):
        norm_chars = list(whole)
  if not norm_chars:
    return []
  # Split on punctuation, then WordPiece each piece.
  pieces: List[Tuple[int, int]] = []  # [start, end) in norm_chars
  start = None
  for k, c in enumerate(norm_chars):
    if _is_punct(c):
      if start is not None:
        pieces.append((start, k))
        start = None
      pieces.append((k, k + 1))
    elif start is None:
      start = k
  if start is not None:
    pieces.append((start, len(norm_chars)))
  unk = getattr(tokenizer.wordpiece_tokenizer, "unk_token", "[UNK]")
  out: List[Tuple[str, int, int]] = []
  for ps, pe in pieces:
    sub = "".join(norm_chars[ps:pe])
    wps = _wordpiece(tokenizer, sub)
    pos = ps
    if len(wps) == 1 and wps[0] == unk and sub != unk:
      # No WordPiece cover: one [UNK] for the whole piece.
      out.append((wps[0], norm_src[ps][0], norm_src[pe - 1][1]))
      continue
    for w in wps:
      length = len(w) - 2 if (w.startswith("##") and pos > ps) else len(w)
      end = min(pos + length, pe)
      out.append((w, norm_src[pos][0], norm_src[end - 1][1]))
      pos = end
  return out


def encode_text(tokenizer, text: str) -> List[int]:
  return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


def encode_texts(tokenizer, texts: Sequence[str]) -> List[List[int]]:
  """Token ids for many texts; the Rust batch path of tokenization.py when available (identical ids)."""
  try:
    from bert_jax.input_pipeline import tokenization  # pylint: disable=g-import-not-at-top
    fast = getattr(tokenization, "fast_batch_tokenizer", None)
    full = getattr(tokenization, "FullTokenizer", None)
  except ImportError:  # pragma: no cover
    fast = full = None
  if fast is not None and full is not None and isinstance(tokenizer, full) and len(texts) > 1000:
    return fast(tokenizer).encode_batch(list(texts))
  return [encode_text(tokenizer, t) for t in texts]


# --------------------------------------------------------------------------------------------------------
# Packing.
# --------------------------------------------------------------------------------------------------------
def special_ids(tokenizer) -> Tuple[int, int]:
  vocab = tokenizer.vocab
  for t in ("[CLS]", "[SEP]"):
    if t not in vocab:
      raise ValueError(f"the vocab has no {t} token, which fine-tuning inputs need")
  return vocab["[CLS]"], vocab["[SEP]"]


def truncate_seq_pair(a: list, b: list, max_length: int):
  """Google's _truncate_seq_pair: pop from the end of the longer list until the total fits."""
  while len(a) + len(b) > max_length:
    if len(a) > len(b):
      a.pop()
    else:
      b.pop()


def pack_pair(ids_a: List[int], ids_b: Optional[List[int]], cls_id: int, sep_id: int, max_seq_length: int):
  """[CLS] a [SEP] (b [SEP]) -> (input_ids, segment_ids), truncated with Google's rule, not padded."""
  a = list(ids_a)
  if ids_b is not None:
    b = list(ids_b)
    truncate_seq_pair(a, b, max_seq_length - 3)
    ids = [cls_id] + a + [sep_id] + b + [sep_id]
    seg = [0] * (len(a) + 2) + [1] * (len(b) + 1)
  else:
    a = a[:max_seq_length - 2]
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


def load_tfds(name: str, split: str, data_dir: Optional[str], download: bool = False):
  """(iterator of numpy examples, DatasetInfo) of a TFDS split; TensorFlow/TFDS are imported here only.

  download=False (default) never touches the network: the dataset must already be prepared in `data_dir`.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    ds, info = tfds.load(name, split=split, data_dir=data_dir, with_info=True, download=download,
                         shuffle_files=False)
  except (AssertionError, FileNotFoundError) as e:
    raise FileNotFoundError(f"TFDS {name} split {split!r} is not prepared in data_dir={data_dir!r} "
                            f"(pass download=True to let TFDS fetch it): {e}") from e
  return tfds.as_numpy(ds), info

