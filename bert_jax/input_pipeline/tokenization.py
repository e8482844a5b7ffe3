"""BERT tokenization: a pure-Python `FullTokenizer` equal to google-research/bert's.

Pipeline (the same steps and order as BERT's `tokenization.py`):
  1. clean: drop NUL, U+FFFD and control characters; every whitespace character becomes " ".
  2. CJK: put spaces around every CJK ideograph, so each becomes its own token.
  3. split on whitespace; per word: lower-case and strip accents (NFD, drop category Mn) when
     `do_lower_case`; split every punctuation character off as its own token.
  4. WordPiece: greedy longest-match-first with "##" continuations; a word with no full cover, or longer
     than `max_input_chars_per_word` (200, Google's value), becomes "[UNK]".

No TensorFlow here. The in-graph equivalent (TF-Text) is `tf_tokenization.py`; the bulk tokenizer used for
offline record creation (`fast_batch_tokenizer`) uses Hugging Face `tokenizers` (Rust) when installed and
falls back to this module; tests check that all of them give identical ids.

    tok = FullTokenizer("vocab.txt", do_lower_case=True)
    tokens = tok.tokenize("Hello, world!")            # ['hello', ',', 'world', '!']
    ids = tok.convert_tokens_to_ids(tokens)
    pieces, spans = tok.tokenize_with_offsets(text)   # spans: (start, end) char offsets into `text`

For SQuAD-style alignment `whitespace_tokenize` / `basic_tokenize_with_offsets` give words with their
character spans in the original text.
"""

from __future__ import annotations

import collections
import itertools
import re
import unicodedata
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from bert_jax.input_pipeline import fileio

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)


# ----------------------------------------------------------------------------------------------------------
# Character classes (identical to BERT's helpers).
# ----------------------------------------------------------------------------------------------------------
def is_whitespace(char: str) -> bool:
  """True for space, tab, newline, carriage return and Unicode category Zs."""
  if char in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
  """True for Unicode categories Cc/Cf/Cn/Co/Cs, except tab/newline/CR (treated as whitespace)."""
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char).startswith("C")


