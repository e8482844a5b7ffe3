"""task=c3 / multiple_choice / multilabel and config.pooling: readers on fixtures in the standard formats,
features, the heads' masking, metrics, and end-to-end runs (C3; NER with the CRF head on a 2x2x2 mesh)."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.evaluation.multilabel import multilabel_metrics
from bert_jax.finetune import loop as finetune_loop
from bert_jax.finetune.predict import Predictor
from bert_jax.finetune.tasks import TaskDataError, get_task
from bert_jax.finetune.tasks.ner import NerExample
from bert_jax.input_pipeline.tokenization import FullTokenizer
from bert_jax.models import heads

from test_finetune_tasks import make_config

C3_DOCS = [
    [["男：你今天去北京吗？", "女：不去，我明天去上海。"],
     [{"question": "女的明天去哪儿？", "choice": ["北京", "上海", "中国"], "answer": "上海", "id": "d1-1"}], "d1"],
    [["这本书很好。"],
     [{"question": "这本书怎么样？", "choice": ["很好", "不好"], "answer": "很好", "id": "d2-1"},
      {"question": "说的是什么？", "choice": ["书", "电影", "城市", "首都"], "answer": "书", "id": "d2-2"}], "d2"],
]


def write_c3(directory, layout="clue"):
  os.makedirs(directory, exist_ok=True)
  for split in ("train", "dev", "test"):
    docs = json.loads(json.dumps(C3_DOCS))
    if split == "test":
      for d in docs:
        for q in d[1]:
          del q["answer"]
    if layout == "clue":
      names = {f"{split}.json": docs}
    else:   # C3's own release: dialogue (d-) and mixed-genre (m-) files per split
      names = {f"d-{split}.json": docs[:1], f"m-{split}.json": docs[1:]}
    for name, content in names.items():
      with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
        json.dump(content, f, ensure_ascii=False)
  return directory


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
  return FullTokenizer(testing.write_vocab(str(tmp_path_factory.mktemp("v"))), do_lower_case=True)


@pytest.mark.parametrize("layout", ["clue", "d_m_pairs"])
def test_c3_reader_and_features_pad_choices(tmp_path, tok, layout):
  task = get_task("c3")
  es = task.read("train", write_c3(str(tmp_path), layout))
  assert [(e.question, e.label, len(e.choices)) for e in es] == [
      ("女的明天去哪儿？", 1, 3), ("这本书怎么样？", 0, 2), ("说的是什么？", 0, 4)]
  assert es[0].context == "男：你今天去北京吗？\n女：不去，我明天去上海。" and es[2].id == "d2-2"
  f = task.featurize(es, tok, 24)
  assert f["input_ids"].shape == (3, 4, 24) and f["choice_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 0, 0],
                                                                              [1, 1, 1, 1]]
  assert f["label_ids"].tolist() == [1, 0, 0] and not f["input_ids"][0, 3].any()
  # [CLS] context [SEP] question+choice [SEP], segment 1 on the second part.
  row, seg = f["input_ids"][1, 0], f["segment_ids"][1, 0]
  sep = tok.vocab["[SEP]"]
  assert row[0] == tok.vocab["[CLS]"] and list(row).count(sep) == 2 and seg.max() == 1
  test = task.read("test", str(tmp_path))
  assert all(e.label is None for e in test) and task.evaluate(test, np.eye(4)[[0, 0, 0]]) == {}


def test_c3_test_split_reads_clues_test1_1_json(tmp_path):
  """CLUE's c3_public.zip: d-/m-train.json, d-/m-dev.json, test1.0.json and test1.1.json (no test.json): the
  test split was a FileNotFoundError on the release's layout."""
  d = write_c3(str(tmp_path), "d_m_pairs")
  for name in ("d-test.json", "m-test.json"):
    os.remove(os.path.join(d, name))
  test = [[["这本书很好。"], [{"question": "这本书怎么样？", "choice": ["很好", "不好"], "id": 1000}], "t1"]]
  for name, docs in (("test1.1.json", test), ("test1.0.json", test[:0])):
    with open(os.path.join(d, name), "w", encoding="utf-8") as f:
      json.dump(docs, f, ensure_ascii=False)
  es = get_task("c3").read("test", d)
  assert es.source.endswith("test1.1.json") and [(e.id, e.label) for e in es] == [(1000, None)]


