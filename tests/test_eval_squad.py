"""Official SQuAD v1.1 / v2.0 EM and F1 on hand-made cases with known scores, and CMRC2018-style Chinese."""

import ast
import pathlib

import pytest

from bert_jax.evaluation import squad


def test_normalize_answer_lowercases_drops_punctuation_articles_whitespace():
  assert squad.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
  assert squad.normalize_answer("An apple a day\tkeeps  THE doctor away.") == "apple day keeps doctor away"
  assert squad.normalize_answer("U.S.") == "us"
  assert squad.normalize_answer("theatre anathema") == "theatre anathema"  # articles only as whole words
  assert squad.normalize_answer("Zürich") == "zürich"  # accents are not stripped by the official script


@pytest.mark.parametrize("pred,gold,em,f1", [
    ("the Denver Broncos", "Denver Broncos", 1.0, 1.0),
    ("Denver Broncos won", "Denver Broncos", 0.0, 0.8),          # p=2/3, r=1
    ("an apple a day", "apple", 0.0, 2 / 3),                      # "apple day" vs "apple"
    ("U.S", "U.S.", 1.0, 1.0),
    ("Carolina Panthers", "Denver Broncos", 0.0, 0.0),
    ("the the", "a", 1.0, 0.0),                                   # both normalise to "" (v1.1 F1 is 0)
    ("cat cat dog", "cat dog dog", 0.0, 2 / 3),                   # multiset overlap 2 of 3
])
def test_v1_pair_scores(pred, gold, em, f1):
  assert squad.exact_match_score(pred, gold) == em
  assert squad.f1_score(pred, gold) == pytest.approx(f1)


def test_v2_pair_scores_for_no_answer():
  assert squad.compute_f1("", "") == 1.0 and squad.compute_exact("", "") == 1
  assert squad.compute_f1("", "something") == 0.0
  assert squad.compute_f1("the", "") == 1.0  # "the" normalises to nothing: counts as a no-answer


def _v1_dataset():
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": [
      {"id": "a", "answers": [{"text": "Denver Broncos", "answer_start": 0},
                              {"text": "the Denver Broncos", "answer_start": 0}]},
      {"id": "b", "answers": [{"text": "Santa Clara, California", "answer_start": 0}]},
      {"id": "c", "answers": [{"text": "Levi's Stadium", "answer_start": 0}]}]}]}]


def test_evaluate_v1_max_over_golds_and_missing_counts_zero():
  r = squad.evaluate_v1(_v1_dataset(), {"a": "Denver Broncos", "b": "California"})
  assert r["exact_match"] == pytest.approx(100 / 3)
  assert r["f1"] == pytest.approx(100 * (1 + 0.5) / 3)
  assert r["total"] == 3 and r["missing"] == 1
  # Also accepts the whole JSON object and a {qid: answers} mapping.
  assert squad.evaluate_v1({"data": _v1_dataset()}, {"a": "Denver Broncos"})["exact_match"] == pytest.approx(
      100 / 3)
  assert squad.evaluate_v1({"a": ["x y"]}, {"a": "y"})["f1"] == pytest.approx(100 * 2 / 3)


def _v2_golds():
  return {"a1": ["Denver Broncos", "the Denver Broncos"], "a2": ["Santa Clara, California"], "n1": [], "n2": []}


def test_evaluate_v2_breakdown_and_best_thresholds():
  preds = {"a1": "Denver Broncos", "a2": "California", "n1": "", "n2": "something"}
  na = {"a1": 0.1, "a2": 0.6, "n1": 0.9, "n2": 0.8}
  r = squad.evaluate_v2(_v2_golds(), preds, na_probs=na, na_prob_thresh=1.0)
  assert r["exact"] == pytest.approx(50.0) and r["f1"] == pytest.approx(62.5) and r["total"] == 4
  assert r["HasAns_exact"] == pytest.approx(50.0) and r["HasAns_f1"] == pytest.approx(75.0)
  assert r["HasAns_total"] == 2 and r["NoAns_total"] == 2
  assert r["NoAns_exact"] == pytest.approx(50.0) and r["NoAns_f1"] == pytest.approx(50.0)
  # Official find_best_thresh, worked by hand: start at #no-answer = 2 correct, walk by na_prob.
  assert r["best_exact"] == pytest.approx(75.0) and r["best_exact_thresh"] == pytest.approx(0.1)
  assert r["best_f1"] == pytest.approx(87.5) and r["best_f1_thresh"] == pytest.approx(0.6)
  # A threshold of 0.7 turns n1/n2 into predicted no-answers.
  r = squad.evaluate_v2(_v2_golds(), preds, na_probs=na, na_prob_thresh=0.7)
  assert r["exact"] == pytest.approx(75.0) and r["f1"] == pytest.approx(87.5)
  # Without na_probs there are no best_* keys (as the official script without --na-prob-file).
  assert "best_f1" not in squad.evaluate_v2(_v2_golds(), preds)