def is_punctuation(char: str) -> bool:
  """True for Unicode category P* and for all non-alphanumeric ASCII symbols ("$", "^", "`", ...)."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def is_chinese_char(cp: int) -> bool:
  """True for a code point in the CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana)."""
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
          or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
          or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def convert_to_unicode(text, source: str = "<text>") -> str:
  """Returns `text` as str; bytes are decoded as UTF-8 with an error naming `source` on bad bytes."""
  if isinstance(text, str):
    return text
  if isinstance(text, (bytes, bytearray)):
    try:
      return bytes(text).decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(f"{source}: not valid UTF-8 at byte {e.start}: {bytes(text)[e.start:e.start + 8]!r}")
  raise TypeError(f"{source}: expected str or bytes, got {type(text).__name__}")


def whitespace_tokenize(text: str) -> List[str]:
  """Splits on runs of whitespace (Python's str.split)."""
  return text.split()


def split_isolating(text: str, is_single: Callable[[str], bool]) -> List[str]:
  """Splits on whitespace and makes every character for which `is_single(char)` holds a token of its own
  ("ab中c" -> ["ab", "中", "c"]); the character-level words of Chinese CoNLL files and of CJK answer F1."""
  if not any(is_single(ch) for ch in text):
    return text.split()
  out: List[str] = []
  for chunk in text.split():
    buf = ""
    for ch in chunk:
      if is_single(ch):
        if buf:
          out.append(buf)
          buf = ""
        out.append(ch)
      else:
        buf += ch
    if buf:
      out.append(buf)
  return out


# ----------------------------------------------------------------------------------------------------------
# Vocabulary.
# ----------------------------------------------------------------------------------------------------------
def load_vocab(vocab_file: str, required: Sequence[str] = SPECIAL_TOKENS) -> "collections.OrderedDict[str, int]":
  """Reads a vocab file (one token per line; id = line number) into an ordered token -> id dict.

  Raises ValueError naming the file when it is empty, not UTF-8, or lacks a token of `required`
  (by default all of [PAD] [UNK] [CLS] [SEP] [MASK], which pre-training needs).
  """
  if not fileio.exists(vocab_file):
    raise FileNotFoundError(f"vocab file not found: {vocab_file}")
  with fileio.open_file(vocab_file, "rb") as f:
    raw = f.read()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(f"vocab file {vocab_file}: not valid UTF-8 at byte {e.start}")
  vocab: "collections.OrderedDict[str, int]" = collections.OrderedDict()
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  for index, line in enumerate(lines):
    token = line.rstrip("\r").strip()
    if not token:
      # Google's loader keeps the id slot of a blank line; keep ids aligned with line numbers.
      continue
    if token not in vocab:
      vocab[token] = index
  if not vocab:
    raise ValueError(f"vocab file {vocab_file} is empty")
  missing = [t for t in required if t not in vocab]
  if missing:
    raise ValueError(f"vocab file {vocab_file} lacks the special token(s) {missing}; BERT needs "
                     f"{list(required)} (one per line)")
  return vocab


def convert_by_vocab(vocab, items: Iterable) -> list:
  return [vocab[item] for item in items]


# ----------------------------------------------------------------------------------------------------------
# Tokenizers.
# ----------------------------------------------------------------------------------------------------------
def _strip_accents(text: str) -> str:
  text = unicodedata.normalize("NFD", text)
  return "".join(c for c in text if unicodedata.category(c) != "Mn")


def _normalize_word(word: str, do_lower_case: bool) -> str:
  if do_lower_case:
    return _strip_accents(word.lower())
  return word


def _split_on_punc(text: str) -> List[str]:
  out: List[str] = []
  start_new = True
  for ch in text:
    if is_punctuation(ch):
      out.append(ch)
      start_new = True
    else:
      if start_new:
        out.append("")
        start_new = False
      out[-1] += ch
  return out


class BasicTokenizer:
  """Cleaning, CJK splitting, lower-casing + accent stripping, punctuation splitting."""

  def __init__(self, do_lower_case: bool = True, never_split: Iterable[str] = ()):
    self.do_lower_case = do_lower_case
    self.never_split = frozenset(never_split)

  def _clean_and_space_cjk(self, text: str) -> str:
    out = []
    for ch in text:
      cp = ord(ch)
      if cp == 0 or cp == 0xFFFD or is_control(ch):
        continue
      if is_whitespace(ch):
        out.append(" ")
      elif is_chinese_char(cp):
        out.append(" ")
        out.append(ch)
        out.append(" ")
      else:
        out.append(ch)
    return "".join(out)

  def tokenize(self, text) -> List[str]:
    text = self._clean_and_space_cjk(convert_to_unicode(text))
    tokens: List[str] = []
    for word in text.split():
      if word in self.never_split:
        tokens.append(word)
        continue
      word = _normalize_word(word, self.do_lower_case)
      tokens.extend(t for t in _split_on_punc(word) if t)
    return tokens

  def tokenize_with_offsets(self, text: str) -> Tuple[List[str], List[Tuple[int, int]]]:
    """Basic tokens with (start, end) character spans into the original `text`."""
    text = convert_to_unicode(text)
    tokens: List[str] = []
    spans: List[Tuple[int, int]] = []
    word_start = -1

    def flush(end: int):
      if word_start < 0:
        return
      for tok, span in self._split_word_with_offsets(text, word_start, end):
        tokens.append(tok)
        spans.append(span)

    for i, ch in enumerate(text):
      cp = ord(ch)
      if cp == 0 or cp == 0xFFFD or is_control(ch):
        continue  # dropped characters neither start nor end a word
      # str.isspace also covers U+2028/U+2029, which BERT keeps through cleaning but its final
      # whitespace split (str.split) still splits on.
      if is_whitespace(ch) or ch.isspace() or is_chinese_char(cp):
        flush(i)
        word_start = -1
        if is_chinese_char(cp):
          tokens.append(ch)
          spans.append((i, i + 1))
      elif word_start < 0:
        word_start = i
    flush(len(text))
    return tokens, spans

  def _split_word_with_offsets(self, text: str, start: int, end: int):
    """Splits text[start:end] (no whitespace/CJK inside) into basic tokens with spans."""
    chars = [(i, text[i]) for i in range(start, end)
             if not (ord(text[i]) in (0, 0xFFFD) or is_control(text[i]))]
    word = "".join(c for _, c in chars)
    if word in self.never_split:
      return [(word, (chars[0][0], chars[-1][0] + 1))]
    out = []
    piece: List[Tuple[int, str]] = []

    def emit():
      if piece:
        norm = _normalize_word("".join(c for _, c in piece), self.do_lower_case)
        if norm:
          out.append((norm, (piece[0][0], piece[-1][0] + 1)))
        piece.clear()

    for i, ch in chars:
      # Punctuation is decided after normalisation in Google's code; for a single character the
      # normalised form is its lower-cased, accent-stripped self.
      norm = _normalize_word(ch, self.do_lower_case)
      if norm and all(is_punctuation(c) for c in norm):
        emit()
        for c in norm:
          out.append((c, (i, i + 1)))
      else:
        piece.append((i, ch))
    emit()
    return out


class WordpieceTokenizer:
  """Greedy longest-match-first WordPiece over one already basic-tokenized word."""

  def __init__(self, vocab, unk_token: str = UNK, max_input_chars_per_word: int = 200):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word

  def tokenize_word(self, word: str) -> List[str]:
    n = len(word)
    if n > self.max_input_chars_per_word:
      return [self.unk_token]
    vocab = self.vocab
    if word in vocab:  # the common case: a whole word in the vocab
      return [word]
    pieces = []
    start = 0
    while start < n:
      end = n
      cur = None
      while start < end:
        sub = word[start:end]
        if start > 0:
          sub = "##" + sub
        if sub in vocab:
          cur = sub
          break
        end -= 1
      if cur is None:
        return [self.unk_token]
      pieces.append(cur)
      start = end
    return pieces

  def tokenize_word_with_lengths(self, word: str) -> List[Tuple[str, int, int]]:
    """Like tokenize_word, with each piece's [start, end) character range in `word`."""
    pieces = self.tokenize_word(word)
    if pieces == [self.unk_token] and word != self.unk_token:
      return [(self.unk_token, 0, len(word))]
    out, pos = [], 0
    for p in pieces:
      length = len(p) - 2 if p.startswith("##") and pos > 0 else len(p)
      out.append((p, pos, pos + length))
      pos += length
    return out

  def tokenize(self, text: str) -> List[str]:
    out: List[str] = []
    for word in whitespace_tokenize(convert_to_unicode(text)):
      out.extend(self.tokenize_word(word))
    return out


class FullTokenizer:
  """BasicTokenizer followed by WordpieceTokenizer; equal to BERT's `tokenization.FullTokenizer`.

  Args:
    vocab_file: one token per line; must contain [PAD] [UNK] [CLS] [SEP] [MASK] (ValueError otherwise,
      naming the file). Pass `required_tokens=("[UNK]",)` to load a vocab for tokenization only.
    do_lower_case: lower-case and strip accents (uncased models); False for cased models.
  """

  def __init__(self, vocab_file: str, do_lower_case: bool = True,
               required_tokens: Sequence[str] = SPECIAL_TOKENS, max_input_chars_per_word: int = 200):
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.vocab = load_vocab(vocab_file, required=required_tokens)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(self.vocab,
                                                  max_input_chars_per_word=max_input_chars_per_word)
    self._cache: Dict[str, List[str]] = {}

  def __len__(self) -> int:
    return len(self.vocab)

  @property
  def vocab_size(self) -> int:
    """Number of id slots: 1 + the largest id (equals len(vocab) for a well-formed file)."""
    return max(self.vocab.values()) + 1

  def special_ids(self) -> Dict[str, int]:
    return {t: self.vocab[t] for t in SPECIAL_TOKENS if t in self.vocab}

  def tokenize(self, text) -> List[str]:
    out: List[str] = []
    cache = self._cache
    wp = self.wordpiece_tokenizer.tokenize_word
    for tok in self.basic_tokenizer.tokenize(text):
      pieces = cache.get(tok)
      if pieces is None:
        pieces = wp(tok)
        if len(cache) < 1_000_000:
          cache[tok] = pieces
      out.extend(pieces)
    return out

  def encode(self, text) -> List[int]:
    """Token ids of `text` (no [CLS]/[SEP] added)."""
    return self.convert_tokens_to_ids(self.tokenize(text))

  def tokenize_with_offsets(self, text) -> Tuple[List[str], List[Tuple[int, int]]]:
    """WordPiece tokens and their (start, end) character spans in the original `text`.

    A piece's span covers the original characters it came from (accents and dropped control characters
    inside it included); an [UNK] spans its whole word.
    """
    text = convert_to_unicode(text)
    words, spans = self.basic_tokenizer.tokenize_with_offsets(text)
    out_tokens: List[str] = []
    out_spans: List[Tuple[int, int]] = []
    for word, (s, e) in zip(words, spans):
      pieces = self.wordpiece_tokenizer.tokenize_word_with_lengths(word)
      if len(pieces) == 1 or e - s != len(word):
        # One piece, or normalisation changed the length (e.g. a stripped accent): pieces share the
        # word's span proportionally, which keeps them ordered and inside the word.
        total = max(len(word), 1)
        for p, ps, pe in pieces:
          out_tokens.append(p)
          out_spans.append((s + (ps * (e - s)) // total, s + (pe * (e - s) + total - 1) // total))
      else:
        for p, ps, pe in pieces:
          out_tokens.append(p)
          out_spans.append((s + ps, s + pe))
    return out_tokens, out_spans

  def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
    vocab = self.vocab
    unk = vocab.get(UNK)
    return [vocab.get(t, unk) for t in tokens]

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
    return convert_by_vocab(self.inv_vocab, (int(i) for i in ids))


def basic_tokenize(text, do_lower_case: bool = True) -> List[str]:
  """BERT's basic tokenization (no WordPiece): the words WordPiece would see."""
  return BasicTokenizer(do_lower_case=do_lower_case).tokenize(text)


def basic_tokenize_with_offsets(text, do_lower_case: bool = True):
  """(words, spans): basic tokens and their (start, end) character spans in `text`."""
  return BasicTokenizer(do_lower_case=do_lower_case).tokenize_with_offsets(text)


# ----------------------------------------------------------------------------------------------------------
# Bulk tokenization for offline record creation.
# ----------------------------------------------------------------------------------------------------------
class _PythonBatchTokenizer:
  def __init__(self, tokenizer: FullTokenizer):
    self.tokenizer = tokenizer
    self.backend = "python"

  def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
    return [self.tokenizer.encode(t) for t in texts]

  def encode_batch_with_offsets(self, texts: Sequence[str]):
    """(ids, spans) per text; spans are (start, end) character offsets into the text."""
    ids, spans = [], []
    for t in texts:
      pieces, sp = self.tokenizer.tokenize_with_offsets(t)
      ids.append(self.tokenizer.convert_tokens_to_ids(pieces))
      spans.append(sp)
    return ids, spans


_CJK_CLASS = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
              "\U0002b740-\U0002b81f\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f")
# A CJK ideograph, or a run of anything else up to whitespace / the next ideograph. BERT's tokenization of
# a line is the concatenation of its tokenization of these pieces (ideographs are always split off and
# lower-casing is per whitespace-separated word), so each distinct piece is tokenized once and cached.
_PIECE_RE = re.compile(f"[{_CJK_CLASS}]|[^\\s{_CJK_CLASS}]+")
# Python's `\s` (and str.split) also splits on these control characters, which BERT deletes instead
# (joining their neighbours): lines containing them take the uncached path.
_SPLIT_DIFFERENCES = re.compile("[\x0b\x0c\x1c-\x1f\x85]")


class _PieceCache(dict):
  def __init__(self, tokenizer: "FullTokenizer"):
    super().__init__()
    self._tokenizer = tokenizer

  def __missing__(self, piece: str):
    tok = self._tokenizer
    ids = tuple(tok.convert_tokens_to_ids(tok.tokenize(piece)))
    if len(self) > 2_000_000:
      self.clear()
    self[piece] = ids
    return ids


class _CachedBatchTokenizer:
  """Exact BERT tokenization in Python with a cache of distinct pieces (CJK chars, words): a dict lookup
  per piece. ~3x faster than Rust `tokenizers` on Chinese text, similar on English."""

  def __init__(self, tokenizer: FullTokenizer):
    self.tokenizer = tokenizer
    self.backend = "python-cached"
    self._cache = _PieceCache(tokenizer)
    self._span_cache: Dict[str, tuple] = {}

  def encode(self, text: str) -> List[int]:
    if _SPLIT_DIFFERENCES.search(text):
      return self.tokenizer.encode(text)
    return list(itertools.chain.from_iterable(map(self._cache.__getitem__, _PIECE_RE.findall(text))))

  def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
    return [self.encode(t) for t in texts]

  def encode_batch_with_offsets(self, texts: Sequence[str]):
    """(ids, spans) per text; spans are (start, end) character offsets into the text."""
    ids_out, spans_out = [], []
    tok = self.tokenizer
    for text in texts:
      if _SPLIT_DIFFERENCES.search(text):
        pieces, spans = tok.tokenize_with_offsets(text)
        ids_out.append(tok.convert_tokens_to_ids(pieces))
        spans_out.append(spans)
        continue
      ids, spans = [], []
      for m in _PIECE_RE.finditer(text):
        piece = m.group()
        hit = self._span_cache.get(piece)
        if hit is None:
          p_toks, p_spans = tok.tokenize_with_offsets(piece)
          hit = (tuple(tok.convert_tokens_to_ids(p_toks)), tuple(p_spans))
          if len(self._span_cache) > 2_000_000:
            self._span_cache.clear()
          self._span_cache[piece] = hit
        start = m.start()
        ids.extend(hit[0])
        spans.extend((start + a, start + b) for a, b in hit[1])
      ids_out.append(ids)
      spans_out.append(spans)
    return ids_out, spans_out


class _RustBatchTokenizer:
  """Hugging Face `tokenizers` (Rust) WordPiece configured exactly like BERT's tokenizer."""

  def __init__(self, tokenizer: FullTokenizer):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers  # pylint: disable=g-import-not-at-top
    self.tokenizer = tokenizer
    self.backend = "tokenizers"
    vocab = dict(tokenizer.vocab)
    rust = Tokenizer(models.WordPiece(vocab=vocab, unk_token=UNK,
                                      max_input_chars_per_word=tokenizer.wordpiece_tokenizer
                                      .max_input_chars_per_word))
    rust.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                 strip_accents=tokenizer.do_lower_case,
                                                 lowercase=tokenizer.do_lower_case)
    rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    self._rust = rust

  def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
    texts = list(texts)
    encs = self._rust.encode_batch(texts, add_special_tokens=False)
    out = [e.ids for e in encs]
    if self.tokenizer.do_lower_case:
      # Python's str.lower (used by BERT) lower-cases a word-final capital sigma to "ς"; Rust always
      # gives "σ". Such texts take the Python path so ids stay identical to BERT's tokenizer.
      for i, t in enumerate(texts):
        if "\u03a3" in t:
          out[i] = self.tokenizer.encode(t)
    return out

  def encode_batch_with_offsets(self, texts: Sequence[str]):
    """(ids, spans) per text; spans are (start, end) character offsets into the text."""
    texts = list(texts)
    encs = self._rust.encode_batch(texts, add_special_tokens=False)
    ids = [e.ids for e in encs]
    spans = [e.offsets for e in encs]
    if self.tokenizer.do_lower_case:
      for i, t in enumerate(texts):
        if "\u03a3" in t:
          pieces, spans[i] = self.tokenizer.tokenize_with_offsets(t)
          ids[i] = self.tokenizer.convert_tokens_to_ids(pieces)
    return ids, spans


def fast_batch_tokenizer(tokenizer: FullTokenizer, backend: str = "auto"):
  """An object with `.encode_batch(texts) -> id lists`, `.encode_batch_with_offsets(texts) -> (ids, spans)`
  and `.backend`.

  backend: "auto"/"python-cached" (exact, a cache of distinct pieces: the fastest here on one core,
  ~1.5M tokens/s on Chinese news), "tokenizers" (Hugging Face Rust, multi-threaded), or "python" (the
  plain `FullTokenizer`, uncached). All give identical ids (tests/test_pipeline_tokenization.py).
  """
  if backend in ("auto", "python-cached"):
    return _CachedBatchTokenizer(tokenizer)
  if backend == "python":
    return _PythonBatchTokenizer(tokenizer)
  if backend == "tokenizers":
    return _RustBatchTokenizer(tokenizer)
  raise ValueError(f"unknown tokenizer backend {backend!r}: auto, python-cached, tokenizers or python")
