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
    pieces, spans = tok.tokenize_with_offsets(text)   # spans: exact [start, end) char ranges in `text`

`FullTokenizer.tokenize_with_offsets` is the one offsets API (SQuAD answer alignment uses it).

SentencePiece vocabularies (the English ALBERTs, albert-*-v2): `load_tokenizer(vocab_file)` returns a
`SentencePieceTokenizer` when a Hugging Face tokenizer.json holding a Unigram model sits beside vocab.txt
(import-hf puts it there), with the same interface; its ids equal transformers' AlbertTokenizerFast's.

A Hugging Face tokenizer.json (ModernBERT's byte-level BPE): `load_tokenizer` returns a `JsonTokenizer`, the
same interface again, when `vocab_file` is the tokenizer.json itself or a vocab.txt with a BPE tokenizer.json
beside it (`bpe_json`); `load_vocab` returns its `JsonVocab` (ids, its own special tokens under BERT's names,
its word-continuation table for whole-word masking). Its ids equal transformers' PreTrainedTokenizerFast's.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import re
import unicodedata
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from bert_jax import input_warnings
from bert_jax import fileio

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
  """True for Unicode categories Cc/Cf/Cn/Co/Cs, except tab/newline/CR (treated as whitespace).

  This is Hugging Face's set (its BertNormalizer and `tokenizers` drop every C* character); Google's
  `tokenization._is_control` drops only Cc and Cf (`is_control_google`): unassigned (Cn), private-use (Co)
  and surrogate (Cs) characters stay in Google's words. `FullTokenizer(control_chars="google")` uses it.
  """
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char).startswith("C")


def is_control_google(char: str) -> bool:
  """google-research/bert's `_is_control`: Unicode categories Cc and Cf, except tab/newline/CR."""
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def google_control_differences(texts: Iterable[str]) -> List[int]:
  """Indices of the texts holding a Cn/Co/Cs character, which Google's tokenizer keeps and ours drops."""
  texts = list(texts)
  odd = [c for c in set("".join(texts)) if not c.isascii() and unicodedata.category(c) in ("Cn", "Co", "Cs")]
  if not odd:
    return []
  pattern = re.compile("[" + "".join(re.escape(c) for c in odd) + "]")
  return [i for i, t in enumerate(texts) if pattern.search(t)]