def test_c3_bad_answer_and_multiple_choice_jsonl(tmp_path):
  bad = json.loads(json.dumps(C3_DOCS))
  bad[0][1][0]["answer"] = "广州"
  (tmp_path / "train.json").write_text(json.dumps(bad, ensure_ascii=False), encoding="utf-8")
  with pytest.raises(TaskDataError, match="not among the choices"):
    get_task("c3").read("train", str(tmp_path))
  es = get_task("c3", on_error="skip").read("train", str(tmp_path))
  assert len(es) == 2 and es.skipped.total == 1
  rows = [{"context": "北京是中国的首都。", "question": "中国的首都是？", "choices": ["上海", "北京"], "label": 1},
          {"context": "", "question": "哪个是城市？", "choices": ["上海", "书", "电影"], "label": 0, "id": "q2"},
          {"context": "x", "question": "y", "choices": ["a", "b"], "label": 5}]
  (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), "utf-8")
  with pytest.raises(TaskDataError, match=r"train.jsonl:3: label out of range"):
    get_task("multiple_choice").read("train", str(tmp_path))
  es = get_task("multiple_choice", on_error="skip").read("train", str(tmp_path))
  assert [e.label for e in es] == [1, 0] and es[1].id == "q2" and es.skipped.total == 1


def _rows(tok, f, i):
  inv = {v: k for k, v in tok.vocab.items()}
  return ["".join(inv[x] for x in f["input_ids"][i, c] if x) for c in range(f["input_ids"].shape[1])]


def test_multiple_choice_packing_never_cuts_the_choice(tok):
  # Issue 25: Google's pair truncation pops from the longer of context and question+choice, so a long
  # question with a short passage lost the END of question+choice -- the choice. Both rows were then
  # identical and scored the same whatever the passage.
  from bert_jax.finetune.tasks.multiple_choice import MultipleChoiceExample
  task = get_task("multiple_choice")
  ex = [MultipleChoiceExample("a", context="这本书很好。", question="中国的首都是北京，上海是城市，这本书怎么样？",
                              choices=["很好", "不好"], label=0),
        MultipleChoiceExample("b", context="", question="中国的首都是北京，上海是城市，这本书怎么样？",
                              choices=["很好", "不好"], label=1)]
  f = task.featurize(ex, tok, 16)   # room 13 with a context: question+choice (24 tokens) may take 6
  a0, a1 = _rows(tok, f, 0)
  assert a0 != a1 and a0.endswith("很好[SEP]") and a1.endswith("不好[SEP]")
  assert a0.startswith("[CLS]这本书很好。[SEP]"[:len("[CLS]") + 6])     # the passage keeps half the room
  assert f["segment_ids"][0, 0].tolist()[:8] == [0] * 8 and f["input_mask"][0].sum(axis=1).tolist() == [16, 16]
  b0, b1 = _rows(tok, f, 1)          # no context: [CLS] question choice [SEP], the question is cut
  assert b0.endswith("很好[SEP]") and b1.endswith("不好[SEP]") and b0[:-len("很好[SEP]")] == b1[:-len("不好[SEP]")]
  assert not f["segment_ids"][1].any()


