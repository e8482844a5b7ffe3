"""CoNLL NER reading (-DOCSTART-, tag in the last column), first-sub-token labels, windows, errors."""

import numpy as np
import pytest

from bert_jax.finetune.tasks import IGNORE_INDEX, TaskDataError, ner
import task_fixtures as testing
from bert_jax.input_pipeline.tokenization import FullTokenizer


@pytest.fixture
def tok(tmp_path):
  return FullTokenizer(testing.write_vocab(str(tmp_path / "v"), extra=()), do_lower_case=True)


@pytest.mark.parametrize("with_pos", [True, False])
def test_reads_conll_with_docstart_and_tag_in_last_column(tmp_path, with_pos):
  d = testing.write_conll(str(tmp_path), with_pos=with_pos)
  es = ner.read_conll_split(d, "train")
  assert len(es) == len(testing.CONLL_SENTENCES)
  for ex, (words, tags) in zip(es, testing.CONLL_SENTENCES):
    assert ex.words == words and ex.labels == tags
  assert es[0].guid.endswith("train.txt:3")  # line 1 -DOCSTART-, line 2 blank
  labels = ner.infer_label_list([es])
  assert labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def test_first_subtoken_gets_the_label_others_ignored(tmp_path, tok):
  ex = ner.NerExample("x:1", ["John", "Berlins", "play", "北京"], ["B-PER", "I-PER", "O", "B-LOC"])
  labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  f = ner.convert_examples_to_features([ex], tok, 16, labels)
  v = tok.vocab
  # "berlins" -> berlin ##s; 北京 -> 北 京 (two CJK tokens from one word).
  assert f["input_ids"][0, :9].tolist() == [v["[CLS]"], v["john"], v["berlin"], v["##s"], v["play"], v["北"],
                                            v["京"], v["[SEP]"], 0]
  I = IGNORE_INDEX
  assert f["label_ids"][0, :9].tolist() == [I, 3, 4, I, 0, 1, I, I, I]
  assert f["word_ids"][0, :9].tolist() == [-1, 0, 1, -1, 2, 3, -1, -1, -1]
  assert (f["segment_ids"] == 0).all() and f["input_mask"][0].sum() == 8
  pred = np.where(f["label_ids"] >= 0, f["label_ids"], 0)
  assert ner.predictions_to_tags([ex], f, pred, labels) == [ex.labels]


def test_long_sentences_split_into_windows_and_reassemble(tok):
  words = ["john", "berlins"] * 10  # 30 sub-tokens
  tags = ["B-PER", "I-PER"] * 10
  ex = ner.NerExample("x:1", words, tags)
  labels = ["O", "B-PER", "I-PER"]
  f = ner.convert_examples_to_features([ex], tok, 9, labels)  # 7 sub-tokens per window
  # Greedy word packing into 7 sub-token slots: [john berlin ##s john berlin ##s john] ... -> 5 windows.
  assert len(f["input_ids"]) == 5 and (f["example_index"] == 0).all()
  assert f["input_mask"].sum() == 30 + 2 * 5
  covered = sorted(int(w) for w in f["word_ids"].ravel() if w >= 0)
  assert covered == list(range(20))  # every word exactly once
  pred = np.where(f["label_ids"] >= 0, f["label_ids"], 0)
  assert ner.predictions_to_tags([ex], f, pred, labels)[0] == tags