def is_punctuation(char: str) -> bool:
  """True for Unicode category P* and for all non-alphanumeric ASCII symbols ("$", "^", "`", ...)."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


# BERT's CJK ideograph ranges (google-research/bert `_is_chinese_char`) as [lo, hi] code point pairs: the one
# definition behind `is_chinese_char`, the regex classes and the numpy mask of the fast encoders below.
# The compatibility blocks decompose under NFD (U+F900 -> U+8C48); the others are their own NFD.
_CJK_COMPAT = ((0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF)) + _CJK_COMPAT
_CJK_LOWEST = min(lo for lo, _ in _CJK_RANGES)   # U+3400: Latin, Cyrillic, ... answer without the loop
# The ranges as the body of a regex character class ("[...]").
_CJK_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES)


def is_chinese_char(cp: int) -> bool:
  """True for a code point in the CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana)."""
  if cp < _CJK_LOWEST:
    return False
  for lo, hi in _CJK_RANGES:
    if lo <= cp <= hi:
      return True
  return False


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
  json_path = bpe_json(vocab_file)
  if json_path:   # a tokenizer.json, named or beside vocab.txt: its ids and special tokens (JsonVocab)
    return load_json_vocab(json_path, required, vocab_file)
  if not fileio.exists(vocab_file):
    raise FileNotFoundError(f"vocab file not found: {vocab_file}")
  with fileio.open_file(vocab_file, "rb") as f:
    raw = f.read()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(f"vocab file {vocab_file}: not valid UTF-8 at byte {e.start}")
  # A byte-order mark (a vocab saved by Windows Notepad) is not part of the first token ("[PAD]").
  text = text[1:] if text.startswith("\ufeff") else text
  vocab: "collections.OrderedDict[str, int]" = collections.OrderedDict()
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  duplicates = []
  for index, line in enumerate(lines):
    token = line.rstrip("\r").strip()
    if not token:
      # Google's loader keeps the id slot of a blank line; keep ids aligned with line numbers.
      continue
    if token in vocab:
      duplicates.append((token, vocab[token] + 1, index + 1))
    # The last line wins, as in Google's and Hugging Face's loaders: a checkpoint trained with this vocab saw
    # that id for the token, so importing one keeps its ids (the earlier lines' ids are never produced).
    vocab[token] = index
  if duplicates:   # said, not silently dropped
    token, first, again = duplicates[0]
    input_warnings.warn_input(
        f"vocab file {vocab_file}: {len(duplicates)} duplicate token(s) (first: {token!r} on lines {first} and "
        f"{again}); each maps to the id of its last line, as Google's and Hugging Face's loaders do")
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



# Word boundaries for `FullTokenizer.tokenize_with_offsets`, found on the original text (no cleaned copy),
# so offsets need no mapping back; the classes come from the character-class functions above.
_ASCII_WORD = re.compile(r"[^ \t\n\r]+")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_KEEP, _SPACE, _DROP, _CJK = 0, 1, 2, 3
_CHAR_CLASS: Dict[str, int] = {}


def _char_class(ch: str) -> int:
  """_DROP (deleted by cleaning), _SPACE, _CJK (a word of its own) or _KEEP; memoised per character."""
  c = _CHAR_CLASS.get(ch)
  if c is None:
    cp = ord(ch)
    if cp == 0 or cp == 0xFFFD or is_control(ch):
      c = _DROP
    elif is_whitespace(ch) or ch.isspace():
      # BERT turns Zs into spaces, then splits with str.split(), which also splits on U+2028/U+2029.
      c = _SPACE
    elif is_chinese_char(cp):
      c = _CJK
    else:
      c = _KEEP
    _CHAR_CLASS[ch] = c
  return c


def _word_bounds(text: str) -> List[Tuple[int, int]]:
  """[start, end) of BERT's words in `text`: whitespace splits, a CJK ideograph is a word of its own, and
  deleted (control) characters never start a word but stay inside one (cleaning happens before splitting;
  a trailing one stays in its word so that spans cover it)."""
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
  return out


class BasicTokenizer:
  """Cleaning, CJK splitting, lower-casing + accent stripping, punctuation splitting."""

  def __init__(self, do_lower_case: bool = True, never_split: Iterable[str] = (),
               control_chars: str = "all"):
    self.do_lower_case = do_lower_case
    self.never_split = frozenset(never_split)
    if control_chars not in ("all", "google"):
      raise ValueError(f"control_chars must be 'all' or 'google', got {control_chars!r}")
    self._is_control = is_control_google if control_chars == "google" else is_control

  def _clean_and_space_cjk(self, text: str) -> str:
    out = []
    is_ctrl = self._is_control
    for ch in text:
      cp = ord(ch)
      if cp == 0 or cp == 0xFFFD or is_ctrl(ch):
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
    control_chars: "all" (drop every Unicode C* character, as Hugging Face) or "google" (only Cc/Cf, as
      google-research/bert; used by `tokenize`/`encode`, not by the offsets API).
  """

  def __init__(self, vocab_file: str, do_lower_case: bool = True,
               required_tokens: Sequence[str] = SPECIAL_TOKENS, max_input_chars_per_word: int = 200,
               control_chars: str = "all"):
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.control_chars = control_chars
    self.vocab = load_vocab(vocab_file, required=required_tokens)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case, control_chars=control_chars)
    self.wordpiece_tokenizer = WordpieceTokenizer(self.vocab,
                                                  max_input_chars_per_word=max_input_chars_per_word)
    self._cache: Dict[str, List[str]] = {}
    self._offset_cache: Dict[str, Tuple[Tuple[str, int, int], ...]] = {}

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
    """WordPiece tokens (equal to `tokenize(text)`) and each token's exact [start, end) character range in
    the original `text`.

    Each original character is normalised on its own (lower-case, NFD, accents dropped); characters that
    normalise to nothing (combining accents, deleted control characters) are attached to the preceding
    character, so a span covers exactly the original characters of its token: "Café" -> "cafe" spans all
    of "Café", "##s" in "1990s" spans just "s", and an [UNK] spans its whole punctuation-split piece.
    Words are cached per tokenizer: SQuAD contexts repeat once per question, so most words cost one lookup.
    """
    text = convert_to_unicode(text)
    cache = self._offset_cache
    tokens: List[str] = []
    spans: List[Tuple[int, int]] = []
    for ws, we in _word_bounds(text):
      word = text[ws:we]
      rel = cache.get(word)
      if rel is None:
        rel = self._word_pieces_with_offsets(word)
        if len(cache) < 1_000_000:
          cache[word] = rel
      for tok, s, e in rel:
        tokens.append(tok)
        spans.append((ws + s, ws + e))
    return tokens, spans

  def _word_pieces_with_offsets(self, word: str) -> Tuple[Tuple[str, int, int], ...]:
    """(token, start, end) of one word from `_word_bounds`, offsets relative to the word."""
    lower = self.basic_tokenizer.do_lower_case
    # Normalised characters, each with the original [start, end) it came from.
    norm_chars: List[str] = []
    norm_src: List[List[int]] = []
    if word.isascii() and not _ASCII_CONTROL.search(word):
      norm_chars = list(word.lower() if lower else word)
      norm_src = [[i, i + 1] for i in range(len(word))]
    else:
      for i, ch in enumerate(word):
        n = "" if _char_class(ch) == _DROP else _normalize_word(ch, lower)
        if not n:
          if norm_src:
            norm_src[-1][1] = i + 1  # attach to the previous character, so no original character is lost
          continue
        for c in n:
          norm_chars.append(c)
          norm_src.append([i, i + 1])
      if lower and norm_chars:
        # Word-level lower-casing differs from per-character in rare cases (a word-final capital sigma);
        # take the word-level characters when the lengths agree, so tokens equal `tokenize` exactly.
        whole = _normalize_word("".join(ch for ch in word if _char_class(ch) != _DROP), True)
        if len(whole) == len(norm_chars):
          norm_chars = list(whole)
    if not norm_chars:
      return ()
    # Split on punctuation (decided after normalisation, as BERT does), then WordPiece each piece.
    pieces: List[Tuple[int, int]] = []  # [start, end) in norm_chars
    start = None
    for k, c in enumerate(norm_chars):
      if is_punctuation(c):
        if start is not None:
          pieces.append((start, k))
          start = None
        pieces.append((k, k + 1))
      elif start is None:
        start = k
    if start is not None:
      pieces.append((start, len(norm_chars)))
    wordpiece = self.wordpiece_tokenizer
    unk = wordpiece.unk_token
    out: List[Tuple[str, int, int]] = []
    for ps, pe in pieces:
      sub = "".join(norm_chars[ps:pe])
      wps = wordpiece.tokenize_word(sub)
      if len(wps) == 1 and wps[0] == unk and sub != unk:
        # No WordPiece cover (or too long): one [UNK] for the whole piece.
        out.append((unk, norm_src[ps][0], norm_src[pe - 1][1]))
        continue
      pos = ps
      for w in wps:
        length = len(w) - 2 if (w.startswith("##") and pos > ps) else len(w)
        end = min(pos + length, pe)
        out.append((w, norm_src[pos][0], norm_src[end - 1][1]))
        pos = end
    return tuple(out)

  def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
    vocab = self.vocab
    unk = vocab.get(UNK)
    return [vocab.get(t, unk) for t in tokens]

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
    return convert_by_vocab(self.inv_vocab, (int(i) for i in ids))