def test_multiple_choice_packing_cuts_a_long_passage_and_keeps_question_and_choice(tok):
  from bert_jax.finetune.tasks.multiple_choice import pack_choice
  ids, seg = pack_choice(list(range(100, 140)), [7, 8, 9], [5, 6], 1, 2, 16)
  assert ids == [1] + list(range(100, 108)) + [2, 7, 8, 9, 5, 6, 2] and seg == [0] * 10 + [1] * 6
  # Room 13, question+choice limited to 13 - 6 = 7 tokens: question first, then choice.
  ids, seg = pack_choice([100] * 40, list(range(10, 20)), [5, 6, 4], 1, 2, 16)
  assert ids == [1] + [100] * 6 + [2] + [10, 11, 12, 13, 5, 6, 4, 2] and sum(seg) == 8
  assert pack_choice([], [7], [5, 6], 1, 2, 4) == ([1, 5, 6, 2], [0, 0, 0, 0])   # a choice that overflows


def test_multiple_choice_jsonl_refuses_a_misnamed_passage_field(tmp_path):
  # Read as "", a "passage" (RACE: "article") key gave every question the same rows: the reported symptom.
  row = {"passage": "北京是中国的首都。", "question": "中国的首都是？", "choices": ["上海", "北京"], "label": 1}
  (tmp_path / "train.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n", "utf-8")
  with pytest.raises(TaskDataError, match=r"train.jsonl:1: missing field.*'context'.*passage"):
    get_task("multiple_choice").read("train", str(tmp_path))
  row = {"context": "", "question": "中国的首都是？", "choices": ["上海", "北京"], "label": 1}
  (tmp_path / "train.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n", "utf-8")
  assert get_task("multiple_choice").read("train", str(tmp_path))[0].context == ""


def test_pooling_is_mask_aware():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 5, 3)).astype(np.float32)
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
  enc = {"sequence_output": jnp.asarray(x), "pooled_output": jnp.ones((2, 3))}
  np.testing.assert_allclose(heads.pool(enc, mask, "mean")[0], x[0, :3].mean(0), rtol=1e-6)
  np.testing.assert_allclose(heads.pool(enc, mask, "max")[0], x[0, :3].max(0), rtol=1e-6)
  np.testing.assert_allclose(heads.pool(enc, mask, "last"), np.stack([x[0, 2], x[1, 4]]), rtol=1e-6)
  np.testing.assert_allclose(heads.pool(enc, mask, "first"), x[:, 0], rtol=1e-6)
  assert np.all(np.asarray(heads.pool(enc, mask, "cls")) == 1)


def test_multilabel_reader_features_loss_and_metrics(tmp_path, tok):
  (tmp_path / "train.tsv").write_text("label\ttext_a\n体育|财经\t比赛和股票\n体育\t比赛\n\t天气\n", "utf-8")
  (tmp_path / "dev.jsonl").write_text(json.dumps({"text_a": "股票", "label": ["财经"]}, ensure_ascii=False)
                                      + "\n", "utf-8")
  task = get_task("multilabel").prepare(str(tmp_path))
  assert task.label_list == ["体育", "财经"]
  es = task.read("train", str(tmp_path))
  assert [e.labels for e in es] == [["体育", "财经"], ["体育"], []]
  f = task.featurize(es, tok, 16)
  assert f["label_ids"].tolist() == [[1, 1], [1, 0], [0, 0]]
  dev = get_task("multilabel", label_list=task.label_list, file_format="jsonl").read("dev", str(tmp_path))
  assert dev[0].labels == ["财经"]
  # Sums: mean BCE per example, exact match at probability 0.5.
  logits = jnp.array([[5.0, 5.0], [5.0, -5.0], [-5.0, 5.0]])
  batch = {"label_ids": jnp.asarray(f["label_ids"]), "example_weight": jnp.ones(3)}
  s = task.loss_sums({"logits": logits}, batch)
  assert float(s["task_weight_sum"]) == 3 and float(s["task_correct_sum"]) == 2
  probs = task.predict(es, f, {"logits": np.asarray(logits)})
  m = task.evaluate(es, probs)
  assert m["exact_match"] == pytest.approx(2 / 3) and m["micro_f1"] == pytest.approx(6 / 7)
  assert m["macro_f1"] == pytest.approx((1.0 + 2 / 3) / 2)
  assert multilabel_metrics([[1, 0]], [[1, 0]]) == {"micro_f1": 1.0, "macro_f1": 0.5, "exact_match": 1.0,
                                                    "micro_precision": 1.0, "micro_recall": 1.0}
  with pytest.raises(TaskDataError, match="label not in label set"):
    get_task("multilabel", label_list=["体育"]).read("train", str(tmp_path))


