"""Config field and file checks, each raising `bert_jax.errors.UserError` naming the field (as
`config.a.b=value`) and what was expected, so the entry points print one `error: ...` line. The run plans
(`input_pipeline.data_plan`, `training.plan`, `finetune.plan`) are made of them:

  check_range / check_choice        a config field's range or choice (skipped when the config lacks the field)
  check_vocab                       an existing, UTF-8 vocab holding the special tokens; its size
  check_input_files                 comma-separated globs that match non-empty files
  is_raw_text                       files the pipeline reads as raw text (.txt)
  count_documents_upto              documents of raw text (blank-line separated), counted up to a limit
  warn                              a config warning, logged (the run goes on)
"""

from __future__ import annotations

import argparse
import io
import logging
import math
from typing import Iterable, List, Optional, Sequence

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.input_pipeline import text_io, tokenization

_log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_TEXT_SUFFIXES = (".txt", ".text", ".txt.gz", ".text.gz")   # raw text, as pretrain_dataset's input_format="auto"


class ArgumentParser(argparse.ArgumentParser):
  """argparse for the data tools' command lines: a bad flag (unknown, wrong type, out of range) is a
  UserError, so the entry point prints one `error: --flag ...` line and exits 2, as for every other user
  mistake, instead of argparse's usage block and `PROG: error:` line."""

  def error(self, message: str):
    raise UserError(f"{message} (--help lists the flags)")


# ---- generic field checks -------------------------------------------------------------------------------
def get_field(config, path: str):
  """config.a.b by dotted path; raises KeyError when a part is missing."""
  value = config
  for part in path.split("."):
    if part not in value:
      raise KeyError(path)
    value = value[part]
  return value


def has(config, path: str) -> bool:
  try:
    get_field(config, path)
    return True
  except (KeyError, TypeError, AttributeError):
    return False


def check_range(config, path: str, *, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False,
                allow: Sequence = (), integer: bool = False) -> None:
  """config.<path> within [lo, hi] (open ends with lo_open / hi_open) or one of `allow`; skipped when the
  config has no such field."""
  if not has(config, path):
    return
  value = get_field(config, path)
  if value in allow and not isinstance(value, bool):
    return
  ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
  if isinstance(value, bool) or not ok_type:
    raise UserError(f"config.{path}={value!r}; expected {'an integer' if integer else 'a number'}")
  bad = (lo is not None and (value <= lo if lo_open else value < lo)) or \
        (hi is not None and (value >= hi if hi_open else value > hi)) or \
        (isinstance(value, float) and not math.isfinite(value))
  if bad:
    lo_s = "" if lo is None else f"{'>' if lo_open else '>='} {lo}"
    hi_s = "" if hi is None else f"{'<' if hi_open else '<='} {hi}"
    want = " and ".join(s for s in (lo_s, hi_s) if s)
    extra = f" (or {', '.join(repr(a) for a in allow)})" if allow else ""
    raise UserError(f"config.{path}={value!r}; expected {want}{extra}")


def check_choice(config, path: str, choices: Iterable) -> None:
  if not has(config, path):
    return
  value = get_field(config, path)
  choices = tuple(choices)
  if value not in choices:
    raise UserError(f"config.{path}={value!r}; expected one of {', '.join(repr(c) for c in choices)}")


# ---- files ----------------------------------------------------------------------------------------------
def check_vocab(vocab_file: str, field: str, required: Sequence[str] = SPECIAL_TOKENS) -> int:
  """Number of lines of an existing, UTF-8, non-empty vocab holding `required`; UserError naming `field`."""
  if not vocab_file:
    raise UserError(f"{field} is empty: pass the WordPiece vocab (one token per line) or a tokenizer.json")
  if not fileio.exists(vocab_file):
    raise UserError(f"{field}={vocab_file!r}: no such file")
  if fileio.isdir(vocab_file):
    raise UserError(f"{field}={vocab_file!r} is a directory; expected a vocab file (one token per line, e.g. "
                    f"{fileio.join(vocab_file, 'vocab.txt')})")
  try:
    vocab = tokenization.load_vocab(vocab_file, required=tuple(required))
  except (ValueError, FileNotFoundError) as e:
    raise UserError(f"{field}={vocab_file!r}: {e}") from e
  if tokenization.is_tokenizer_json(vocab_file):
    return max(vocab.values()) + 1
  with fileio.open_file(vocab_file, "rb") as f:
    return sum(1 for _ in f)


