"""GLUE readers on fixture files in the release's exact layouts, features, and bad-input errors."""

import os

import numpy as np
import pytest

from bert_jax.finetune.tasks import TaskDataError, get_task, glue
import task_fixtures as testing
from bert_jax.finetune.tasks import classification
from bert_jax.input_pipeline.tokenization import FullTokenizer

ALL = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]


@pytest.fixture
def glue_root(tmp_path):
  return testing.write_glue(str(tmp_path / "glue"), n=8)


@pytest.fixture
def tok(tmp_path):
  return FullTokenizer(testing.write_vocab(str(tmp_path)), do_lower_case=True)


@pytest.mark.parametrize("task", ALL)
def test_every_task_reads_train_dev_test_with_right_columns(glue_root, task):
  spec = glue.get_spec(task)
  train = glue.read_glue(task, "train", glue_root)
  assert len(train) == 8 and train.skipped.total == 0
  first = train[0]
  pair = testing._PAIRS[0]
  if task in ("cola", "sst2"):
    assert first.text_a.strip() == testing._SENTS[0] and first.text_b is None
  else:
    assert (first.text_a, first.text_b) == pair
  if spec.is_regression:
    assert [e.label for e in train][:3] == [0.0, 0.625, 1.25]
  else:
    assert all(e.label in spec.label_list for e in train)
  for split in get_task(task).eval_splits + get_task(task).test_splits:
    es = get_task(task).read(split, glue_root)
    assert len(es) == 8
    if split in get_task(task).test_splits:
      assert all(e.label is None for e in es) and [e.index for e in es] == [str(i) for i in range(8)]
      assert (es[1].text_b is None) == (task in ("cola", "sst2"))
      assert es.source.endswith("diagnostic.tsv") == (split == "ax")
    else:
      assert all(e.label is not None for e in es)


def test_specific_labels_and_layout_details(glue_root):
  cola = glue.read_glue("cola", "train", glue_root)
  assert [e.label for e in cola][:2] == ["0", "1"]  # no header: the first line is an example
  mrpc = glue.read_glue("mrpc", "dev", glue_root)   # the file starts with a UTF-8 BOM
  assert mrpc[1].label == "1" and mrpc[1].text_a == testing._PAIRS[1][0]
  mnli = glue.read_glue("mnli", "dev_mismatched", glue_root)
  assert [e.label for e in mnli][:3] == ["entailment", "neutral", "contradiction"]  # last column of 16
  assert glue.read_glue("mnli", "dev", glue_root).source.endswith("dev_matched.tsv")
  qqp_test = glue.read_glue("qqp", "test", glue_root)
  assert qqp_test[2].text_a == testing._PAIRS[2][0]
  ax = glue.read_glue("ax", "test", glue_root)
  assert len(ax) == 8 and ax[0].text_b == testing._PAIRS[0][1]
  # The task folder itself also works as data_dir.
  assert len(glue.read_glue("rte", "train", os.path.join(glue_root, "RTE"))) == 8


def test_features_have_exact_ids_and_labels(glue_root, tok):
  task = get_task("mrpc")
  es = task.read("train", glue_root)
  f = task.featurize(es, tok, max_seq_length=16)
  v = tok.vocab
  a, b = testing._PAIRS[0]  # "the cat sat on the mat ." / "the dog sat ."
  expected = ([v["[CLS]"]] + [v[w] for w in a.split()] + [v["[SEP]"]] + [v[w] for w in b.split()]
              + [v["[SEP]"]])
  assert f["input_ids"][0, :len(expected)].tolist() == expected
  assert f["input_ids"][0, len(expected):].tolist() == [0] * (16 - len(expected))
  assert f["segment_ids"][0].tolist() == [0] * 9 + [1] * 5 + [0] * 2
  assert f["input_mask"][0].sum() == len(expected)
  assert f["label_ids"].tolist() == [int(e.label) for e in es] and f["label_ids"].dtype == np.int32
  assert f["example_index"].tolist() == list(range(8))
  # Google's pair truncation pops from the longer sentence: 8 + 4 tokens into 9 - 3 = 6.
  f = task.featurize(es, tok, max_seq_length=9)
  assert f["input_ids"][0].tolist() == [v["[CLS]"], v["the"], v["cat"], v["sat"], v["[SEP]"], v["the"],
                                        v["dog"], v["sat"], v["[SEP]"]]
  st = get_task("stsb")
  f = st.featurize(st.read("train", glue_root), tok, 16)
  assert f["label_ids"].dtype == np.float32 and f["label_ids"][1] == pytest.approx(0.625)
  test = get_task("stsb").featurize(st.read("test", glue_root), tok, 16)
  assert np.isnan(test["label_ids"]).all()
  f = get_task("qnli").featurize(get_task("qnli").read("test", glue_root), tok, 16)
  assert (f["label_ids"] == -1).all()


