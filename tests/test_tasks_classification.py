"""Generic classification files (TSV/CSV/JSONL, named or indexed columns) incl. Chinese sentiment."""

import json

import numpy as np
import pytest

from bert_jax.finetune.tasks import TaskDataError, classification, get_task
import task_fixtures as testing
from bert_jax.input_pipeline.tokenization import FullTokenizer

Fmt = classification.ClassificationFormat


@pytest.fixture
def tok(tmp_path):
  return FullTokenizer(testing.write_vocab(str(tmp_path / "v")), do_lower_case=True)


def test_chnsenticorp_style_tsv_is_character_level(tmp_path, tok):
  d = testing.write_classification(str(tmp_path))
  task = get_task("classification").prepare(d)
  assert task.label_list == ["0", "1"] and task.num_labels == 2
  es = task.read("train", d)
  assert [(e.label, e.text_a) for e in es] == testing.CLASSIFICATION_ROWS
  f = task.featurize(es, tok, 12)
  v = tok.vocab
  assert f["input_ids"][0, :7].tolist() == [v["[CLS]"], v["这"], v["本"], v["书"], v["很"], v["好"], v["[SEP]"]]
  assert f["label_ids"].tolist() == [int(l) for l, _ in testing.CLASSIFICATION_ROWS]


def test_headerless_index_columns_csv_with_quotes_and_jsonl_pairs(tmp_path):
  (tmp_path / "train.tsv").write_text("1\t这本书很好\n0\t不好\n", encoding="utf-8")
  es = classification.read_classification_split(str(tmp_path), "train", Fmt(text_a=1, label=0, header=False))
  assert [(e.label, e.text_a) for e in es] == [("1", "这本书很好"), ("0", "不好")]
  (tmp_path / "dev.csv").write_text('rating,review\n5,"good, very ""good""\nbook"\n1,bad\n', encoding="utf-8")
  es = classification.read_classification_split(str(tmp_path), "dev", Fmt(text_a="review", label="rating",
                                                                            file_format="csv"))
  assert es[0].text_a == 'good, very "good"\nbook' and es[1].guid.endswith("dev.csv:4")
  rows = [{"sentence1": "a cat", "sentence2": "a dog", "label": "no"},
          {"sentence1": "a cat", "sentence2": "the cat", "label": "yes"}]
  (tmp_path / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
  fmt = Fmt(text_a="sentence1", text_b="sentence2", label="label")
  es = classification.read_classification_split(str(tmp_path), "test", fmt)
  assert (es[1].text_a, es[1].text_b, es[1].label) == ("a cat", "the cat", "yes")
  assert classification.infer_label_list(es) == ["no", "yes"]
  assert classification.infer_label_list([classification.ClassificationExample("g", "t", label=l)
                                          for l in ("10", "9", "2")]) == ["2", "9", "10"]


def test_bad_rows_name_file_and_line(tmp_path):
  (tmp_path / "train.tsv").write_text("label\ttext_a\n1\tgood\n2\tbad\n1\n", encoding="utf-8")
  fmt = Fmt()
  with pytest.raises(TaskDataError, match=r"train.tsv:3: label not in label set: '2'"):
    classification.read_classification_split(str(tmp_path), "train", fmt, label_list=["0", "1"])
  es = classification.read_classification_split(str(tmp_path), "train", fmt, ["0", "1"], on_error="skip")
  assert len(es) == 1 and es.skipped.counts == {"label not in label set": 1, "missing column": 1}
  assert es.skipped.samples["missing column"] == [f"{tmp_path}/train.tsv:4"]
  with pytest.raises(TaskDataError, match=r"train.tsv:1: header has no column 'sentence'"):
    classification.read_classification_split(str(tmp_path), "train", Fmt(text_a="sentence"))
  (tmp_path / "dev.jsonl").write_text('{"text_a": "x", "label": "1"}\n{"text_a": "y"\n', encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"dev.jsonl:2: invalid JSON"):
    classification.read_classification_split(str(tmp_path), "dev", fmt)


def test_regression_and_unlabelled_test_rows(tmp_path, tok):
  (tmp_path / "train.tsv").write_text("score\ttext_a\n0.5\tgood\nx\tbad\n", encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"train.tsv:3: bad regression label"):
    get_task("classification", label="score", is_regression=True).read("train", str(tmp_path))
  (tmp_path / "test.tsv").write_text("text_a\tother\n这本书\tz\n", encoding="utf-8")
  task = get_task("classification", label_list=["0", "1"])
  es = task.read("test", str(tmp_path))
  assert es[0].label is None
  f = task.featurize(es, tok, 8)
  assert f["label_ids"].tolist() == [-1]
  preds = task.predict(es, f, {"logits": np.array([[0.1, 0.9]])})
  assert task.evaluate(es, preds) == {}
  path = task.write_predictions(str(tmp_path / "out"), "test", es, preds)[0]
  assert open(path, encoding="utf-8").read() == "index\tprediction\n0\t1\n"
