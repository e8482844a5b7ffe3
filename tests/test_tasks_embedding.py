"""task=embedding: the loss is sentence-transformers' MultipleNegativesRankingLoss (checked against torch's
cross-entropy on the same similarities), the reader's one-line errors, the retrieval metrics on known ranks,
and (slow) a contrastive fine-tuning run whose model `predict features` and the exports read with its pooling
and normalisation."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.finetune.tasks import common, get_task
from bert_jax.finetune.tasks.embedding import mnrl_sums, rank_of_relevant, read_pairs, retrieval_metrics

from test_finetune_tasks import make_config


@pytest.mark.parametrize("negatives", [0, 1, 3])
def test_loss_is_cross_entropy_over_scaled_cosines_with_in_batch_negatives_and_padding_left_out(negatives):
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(0)
  e = rng.normal(size=(4, 2 + negatives, 8)).astype(np.float32)   # query, positive, hard negatives
  w = np.array([1, 1, 1, 0], np.float32)                     # the last row pads the batch
  got = mnrl_sums(jnp.asarray(e), jnp.asarray(w), 20.0)
  # sentence-transformers' MNRL: cross_entropy(cos_sim(a, cat(p, n_1, ..., n_k)) * scale, arange(B)), real rows
  t = torch.nn.functional.normalize(torch.tensor(e[:3]), dim=-1)
  scores = 20.0 * t[:, 0] @ torch.cat([t[:, j] for j in range(1, 2 + negatives)]).T
  want = torch.nn.functional.cross_entropy(scores, torch.arange(3), reduction="sum").item()
  assert float(got["task_loss_sum"]) == pytest.approx(want, rel=1e-5) and float(got["task_weight_sum"]) == 3
  # a padding row is no candidate either: making it equal to query 0 must not change query 0's loss
  e2 = e.copy()
  e2[3, 1] = e2[0, 0]
  assert float(mnrl_sums(jnp.asarray(e2), jnp.asarray(w), 20.0)["task_loss_sum"]) == pytest.approx(want, rel=1e-5)


def test_reader_takes_pairs_triples_and_scores_and_a_row_without_positive_is_one_error(tmp_path):
  (tmp_path / "train.tsv").write_text("q1\tp1\nq2\tp2\tn2\n\nq3\tp3\t4.5\n", encoding="utf-8")
  es = read_pairs(str(tmp_path / "train.tsv"))
  assert [(e.query, e.positive, e.negative, e.score) for e in es] == [
      ("q1", "p1", None, None), ("q2", "p2", "n2", None), ("q3", "p3", None, 4.5)]
  (tmp_path / "dev.jsonl").write_text('{"anchor": "a", "positive": "b"}\n{"query": "c"}\n', encoding="utf-8")
  with pytest.raises(common.TaskDataError, match=r"dev.jsonl:2: no positive"):
    read_pairs(str(tmp_path / "dev.jsonl"), "dev")
  (tmp_path / "bad.tsv").write_text("q1\tp1\nonly a query\n", encoding="utf-8")
  with pytest.raises(common.TaskDataError, match=r"bad.tsv:2: no positive"):
    read_pairs(str(tmp_path / "bad.tsv"))


def test_rows_take_several_hard_negatives_and_training_uses_as_many_as_every_row_has(tmp_path, caplog):
  from bert_jax.input_pipeline.tokenization import FullTokenizer
  (tmp_path / "train.tsv").write_text("q1\tp1\tn1\tm1\nq2\tp2\tn2\tm2\to2\n", encoding="utf-8")
  es = read_pairs(str(tmp_path / "train.tsv"))
  assert [e.negatives for e in es] == [("n1", "m1"), ("n2", "m2", "o2")] and es.examples[0].negative == "n1"
  (tmp_path / "train.jsonl").write_text('{"query": "a", "positive": "b", "negative": ["c", "d"]}\n'
                                        '{"query": "e", "positive": "f", "negatives": ["g", "h"]}\n'
                                        '{"query": "i", "positive": "j", "negative": "k"}\n', encoding="utf-8")
  assert [e.negatives for e in read_pairs(str(tmp_path / "train.jsonl"))] == [("c", "d"), ("g", "h"), ("k",)]
  (tmp_path / "bad.jsonl").write_text('{"query": "a", "positive": "b", "negative": [1]}\n', encoding="utf-8")
  with pytest.raises(common.TaskDataError, match=r"bad.jsonl:1: \"negative\" is a passage or a list"):
    read_pairs(str(tmp_path / "bad.jsonl"))
  tok = FullTokenizer(testing.write_vocab(str(tmp_path / "vocab"), extra=["p1", "m1", "m2", "o2"]))
  for task in (get_task("embedding"), get_task("embedding", query_encoder="idf")):
    if task.query_encoder:
      task.pooling = "lexical"
    with caplog.at_level("WARNING"):
      feats = task.featurize(es, tok, 8, is_training=True)
    assert feats["input_ids"].shape == (2, 4, 8)              # query, positive and the two negatives every row has
    assert feats["input_ids"][1, 3, 1] == tok.vocab["m2"]       # the second negative; o2 goes unused
    assert "1 of 2 rows have more hard negatives than the 2 every row has" in caplog.text
    if task.query_encoder:
      assert feats["text_role"].tolist() == [[0, 1, 1, 1]] * 2
      idf = task._idf   # BM25 idf over the passages training uses: o2 is counted in none, as an unseen entry
      assert idf[tok.vocab["o2"]] == idf.max() > idf[tok.vocab["m2"]]
    caplog.clear()
  (tmp_path / "mixed.jsonl").write_text((tmp_path / "train.jsonl").read_text(encoding="utf-8") +
                                        '{"query": "q", "positive": "p"}\n', encoding="utf-8")
  with caplog.at_level("WARNING"):   # a row without a negative: none is used, and the warning says so
    feats = get_task("embedding").featurize(read_pairs(str(tmp_path / "mixed.jsonl")), tok, 8, is_training=True)
  assert feats["input_ids"].shape == (4, 2, 8) and "3 of 4 rows have hard negatives, the others none" in caplog.text


def test_retrieval_metrics_of_known_ranks():
  m = retrieval_metrics(np.array([1, 2, 11]))
  assert m["recall@1"] == pytest.approx(1 / 3) and m["recall@10"] == pytest.approx(2 / 3)
  assert m["mrr@10"] == pytest.approx((1 + 0.5) / 3)
  assert m["ndcg@10"] == pytest.approx((1 + 1 / np.log2(3)) / 3)
  q = np.array([[1.0, 0.0], [0.0, 1.0]])
  p = np.array([[0.0, 1.0], [1.0, 0.1], [1.0, 0.0]])
  assert list(rank_of_relevant(q, p, [2, 0])) == [1, 1]
  assert list(rank_of_relevant(q, p, [1, 2])) == [2, 3]


def test_the_task_is_registered_and_its_head_options_record_the_pipeline():
  task = get_task("embedding", scale=10.0, normalize=False)
  task.pooling = "first"
  assert task.head_options()["sentence_embedding"] == {"pooling": "first", "normalize": False, "scale": 10.0}
  again = type(task).from_info("embedding", {"sentence_embedding": task.head_options()["sentence_embedding"]})
  assert (again.scale, again.normalize) == (10.0, False)
  with pytest.raises(ValueError, match="scale"):
    get_task("embedding", scale=0.0)


# Words that pair up: each query shares its topic word with its positive only.
TOPICS = ["cat", "dog", "paris", "london", "music", "game", "rain", "sun", "book", "car", "river", "tree"]


@pytest.fixture()
def pair_data(tmp_path):
  d = tmp_path / "pairs"
  d.mkdir()
  train = [f"the {t} is here\ta {t} was seen\n" for t in TOPICS] * 2
  (d / "train.tsv").write_text("".join(train), encoding="utf-8")
  (d / "dev.tsv").write_text("".join(f"my {t}\tthe {t} again\n" for t in TOPICS[:6]), encoding="utf-8")
  (d / "corpus.txt").write_text("".join(f"nothing about {t}\n" for t in ("x", "y")), encoding="utf-8")
  return str(d), testing.write_vocab(str(tmp_path / "vocab"), extra=TOPICS)


@pytest.mark.slow
def test_contrastive_fine_tuning_runs_end_to_end_and_predict_features_uses_its_pipeline(pair_data, tmp_path):
  from bert_jax.export import export
  from bert_jax.finetune import loop as finetune_loop
  from bert_jax.predict import FeatureExtractor
  out = str(tmp_path / "run")
  results = finetune_loop.run(make_config("embedding", *pair_data, num_train_epochs=3.0), out)
  dev = results["dev"]
  assert set(dev) >= {"recall@1", "recall@10", "mrr@10", "ndcg@10"} and dev["num_passages"] == 8
  assert 0 <= dev["recall@1"] <= dev["recall@10"] <= 1
  info = json.load(open(os.path.join(out, "best_checkpoint", "finetune_info.json"), encoding="utf-8"))
  assert info["sentence_embedding"] == {"pooling": "mean", "normalize": True, "scale": 20.0}
  assert os.path.exists(os.path.join(out, "embedding_dev_retrieval.jsonl"))
  from bert_jax.finetune.predict import Predictor
  rows = Predictor.from_workdir(out).predict(["my cat", "a dog"])     # predict classify: the vectors
  v = FeatureExtractor(out).encode(["my cat", "a dog"])
  np.testing.assert_allclose(np.array([r["embedding"] for r in rows]), v, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
  result = export("onnx", out, str(tmp_path / "onnx"))
  assert result["head"] == "features" and result["max_abs_diff"] <= 1e-4
  sig = json.load(open(os.path.join(str(tmp_path / "onnx"), "signature.json"), encoding="utf-8"))
  assert sig["head"]["pooling"] == "mean" and sig["head"]["normalize"] is True