def test_bad_tags_and_missing_columns_name_file_and_line(tmp_path):
  p = tmp_path / "train.txt"
  p.write_text("John B-PER\nSmith I-PER\n\nParis B-LOCATION\n", encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"train.txt:4: label not in label set: tag 'B-LOCATION'"):
    ner.read_conll(str(p), label_list=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
  es = ner.read_conll(str(p), label_list=["O", "B-PER", "I-PER"], on_error="skip")
  assert len(es) == 1 and es.skipped.samples["label not in label set"] == [f"{p}:4"]
  p.write_text("John B-PER\nSmith\n", encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"train.txt:2: missing tag column"):
    ner.read_conll(str(p))
  # A test file may carry words only, but not a mix within one sentence.
  with pytest.raises(TaskDataError, match=r"train.txt:1: mixed tagged and untagged lines"):
    ner.read_conll(str(p), split="test")
  p.write_text("John\nSmith\n", encoding="utf-8")
  es = ner.read_conll(str(p), split="test")
  assert es[0].labels is None and es[0].words == ["John", "Smith"]
  with pytest.raises(TaskDataError, match="tag 'B-X' not in the label set"):
    ner.convert_examples_to_features([ner.NerExample("f:1", ["a"], ["B-X"])], None, 8, ["O"])


_IOB1 = ("-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\ncall NN I-NP O\n"
         "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\nSmith NNP I-NP B-PER\n\n")


def test_the_crf_reads_conll2003_iob1_files_as_iob2(tmp_path):
  """CoNLL-2003's original files are IOB1 (an entity starts with I-X). The CRF's BIO constraints forbid I-X
  after O, so those gold paths were impossible (train loss ~1e3 per sentence, no entity predicted): with the
  CRF the tags are read as IOB2, and B-PER joins the label list although the files never write it."""
  from bert_jax.models import crf as crf_lib
  for split in ("train", "dev"):
    (tmp_path / f"{split}.txt").write_text(_IOB1)
  task = ner.NerTask(crf=True).prepare(data_dir=str(tmp_path))
  assert {"B-ORG", "B-MISC", "B-PER", "I-PER"} <= set(task.label_list)
  labels = task.read("train", str(tmp_path))[0].labels
  assert labels == ["B-ORG", "O", "B-MISC", "O", "B-PER", "I-PER", "B-PER"]
  allowed = crf_lib.transition_constraints(task.label_list, "BIO")
  ids = [task.label_list.index(t) for t in labels]
  assert allowed.start[ids[0]] and all(allowed.transitions[a, b] for a, b in zip(ids, ids[1:]))
  # conlleval reads the same entities from both
  from bert_jax.evaluation import ner as ner_eval
  raw = ["I-ORG", "O", "I-MISC", "O", "I-PER", "I-PER", "B-PER"]
  assert ner_eval.get_entities(raw, "conlleval", "BIO") == ner_eval.get_entities(labels, "conlleval", "BIO")
  # the softmax head keeps the file's tags
  assert ner.NerTask().prepare(data_dir=str(tmp_path)).read("train", str(tmp_path))[0].labels == raw


def test_strict_scoring_reads_conll2003_iob1_files_as_iob2(tmp_path):
  """mode=strict (seqeval's IOB2 scheme) drops an entity that starts with I-X: on CoNLL-2003's original IOB1
  files every gold entity but B-PER was dropped, so a perfect prediction scored 1 gold entity of 4."""
  for split in ("train", "dev"):
    (tmp_path / f"{split}.txt").write_text(_IOB1)
  task = ner.NerTask(mode="strict").prepare(data_dir=str(tmp_path))
  dev = task.read("dev", str(tmp_path))
  assert "B-PER" in task.label_list and dev[0].labels[0] == "B-ORG"
  r = task.evaluate(dev, [ex.labels for ex in dev])
  assert r["num_gold"] == 4 and r["f1"] == 1.0


def test_the_conll2003_release_file_names_are_read(tmp_path):
  """The English CoNLL-2003 release names its splits eng.train / eng.testa (dev) / eng.testb (test)."""
  for name in ("eng.train", "eng.testa", "eng.testb"):
    (tmp_path / name).write_text(_IOB1.replace("Smith", name.split(".")[1]))
  for split, word in (("train", "train"), ("dev", "testa"), ("test", "testb")):
    assert ner.read_conll_split(str(tmp_path), split)[0].words[-1] == word
  (tmp_path / "test.txt").write_text(_IOB1)                 # the usual names come first
  assert ner.read_conll_split(str(tmp_path), "test")[0].words[-1] == "Smith"


def test_a_tab_separated_whitespace_character_is_a_word_of_a_character_per_line_file(tmp_path, tok):
  """A char-per-line Chinese file keeps the text's ideographic space as a character ("\u3000\tO"); split()
  saw only the tag, and the whole file failed with 'missing tag column'."""
  (tmp_path / "train.txt").write_text("北\tB-LOC\n京\tI-LOC\n\u3000\tO\n好\tO\n\n", encoding="utf-8")
  es = ner.read_conll(str(tmp_path / "train.txt"))
  assert es[0].words == ["北", "京", "\u3000", "好"] and es[0].labels == ["B-LOC", "I-LOC", "O", "O"]
  f = ner.convert_examples_to_features(es, tok, 16, ["O", "B-LOC", "I-LOC"])
  assert sorted(set(f["word_ids"][0].tolist()) - {-1}) == [0, 1, 2, 3]   # every word still predicted once