TOKENIZER_JSON = "tokenizer.json"


def sentencepiece_json(vocab_file: str) -> Optional[str]:
  """The tokenizer.json beside `vocab_file` when it holds a SentencePiece Unigram model (ALBERT's; import-hf
  writes it next to the pieces' vocab.txt), else None: WordPiece vocabs, remote paths, no such file."""
  if not vocab_file or "://" in str(vocab_file):
    return None
  path = os.path.join(os.path.dirname(os.path.abspath(vocab_file)), TOKENIZER_JSON)
  if not os.path.isfile(path):
    return None
  return path if _model_type(path, os.path.getmtime(path)) == "Unigram" else None


@functools.lru_cache(maxsize=32)
def _model_type(path: str, mtime: float) -> Optional[str]:
  try:
    with open(path, encoding="utf-8") as f:
      return (json.load(f).get("model") or {}).get("type")
  except (OSError, ValueError, AttributeError):
    return None


class SentencePieceTokenizer(FullTokenizer):
  """FullTokenizer's interface over a SentencePiece Unigram model read from a Hugging Face tokenizer.json
  (the English ALBERTs), so that text gives the ids transformers' AlbertTokenizerFast gives. vocab.txt holds
  the same pieces in id order (SentencePiece's <pad>/<unk> named [PAD]/[UNK]); the model's own normaliser
  decides casing and accents (do_lower_case is kept for the record only). `tokenize_with_offsets` returns the
  model's character offsets into the original text."""

  def __init__(self, vocab_file: str, tokenizer_json: str, do_lower_case: bool = True,
               required_tokens: Sequence[str] = SPECIAL_TOKENS, **kwargs):
    super().__init__(vocab_file, do_lower_case, required_tokens, **kwargs)
    from tokenizers import Tokenizer
    self.tokenizer_json = tokenizer_json
    try:
      self._sp = Tokenizer.from_file(tokenizer_json)
    except Exception as e:  # noqa: BLE001 - the tokenizers library's own parse errors
      raise ValueError(f"{tokenizer_json}: not a readable Hugging Face tokenizer ({e})") from None
    self._sp.no_padding()
    self._sp.no_truncation()
    pieces = self._sp.get_vocab_size(with_added_tokens=False)
    if pieces != len(self.vocab):
      raise ValueError(f"{tokenizer_json} holds {pieces} pieces but {vocab_file} has {len(self.vocab)} lines; "
                       "they must be the same vocabulary in id order (re-run import-hf)")

  def encode(self, text) -> List[int]:
    return self._sp.encode(convert_to_unicode(text), add_special_tokens=False).ids

  def tokenize(self, text) -> List[str]:
    return self.convert_ids_to_tokens(self.encode(text))

  def tokenize_with_offsets(self, text) -> Tuple[List[str], List[Tuple[int, int]]]:
    """Pieces and their [start, end) spans in `text`. The model's offsets of a word-initial piece ("\u2581b")
    cover the space its "\u2581" stands for (" b"); SQuAD answer spans built on them started one character
    early, so the span is narrowed to the piece's characters ("b"). A piece that is "\u2581" alone keeps the
    space it stands for (it has no other character)."""
    text = convert_to_unicode(text)
    enc = self._sp.encode(text, add_special_tokens=False)
    spans = []
    for start, end in enc.offsets:
      while start < end - 1 and text[start].isspace():
        start += 1
      spans.append((start, end))
    return self.convert_ids_to_tokens(enc.ids), spans


# ----------------------------------------------------------------------------------------------------------
# A Hugging Face tokenizer.json read through the `tokenizers` library: byte-level BPE (ModernBERT, RoBERTa,
# GPT-2 style) or any other model it holds.
#
# A config names one where it names a vocab: `vocab_file` may be the tokenizer.json itself, or a vocab.txt
# with a BPE tokenizer.json beside it (a params dir or a work dir: vocab.txt lists the pieces in id order,
# padded with [unused] lines up to the embedding rows, so line counts stay the vocab size). The tokenizer's
# own special tokens play BERT's roles: [CLS] and [SEP] are the first and last special tokens of its
# post-processor's single-sequence template ("[CLS] $A [SEP]", "<s> $A </s>"); [MASK], [PAD] and [UNK] are
# the added tokens of those names or their "<mask>", "<pad>", "<unk>" forms. The vocab dict carries the BERT
# names as aliases of those ids, so every caller that asks `vocab["[CLS]"]` works unchanged.
# ----------------------------------------------------------------------------------------------------------
BPE = "BPE"
_EQUIVALENTS = {CLS: ("[CLS]", "<s>", "<cls>", "[BOS]", "<bos>"), SEP: ("[SEP]", "</s>", "<sep>", "[EOS]", "<eos>"),
                MASK: ("[MASK]", "<mask>", "<MASK>"), PAD: ("[PAD]", "<pad>", "<|padding|>"),
                UNK: ("[UNK]", "<unk>", "<|unk|>")}
# The leading-space markers of byte-level BPE (GPT-2's "Ġ" for a space byte) and of Metaspace ("▁").
WORD_START_MARKERS = ("\u0120", "\u2581")


def is_tokenizer_json(path) -> bool:
  """A vocab path naming a Hugging Face tokenizer.json: a .json file holding a "model" object (a local file is
  looked into; a remote one is taken at its suffix). Another .json stays a vocab file, refused as one."""
  if not path or not str(path).lower().endswith(".json"):
    return False
  if "://" in str(path) or not os.path.isfile(path):
    return True
  return _model_type(os.path.abspath(path), os.path.getmtime(path)) is not None