def _append(path, line):
  with open(path, "a", encoding="utf-8") as fh:
    fh.write(line + "\n")


def test_label_not_in_label_set_names_file_and_line(glue_root):
  path = os.path.join(glue_root, "RTE", "train.tsv")
  _append(path, "8\tthe cat .\tthe dog .\tmaybe")
  with pytest.raises(TaskDataError, match=r"RTE/train.tsv:10: label not in label set: 'maybe'"):
    glue.read_glue("rte", "train", glue_root)
  es = glue.read_glue("rte", "train", glue_root, on_error="skip")
  assert len(es) == 8 and es.skipped.counts == {"label not in label set": 1}
  assert es.skipped.samples["label not in label set"] == [f"{path}:10"]
  assert "skipped 1" in es.skipped.summary()


def test_missing_columns_and_bad_scores_name_file_and_line(glue_root):
  _append(os.path.join(glue_root, "MRPC", "dev.tsv"), "1\t1\t2\tonly one sentence")
  with pytest.raises(TaskDataError, match=r"MRPC/dev.tsv:10: missing columns: row has 4 column\(s\)"):
    glue.read_glue("mrpc", "dev", glue_root)
  _append(os.path.join(glue_root, "STS-B", "train.tsv"), "8\tg\tf\ty\to\tn\tn\ta\tb\tfive")
  with pytest.raises(TaskDataError, match=r"STS-B/train.tsv:10: bad score"):
    glue.read_glue("stsb", "train", glue_root)
  # MNLI: a row cut short must not read a sentence as its label.
  _append(os.path.join(glue_root, "MNLI", "train.tsv"), "\t".join(["x"] * 10))
  with pytest.raises(TaskDataError, match=r"MNLI/train.tsv:10: missing columns"):
    glue.read_glue("mnli", "train", glue_root)


def test_unknown_split_and_missing_file(glue_root, tmp_path):
  with pytest.raises(ValueError, match="no split 'dev_matched'"):
    glue.read_glue("rte", "dev_matched", glue_root)
  with pytest.raises(FileNotFoundError, match="CoLA/train.tsv"):
    glue.read_glue("cola", "train", str(tmp_path / "empty"))
  with pytest.raises(TaskDataError, match="label 'x' is not in the label set"):
    classification.convert_examples_to_features(
        [classification.ClassificationExample("g:1", "a", label="x")], None, 8, ["0", "1"])


def test_a_reordered_label_list_keeps_glues_metrics(glue_root):
  """config.label_list="1,0" on MRPC: the metrics read label ids in GLUE's order, so the F1 was the F1 of
  class "0"; the ids are mapped back before scoring."""
  plain, flipped = get_task("mrpc"), get_task("mrpc")
  flipped.use_label_list(["1", "0"])
  es = plain.read("dev", glue_root)
  gold = [e.label for e in es]
  guess = ["1"] * len(gold)                 # always "1": recall 1 on the positives
  ids = lambda task: np.array([task.label_list.index(g) for g in guess])  # noqa: E731
  want = plain.evaluate(es, ids(plain), "dev")
  assert flipped.evaluate(es, ids(flipped), "dev") == want
  assert want["f1"] > 0.5 and gold.count("1") > 0


def test_mnli_given_its_task_folder_still_predicts_ax_from_the_sibling_diagnostic(glue_root):
  """data_dir may be the task folder (<glue root>/MNLI); AX.tsv was then silently not written."""
  mnli = get_task("mnli")
  es = mnli.read("ax", os.path.join(glue_root, "MNLI"))
  assert es.source == os.path.join(glue_root, "diagnostic", "diagnostic.tsv") and len(es) == 8


@pytest.mark.parametrize("score", ["5.5", "-0.2", "nan"])
def test_an_stsb_score_outside_0_5_names_file_line_and_value(glue_root, score):
  """STS-B's gold scores are in [0, 5]; 5.5 or -0.2 (a scaled or shifted file) was read silently."""
  path = os.path.join(glue_root, "STS-B", "dev.tsv")
  _append(path, f"8\tg\tf\ty\to\tn\tn\tthe cat .\tthe dog .\t{score}")
  want = "'nan' is not a number" if score == "nan" else rf"'{score}' is outside STS-B's \[0, 5\]"
  with pytest.raises(TaskDataError, match=rf"STS-B/dev.tsv:10: bad score: {want}"):
    glue.read_glue("stsb", "dev", glue_root)
  es = glue.read_glue("stsb", "dev", glue_root, on_error="skip")
  assert len(es) == 8 and es.skipped.counts == {"bad score": 1}
  assert all(0.0 <= e.label <= 5.0 for e in glue.read_glue("stsb", "train", glue_root))   # 0 and 4.375 kept