@pytest.mark.slow      # a run of several seconds; CI runs it, the fast tier keeps the unit tests
def test_c3_end_to_end_with_mean_pooling_masks_padded_choices(tmp_path):
  data = write_c3(str(tmp_path / "c3"))
  vocab = testing.write_vocab(str(tmp_path / "v"))
  c = make_config("c3", data, vocab, num_train_epochs=1.0, pooling="mean")
  out = str(tmp_path / "run")
  res = finetune_loop.run(c, out)
  assert 0.0 <= res["dev"]["accuracy"] <= 1.0 and np.isfinite(res["dev"]["loss"])
  rows = [json.loads(l) for l in open(os.path.join(out, "c3_test_predictions.jsonl"), encoding="utf-8")]
  assert [r["id"] for r in rows] == ["d1-1", "d2-1", "d2-2"]
  assert all(r["answer"] in q["choice"] for r, q in zip(rows, [q for d in C3_DOCS for q in d[1]]))
  # The padded 3rd/4th choices got logit -1e9: the real choices' probabilities alone sum to 1.
  assert all(abs(sum(r["probabilities"]) - 1) < 1e-5 for r in rows) and len(rows[1]["probabilities"]) == 2
  info = json.load(open(os.path.join(out, "best_checkpoint", "finetune_info.json"), encoding="utf-8"))
  assert info["pooling"] == "mean"
  got = Predictor.from_workdir(out).predict_choices([{"context": "这本书很好。", "question": "这本书怎么样？",
                                                      "choices": ["很好", "不好"]}])
  assert got[0]["answer"] in ("很好", "不好") and len(got[0]["probabilities"]) == 2


# slow (full tier): a whole fine-tuning run; the CRF itself (forward algorithm, Viterbi, constraints against
# brute force) is tests/test_crf.py's, in the fast tier.
@pytest.mark.slow
def test_ner_with_the_crf_head_writes_conll_output_and_predicts_valid_bio(tmp_path):
  data = testing.write_conll(str(tmp_path / "ner"))
  vocab = testing.write_vocab(str(tmp_path / "v"))
  out = str(tmp_path / "run")
  c = make_config("ner", data, vocab, num_train_epochs=2.0, crf=True, batch_size=4, eval_batch_size=4)
  c.mesh.shape = (2, 2, 2)
  res = finetune_loop.run(c, out)
  assert {"precision", "recall", "f1"} <= set(res["dev"]) and np.isfinite(res["dev"]["loss"])
  rows = [l.split() for l in open(os.path.join(out, "dev_predictions.txt"), encoding="utf-8") if l.strip()]
  assert [r[0] for r in rows] == [w for s, _ in testing.CONLL_SENTENCES for w in s]
  info = json.load(open(os.path.join(out, "best_checkpoint", "finetune_info.json"), encoding="utf-8"))
  assert info["crf"] is True
  got = Predictor.from_workdir(out).predict(["John Smith lives in New York .", "我住在北京。"])
  for g in got:   # the constrained Viterbi path never starts an entity with I-X
    tags = g["tags"]
    assert len(tags) == len(g["words"])
    for prev, cur in zip(["O"] + tags[:-1], tags):
      assert not cur.startswith("I-") or prev[2:] == cur[2:], tags


