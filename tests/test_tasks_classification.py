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


def _config(task, data_dir, **fields):
  from test_finetune_units import load_config_module
  c = load_config_module().get_config(f"task={task}")
  c.data_dir = data_dir
  for k, v in fields.items():
    setattr(c, k, v)
  return c


def test_truncation_from_the_config_keeps_the_end_of_a_long_review_and_reaches_the_predictor(tmp_path, tok):
  """config.truncation=head_tail: a review longer than max_seq_length keeps its start and its end (where the
  verdict often is); finetune_info.json records the rule, so the Predictor cuts new texts the same way."""
  from bert_jax.finetune import data as finetune_data, plan
  from bert_jax.finetune.predict import task_from_info
  long_review = "这本书" * 6 + "很好"          # 20 characters; max_seq_length 8 holds 6
  (tmp_path / "train.tsv").write_text(f"label\ttext_a\n1\t{long_review}\n0\t不好\n", encoding="utf-8")
  v = tok.vocab
  task = finetune_data.make_task(_config("classification", str(tmp_path), truncation="head_tail",
                                         truncation_head_fraction=0.5))
  es = task.read("train", str(tmp_path))
  f = task.featurize(es, tok, 8)
  assert f["input_ids"][0].tolist() == [v[t] for t in ["[CLS]", "这", "本", "书", "书", "很", "好", "[SEP]"]]
  head = finetune_data.make_task(_config("classification", str(tmp_path)))
  assert head.featurize(es, tok, 8)["input_ids"][0, 1:7].tolist() == [v[c] for c in "这本书这本书"]
  info = plan._finetune_info(_config("classification", str(tmp_path)), task, True)
  assert info["truncation"] == "head_tail" and info["truncation_head_fraction"] == 0.5
  again = task_from_info(info)
  assert again.featurize(es, tok, 8)["input_ids"].tolist() == f["input_ids"].tolist()
  assert task_from_info({k: x for k, x in info.items() if not k.startswith("truncation")}).truncation == "head"


@pytest.mark.parametrize("task,fields,message", [
    ("classification", {"truncation": "middle"}, "config.truncation='middle'; expected one of head, tail, head_tail"),
    ("classification", {"truncation_head_fraction": 1.5}, r"config.truncation_head_fraction=1.5; expected a number "
                                                          r"in \[0, 1\]"),
    ("ner", {"truncation": "tail"}, "config.truncation='tail' applies to sentence-level text tasks"),
])
def test_truncation_mistakes_name_the_field(tmp_path, task, fields, message):
  from bert_jax.errors import UserError
  from bert_jax.finetune import data as finetune_data
  d = testing.write_conll(str(tmp_path / "ner")) if task == "ner" else testing.write_classification(str(tmp_path))
  with pytest.raises(UserError, match=message):
    finetune_data.make_task(_config(task, d, **fields))


def test_test_rows_keep_their_own_id_in_the_prediction_file(tmp_path):
  """ChnSentiCorp's test.tsv is `qid\\ttext_a` and CLUE's JSONL has an `id`: the submission's index column is
  that id (it was the row number, so a file with ids 100.. was misaligned for the scorer)."""
  (tmp_path / "test.tsv").write_text("qid\ttext_a\n100\t这本书很好\n101\t不好\n", encoding="utf-8")
  es = classification.read_classification_file(str(tmp_path / "test.tsv"), classification.ClassificationFormat(),
                                               split="test")
  assert [e.index for e in es] == ["100", "101"]
  (tmp_path / "test.jsonl").write_text('{"id": 7, "sentence": "好"}\n{"sentence": "不"}\n', encoding="utf-8")
  fmt = classification.ClassificationFormat(text_a="sentence", file_format="jsonl")
  es = classification.read_classification_file(str(tmp_path / "test.jsonl"), fmt, split="test")
  assert [e.index for e in es] == ["7", "1"]     # no id: the row number
  path = classification.write_predictions_tsv(str(tmp_path / "p.tsv"), es, ["1", "0"])
  assert open(path, encoding="utf-8").read() == "index\tprediction\n7\t1\n1\t0\n"


def test_dev_prediction_files_carry_the_gold_label_and_test_files_keep_their_format(tmp_path):
  """A dev file was `index\\tprediction` only: comparing with gold meant re-joining it with dev.tsv. Dev files
  (classification, multilabel) now end with the gold label; test (submission) files are unchanged."""
  from bert_jax.finetune.tasks import multilabel
  (tmp_path / "dev.tsv").write_text("text_a\tlabel\n好\t1\n不好\t0\n", encoding="utf-8")
  task = get_task("classification", label_list=["0", "1"])
  es = task.read("dev", str(tmp_path))
  (path,) = task.write_predictions(str(tmp_path / "out"), "dev", es, np.array([1, 1]))
  assert open(path, encoding="utf-8").read() == "index\tprediction\tlabel\n0\t1\t1\n1\t1\t0\n"
  (path,) = task.write_predictions(str(tmp_path / "out"), "test", es, np.array([1, 1]))
  assert open(path, encoding="utf-8").read() == "index\tprediction\n0\t1\n1\t1\n"
  ml = [multilabel.MultilabelExample(guid="g", text_a="x", labels=["a", "b"], index="0")]
  p = multilabel.write_predictions(str(tmp_path / "m.tsv"), ml, np.array([[1, 0]]), np.array([[0.9, 0.2]]),
                                   ["a", "b"], gold=True)
  assert open(p, encoding="utf-8").read() == "index\tprediction\tprobabilities\tlabel\n0\ta\ta:0.9000 b:0.2000\ta|b\n"


def test_an_empty_label_cell_is_unlabelled_in_test_and_a_missing_label_elsewhere(tmp_path):
  """A test file with an empty label column (a submission template) was 'label not in label set: '''; a dev
  row with an empty label now says the label is missing."""
  (tmp_path / "test.tsv").write_text("label\ttext_a\n\t这本书很好\n1\t不好\n", encoding="utf-8")
  task = get_task("classification", label_list=["0", "1"])
  es = task.read("test", str(tmp_path))
  assert [e.label for e in es] == [None, "1"]
  from bert_jax import input_warnings
  assert task.evaluate(es, np.array([1, 1])) == {}
  assert any("1 of 2 rows have no label, so the split is not scored" in w for w in input_warnings.input_warnings())
  (tmp_path / "dev.tsv").write_text("label\ttext_a\n \t这本书很好\n", encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"dev.tsv:2: missing label: column 'label' is empty"):
    task.read("dev", str(tmp_path))