def bpe_json(vocab_file: str) -> Optional[str]:
  """The tokenizer.json that tokenizes for `vocab_file` through the `tokenizers` library: `vocab_file` itself
  when it is a .json, else a BPE tokenizer.json beside it; None for WordPiece (and SentencePiece's Unigram,
  which `sentencepiece_json` handles)."""
  if not vocab_file:
    return None
  if is_tokenizer_json(vocab_file):
    return vocab_file
  if "://" in str(vocab_file) or str(vocab_file).lower().endswith(".json"):
    return None
  path = os.path.join(os.path.dirname(os.path.abspath(vocab_file)), TOKENIZER_JSON)
  if not os.path.isfile(path):
    return None
  return path if _model_type(path, os.path.getmtime(path)) == BPE else None


def tokenizer_kind(vocab_file: str) -> str:
  """"bpe" (a BPE tokenizer.json), "sentencepiece" (a Unigram tokenizer.json beside the vocab), "json" (another
  tokenizer.json named directly) or "wordpiece" (a vocab.txt): what tokenizes text for `vocab_file`."""
  path = bpe_json(vocab_file)
  if path:
    kind = _model_type(fileio.abspath(path), _mtime(path))
    return {BPE: "bpe", "Unigram": "sentencepiece"}.get(kind, "json")
  return "sentencepiece" if sentencepiece_json(vocab_file) else "wordpiece"


def _mtime(path: str) -> float:
  return os.path.getmtime(path) if os.path.isfile(path) else 0.0


def _read_json_file(path: str) -> dict:
  if not fileio.exists(path):
    raise FileNotFoundError(f"tokenizer file not found: {path}")
  try:
    data = json.loads(fileio.read_text(path))
  except (UnicodeDecodeError, ValueError) as e:
    raise ValueError(f"tokenizer file {path}: not a JSON tokenizer ({e})") from None
  if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
    raise ValueError(f"tokenizer file {path}: no \"model\" object; expected a Hugging Face tokenizer.json")
  return data


def _template_specials(processor) -> List[str]:
  """The special tokens of a post-processor's single-sequence template, in order (Template, Bert, Roberta and
  Sequence processors)."""
  if not isinstance(processor, dict):
    return []
  kind = processor.get("type")
  if kind == "Sequence":
    return [t for p in processor.get("processors", ()) for t in _template_specials(p)]
  if kind in ("BertProcessing", "RobertaProcessing"):
    return [processor["cls"][0], processor["sep"][0]]
  if kind == "TemplateProcessing":
    out = []
    for item in processor.get("single", ()):
      if "SpecialToken" in item:
        sid = item["SpecialToken"]["id"]
        tokens = (processor.get("special_tokens", {}).get(sid) or {}).get("tokens") or [sid]
        out.extend(tokens)
    return out
  return []


def json_special_tokens(data: dict, ids: Dict[str, int], path: str) -> Dict[str, str]:
  """BERT's role -> the tokenizer's own token for it ({"[CLS]": "<s>", ...}). [CLS] and [SEP] come from the
  post-processor's single template (first and last special token), else from the added tokens by name;
  ValueError naming the file when either is missing."""
  out: Dict[str, str] = {}
  template = [t for t in _template_specials(data.get("post_processor")) if t in ids]
  if template:
    out[CLS] = template[0]
    if len(template) > 1:
      out[SEP] = template[-1]
  added = [a.get("content") for a in data.get("added_tokens") or () if a.get("content") in ids]
  for role, names in _EQUIVALENTS.items():
    if role in out:
      continue
    hit = next((n for n in names if n in added), None) or next((n for n in names if n in ids), None)
    if hit is not None:
      out[role] = hit
  if UNK not in out and data["model"].get("unk_token") in ids:
    out[UNK] = data["model"]["unk_token"]
  missing = [r for r in (CLS, SEP) if r not in out]
  if missing:
    raise ValueError(f"tokenizer file {path}: its special tokens lack {' and '.join(missing)} or an equivalent "
                     f"({', '.join(n for r in missing for n in _EQUIVALENTS[r])}) in its post_processor or "
                     "added_tokens; a BERT-style encoder needs both")
  return out


class JsonVocab(collections.OrderedDict):
  """token -> id of a tokenizer.json (model vocab and added tokens), plus BERT's special-token names as aliases
  of the tokenizer's own (`specials`: role -> token). `continuation` is the word-continuation table of the
  pieces (`json_continuation_table`), which `masking.continuation_table` returns for whole-word and span
  masking; `path` is the tokenizer.json."""
  specials: Dict[str, str]
  special_token_ids: Tuple[int, ...]     # every special token's id: the roles' and the other added specials'
  continuation: np.ndarray
  path: str


def _byte_decoder() -> Dict[str, int]:
  """GPT-2's byte-level alphabet inverted: the printable character that stands for each byte -> the byte."""
  bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return {chr(c): b for b, c in zip(bs, cs)}


def _uses_byte_level(data: dict) -> bool:
  def walk(node):
    if isinstance(node, dict):
      return node.get("type") == "ByteLevel" or any(walk(v) for v in node.values())
    if isinstance(node, list):
      return any(walk(v) for v in node)
    return False
  return walk(data.get("pre_tokenizer")) or walk(data.get("decoder"))