def test_ner_features_mark_first_sub_tokens_and_continuation_windows(tok):
  task = get_task("ner", label_list=["O", "B-LOC", "I-LOC"], crf=True)
  assert task.extra_input_keys == ("word_mask", "window_continues", "window_continued")
  ex = [NerExample("a", list("我住在北京上海"), ["O", "O", "O", "B-LOC", "I-LOC", "B-LOC", "I-LOC"]),
        NerExample("b", ["上海"], ["B-LOC"])]
  f = task.featurize(ex, tok, 6)          # 4 words per window: sentence a is cut inside 北京
  assert f["example_index"].tolist() == [0, 0, 1]
  assert f["window_continues"].tolist() == [0, 1, 0] and f["window_continued"].tolist() == [1, 0, 0]
  assert (f["word_mask"] == (f["word_ids"] >= 0)).all() and f["word_mask"].sum() == 8


def test_c3_prediction_file_keeps_clues_integer_ids(tmp_path):
  """CLUE's C3 test file numbers its questions ({"id": 1000}) and its submission reads {"id": 1000, "label": 1}:
  an integer id stays an integer in the prediction file (it was written as "1000"); text ids stay text."""
  from bert_jax.finetune.tasks import multiple_choice
  docs = json.loads(json.dumps(C3_DOCS))
  for d in docs:
    for q in d[1]:
      del q["answer"]
  docs[0][1][0]["id"] = 1000
  (tmp_path / "test.json").write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
  es = get_task("c3").read("test", str(tmp_path))
  path = multiple_choice.write_predictions(str(tmp_path / "p.jsonl"), es, [1, 0, 3], np.eye(4)[[1, 0, 3]])
  rows = [json.loads(line) for line in open(path, encoding="utf-8")]
  assert [(r["id"], r["label"]) for r in rows] == [(1000, 1), ("d2-1", 0), ("d2-2", 3)]


def test_c3_test_questions_with_an_empty_answer_are_unlabelled(tmp_path):
  """A test file whose questions carry "answer": "" (no gold) was an error ("'' not among the choices");
  in train an empty answer is a missing one."""
  docs = json.loads(json.dumps(C3_DOCS))
  for d in docs:
    for q in d[1]:
      q["answer"] = ""
  for split in ("train", "test"):
    (tmp_path / f"{split}.json").write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
  test = get_task("c3").read("test", str(tmp_path))
  assert len(test) == 3 and all(e.label is None for e in test)
  with pytest.raises(TaskDataError, match="missing answer"):
    get_task("c3").read("train", str(tmp_path))


@pytest.mark.parametrize("label", ["true", "1.5"])
def test_multiple_choice_label_that_is_no_index_is_an_error(tmp_path, label):
  """int(true) and int(1.5) are 1: such a label was read as choice 1."""
  row = '{"context": "c", "question": "q", "choices": ["a", "b", "c"], "label": %s}\n'
  (tmp_path / "train.jsonl").write_text(row % "1.0" + row % label, encoding="utf-8")
  with pytest.raises(TaskDataError, match=r"train.jsonl:2: bad label: label .* is not a choice index"):
    get_task("multiple_choice").read("train", str(tmp_path))
  es = get_task("multiple_choice", on_error="skip").read("train", str(tmp_path))
  assert [e.label for e in es] == [1] and es.skipped.total == 1


def test_c3_turns_are_joined_by_a_newline_so_words_at_a_boundary_stay_apart(tmp_path, tok):
  """The turns were joined with nothing: "... the cat" + "sat on ..." read as "catsat", one wrong WordPiece
  sequence. Joined by a newline (the C3 baseline's choice), which the tokenizer reads as whitespace."""
  docs = [[["A: the cat", "B: sat on the mat ."],
           [{"question": "who sat ?", "choice": ["cat", "dog"], "answer": "cat", "id": 1}], "d9"]]
  (tmp_path / "train.json").write_text(json.dumps(docs), encoding="utf-8")
  (ex,) = get_task("c3").read("train", str(tmp_path))
  assert ex.context == "A: the cat\nB: sat on the mat ."
  assert tok.tokenize(ex.context)[2:4] == ["the", "cat"]
  assert tok.tokenize("A: the catB: sat")[2:4] != ["the", "cat"]       # what the glued text read as