SNIFFED_FILES = text_io.SNIFFED_FILES   # input files whose first bytes are looked at
_RECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrec")


def check_is_text(files: Sequence[str], what: str) -> None:
  """A UserError (prefixed by `what`, e.g. "--input_file='x'") for a raw-text input that is not text:
  TFRecords (by name, or bytes: records' length headers and padded ids are mostly zero bytes) or UTF-16 text.
  Read as text they were "lines that are not UTF-8", nearly all skipped with a warning, and the tools made
  records or a vocab from the rest. The first SNIFFED_FILES files are looked at (4 KiB each)."""
  for path in files[:SNIFFED_FILES]:
    if path.endswith(_RECORD_SUFFIXES):
      raise UserError(f"{what}: {path} is a TFRecord file; expected raw text (one sentence per line, a blank "
                      "line between documents); train on records with --config.data.input_files")
    with fileio.open_file(path, "rb") as f:
      head = f.read(4096)
    if head and not text_io.is_gzip(head) and head.count(0) >= 0.1 * len(head):
      kind = "UTF-16 text" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else "binary (a TFRecord file?)"
      raise UserError(f"{what}: {path} is {kind}, not UTF-8 text ({head.count(0)} of its first {len(head)} "
                      "bytes are zero); expected raw UTF-8 text, one sentence per line")


def check_input_files(patterns: str, field: str) -> List[str]:
  """The files of comma-separated globs; each glob matches, each file has bytes. UserError naming `field`."""
  if not str(patterns).strip():
    raise UserError(f"{field} is empty: pass --{field}=GLOB (comma-separated globs of raw .txt text or "
                    "TFRecords in Google's format)")
  try:
    files = text_io.expand_globs(patterns)
  except FileNotFoundError as e:
    raise UserError(f"{field}={patterns!r}: {e}") from e
  for path in files:
    if fileio.size(path) == 0:
      raise UserError(f"{field}={patterns!r}: {path} is empty")
  return files


def is_raw_text(files: Sequence[str]) -> bool:
  return all(f.endswith(_TEXT_SUFFIXES) for f in files)


def count_documents_upto(files: Sequence[str], limit: int, utf8: text_io.Utf8Rule = text_io.Utf8Rule(),
                         stats: Optional[text_io.ReadStats] = None) -> int:
  """Documents of raw text in Google's format as the reader keeps them (`text_io.parse_documents`: a blank
  or whitespace-only line between them, each file ends one, lines that are not UTF-8 dropped), counted until
  `limit` are found. Every file is read and its encoding checked (`utf8`: above 1% of lines that are not
  UTF-8, the UserError naming the file and the fix), as the reader will read it whole: a GBK corpus whose
  Chinese lines the reader would drop is counted by the documents left, not by its blank lines. The lines
  dropped are counted into `stats.bad_utf8_lines`."""
  found = 0
  stats = stats if stats is not None else text_io.ReadStats()
  for path in files:
    with fileio.open_file(path, "rb") as f:
      raw = f.read()
    try:
      text = text_io.decompress_if_gzip(raw, path).decode("utf-8")
    except UnicodeDecodeError:
      found += len(text_io.parse_documents(raw, path, stats, utf8=utf8))
      continue
    if found >= limit:
      continue
    in_doc = False
    for line in io.StringIO(text, newline="\n"):
      if line.strip():
        in_doc = True
      elif in_doc:
        found += 1
        in_doc = False
        if found >= limit:
          break
    else:
      found += in_doc
  return found


def warn(message: str) -> None:
  """A config warning: logged (the run goes on)."""
  _log.warning("%s", message)
