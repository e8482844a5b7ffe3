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
