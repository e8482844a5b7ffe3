"""SQuAD reading (v1.1/v2.0, Chinese), answer_start validation, and doc-stride features."""

import json

import numpy as np
import pytest

from bert_jax.finetune.tasks import TaskDataError, squad
import task_fixtures as testing
from bert_jax.input_pipeline.tokenization import FullTokenizer


@pytest.fixture
def tok(tmp_path):
  return FullTokenizer(testing.write_vocab(str(tmp_path / "v")), do_lower_case=True)


def test_reads_v1_and_v2_with_offsets_checked(tmp_path):
  d = testing.write_squad(str(tmp_path), False)
  es = squad.read_squad_split(d, "train")
  assert len(es) == 8 and es.skipped.total == 0
  by_id = {e.qas_id: e for e in es}
  assert by_id["q9"].context_text[by_id["q9"].start_char:by_id["q9"].end_char] == "Zürich"
  assert by_id["q9"].start_char > by_id["q4"].context_text.index("Zürich")  # the second occurrence
  d2 = testing.write_squad(str(tmp_path / "v2"), True)
  es2 = squad.read_squad_split(d2, "dev", version_2_with_negative=True)
  q8 = [e for e in es2 if e.qas_id == "q8"][0]
  assert q8.is_impossible and q8.answers == []
  assert squad.gold_answers(es2)["q7"] == ["中国的城市"]


def _write(tmp_path, obj, name="train-v1.1.json", indent=1):
  path = tmp_path / name
  path.write_text(json.dumps(obj, ensure_ascii=False, indent=indent), encoding="utf-8")
  return str(path)


def test_answer_mismatch_is_error_with_file_line_and_id_or_counted_skip(tmp_path):
  obj = testing.squad_json(False)
  obj["data"][1]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 3
  path = _write(tmp_path, obj)
  with pytest.raises(TaskDataError, match=r"train-v1.1.json:\d+: answer mismatch: question id q4: answer "
                                          r"'John Smith' is not at answer_start=\d+.*--config.on_error=skip"):
    squad.read_squad(path, is_training=True, on_error="raise")
  es = squad.read_squad(path, is_training=True)  # default for training: Google's skip, but counted
  assert len(es) == 7 and es.skipped.counts == {"answer mismatch": 1}
  line = int(es.skipped.samples["answer mismatch"][0].rsplit(":", 1)[1])
  assert '"q4"' in open(path, encoding="utf-8").read().splitlines()[line - 1]
  # Evaluation keeps every question (answers are only scored, never located).
  assert len(squad.read_squad(path, is_training=False)) == 8


def test_whitespace_insensitive_answer_check_like_google():
  ctx = "New  York is big"
  assert squad.locate_answer(ctx, "New York", 0) == (0, 9)
  assert squad.locate_answer("in New York", " New", 2) == (3, 6)  # a leading space in the answer text
  assert squad.locate_answer(ctx, " New", 0) is None
  assert squad.locate_answer(ctx, "York", 0) is None
  assert squad.locate_answer(ctx, "big", 99) is None


def test_v1_training_question_without_answer_and_bad_json(tmp_path):
  obj = testing.squad_json(False)
  obj["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
  path = _write(tmp_path, obj)
  with pytest.raises(TaskDataError, match="question id q1 has no answer"):
    squad.read_squad(path, is_training=True, on_error="raise")
  bad = tmp_path / "dev-v1.1.json"
  bad.write_text('{"data": [\n{"title": }\n]}', encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"dev-v1.1.json:2: invalid JSON"):
    squad.read_squad(str(bad), is_training=False)


def test_features_put_answers_on_the_right_tokens_in_every_window(tmp_path, tok):
  es = squad.read_squad_split(testing.write_squad(str(tmp_path), True), "train", version_2_with_negative=True)
  f = squad.convert_examples_to_features(es, tok, max_seq_length=24, doc_stride=5, max_query_length=6,
                                         is_training=True)
  assert "token_char_spans" not in f  # training features stay small
  ef = squad.convert_examples_to_features(es, tok, 24, 5, 6, is_training=False)
  n = len(f["input_ids"])
  assert n > len(es)  # several windows per context
  for row in range(n):
    ex = es[int(f["example_index"][row])]
    s, e = int(f["start_positions"][row]), int(f["end_positions"][row])
    assert f["is_impossible"][row] == int(s == 0)
    if s:
      spans = ef["token_char_spans"][row]
      assert ex.context_text[spans[s, 0]:spans[e, 1]] == ex.answer_text
      assert f["segment_ids"][row, s] == 1 and e >= s
  # Every answerable question is labelled in at least one window; the impossible one in none.
  labelled = {es[int(i)].qas_id for i in f["example_index"][f["start_positions"] > 0]}
  assert labelled == {e.qas_id for e in es if not e.is_impossible}
  # Each context token is "max context" in exactly one window.
  for ex_i in range(len(es)):
    rows = np.flatnonzero(ef["example_index"] == ex_i)
    counts = {}
    for row in rows:
      for t in np.flatnonzero(ef["token_is_max_context"][row]):
        key = tuple(ef["token_char_spans"][row, t])
        counts[key] = counts.get(key, 0) + 1
    assert set(counts.values()) == {1}


def test_query_truncation_window_layout_and_too_small_length(tmp_path, tok):
  ex = squad.SquadExample("q", "the cat sat on the mat", "北京是中国的首都", answer_text="中国", start_char=3,
                          end_char=5)
  f = squad.convert_examples_to_features([ex], tok, max_seq_length=12, doc_stride=3, max_query_length=3,
                                         is_training=True)
  v = tok.vocab
  # [CLS] the cat sat [SEP] + 6 context characters + [SEP]; 8 characters -> windows at 0 and 3.
  assert f["input_ids"][0].tolist() == [v["[CLS]"], v["the"], v["cat"], v["sat"], v["[SEP]"], v["北"], v["京"],
                                        v["是"], v["中"], v["国"], v["的"], v["[SEP]"]]
  assert f["segment_ids"][0].tolist() == [0] * 5 + [1] * 7
  assert f["start_positions"].tolist() == [8, 5] and f["end_positions"].tolist() == [9, 6]
  with pytest.raises(ValueError, match="leaves no room"):
    squad.convert_examples_to_features([ex], tok, max_seq_length=6, max_query_length=3)


def test_a_duplicate_question_id_is_an_error_or_a_counted_skip(tmp_path):
  """Predictions, gold answers and scores are keyed by id: a second question with an id already used took the
  first one's place silently."""
  obj = testing.squad_json()
  qas = obj["data"][0]["paragraphs"][0]["qas"]
  qas.append(dict(qas[1], question="another question ?"))
  path = tmp_path / "dev-v1.1.json"
  path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"dev-v1.1.json:1: duplicate question id: id q2"):
    squad.read_squad(str(path), is_training=False, split="dev")
  es = squad.read_squad(str(path), is_training=False, split="dev", on_error="skip")
  assert es.skipped.counts == {"duplicate question id": 1} and len(es) == 8   # 8 unique questions
