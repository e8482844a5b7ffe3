"""Reading pre-training text in Google's format, with counted skips instead of silent loss.

Format: one sentence per line, a blank line between documents (google-research/bert `sample_text.txt`).
A gzip'd file (`corpus.txt.gz`; recognised by its magic bytes, whatever its name) is read decompressed; it is
read whole (sharding never cuts it into byte ranges).
Lines that are not UTF-8 are skipped and counted (with the file name); empty files are counted; a glob that
matches nothing raises, naming the glob. Both kinds of skip are also reported as input warnings
(`bert_jax.input_warnings.warn_input`: a `warning:` line naming the file and the count, printed again when
the entry point exits; with `--strict` a UserError instead).
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import zlib
from typing import List, Sequence, Union

from bert_jax.errors import UserError
from bert_jax.input_warnings import warn_input
from bert_jax import fileio
from bert_jax.input_pipeline import manifest


def expand_globs(patterns: Union[str, Sequence[str]]) -> List[str]:
  """Comma-separated globs (or a list of them) -> sorted, de-duplicated file list.

  A wildcard skips the `manifest.json` / `NAME.manifest.json` files create_pretraining_data writes beside
  its records, so `records/*` means the records. Raises FileNotFoundError naming the pattern when a pattern
  matches no file.
  """
  if isinstance(patterns, str):
    patterns = [p for p in patterns.split(",")]
  files: List[str] = []
  for pattern in patterns:
    pattern = pattern.strip()
    if not pattern:
      continue
    matched = fileio.glob(pattern)
    if any(c in pattern for c in "*?["):    # a wildcard does not take the manifests written beside records
      kept = [m for m in matched if not manifest.is_manifest(m)]
      if matched and not kept:
        raise FileNotFoundError(f"no file matches {pattern!r} but {manifest.FILENAME} files")
      matched = kept
    if not matched:
      raise FileNotFoundError(f"no file matches {pattern!r}")
    files.extend(m for m in matched if fileio.isfile(m))
  seen = set()
  out = [f for f in files if not (f in seen or seen.add(f))]
  if not out:
    dirs = [p.strip() for p in patterns if p.strip() and fileio.isdir(p.strip())]
    if dirs:   # a folder given where files are expected: say so, with the glob that was probably meant
      raise FileNotFoundError(f"{dirs[0]!r} is a directory; expected files or a glob such as "
                              f"{fileio.join(dirs[0], '*.txt')!r}")
    raise FileNotFoundError(f"no input files in {list(patterns)!r}")
  return out


@dataclasses.dataclass
class ReadStats:
  """Counts of what reading skipped or changed; printed in the run summary."""
  files: int = 0
  empty_files: List[str] = dataclasses.field(default_factory=list)
  lines: int = 0
  documents: int = 0
  bad_utf8_lines: "collections.Counter[str]" = dataclasses.field(default_factory=collections.Counter)

  def summary_lines(self) -> List[str]:
    out = [f"files read: {self.files}, lines: {self.lines:,}, documents: {self.documents:,}"]
    if self.empty_files:
      out.append(f"skipped empty or blank-only files: {len(self.empty_files)} ({', '.join(self.empty_files[:5])}"
                 f"{', ...' if len(self.empty_files) > 5 else ''})")
    if self.bad_utf8_lines:
      total = sum(self.bad_utf8_lines.values())
      per_file = ", ".join(f"{f}: {n}" for f, n in self.bad_utf8_lines.most_common(5))
      out.append(f"skipped lines that are not UTF-8: {total} ({per_file})")
    return out


GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(head: bytes) -> bool:
  """Whether bytes starting a file are gzip's magic number (no UTF-8 text starts with 0x1F 0x8B)."""
  return head[:2] == GZIP_MAGIC


def decompress_if_gzip(raw: bytes, path: str) -> bytes:
  """`raw` (a whole file's bytes), decompressed when it is gzip'd; a damaged gzip file is a UserError
  naming it (its text cannot be told from its bytes)."""
  if not is_gzip(raw):
    return raw
  try:
    return gzip.decompress(raw)
  except (OSError, EOFError, zlib.error) as e:
    raise UserError(f"{path}: not a readable gzip file ({e}); decompress it or fix the copy") from e


def read_documents(files: Sequence[str], stats: ReadStats = None) -> List[List[str]]:
  """Documents (lists of non-empty stripped lines) from text files in Google's format.

  A blank line ends a document; each file also ends one. Lines with invalid UTF-8 are skipped and counted
  in `stats.bad_utf8_lines[file]`; files with no text are listed in `stats.empty_files`; each such file is
  reported through `warn_input` (a UserError under strict mode).
  """
  stats = stats if stats is not None else ReadStats()
  documents: List[List[str]] = []
  for path in files:
    with fileio.open_file(path, "rb") as f:
      raw = f.read()
    documents.extend(parse_documents(raw, path, stats))
  stats.documents = len(documents)
  return documents


def parse_documents(raw: bytes, path: str, stats: ReadStats, whole_file: bool = True) -> List[List[str]]:
  """The documents in `raw`, the bytes of `path` (or, `whole_file=False`, a later byte range of it that
  starts at a document boundary: `sharding`). Counts into `stats` as `read_documents` does."""
  documents: List[List[str]] = []
  if whole_file:
    stats.files += 1
    raw = decompress_if_gzip(raw, path)
  if not raw.strip():
    if whole_file:
      stats.empty_files.append(path)
      # a file of blank lines is not "empty" to its owner, who sees its bytes (and its size)
      warn_input(f"{path}: {'only blank lines (no text)' if raw else 'empty file'}, skipped")
    return documents
  try:
    lines = raw.decode("utf-8").split("\n")  # only "\n" ends a line, as in BERT's reader
  except UnicodeDecodeError:
    lines, first_bad, bad = [], None, 0
    raw_lines = raw.split(b"\n")
    for number, line in enumerate(raw_lines, start=1):
      try:
        lines.append(line.decode("utf-8"))
      except UnicodeDecodeError:
        bad += 1
        first_bad = first_bad or number
    stats.bad_utf8_lines[path] += bad
    where = "" if whole_file else " of a byte range"
    warn_input(f"{path}: skipped {bad:,} of {len(raw_lines):,} lines{where} that are not UTF-8 "
               f"(first: line {first_bad}{where})")
  current: List[str] = []
  for line in lines:
    stats.lines += 1
    line = line.strip()
    if not line:
      if current:
        documents.append(current)
        current = []
      continue
    current.append(line)
  if current:
    documents.append(current)
  return documents