def _starts_cjk(raw: bytes) -> bool:
  """Whether UTF-8 bytes `raw` begin with (the lead bytes of) a CJK ideograph. A piece may hold only the first
  one or two bytes of a 3-byte character; the code point range those fix decides (lead byte 0xE5-0xE9:
  U+5000-U+9FFF, all ideographs)."""
  if not raw or raw[0] < 0xE0:
    return False
  n = 3 if raw[0] < 0xF0 else 4
  head = raw[:n]
  cp = head[0] & (0x0F if n == 3 else 0x07)
  for b in head[1:]:
    cp = (cp << 6) | (b & 0x3F)
  cp <<= 6 * (n - len(head))                     # the lowest code point the bytes seen allow
  return is_chinese_char(cp)


def json_continuation_table(data: dict, ids: Dict[str, int], special: Iterable[int]) -> np.ndarray:
  """bool [vocab_size]: True for a piece that continues the word before it. A piece starts a word when it
  begins with a leading-space marker ("Ġ", "▁") or with a CJK ideograph (with byte-level BPE: the UTF-8 lead
  bytes of one), or is a special token; every other piece (the rest of a word, punctuation glued to it, the
  later bytes of a character) continues. A WordPiece model (or one with a continuing_subword_prefix) marks
  the other way round: its "##" pieces continue."""
  size = max(ids.values()) + 1
  table = np.zeros(size, dtype=bool)
  prefix = data["model"].get("continuing_subword_prefix")
  if data["model"].get("type") == "WordPiece" or prefix:   # "##" marks the continuation, not the start
    prefix = prefix or "##"
    for tok, i in ids.items():
      table[i] = tok.startswith(prefix) and len(tok) > len(prefix)
    return table
  byte_level = _uses_byte_level(data)
  decoder = _byte_decoder() if byte_level else {}
  special = set(special)
  for tok, i in ids.items():
    if i in special or not tok or tok.startswith(WORD_START_MARKERS):
      continue
    if byte_level:
      raw = bytes(decoder[c] for c in tok[:4] if c in decoder)
      starts = _starts_cjk(raw) or (raw[:1] in (b" ", b"\n", b"\t"))
    else:
      starts = is_chinese_char(ord(tok[0]))
    table[i] = not starts
  return table


def load_json_vocab(path: str, required: Sequence[str] = SPECIAL_TOKENS, vocab_file: Optional[str] = None) -> JsonVocab:
  """The JsonVocab of a tokenizer.json; ValueError naming the file when it is not one, lacks [CLS]/[SEP] or
  an equivalent, lacks another role of `required` (a byte-level BPE without an unknown token gets [UNK] =
  [PAD]'s id: every text has a byte-level cover, so no piece is ever unknown), or (`vocab_file`: the
  vocab.txt it sits beside) has more pieces than that file has lines."""
  data = _read_json_file(path)
  try:
    from tokenizers import Tokenizer   # lazy: the `tokenizers` library is needed only for tokenizer.json
    ids = Tokenizer.from_str(json.dumps(data)).get_vocab(with_added_tokens=True)
  except Exception as e:  # noqa: BLE001 - the tokenizers library's own parse errors
    raise ValueError(f"tokenizer file {path}: not readable by the tokenizers library ({e})") from None
  specials = json_special_tokens(data, ids, path)
  if UNK in required and UNK not in specials and PAD in specials and _uses_byte_level(data):
    specials[UNK] = specials[PAD]
  missing = [r for r in required if r not in specials]
  if missing:
    raise ValueError(f"tokenizer file {path} lacks the special token(s) {missing} or their equivalents "
                     f"({', '.join(n for r in missing for n in _EQUIVALENTS[r])})")
  vocab = JsonVocab(sorted(ids.items(), key=lambda kv: kv[1]))
  for role, token in specials.items():
    vocab.setdefault(role, ids[token])
  vocab.specials = specials
  vocab.path = path
  vocab.special_token_ids = tuple(sorted({ids[t] for t in specials.values()} | {
      int(a["id"]) for a in data.get("added_tokens") or () if a.get("special") and a.get("content") in ids}))
  vocab.continuation = json_continuation_table(data, ids, vocab.special_token_ids)
  if vocab_file and not is_tokenizer_json(vocab_file):
    lines = sum(1 for _ in fileio.open_file(vocab_file))
    if lines < max(ids.values()) + 1:
      raise ValueError(f"vocab file {vocab_file} has {lines} lines but {path} beside it has "
                       f"{max(ids.values()) + 1} token ids; write it again with tokenization.write_json_vocab_txt")
  return vocab


def readable_tokens(vocab) -> Dict[int, str]:
  """id -> token as a person reads it: a byte-level BPE piece decoded from its bytes when they are whole UTF-8
  characters ("åĮĹäº¬" -> "北京", "Ġworld" -> "Ġworld": the marker kept where a space starts the word); other
  pieces, and every WordPiece token, as they are."""
  inv = {i: t for t, i in reversed(list(vocab.items()))}
  path = getattr(vocab, "path", None)
  if not path or not _uses_byte_level(_read_json_file(path)):
    return inv
  decoder = _byte_decoder()
  special = set(getattr(vocab, "special_token_ids", ()))
  out = {}
  for i, tok in inv.items():
    try:
      text = bytes(decoder[c] for c in tok).decode("utf-8") if i not in special else tok
    except (KeyError, UnicodeDecodeError):
      text = tok
    out[i] = "\u0120" + text[1:] if text.startswith(" ") else text
  return out


def json_vocab_size(vocab_file: str) -> int:
  """The id slots of a tokenizer.json named as a vocab: 1 + its largest id."""
  return max(load_json_vocab(vocab_file, required=()).values()) + 1


