"""In-graph BERT tokenization for tf.data (TF-Text), giving the same ids as `tokenization.FullTokenizer`.

TF-Text's `BertTokenizer(lower_case=True)` is not quite BERT's tokenizer: it case-folds with NFKC
(full-width "１９９８" becomes "1998", "ﬁ" becomes "fi") and turns control characters into spaces where
BERT deletes them. So the normalisation is done here with BERT's exact rules, and TF-Text is used only for
the punctuation/CJK split and the WordPiece lookup:

  1. delete NUL, U+FFFD and control characters (categories Cc/Cf except tab/newline/CR);
     whitespace (tab/newline/CR and category Zs) becomes " ";
  2. if do_lower_case: Unicode lower-casing, NFD, delete category Mn (accents);
  3. `tensorflow_text.BasicTokenizer` split (whitespace, ASCII symbols, \\p{P}, CJK ideographs);
  4. words longer than 200 characters become [UNK] (BERT's rule, counted in characters);
  5. `tensorflow_text.WordpieceTokenizer` with "##" continuations and [UNK].

    tok = TFBertTokenizer("vocab.txt", do_lower_case=True)
    ids = tok.tokenize(tf.constant(["Hello, world!"]))   # tf.RaggedTensor [batch, (tokens)] int64
    ds = ds.map(lambda line: tok.tokenize(line))          # works inside tf.data
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tft
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer as _TFTextBasicTokenizer

from bert_jax.input_pipeline import tokenization

# Applied after whitespace became " ", so tab/newline/CR (category Cc) are no longer there to delete.
_CONTROL = r"[\p{Cc}\p{Cf}\p{Co}\x{FFFD}]"
# U+2028/U+2029 survive BERT's cleaning but its final str.split() splits on them.
_WHITESPACE = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]"
# CJK ideographs (tokenization.is_chinese_char's blocks) as an RE2 class: each a word of its own.
CJK = "[" + "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in tokenization._CJK_RANGES) + "]"  # noqa


def make_vocab_table(vocab, unk_token: str = tokenization.UNK) -> tf.lookup.StaticHashTable:
  """A string -> int64 lookup table from a token -> id dict (unknown strings map to [UNK]'s id)."""
  keys = tf.constant(list(vocab.keys()), dtype=tf.string)
  values = tf.constant(list(vocab.values()), dtype=tf.int64)
  return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values),
                                   default_value=int(vocab[unk_token]))


def normalize(text: tf.Tensor, do_lower_case: bool = True) -> tf.Tensor:
  """BERT's text cleaning (+ lower-casing and accent stripping) on a string tensor of any shape."""
  text = tf.strings.regex_replace(text, _WHITESPACE, " ")
  text = tf.strings.regex_replace(text, _CONTROL, "")
  if do_lower_case:
    text = tf.strings.lower(text, encoding="utf-8")
    text = tft.normalize_utf8(text, "NFD")
    text = tf.strings.regex_replace(text, r"\p{Mn}", "")
  return text


