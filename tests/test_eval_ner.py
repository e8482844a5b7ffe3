"""Entity-level NER scores: hand-made BIO/BIOES cases with known conlleval output, and seqeval agreement."""

import random
import warnings

import pytest
from seqeval import metrics as sq
from seqeval.scheme import IOB2, IOBES

from bert_jax.evaluation import ner


def test_conlleval_known_output_for_hand_made_bio():
  gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
  pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
  r = ner.evaluate(gold, pred)
  # conlleval.pl prints: processed 10 tokens with 2 phrases; found: 2 phrases; correct: 1.
  #   accuracy:  80.00%; precision:  50.00%; recall:  50.00%; FB1:  50.00
  assert (r["num_tokens"], r["num_gold"], r["num_pred"], r["num_correct"]) == (10, 2, 2, 1)
  assert r["accuracy"] == pytest.approx(0.8)
  assert r["precision"] == r["recall"] == r["f1"] == pytest.approx(0.5)
  assert r["per_type"]["MISC"]["f1"] == 0.0 and r["per_type"]["PER"]["f1"] == 1.0
  report = ner.conlleval_report(r)
  assert report.splitlines()[0] == "processed 10 tokens with 2 phrases; found: 2 phrases; correct: 1."
  assert "accuracy:  80.00%; precision:  50.00%; recall:  50.00%; FB1:  50.00" in report


def test_conlleval_chunking_of_ill_formed_sequences():
  # I- after O starts an entity (IOB1 leniency); a type change splits; B after I splits.
  assert ner.get_entities(["I-PER", "I-PER", "O", "B-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 3, 4)]
  assert ner.get_entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)]
  assert ner.get_entities(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 2)]
  # BIOES
  assert ner.get_entities(["S-PER", "B-LOC", "I-LOC", "E-LOC", "O"]) == [("PER", 0, 0), ("LOC", 1, 3)]
  # Strict mode drops ill-formed entities.
  assert ner.get_entities(["I-PER", "I-PER", "O", "B-LOC", "I-LOC"], mode="strict") == [("LOC", 3, 4)]
  assert ner.get_entities(["B-LOC", "I-LOC", "O", "S-PER"], mode="strict", scheme="BIOES") == [("PER", 3, 3)]
  with pytest.raises(ValueError, match="BIO scheme"):
    ner.get_entities(["S-PER"], mode="strict", scheme="BIO")


def test_entities_never_cross_sentences():
  r = ner.evaluate([["B-PER"], ["I-PER"]], [["B-PER"], ["I-PER"]])
  assert r["num_gold"] == 2  # a merged cross-sentence PER would be 1


def _random_sentences(rng, prefixes, n=300):
  types = ["PER", "LOC", "ORG"]
  out = []
  for _ in range(n):
    length = rng.randint(1, 12)
    out.append([("O" if (p := rng.choice(prefixes)) == "O" else f"{p}-{rng.choice(types)}") for _ in range(length)])
  return out


def _noisy(rng, sents, prefixes):
  types = ["PER", "LOC", "ORG"]
  return [[t if rng.random() < 0.7 else ("O" if (p := rng.choice(prefixes)) == "O" else f"{p}-{rng.choice(types)}")
           for t in s] for s in sents]


@pytest.mark.parametrize("prefixes,seed", [(["B", "I", "O"], 0), (["B", "I", "O"], 1),
                                           (["B", "I", "E", "S", "O"], 2)])
def test_default_mode_matches_seqeval_on_random_sequences(prefixes, seed):
  rng = random.Random(seed)
  gold = _random_sentences(rng, prefixes)
  pred = _noisy(rng, gold, prefixes)
  r = ner.evaluate(gold, pred)
  assert r["precision"] == pytest.approx(sq.precision_score(gold, pred))
  assert r["recall"] == pytest.approx(sq.recall_score(gold, pred))
  assert r["f1"] == pytest.approx(sq.f1_score(gold, pred))
  rep = sq.classification_report(gold, pred, output_dict=True)
  for type_, m in r["per_type"].items():
    assert m["f1"] == pytest.approx(rep[type_]["f1-score"]) and m["support"] == rep[type_]["support"]
    # The conlleval counts agree with seqeval's rates.
    assert m["precision"] == pytest.approx(m["num_correct"] / m["num_pred"] if m["num_pred"] else 0.0)
    assert m["recall"] == pytest.approx(m["num_correct"] / m["support"] if m["support"] else 0.0)
  assert r["num_gold"] == rep["micro avg"]["support"]
  assert r["num_pred"] == sum(m["num_pred"] for m in r["per_type"].values())
  assert r["accuracy"] == pytest.approx(sq.accuracy_score(gold, pred))