def json_vocab_text(tokenizer_json: str, size: Optional[int] = None) -> str:
  """The vocab.txt of a tokenizer.json: its tokens in id order, one a line (a gap, or the rows up to `size`
  when the embeddings have more rows than the tokenizer has ids, as ModernBERT's 50,368, as "[unused{i}]")."""
  vocab = load_json_vocab(tokenizer_json, required=())
  by_id = {i: t for t, i in reversed(list(vocab.items()))}    # the tokenizer's own name wins over the alias
  n = max(max(by_id) + 1, int(size or 0))
  bad = [t for t in by_id.values() if not t.strip() or t != t.strip() or "\n" in t or "\r" in t]
  if bad:
    raise ValueError(f"tokenizer file {tokenizer_json}: token {bad[0]!r} cannot be one line of a vocab.txt; "
                     "name the tokenizer.json itself as the vocab file")
  return "".join(by_id.get(i, f"[unused{i}]") + "\n" for i in range(n))


def write_json_vocab_txt(tokenizer_json: str, out_path: str, size: Optional[int] = None) -> str:
  """Writes `json_vocab_text` to `out_path` atomically (an importer's vocab.txt beside the tokenizer.json);
  returns `out_path`."""
  fileio.write_text_atomic(out_path, json_vocab_text(tokenizer_json, size))
  return out_path


class JsonTokenizer:
  """FullTokenizer's interface over a Hugging Face tokenizer.json, tokenized by the `tokenizers` library (its
  normaliser, pre-tokenizer and model; the ids of transformers' PreTrainedTokenizerFast on that file). The
  special tokens are the tokenizer's own (`JsonVocab`); `vocab["[CLS]"]` is its [CLS] or equivalent.

    tok = load_tokenizer("tokenizer.json")     # or a vocab.txt with a BPE tokenizer.json beside it
    tok.encode("江泽民 met Clinton")            # ids, no specials
    tok.tokenize_with_offsets(text)            # pieces and [start, end) character spans in `text`
  """

  reads_special_tokens = True   # encode() keeps a special token written in the text ("[MASK]") as that token

  def __init__(self, tokenizer_json: str, vocab_file: Optional[str] = None, do_lower_case: bool = True,
               required_tokens: Sequence[str] = SPECIAL_TOKENS, **unused):
    from tokenizers import Tokenizer   # lazy: the `tokenizers` library is needed only for tokenizer.json
    del unused   # control_chars, max_input_chars_per_word: WordPiece's, the tokenizer.json decides
    self.tokenizer_json = tokenizer_json
    self.vocab_file = vocab_file or tokenizer_json
    self.do_lower_case = do_lower_case          # for the record: the tokenizer's own normaliser decides
    self.control_chars = "all"
    self.vocab = load_json_vocab(tokenizer_json, required_tokens, vocab_file)
    self.inv_vocab = {i: t for t, i in reversed(list(self.vocab.items()))}
    self._tk = Tokenizer.from_str(fileio.read_text(tokenizer_json))
    self._tk.no_padding()
    self._tk.no_truncation()

  def __len__(self) -> int:
    return len(self.inv_vocab)

  @property
  def vocab_size(self) -> int:
    return max(self.inv_vocab) + 1

  def special_ids(self) -> Dict[str, int]:
    return {t: self.vocab[t] for t in SPECIAL_TOKENS if t in self.vocab}

  def encode(self, text) -> List[int]:
    """Token ids of `text` (no specials added)."""
    return self._tk.encode(convert_to_unicode(text), add_special_tokens=False).ids

  def encode_word(self, word: str, after_space: bool) -> List[int]:
    """Ids of one word of a pre-split sentence (NER): with the space before it when the sentence has one, so
    "York" in "New York" is "ĠYork" as in running text."""
    return self.encode(" " + word if after_space else word)

  def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
    return [e.ids for e in self._tk.encode_batch([convert_to_unicode(t) for t in texts], add_special_tokens=False)]

  def tokenize(self, text) -> List[str]:
    return self.convert_ids_to_tokens(self.encode(text))

  def tokenize_with_offsets(self, text) -> Tuple[List[str], List[Tuple[int, int]]]:
    """Pieces and their [start, end) spans in `text`. A word-initial piece ("Ġword") is narrowed to its word's
    characters (the library's offsets cover the space it stands for); the byte pieces of one character each
    span that whole character."""
    text = convert_to_unicode(text)
    enc = self._tk.encode(text, add_special_tokens=False)
    return self.convert_ids_to_tokens(enc.ids), _trim_spans(text, enc.offsets)

  def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
    vocab = self.vocab
    unk = vocab.get(UNK)
    return [vocab.get(t, unk) for t in tokens]

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
    return convert_by_vocab(self.inv_vocab, (int(i) for i in ids))


def _trim_spans(text: str, offsets) -> List[Tuple[int, int]]:
  spans = []
  for start, end in offsets:
    while start < end - 1 and text[start].isspace():
      start += 1
    spans.append((start, end))
  return spans


class _JsonBatchTokenizer:
  """The `tokenizers` library's own batch encoding (Rust, multi-threaded) of a JsonTokenizer."""
  backend = "tokenizers"

  def __init__(self, tokenizer: JsonTokenizer):
    self.tokenizer = tokenizer

  def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
    return self.tokenizer.encode_batch(texts)

  def encode_batch_with_offsets(self, texts: Sequence[str]):
    texts = [convert_to_unicode(t) for t in texts]
    encs = self.tokenizer._tk.encode_batch(texts, add_special_tokens=False)  # pylint: disable=protected-access
    return [e.ids for e in encs], [_trim_spans(t, e.offsets) for t, e in zip(texts, encs)]

  def encode_arrays(self, texts: Sequence[str]) -> List[np.ndarray]:
    return [np.asarray(x, np.int32) for x in self.encode_batch(texts)]


