"""experiments/serving.py's retrieval part: a --pretrained path that is no directory is one UserError before the
data or the BM25 pass, and serving.json's retrieval runs (one key per model, `retrieval<TAG>`) each render as
their own table, with only the metric rows as table rows."""

import numpy as np
import pytest

from bert_jax.errors import UserError
from experiments import serving

METRICS = {"recall@1": 0.1, "recall@10": 0.5, "mrr@10": 0.2, "ndcg@10": 0.3}


def test_a_pretrained_path_that_is_not_a_directory_is_a_user_error_before_any_work(tmp_path):
  with pytest.raises(UserError, match=r"^--pretrained=\S*missing: not a directory \(expected a pre-training work "
                                      r"dir, a params dir, or 'minilm'\)$"):
    serving.main([f"--workdir={tmp_path / 'w'}", "--part=retrieval", f"--pretrained={tmp_path / 'missing'}"])
  assert not (tmp_path / "w").exists()


def test_each_retrieval_run_renders_its_own_table_of_metric_rows():
  old = {"queries": 929, "passages": 1853, "train_pairs": 1600, "train_steps": 50, "batch_size": 32,
         "max_seq_length": 96, "BM25 (rank_bm25, characters)": METRICS,
         "all-MiniLM-L6-v2, raw features": dict(METRICS, **{"recall@10": 0.169})}
  new = dict(old, model="pretrain_mini", train_pairs=7233, train_steps=-1, epochs=2.0, batch_size=64,
             learning_rate=2e-4, scale=20.0, best={"step": 113, "epoch": 1.0, "value": 0.4},
             dev_curve=[{"step": 113, "recall@10": 0.6}], load_average=[9.0, 9.0, 9.0])
  new.pop("all-MiniLM-L6-v2, raw features")
  new["pretrain_mini, contrastive fine-tuning"] = dict(METRICS, **{"recall@10": 0.712})
  text = serving.render({"retrieval": old, "retrieval_mini": new})
  tables = text.split("Retrieval, bundled")[1:]
  assert len(tables) == 2
  assert "fine-tuning from all-MiniLM-L6-v2: 1600 train pairs, 50 steps of batch 32" in tables[0]
  assert "| all-MiniLM-L6-v2, raw features | 0.100 | 0.169 |" in tables[0]
  assert ("fine-tuning from pretrain_mini: 7233 train pairs, up to 2 epochs of batch 64, max_seq_length 96, "
          "lr 0.0002, scale 20; best dev checkpoint at step 113 (epoch 1)") in tables[1]
  assert "| pretrain_mini, contrastive fine-tuning | 0.100 | 0.712 |" in tables[1]
  rows = [l for l in text.splitlines() if l.startswith("| ") and not l.startswith("| model")]
  assert len(rows) == 4   # BM25 twice, one model row each: best / dev_curve / load_average are no rows


def test_overlap_counts_test_queries_and_passage_sentences_found_in_the_pretraining_text(tmp_path):
  (tmp_path / "corpora").mkdir()
  (tmp_path / "corpora" / "news.txt").write_text("甲乙丙丁。\n戊己庚辛。\n\n壬癸子丑。\n", encoding="utf-8")
  test = [("甲乙丙丁。", "寅卯辰巳。戊己庚辛。"), ("午未申酉。", "壬癸子丑！")]
  got = serving.overlap(str(tmp_path / "retrieval"), test, [p for _, p in test])
  assert got == {"queries_in_news": 1, "queries": 2, "passage_sentences_in_news": 1, "passage_sentences": 3,
                 "news_sentences": 3}


def test_bm25_matrix_scores_as_rank_bm25_and_mined_negatives_are_top_ranked_non_positives():
  rank_bm25 = pytest.importorskip("rank_bm25")
  corpus = ["北京今天下雨", "上海明天晴天", "北京明天下雪", "广州天气很热", "北京上海都下雨了", "今天天气不错"]
  toks = list
  vocab, idf, weights = serving.bm25_matrix([toks(p) for p in corpus])
  ref = rank_bm25.BM25Okapi([toks(p) for p in corpus])
  for q in ("北京下雨", "明天天气", "上海"):
    v = np.zeros(len(vocab))
    for t in toks(q):
      if t in vocab:
        v[vocab[t]] += idf[vocab[t]]
    np.testing.assert_allclose(weights @ v, ref.get_scores(toks(q)), atol=1e-9)
  pairs = [("北京下雨", "北京今天下雨"), ("上海晴天", "上海明天晴天")]
  triples = serving.bm25_negatives(pairs, corpus, toks, top=2)
  for (q, p), (q2, p2, n) in zip(pairs, triples):
    assert (q2, p2) == (q, p) and n != p
    scores = ref.get_scores(toks(q))
    second = sorted(s for c, s in zip(corpus, scores) if c != p)[-2]   # the top 2 others (ties count)
    assert scores[corpus.index(n)] >= second - 1e-12
  for (q, p), row in zip(pairs, serving.bm25_negatives(pairs, corpus, toks, top=2, k=2)):   # both of the top 2
    scores = ref.get_scores(toks(q))
    assert row[:2] == (q, p) and len(row) == 4 and len(set(row[2:])) == 2 and p not in row[2:]
    assert min(scores[corpus.index(n)] for n in row[2:]) >= sorted(s for c, s in zip(corpus, scores) if c != p)[-2]


def test_ict_pairs_keep_each_pair_and_add_the_paragraphs_other_sentences_as_queries():
  q, p = "第一句话说了这件事。", "第二句话讲的是另外一件事情。第三句很短。第四句话也足够长吧。"
  out = serving.ict_pairs([(q, p)])
  assert out[0] == (q, p)
  assert out[1:] == [("第二句话讲的是另外一件事情。", q + "第三句很短。第四句话也足够长吧。"),
                     ("第四句话也足够长吧。", q + "第二句话讲的是另外一件事情。第三句很短。")]   # "第三句很短。" < 8
