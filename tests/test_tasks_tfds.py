"""TFDS readers (glue/*, squad/v1.1, squad/v2.0, conll2003) with tfds.testing.mock_data: no network."""

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")
tf = pytest.importorskip("tensorflow")

from bert_jax.finetune.tasks import TaskDataError, get_task, glue, ner, squad  # noqa: E402
import task_fixtures as testing  # noqa: E402
from bert_jax.input_pipeline.tokenization import FullTokenizer  # noqa: E402

GLUE_SPLITS = {"cola": "dev", "sst2": "train", "mrpc": "dev", "stsb": "train", "qqp": "dev",
               "mnli": "dev_mismatched", "qnli": "train", "rte": "dev", "wnli": "train", "ax": "test"}


@pytest.mark.parametrize("task", sorted(GLUE_SPLITS))
def test_glue_tfds_random_mock_reads_with_label_strings(tmp_path, task):
  with tfds.testing.mock_data(num_examples=4, data_dir=str(tmp_path)):
    es = glue.read_glue_tfds(task, GLUE_SPLITS[task], data_dir=str(tmp_path))
  spec = glue.get_spec(task)
  assert len(es) == 4 and es.source.startswith(f"tfds:glue/{spec.name}:")
  assert all(isinstance(e.text_a, str) and e.text_a for e in es)
  assert all((e.text_b is None) == (task in ("cola", "sst2")) for e in es)
  if spec.is_regression:
    assert all(isinstance(e.label, float) for e in es)
  else:
    assert all(e.label in spec.label_list for e in es)


def _mock_fn(rows):
  def as_dataset(self, *args, **kwargs):
    del args, kwargs
    return tf.data.Dataset.from_generator(lambda: iter(rows), output_types=self.info.features.dtype,
                                          output_shapes=self.info.features.shape)
  return as_dataset


def test_glue_tfds_maps_classlabel_names_and_test_minus_one(tmp_path):
  rows = [{"premise": "the cat sat .", "hypothesis": "a cat sat .", "label": i, "idx": 10 + i} for i in range(3)]
  rows.append({"premise": "p", "hypothesis": "h", "label": -1, "idx": 13})
  with tfds.testing.mock_data(as_dataset_fn=_mock_fn(rows), data_dir=str(tmp_path)):
    es = get_task("mnli").read("test_matched", use_tfds=True, tfds_data_dir=str(tmp_path))
  # TFDS order is entailment, neutral, contradiction; GLUE (Google) ids differ, strings must match.
  assert [e.label for e in es] == ["entailment", "neutral", "contradiction", None]
  assert [e.index for e in es] == ["10", "11", "12", "13"]
  rows = [{"sentence": "good", "label": 1, "idx": 0}, {"sentence": "bad", "label": 0, "idx": 1}]
  with tfds.testing.mock_data(as_dataset_fn=_mock_fn(rows), data_dir=str(tmp_path)):
    es = glue.read_glue_tfds("sst2", "train", str(tmp_path))
  assert [e.label for e in es] == ["1", "0"]


def _squad_rows(v2):
  out = []
  for title, context, qas in testing.SQUAD_PARAGRAPHS:
    for qid, q, ans, start in qas:
      start = {None: context.find(ans), "last": context.rfind(ans)}.get(start, start)
      row = {"id": qid, "title": title, "context": context, "question": q,
             "answers": {"text": [ans], "answer_start": np.array([start], np.int32)}}
      if v2:
        row["is_impossible"] = False
        row["plausible_answers"] = {"text": [], "answer_start": np.zeros((0,), np.int32)}
      out.append(row)
  return out


@pytest.mark.parametrize("v2", [False, True])
def test_squad_tfds_controlled_mock_gives_same_examples_as_json(tmp_path, v2):
  with tfds.testing.mock_data(as_dataset_fn=_mock_fn(_squad_rows(v2)), data_dir=str(tmp_path)):
    es = get_task("squad_v2" if v2 else "squad_v1").read("train", use_tfds=True, tfds_data_dir=str(tmp_path))
  js = squad.read_squad(testing.write_squad(str(tmp_path / "json"), v2) + ("/train-v2.0.json" if v2 else
                                                                             "/train-v1.1.json"), v2)
  want = [(e.qas_id, e.start_char, e.end_char, e.answer_text) for e in js if not e.is_impossible]
  assert [(e.qas_id, e.start_char, e.end_char, e.answer_text) for e in es] == want


def test_squad_tfds_random_mock_counts_answer_mismatches(tmp_path):
  with tfds.testing.mock_data(num_examples=5, data_dir=str(tmp_path)):
    es = squad.read_squad_tfds("train", False, str(tmp_path))
    assert es.skipped.total + len(es) == 5 and es.skipped.total >= 4  # random text never matches
    dev = squad.read_squad_tfds("validation", False, str(tmp_path))
  assert len(dev) == 5  # evaluation keeps every question


def test_conll2003_tfds_and_features(tmp_path):
  names = ner.CONLL2003_LABELS
  rows = [{"tokens": words, "pos": np.zeros(len(words), np.int64), "chunks": np.zeros(len(words), np.int64),
           "ner": np.array([names.index(t) if t in names else 0 for t in tags], np.int64)}
          for words, tags in testing.CONLL_SENTENCES[:3]]
  with tfds.testing.mock_data(as_dataset_fn=_mock_fn(rows), data_dir=str(tmp_path)):
    task = get_task("ner").prepare(use_tfds=True)
    es = task.read("dev", use_tfds=True, tfds_data_dir=str(tmp_path))
  assert [e.labels for e in es] == [t for _, t in testing.CONLL_SENTENCES[:3]]
  tok = FullTokenizer(testing.write_vocab(str(tmp_path / "v")), do_lower_case=True)
  f = task.featurize(es, tok, 16)
  assert f["label_ids"][0, 1] == names.index("B-PER")
  # Fewer tags than tokens: an error naming the example, or a counted skip.
  bad = rows[:1] + [dict(rows[1], ner=rows[1]["ner"][:-1])]
  with tfds.testing.mock_data(as_dataset_fn=_mock_fn(bad), data_dir=str(tmp_path)):
    with pytest.raises(TaskDataError, match=r"tfds:conll2003:train:1: tag count mismatch: 6 tokens but 5"):
      ner.read_conll2003_tfds("train", str(tmp_path))
    es = ner.read_conll2003_tfds("train", str(tmp_path), on_error="skip")
  assert len(es) == 1 and es.skipped.counts == {"tag count mismatch": 1}


def test_tfds_not_prepared_without_mock_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="not prepared"):
    glue.read_glue_tfds("rte", "train", str(tmp_path / "none"))