def load_tokenizer(vocab_file: str, do_lower_case: bool = True, **kwargs) -> FullTokenizer:
  """The tokenizer of a model's vocab: a JsonTokenizer for a tokenizer.json named as the vocab or a BPE one
  beside it (bpe_json), a SentencePieceTokenizer when a SentencePiece tokenizer.json sits beside `vocab_file`
  (sentencepiece_json), else the WordPiece FullTokenizer."""
  path = bpe_json(vocab_file)
  if path:
    return JsonTokenizer(path, vocab_file=vocab_file, do_lower_case=do_lower_case, **kwargs)
  spm = sentencepiece_json(vocab_file)
  if spm:
    return SentencePieceTokenizer(vocab_file, spm, do_lower_case=do_lower_case, **kwargs)
  return FullTokenizer(vocab_file, do_lower_case=do_lower_case, **kwargs)


def basic_tokenize(text, do_lower_case: bool = True) -> List[str]:
  """BERT's basic tokenization (no WordPiece): the words WordPiece would see."""
  return BasicTokenizer(do_lower_case=do_lower_case).tokenize(text)


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
    self._start_table = _StartTable(tokenizer)

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

  def encode_arrays(self, texts: Sequence[str]) -> List[np.ndarray]:
    """int32 token ids per text (the bulk path of offline records and raw-text training): `encode_joined`
    over all texts, split per text. Identical ids to `encode_batch`."""
    texts = list(texts)
    if not texts:
      return []
    _, ids, _, bounds, _ = self.encode_joined(texts)
    b = bounds.tolist()
    return [ids[b[i]:b[i + 1]] for i in range(len(texts))]

  def encode_joined(self, texts: Sequence[str]):
    """Vectorised ids and token start offsets for many texts at once.

    The texts are joined with "\n" into one string (returned as `joined`). Returns (joined, ids int32
    [num_tokens], starts int64 [num_tokens]: each token's first character in `joined`, bounds int64
    [len(texts) + 1]: text i owns tokens bounds[i]:bounds[i + 1], text_starts int64 [len(texts)]).
    The text is classified per code point in numpy: each CJK ideograph is a piece (looked up in a code point
    table, no Python object per character), each run of other non-space characters is a piece (one regex
    findall); every distinct piece is tokenized once. Texts with characters that Python's regex treats as
    whitespace but BERT deletes take the exact per-text path.
    """
    texts = list(texts)
    odd = {i for i, t in enumerate(texts) if _SPLIT_DIFFERENCES.search(t)}
    plain = [("" if i in odd else t) for i, t in enumerate(texts)]
    joined = "\n".join(plain)
    table = self._start_table
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32).astype(np.int64)
    is_cjk = _cjk_mask(cps)
    other = ~is_cjk & ~_space_mask(cps)
    run_start = np.flatnonzero(other & ~np.concatenate([[False], other[:-1]]))
    runs = _RUN_RE.findall(joined)
    if len(runs) != run_start.size:     # cannot happen: the regex and the masks classify alike
      raise AssertionError(f"piece split disagrees: {len(runs)} runs vs {run_start.size} run starts")
    cjk_pos = np.flatnonzero(is_cjk)
    cjk_pid = table.ids_of_code_points(cps[cjk_pos])
    run_pid = np.fromiter(map(table.__getitem__, runs), np.int64, len(runs))
    piece_start = np.concatenate([cjk_pos, run_start])
    order = np.argsort(piece_start, kind="stable")
    piece_start, pid = piece_start[order], np.concatenate([cjk_pid, run_pid])[order]
    flat_ids, flat_rel, piece_off, piece_n = table.arrays()
    ntok = piece_n[pid]
    total = int(ntok.sum())
    # Ragged gather: the tokens of piece k are flat[piece_off[pid[k]] : + ntok[k]].
    first_out = np.cumsum(ntok) - ntok
    src = np.repeat(piece_off[pid] - first_out, ntok) + np.arange(total, dtype=np.int64)
    ids, rel = flat_ids[src], flat_rel[src]
    starts = np.repeat(piece_start, ntok) + rel
    text_starts = np.concatenate([[0], np.cumsum([len(t) + 1 for t in plain])[:-1]]).astype(np.int64)
    bounds = np.concatenate([np.searchsorted(starts, text_starts), [starts.size]]).astype(np.int64)
    if odd:   # splice the exact per-text results in, at offsets inside the (empty) slot of each odd text
      parts_ids, parts_starts, new_bounds = [], [], [0]
      tok = self.tokenizer
      for i in range(len(texts)):
        if i in odd:
          p_toks, _ = tok.tokenize_with_offsets(texts[i])
          parts_ids.append(np.asarray(tok.convert_tokens_to_ids(p_toks), np.int32))
          parts_starts.append(np.full(len(p_toks), -1, np.int64))   # no position in `joined`
        else:
          parts_ids.append(ids[bounds[i]:bounds[i + 1]])
          parts_starts.append(starts[bounds[i]:bounds[i + 1]])
        new_bounds.append(new_bounds[-1] + parts_ids[-1].size)
      ids, starts = np.concatenate(parts_ids), np.concatenate(parts_starts)
      bounds = np.asarray(new_bounds, np.int64)
    return joined, ids, starts, bounds, text_starts


# Runs of non-space, non-CJK characters: the other kind of piece.
_RUN_RE = re.compile(f"[^\\s{_CJK_CLASS}]+")
# Python's `\s` (str.isspace) below U+3001; there are none above.
_SPACE_LUT = np.array([chr(c).isspace() for c in range(0x3001)], bool)


def _cjk_mask(cps: np.ndarray) -> np.ndarray:
  m = np.zeros(cps.shape, bool)
  for lo, hi in _CJK_RANGES:
    m |= (cps >= lo) & (cps <= hi)
  return m


def _space_mask(cps: np.ndarray) -> np.ndarray:
  return _SPACE_LUT[np.minimum(cps, 0x3000)] & (cps <= 0x3000)


