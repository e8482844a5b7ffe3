"""Reading pre-training text in Google's format, with counted skips instead of silent loss.

Format: one sentence per line, a blank line between documents (google-research/bert `sample_text.txt`).
A gzip'd file (`corpus.txt.gz`; recognised by its magic bytes, whatever its name) is read decompressed; it is
read whole (sharding never cuts it into byte ranges).
Lines that are not UTF-8: a file (or a shard's byte range of it) where more than 1% of the lines do not
decode is refused (`Utf8Rule`): one UserError naming the file, the share, the encoding its bad lines decode
as (GB18030/GBK, Big5 or Latin-1) and the `iconv` command that converts it. With `Utf8Rule(allow=True)`
(`--allow_invalid_utf8`, `data.allow_invalid_utf8`), and below the share, they are skipped and counted (with
the file name). Empty files are counted; a glob that matches nothing raises, naming the glob. Both kinds of
skip are also reported as input warnings (`bert_jax.input_warnings.warn_input`: a `warning:` line naming
the file and the count, printed again when the entry point exits; with `--strict` a UserError instead).
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import os
import zlib
from typing import List, Optional, Sequence, Union

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
SNIFFED_FILES = 64          # input files whose first bytes are looked at (a glob may match thousands on GCS)
MAX_INVALID_UTF8_SHARE = 0.01   # more lines than this that are not UTF-8: the file is in another encoding
_HEAD_BYTES = 1 << 20           # what `check_utf8_head` reads of each file


@dataclasses.dataclass(frozen=True)
class Utf8Rule:
  """What a reader does with lines that are not UTF-8: above MAX_INVALID_UTF8_SHARE of a file's lines a
  UserError (a file in another encoding would lose most of its text), unless `allow`; below it, or with
  `allow`, they are skipped and counted. `flag` is how the user says `allow`, named in the error ("": a
  tool without it, whose error names only the conversion)."""
  allow: bool = False
  flag: str = "--allow_invalid_utf8"


def guess_encoding(lines: Sequence[bytes]) -> str:
  """The encoding lines that are not UTF-8 decode as, for the error's `iconv -f` (a guess, said as one):
  GB18030 (GBK, GB2312: simplified Chinese) when they decode as it into characters of GB2312's common set,
  else Big5 (traditional Chinese) when they decode as it, else GB18030 when they decode as it, else
  Latin-1 (which decodes any bytes). Big5 text decodes as GB18030 too, but into rare characters (its second
  bytes 0x40-0x7E fall outside GB2312), so the share of GB2312 characters tells the two apart."""
  sample = b"\n".join(lines[:200])
  try:
    text = sample.decode("gb18030")
  except UnicodeDecodeError:
    text = None
  if text is not None:
    wide = [c for c in text if ord(c) > 127]
    common = 0
    for c in wide:
      try:
        c.encode("gb2312")
        common += 1
      except UnicodeEncodeError:
        pass
    if wide and common >= 0.9 * len(wide):
      return "GB18030"
  try:
    sample.decode("big5")
    return "Big5"
  except UnicodeDecodeError:
    pass
  return "GB18030" if text is not None else "Latin-1"


def invalid_utf8_message(path: str, bad: int, total: int, bad_lines: Sequence[bytes], first_bad: int,
                         utf8: Utf8Rule, where: str = "") -> str:
  """The UserError's line for a file whose share of lines that are not UTF-8 is above the rule's."""
  encoding = guess_encoding(bad_lines)
  root, ext = os.path.splitext(path[:-3] if path.endswith(".gz") else path)
  iconv = {"GB18030": "GB18030", "Big5": "BIG5", "Latin-1": "LATIN1"}[encoding]
  command = (f"gunzip -c {path} | iconv -f {iconv} -t UTF-8" if path.endswith(".gz") else
             f"iconv -f {iconv} -t UTF-8 {path}")
  return (f"{path}: {bad:,} of {total:,} lines{where} ({100 * bad / max(total, 1):.1f}%, first: line {first_bad}) "
          f"are not UTF-8; they decode as {encoding}{' (GBK)' if encoding == 'GB18030' else ''}: convert the "
          f"file with `{command} > {root}.utf8{ext}`"
          + (f", or pass {utf8.flag} to read on, skipping those lines (counted in the summary)" if utf8.flag else ""))


def decode_lines(raw: bytes, path: str, stats: Optional["ReadStats"] = None, utf8: Utf8Rule = Utf8Rule(),
                 where: str = "") -> List[str]:
  """`raw` split at "\\n" (only "\\n" ends a line, as in BERT's reader) and decoded; lines that are not UTF-8
  are refused above the rule's share (UserError), else skipped, counted in `stats` and warned about."""
  try:
    return raw.decode("utf-8").split("\n")
  except UnicodeDecodeError:
    pass
  lines, bad_lines, first_bad = [], [], None
  raw_lines = raw.split(b"\n")
  for number, line in enumerate(raw_lines, start=1):
    try:
      lines.append(line.decode("utf-8"))
    except UnicodeDecodeError:
      bad_lines.append(line)
      first_bad = first_bad or number
  bad = len(bad_lines)
  if not utf8.allow and bad > MAX_INVALID_UTF8_SHARE * len(raw_lines):
    raise UserError(invalid_utf8_message(path, bad, len(raw_lines), bad_lines, first_bad, utf8, where))
  if stats is not None:
    stats.bad_utf8_lines[path] += bad
  warn_input(f"{path}: skipped {bad:,} of {len(raw_lines):,} lines{where} that are not UTF-8 "
             f"(first: line {first_bad}{where})")
  return lines


def check_utf8_head(path: str, utf8: Utf8Rule = Utf8Rule()) -> None:
  """The rule on the first MiB of `path` (decompressed when gzip'd), cut at its last whole line: a file in
  another encoding is refused before any shard is read. Under `allow` nothing is read."""
  if utf8.allow:
    return
  with fileio.open_file(path, "rb") as f:
    head = f.read(2)
    f.seek(0)
    if is_gzip(head):
      with gzip.GzipFile(fileobj=f) as g:
        try:
          raw = g.read(_HEAD_BYTES)
        except (OSError, EOFError, zlib.error):
          return                    # the reader names a damaged gzip file
    else:
      raw = f.read(_HEAD_BYTES)
  if len(raw) == _HEAD_BYTES and b"\n" in raw:
    raw = raw[:raw.rindex(b"\n")]
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError:
    where = f" of its first {len(raw):,} bytes" if len(raw) >= _HEAD_BYTES - (1 << 16) else ""
    decode_lines(raw, path, None, utf8, where)


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


def read_documents(files: Sequence[str], stats: ReadStats = None, utf8: Utf8Rule = Utf8Rule()
                   ) -> List[List[str]]:
  """Documents (lists of non-empty stripped lines) from text files in Google's format.

  A blank line ends a document; each file also ends one. Lines with invalid UTF-8 are refused above 1% of a
  file (`utf8`), else skipped and counted in `stats.bad_utf8_lines[file]`; files with no text are listed in
  `stats.empty_files`; each such file is reported through `warn_input` (a UserError under strict mode).
  """
  stats = stats if stats is not None else ReadStats()
  documents: List[List[str]] = []
  for path in files:
    with fileio.open_file(path, "rb") as f:
      raw = f.read()
    documents.extend(parse_documents(raw, path, stats, utf8=utf8))
  stats.documents = len(documents)
  return documents


def parse_documents(raw: bytes, path: str, stats: ReadStats, whole_file: bool = True,
                    utf8: Utf8Rule = Utf8Rule(), where: str = " of a byte range") -> List[List[str]]:
  """The documents in `raw`, the bytes of `path` (or, `whole_file=False`, a later byte range of it that
  starts at a document boundary: `sharding`, which names it in `where`). Counts into `stats` as
  `read_documents` does."""
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
  lines = decode_lines(raw, path, stats, utf8, "" if whole_file else where)
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