class TFBertTokenizer(tf.Module):
  """In-graph equivalent of `tokenization.FullTokenizer` (same ids on the same vocab).

  Args:
    vocab_file: vocab path (validated like FullTokenizer: [PAD] [UNK] [CLS] [SEP] [MASK] required).
    do_lower_case: lower-case + strip accents.
    vocab: optional token -> id dict instead of reading `vocab_file` again.
  """

  def __init__(self, vocab_file: str, do_lower_case: bool = True, vocab=None,
               required_tokens=tokenization.SPECIAL_TOKENS, max_input_chars_per_word: int = 200):
    super().__init__()
    if vocab is None:
      vocab = tokenization.load_vocab(vocab_file, required=required_tokens)
    self.vocab = vocab
    self.do_lower_case = do_lower_case
    self.max_input_chars_per_word = max_input_chars_per_word
    self.table = make_vocab_table(vocab)
    self._basic = _TFTextBasicTokenizer(lower_case=False, keep_whitespace=False, normalization_form=None)
    # Words are capped in characters above; 4 bytes per character bounds the byte length here.
    self._wordpiece = tft.WordpieceTokenizer(self.table, suffix_indicator="##",
                                             max_bytes_per_word=4 * max_input_chars_per_word,
                                             token_out_type=tf.int64, unknown_token=tokenization.UNK)
    self.special_ids = {t: int(vocab[t]) for t in tokenization.SPECIAL_TOKENS if t in vocab}

  def tokenize_words(self, text: tf.Tensor) -> tf.RaggedTensor:
    """Ragged int64 ids [..., (words), (pieces)] for a string tensor."""
    words = self._basic.tokenize(normalize(tf.convert_to_tensor(text), self.do_lower_case))
    too_long = tf.strings.length(words, unit="UTF8_CHAR") > self.max_input_chars_per_word
    words = tf.where(too_long, tokenization.UNK, words) if isinstance(words, tf.Tensor) else \
        words.with_flat_values(tf.where(too_long.flat_values, tokenization.UNK, words.flat_values))
    return self._wordpiece.tokenize(words)

  def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
    """Ragged int64 ids [..., (tokens)]: words and their pieces merged into one token axis."""
    return self.tokenize_words(text).merge_dims(-2, -1)

  def tokenize_with_offsets(self, text: tf.Tensor):
    """tokenize's ids [B, (tokens)] and each token's [start, end) in BYTES of the original UTF-8 text: the
    characters `FullTokenizer.tokenize_with_offsets` gives it. A token covers the original characters its
    normalised characters came from, and the characters that normalise to nothing (deleted control
    characters, combining accents) after its last one, up to the next character that does not (never after
    a CJK ideograph, a word of its own); an over-long word's [UNK] covers the word. Each character is
    normalised alone to learn where its normalised bytes lie in the whole text's (the same bytes but for
    the order of combining marks, which lower-casing deletes). `text` is [B]."""
    text = tf.convert_to_tensor(text)
    words, w_start, w_end = self._basic.tokenize_with_offsets(normalize(text, self.do_lower_case))
    too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > self.max_input_chars_per_word
    words = words.with_flat_values(tf.where(too_long, tokenization.UNK, words.flat_values))
    ids, p_start, p_end = self._wordpiece.tokenize_with_offsets(words)           # [B, (words), (pieces)]
    word = ids.values.value_rowids()                                             # each piece's word
    ws, we = tf.gather(w_start.flat_values, word), tf.gather(w_end.flat_values, word)
    first = ws + p_start.flat_values                                             # bytes of the normalised row
    last = tf.where(tf.gather(too_long, word), we, ws + p_end.flat_values) - 1
    row = tf.gather(words.value_rowids(), word)
    # Normalised bytes -> original characters: each character's normalised bytes, over all rows in a row.
    chars, char_start = tf.strings.unicode_split_with_offsets(text, "UTF-8")
    splits = chars.row_splits
    size = tf.cast(tf.strings.length(normalize(chars.flat_values, self.do_lower_case)), tf.int64)
    ends = tf.cumsum(size)
    base = tf.gather(tf.concat([[0], ends], 0), splits[:-1])                     # [B] first byte of each row
    at = lambda b: tf.searchsorted(ends, tf.gather(base, row) + b, side="right", out_type=tf.int64)  # noqa
    c_first, c_last = at(first), at(last)
    # The first character after c_last that normalises to something (or the row's end), c_last + 1 after CJK.
    kept = tf.where(size > 0)[:, 0]
    count = tf.cumsum(tf.cast(size > 0, tf.int64))
    nxt = tf.gather(tf.concat([kept, [tf.size(size, out_type=tf.int64)]], 0), tf.gather(count, c_last))
    row_end = tf.gather(splits[1:], row)
    cjk = tf.strings.regex_full_match(chars.flat_values, CJK)
    stop = tf.where(tf.gather(cjk, c_last), c_last + 1, tf.minimum(nxt, row_end))
    flat_start = tf.cast(char_start.flat_values, tf.int64)
    byte_end = tf.where(stop < row_end, tf.gather(flat_start, tf.minimum(stop, tf.maximum(tf.size(
        flat_start, out_type=tf.int64) - 1, 0))), tf.gather(tf.cast(tf.strings.length(text), tf.int64), row))
    token_rows = ids.merge_dims(-2, -1)
    rag = lambda v: token_rows.with_flat_values(v)  # noqa: E731
    return token_rows, rag(tf.gather(flat_start, c_first)), rag(byte_end)
