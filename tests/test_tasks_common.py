"""Tokenisation with character spans (must equal FullTokenizer.tokenize) and Google's pair packing."""

import random

import pytest

from bert_jax.input_pipeline.tasks import common, testing
from bert_jax.input_pipeline.tokenization import FullTokenizer


@pytest.fixture
def vocab(tmp_path):
  return testing.write_vocab(str(tmp_path), extra=["##a", "##e", "##t", "##o", "z", "##u", "##r", "##i", "##c",
                                                   "##h", "e", "t"])


@pytest.mark.parametrize("lower", [True, False])
def test_tokens_equal_full_tokenizer_on_random_text(vocab, lower):
  tok = FullTokenizer(vocab, do_lower_case=lower)
  rng = random.Random(0)
  alphabet = list("the cat sat on mat CAT Zürich Café cafe\u0301 1990s ÉÀ ßİΣ北京是中国的首都。，!?.'-\t\n\x00\u200b\u3000ﬁ\u2028\u2029\x85\x0b\x1f")
  for _ in range(3000):
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
    tokens, spans = common.tokenize_with_char_spans(tok, text)
    assert tokens == tok.tokenize(text), repr(text)
    assert all(0 <= s < e <= len(text) for s, e in spans)
    assert all(spans[i][0] >= spans[i - 1][1] for i in range(1, len(spans)))  # ordered, disjoint


def test_spans_cover_the_exact_original_characters(vocab):
  tok = FullTokenizer(vocab, do_lower_case=True)
  text = "Café  Zu\u0308ri in the 1990s, 北京!"
  tokens, spans = common.tokenize_with_char_spans(tok, text)
  pieces = [(t, text[s:e]) for t, (s, e) in zip(tokens, spans)]
  assert pieces == [("cafe", "Café"), ("z", "Z"), ("##u", "u\u0308"), ("##r", "r"), ("##i", "i"), ("in", "in"), ("the", "the"), ("1990", "1990"), ("##s", "s"), (",", ","),
                    ("北", "北"), ("京", "京"), ("!", "!")]
  tokens, spans = common.tokenize_with_char_spans(tok, "Flore")  # no WordPiece cover
  assert tokens == ["[UNK]"] and spans == [(0, 5)]


def test_pack_pair_truncates_longer_side_first():
  ids, seg = common.pack_pair([1, 2, 3, 4, 5], [6, 7], 100, 101, max_seq_length=7)
  assert ids == [100, 1, 2, 101, 6, 7, 101] and seg == [0, 0, 0, 0, 1, 1, 1]
  ids, seg = common.pack_pair([1, 2, 3, 4, 5], None, 100, 101, max_seq_length=5)
  assert ids == [100, 1, 2, 3, 101] and seg == [0] * 5


def test_encode_texts_fast_path_equals_python(vocab):
  tok = FullTokenizer(vocab, do_lower_case=True)
  texts = [f"the cat {i} sat 北京 Café" for i in range(1200)]  # > 1000 takes the batch path
  assert common.encode_texts(tok, texts) == [common.encode_text(tok, t) for t in texts]


def test_error_policy_raises_or_counts():
  report = common.SkipReport(source="f.tsv")
  with pytest.raises(common.TaskDataError, match=r"^f.tsv:3: bad row: detail"):
    common.ErrorPolicy("raise", report)("f.tsv", 3, "bad row", "detail")
  skip = common.ErrorPolicy("skip", report)
  for line in range(15):
    skip("f.tsv", line, "bad row")
  assert report.total == 15 and len(report.samples["bad row"]) == 10
  assert report.to_dict()["counts"] == {"bad row": 15}
  with pytest.raises(ValueError, match="on_error"):
    common.ErrorPolicy("ignore", report)