@pytest.mark.parametrize("scheme,seq_scheme,prefixes", [("BIO", IOB2, ["B", "I", "O"]),
                                                        ("BIOES", IOBES, ["B", "I", "E", "S", "O"])])
def test_strict_mode_matches_seqeval_strict(scheme, seq_scheme, prefixes):
  rng = random.Random(7)
  gold = _random_sentences(rng, prefixes)
  pred = _noisy(rng, gold, prefixes)
  r = ner.evaluate(gold, pred, mode="strict", scheme=scheme)
  kw = dict(mode="strict", scheme=seq_scheme)
  assert r["precision"] == pytest.approx(sq.precision_score(gold, pred, **kw))
  assert r["recall"] == pytest.approx(sq.recall_score(gold, pred, **kw))
  assert r["f1"] == pytest.approx(sq.f1_score(gold, pred, **kw))


@pytest.mark.parametrize("mode", ["conlleval", "strict"])
def test_no_entities_and_empty_input_score_zero_without_warnings(mode):
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    r = ner.evaluate([["O", "O"], []], [["O", "O"], []], mode=mode)
    assert (r["precision"], r["recall"], r["f1"], r["accuracy"]) == (0.0, 0.0, 0.0, 1.0)
    assert (r["num_gold"], r["num_pred"], r["num_correct"], r["num_tokens"], r["per_type"]) == (0, 0, 0, 2, {})
    r = ner.evaluate([], [], mode=mode)
    assert (r["f1"], r["accuracy"], r["num_tokens"]) == (0.0, 0.0, 0)
    # Nothing predicted / nothing to find: precision resp. recall are 0 (seqeval's zero_division=0).
    r = ner.evaluate([["B-PER", "O"]], [["O", "O"]], mode=mode)
    assert (r["precision"], r["recall"], r["f1"], r["num_gold"], r["num_pred"]) == (0.0, 0.0, 0.0, 1, 0)
    r = ner.evaluate([("O", "O")], [("B-PER", "O")], mode=mode)  # tuples are accepted too
    assert (r["precision"], r["recall"], r["f1"], r["num_gold"], r["num_pred"]) == (0.0, 0.0, 0.0, 0, 1)
    assert r["per_type"]["PER"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0, "num_pred": 1,
                                    "num_correct": 0}
  with pytest.raises(ValueError, match="mode"):
    ner.evaluate([["O"]], [["O"]], mode="lenient")
  with pytest.raises(ValueError, match="scheme"):
    ner.evaluate([["O"]], [["O"]], mode="strict", scheme="BILOU")


def test_write_and_read_conll_round_trip(tmp_path):
  sents = [["John", "lives", "in", "New York"], ["北", "京"]]
  gold = [["B-PER", "O", "O", "B-LOC"], ["B-LOC", "I-LOC"]]
  pred = [["B-PER", "O", "O", "O"], ["B-LOC", "I-LOC"]]
  path = ner.write_conll(str(tmp_path / "out" / "pred.txt"), sents, gold, pred)
  text = open(path, encoding="utf-8").read()
  assert text.startswith("John B-PER B-PER\nlives O O\n") and "New_York B-LOC O\n\n北 B-LOC B-LOC" in text
  s2, g2, p2 = ner.read_conll_predictions(path)
  assert g2 == gold and p2 == pred and s2[1] == ["北", "京"]
  assert ner.evaluate(g2, p2)["f1"] == pytest.approx(ner.evaluate(gold, pred)["f1"])
  with pytest.raises(ValueError, match="sentence 0"):
    ner.write_conll(str(tmp_path / "bad.txt"), sents, gold, [["O"], ["O", "O"]])