def _is_plain_cjk(cp: int) -> bool:
  """A CJK ideograph outside the compatibility blocks (those decompose under NFD, so their characters take
  the tokenizer rather than a vocab lookup)."""
  return is_chinese_char(cp) and not any(lo <= cp <= hi for lo, hi in _CJK_COMPAT)


class _StartTable(dict):
  """piece -> index k; the tokens of piece k are ids[off[k]:off[k] + n[k]] with start offsets (within the
  piece) rel[...]. Flat tables, so a batch of pieces is gathered with a few numpy ops."""

  def __init__(self, tokenizer: "FullTokenizer"):
    super().__init__()
    self._tokenizer = tokenizer
    self._ids: List[int] = []
    self._rel: List[int] = []
    self._off: List[int] = []
    self._n: List[int] = []
    self._arrays = None
    self._cp_table = np.full(0x10000, -1, np.int64)     # code point -> piece index (CJK ideographs)

  def ids_of_code_points(self, cps: np.ndarray) -> np.ndarray:
    """Piece indices of single CJK ideographs given as code points (int64 array), through a code point
    table: a numpy gather, new ideographs added once."""
    if cps.size == 0:
      return np.zeros(0, np.int64)
    need = int(cps.max()) + 1
    if self._cp_table.size < need:
      grown = np.full(max(need, 0x10000), -1, np.int64)
      grown[:self._cp_table.size] = self._cp_table
      self._cp_table = grown
    pid = self._cp_table[cps]
    if (pid < 0).any():
      for cp in np.unique(cps[pid < 0]).tolist():
        self._cp_table[cp] = self[chr(cp)]
      pid = self._cp_table[cps]
    return pid

  def __missing__(self, piece: str) -> int:
    tok = self._tokenizer
    if len(piece) == 1 and _is_plain_cjk(ord(piece)):
      # A CJK ideograph outside the compatibility blocks: no case, no accents, no decomposition, never
      # punctuation or control, one character <= max_input_chars_per_word: WordPiece gives it or [UNK].
      vocab = tok.vocab
      return self._add(piece, [vocab[piece] if piece in vocab else vocab[UNK]], [0])
    p_toks = tok.tokenize(piece)
    surface = [t[2:] if t.startswith("##") else t for t in p_toks]
    normal = piece.lower() if tok.do_lower_case else piece
    if UNK not in p_toks and len(normal) == len(piece) and "".join(surface) == normal:
      # Every character survives as-is (up to case): the tokens tile the piece, offsets are their lengths.
      rel = list(itertools.accumulate((len(x) for x in surface[:-1]), initial=0)) if surface else []
    else:
      p_toks, p_spans = tok.tokenize_with_offsets(piece)
      rel = [a for a, _ in p_spans]
    return self._add(piece, tok.convert_tokens_to_ids(p_toks), rel)

  def _add(self, piece: str, ids: List[int], rel: List[int]) -> int:
    """Stores a new piece's token ids and start offsets; returns its index."""
    self._off.append(len(self._ids))
    self._n.append(len(ids))
    self._ids.extend(ids)
    self._rel.extend(rel)
    self._arrays = None
    k = self[piece] = len(self._off) - 1
    return k

  def arrays(self):
    """(ids int32, rel int64, off int64, n int64) as numpy arrays (rebuilt after new pieces)."""
    if self._arrays is None:
      self._arrays = (np.asarray(self._ids, np.int32), np.asarray(self._rel, np.int64),
                      np.asarray(self._off, np.int64), np.asarray(self._n, np.int64))
    return self._arrays


class _RustBatchTokenizer:
  """Hugging Face `tokenizers` (Rust) WordPiece configured exactly like BERT's tokenizer."""

  def __init__(self, tokenizer: FullTokenizer):
    # lazy: Hugging Face `tokenizers` is optional, needed only for backend="tokenizers"
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


class _SentencePieceBatchTokenizer:
  backend = "tokenizers"

  def __init__(self, tokenizer: SentencePieceTokenizer):
    self.tokenizer = tokenizer

  def _encode(self, texts: Sequence[str]):
    return self.tokenizer._sp.encode_batch([convert_to_unicode(t) for t in texts], add_special_tokens=False)

  def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
    return [e.ids for e in self._encode(texts)]

  def encode_batch_with_offsets(self, texts: Sequence[str]):
    encs = self._encode(texts)
    return [e.ids for e in encs], [[tuple(o) for o in e.offsets] for e in encs]


def fast_batch_tokenizer(tokenizer: FullTokenizer, backend: str = "auto"):
  """An object with `.encode_batch(texts) -> id lists`, `.encode_batch_with_offsets(texts) -> (ids, spans)`
  and `.backend`.

  backend: "auto"/"python-cached" (exact, a cache of distinct pieces: the fastest here on one core,
  ~1.5M tokens/s on Chinese news), "tokenizers" (Hugging Face Rust, multi-threaded), or "python" (the
  plain `FullTokenizer`, uncached). All give identical ids (tests/test_pipeline_tokenization.py).
  """
  if isinstance(tokenizer, SentencePieceTokenizer):   # its own Rust model, whatever the backend
    return _SentencePieceBatchTokenizer(tokenizer)
  if isinstance(tokenizer, JsonTokenizer):
    return _JsonBatchTokenizer(tokenizer)
  if backend in ("auto", "python-cached"):
    return _CachedBatchTokenizer(tokenizer)
  if backend == "python":
    return _PythonBatchTokenizer(tokenizer)
  if backend == "tokenizers":
    return _RustBatchTokenizer(tokenizer)
  raise ValueError(f"unknown tokenizer backend {backend!r}: auto, python-cached, tokenizers or python")