def test_qqp_known_broken_rows_are_skipped_and_counted_but_many_short_rows_are_an_error(glue_root):
  """GLUE's QQP train.tsv has rows broken by a line break inside a question (one 4-column row, then a 3-column
  row starting with the rest of the text); Hugging Face's processor skips them. They were a TaskDataError under
  the default on_error="raise", so QQP could not be trained on the real file without --config.on_error=skip."""
  path = os.path.join(glue_root, "QQP", "train.tsv")
  _append(path, "201359\t303345\t303346\tHow did the early Muslims")
  _append(path, '"\tWas Muhammad a real historical figure? What is the evidence for his existence?\t0')
  es = glue.read_glue("qqp", "train", glue_root)
  assert len(es) == 8 and es.skipped.counts == {"missing columns (QQP's known broken rows)": 2}
  assert es.skipped.samples["missing columns (QQP's known broken rows)"] == [f"{path}:10", f"{path}:11"]
  for i in range(10):   # many short rows are no longer QQP's few broken ones: another file, the usual error
    _append(path, f"{i}\tq\t0")
  with pytest.raises(TaskDataError, match=r"QQP/train.tsv:10: missing columns: row has 4 column.*12 of 20 rows"):
    glue.read_glue("qqp", "train", glue_root)
  assert glue.read_glue("qqp", "train", glue_root, on_error="skip").skipped.counts == {"missing columns": 12}
  _append(os.path.join(glue_root, "QQP", "test.tsv"), "8\tonly one question")   # test rows are submission rows
  with pytest.raises(TaskDataError, match=r"QQP/test.tsv:10: missing columns"):
    glue.read_glue("qqp", "test", glue_root)


def test_quote_characters_are_literal_text_not_csv_quoting(glue_root):
  """MNLI/SNLI-style text starts with or holds unbalanced `"`: with CSV quoting a row would swallow the next
  ones (Google's and HF's readers use QUOTE_NONE)."""
  path = os.path.join(glue_root, "MNLI", "dev_matched.tsv")
  head = "\t".join(["8", "1", "1n", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)"])
  _append(path, f'{head}\t"Yes, he said.\t"No\t' + "\t".join(["neutral"] * 6))
  _append(path, f'{head}\tthe "cat".\tthe dog\t' + "\t".join(["entailment"] * 6))
  es = glue.read_glue("mnli", "dev_matched", glue_root)
  assert len(es) == 10 and es.skipped.total == 0
  assert (es[8].text_a, es[8].text_b, es[8].label) == ('"Yes, he said.', '"No', "neutral")
  assert (es[9].text_a, es[9].label) == ('the "cat".', "entailment")


def test_mrpc_from_its_own_release_files_split_by_dev_ids(tmp_path):
  """MRPC's own msr_paraphrase_train.txt / _test.txt (UTF-8 BOM, header Quality...) with GLUE's dev_ids.tsv
  and no train/dev/test.tsv: split as download_glue_data.py does (was a FileNotFoundError)."""
  d = tmp_path / "MRPC"
  rows = [f"{i % 2}\t{700 + i}\t{800 + i}\t{testing._PAIRS[i][0]}\t{testing._PAIRS[i][1]}" for i in range(6)]
  head = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
  testing._write(str(d / "msr_paraphrase_train.txt"), [head] + rows, bom=True)
  testing._write(str(d / "msr_paraphrase_test.txt"), [head] + rows[:3], bom=True)
  testing._write(str(d / "dev_ids.tsv"), ["701\t801", "704\t804"])
  train, dev = glue.read_glue("mrpc", "train", str(tmp_path)), glue.read_glue("mrpc", "dev", str(tmp_path))
  assert [e.text_a for e in dev] == [testing._PAIRS[1][0], testing._PAIRS[4][0]] and len(train) == 4
  assert [e.label for e in dev] == ["1", "0"] and testing._PAIRS[1][0] not in [e.text_a for e in train]
  test = glue.read_glue("mrpc", "test", str(tmp_path))
  assert [(e.index, e.label, e.text_b) for e in test][1] == ("1", None, testing._PAIRS[1][1])
  os.remove(d / "dev_ids.tsv")
  with pytest.raises(FileNotFoundError, match="dev_ids.tsv"):
    glue.read_glue("mrpc", "train", str(tmp_path))