def test_v2_gold_answers_that_normalise_to_empty_score_as_empty_but_stay_has_answer():
  """The official v2 script scores such a question against "" but counts it under HasAns (its has-answer test is
  a non-empty answers list): it was put under NoAns, which also changed best_f1_thresh's search."""
  r = squad.evaluate_v2({"q": ["the", "."]}, {"q": ""}, na_probs={"q": 0.9})
  assert r["HasAns_total"] == 1 and "NoAns_total" not in r and r["exact"] == 100.0
  assert r["best_f1"] == 100.0 and r["best_f1_thresh"] == 0.9   # official: diff = its score (1), not 0


def test_cjk_answers_are_scored_per_character():
  assert squad.f1_score("北京市", "北京") == pytest.approx(0.8)  # as one token this would be 0
  assert squad.f1_score("在 Beijing 北京", "Beijing北京") == pytest.approx(2 * (3 / 4) / (3 / 4 + 1))
  assert squad.evaluate_v1({"q": ["北京"]}, {"q": "北京市"})["f1"] == pytest.approx(80.0)


def test_cmrc2018_scoring_uses_longest_common_substring_and_chinese_punctuation():
  assert squad.cmrc_f1("北京市", "北京") == pytest.approx(0.8)
  assert squad.cmrc_f1("京北", "北京") == pytest.approx(0.5)     # LCS 1 (bag-of-chars would give 1.0)
  assert squad.f1_score("京北", "北京") == pytest.approx(1.0)
  assert squad.cmrc_exact("北京。", "北京") == 1.0
  assert squad.exact_match_score("北京。", "北京") == 0.0
  r = squad.evaluate_v1({"q1": ["北京"], "q2": ["中国的城市"]}, {"q1": "“北京”", "q2": "城市"}, language="zh")
  assert r["exact_match"] == pytest.approx(50.0)
  assert r["f1"] == pytest.approx(100 * (1 + 2 * (2 / 5) / (1 + 2 / 5)) / 2)
  with pytest.raises(ValueError, match="language"):
    squad.evaluate_v1({"q": ["a"]}, {"q": "a"}, language="fr")


# The floor every package stands on: the one atomic writer and the error types (no TensorFlow, no JAX).
FLOOR = ("bert_jax.fileio", "bert_jax.errors", "bert_jax.lean_imports")


def _bert_jax_imports(path: pathlib.Path):
  """(line, module) of every import of a bert_jax module outside bert_jax.evaluation and the floor, at any
  depth."""
  out = []
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      if node.level == 1:  # a sibling module of the package itself
        continue
      # level >= 2 climbs out of bert_jax/evaluation into bert_jax.
      names = [node.module or ""] if node.level == 0 else ["bert_jax" + ("." + node.module if node.module else "")]
    elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
          in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
      names = [str(node.args[0].value)]
    else:
      continue
    for name in names:
      if (name == "bert_jax" or name.startswith("bert_jax.")) and name not in FLOOR and not (
          name == "bert_jax.evaluation" or name.startswith("bert_jax.evaluation.")):
        out.append((node.lineno, name))
  return sorted(out)


def test_evaluation_package_is_a_leaf(tmp_path):
  # Fine-tuning, prediction and experiments all score with bert_jax.evaluation; an import back into the
  # rest of bert_jax would close an import cycle.
  pkg = pathlib.Path(squad.__file__).parent
  files = sorted(pkg.glob("**/*.py"))
  assert {f.name for f in files} >= {"__init__.py", "glue.py", "ner.py", "squad.py", "squad_postprocess.py"}
  found = {str(f.relative_to(pkg)): _bert_jax_imports(f) for f in files}
  assert {k: v for k, v in found.items() if v} == {}
  # The checker itself sees imports inside functions, parent-relative and importlib imports.
  probe = tmp_path / "probe.py"
  probe.write_text("from . import glue\nimport numpy\nfrom bert_jax.evaluation import ner\n"
                   "def f():\n  from bert_jax.input_pipeline import tokenization\n"
                   "  from .. import models\n  import importlib\n"
                   "  return importlib.import_module('bert_jax.engine')\n", encoding="utf-8")
  assert _bert_jax_imports(probe) == [(5, "bert_jax.input_pipeline"), (6, "bert_jax"), (8, "bert_jax.engine")]


def test_an_english_dataset_keeps_the_official_whitespace_tokens_for_a_cjk_answer():
  """SQuAD's dev set has a few answers in Chinese script; the official scripts split on whitespace, so a
  partly right "北京市" for "北京" scores F1 0 there (it scored 0.8, off the official numbers)."""
  golds = {"q1": ["Paris"], "q2": ["the river"], "q3": ["北京"]}
  preds = {"q1": "Paris", "q2": "river", "q3": "北京市"}
  assert squad.evaluate_v1(golds, preds)["f1"] == pytest.approx(200.0 / 3)
  assert squad.evaluate_v2(golds, preds)["f1"] == pytest.approx(200.0 / 3)
  assert squad.evaluate_v1({"q": ["北京"]}, {"q": "北京市"}, language="en")["f1"] == 0.0
  assert squad.evaluate_v2({"q3": ["北京"]}, {"q3": "北京市"})["f1"] == pytest.approx(80.0)   # Chinese: per char
