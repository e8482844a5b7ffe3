"""Sentence embeddings for retrieval (task=embedding): contrastive training on (query, positive[, hard negatives])
with in-batch negatives, sentence-transformers' MultipleNegativesRankingLoss: cross-entropy over
scale x cos(query, every positive and negative of the batch), the query's own positive the target (scale 20 =
temperature 0.05 by default).

Files in data_dir, `{split}.tsv` (no header) or `{split}.jsonl`:
  retrieval pairs / triples   query<TAB>positive[<TAB>negative...]  {"query", "positive"[, "negative"]}
                              ("anchor" is read as "query", as sentence-transformers names it; "negative" is a
                              passage or a list of them, "negatives" a list; a TSV row takes any number of
                              negative columns, sentence-transformers' (anchor, positive, negative_1, ...))
  scored pairs (STS)          text_a<TAB>text_b<TAB>score           {"text_a", "text_b", "score"}
  (a lone TSV third column that reads as a number is a score; a row without a positive is one error, file:line)
Evaluation splits: retrieval rows rank `corpus.tsv` / `corpus.txt` (one passage per line, or id<TAB>passage;
`{split}_corpus.*` first) together with the split's own positives: recall@1, recall@10, MRR@10, nDCG@10 (one
relevant passage per query: its positive); scored pairs give the Spearman correlation of the cosine with the
score (STS). Training uses retrieval rows only, each with as many hard negatives as every row has (the first
ones of a longer row; a warning counts the rows whose negatives go unused).

Features: training rows input_ids, input_mask, segment_ids int32 [N, S, T] (S = 2: query, positive; 2 + k with k
negatives); evaluation and prediction rows are single texts [N, 1, T] (the split's queries, then its passages,
or text_a then text_b), with `text_role` int32 [N] (0 query / text_a, 1 passage / text_b) and `text_index`.
The head (BiEncoder) pools each text (config.pooling, mean by default) and L2-normalises it when
config.embedding.normalize; its params are params["bert"] (+ params["mlm"] for pooling=splade,
params["term_weight"] for pooling=lexical / lexical_log), so `predict features`, `export` and
`export sentence-transformers` read the model as any encoder, with the pooling and normalisation that
finetune_info.json records ("sentence_embedding").

config.embedding.query_encoder=idf (pooling splade, lexical or lexical_log) is inference-free on the query side: a
query is the set of its tokens at their BM25 idf over the training passages (IdfQueryEncoder, params["query_encoder"],
fixed), computed when the training split is featurized; only passages go through the encoder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from bert_jax.fileio import write_text_atomic
from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.base import Task
from bert_jax.input_pipeline import tokenization
from bert_jax.models import BertConfig
from bert_jax.models.bert import BertModel
from bert_jax.models.heads import LEXICAL_POOLINGS, MLM_POOLINGS, SPARSE_POOLINGS, lexical_pool, pool, splade_pool
from bert_jax.models.targets import LanguageModelHead

DEFAULT_SCALE = 20.0
CORPUS_NAMES = ("{split}_corpus.tsv", "{split}_corpus.txt", "corpus.tsv", "corpus.txt")
_log = logging.getLogger(__name__)


@dataclasses.dataclass
class PairExample:
  guid: str                       # "<file>:<line>"
  query: str                      # or STS's text_a
  positive: Optional[str] = None  # or STS's text_b; None for a text to embed (prediction)
  negatives: Tuple[str, ...] = ()  # hard negatives, in the file's order
  score: Optional[float] = None   # STS

  @property
  def negative(self) -> Optional[str]:
    """The first hard negative, or None."""
    return self.negatives[0] if self.negatives else None


QUERY_ENCODERS = ("", "idf")   # "": queries go through the model as passages do; "idf": inference-free


def bm25_idf(token_rows: Sequence[Sequence[int]], vocab_size: int, skip_ids: Sequence[int] = ()) -> np.ndarray:
  """Lucene's BM25 idf per vocabulary entry over the passages `token_rows` (token ids): ln(1 + (N - df + 0.5) /
  (df + 0.5)), > 0 for every entry; 0 for `skip_ids` ([CLS], [SEP], [PAD]). float32 [V]."""
  df = np.zeros(vocab_size, np.float64)
  for row in token_rows:
    df[np.unique(np.asarray(row, np.int64))] += 1
  n = float(len(token_rows))
  idf = np.log1p((n - df + 0.5) / (df + 0.5))
  idf[np.asarray(list(skip_ids), np.int64)] = 0.0
  return idf.astype(np.float32)


class IdfQueryEncoder(nn.Module):
  """The query side of an inference-free sparse model (embedding.query_encoder=idf; OpenSearch's inference-free
  SPLADE, sentence-transformers' SparseStaticEmbedding): a query is the set of its tokens, each weighted by its
  IDF over the training passages, params["query_encoder"]["idf"] [V], held fixed (no gradient). input_ids
  [N, T], input_mask [N, T] -> [N, V] float32."""
  vocab_size: int
  idf_init: Optional[Callable] = None   # the task's IDF at fine-tuning start; zeros (a checkpoint fills them)

  @nn.compact
  def __call__(self, input_ids, input_mask):
    init = self.idf_init or (lambda key, shape: jnp.zeros(shape, jnp.float32))
    idf = jax.lax.stop_gradient(self.param("idf", init, (self.vocab_size,)))
    w = jnp.where(input_mask.astype(bool), idf[input_ids], 0.0)
    rows = jnp.arange(input_ids.shape[0])[:, None]
    return jnp.zeros((input_ids.shape[0], self.vocab_size), jnp.float32).at[rows, input_ids].max(w)


class BiEncoder(nn.Module):
  """BertModel + pooling (+ L2 normalisation) per text: input_ids [B, S, T] (or [B, T]) -> {"embeddings":
  [B, S, H] float32}. Parameters: params["bert"], and params["mlm"] (the masked-LM head) for pooling=splade or
  params["term_weight"] for pooling=lexical / lexical_log, whose vectors are [B, S, V]. With query_encoder="idf" (a
  sparse pooling) queries skip the model
  (IdfQueryEncoder, params["query_encoder"]): on training rows (S > 1) text 0 is the query and the rest are
  passages; on single-text rows (S = 1) text_role [B] (or [B, 1]) says which (0 query, 1 passage; absent: all
  passages)."""
  config: BertConfig
  pooling: str = "mean"
  normalize: bool = True
  dropout_rate: Optional[float] = None   # unused: the encoder's own dropout regularises (as sentence-transformers)
  query_encoder: str = ""
  idf_init: Optional[Callable] = None

  @property
  def extra_input_keys(self) -> tuple:
    return ("text_role",) if self.query_encoder else ()

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True, text_role=None):
    if input_ids.ndim == 2:
      input_ids, input_mask = input_ids[:, None], input_mask[:, None]
      segment_ids = None if segment_ids is None else segment_ids[:, None]
    if not self.query_encoder:
      return {"embeddings": self._texts(input_ids, input_mask, segment_ids, deterministic)}
    b, s, t = input_ids.shape
    queries = IdfQueryEncoder(self.config.vocab_size, self.idf_init, name="query_encoder")
    if s > 1:   # training rows: (query, positive[, negatives...]); the passages alone go through the model
      q = self._unit(queries(input_ids[:, 0], input_mask[:, 0]))[:, None]
      seg = None if segment_ids is None else segment_ids[:, 1:]
      return {"embeddings": jnp.concatenate(
          [q, self._texts(input_ids[:, 1:], input_mask[:, 1:], seg, deterministic)], 1)}
    v = self._texts(input_ids, input_mask, segment_ids, deterministic)
    if text_role is None and not self.is_initializing():   # passages alone (init still creates the table)
      return {"embeddings": v}
    q = self._unit(queries(input_ids[:, 0], input_mask[:, 0]))[:, None]
    if text_role is None:
      return {"embeddings": v}
    is_query = (jnp.reshape(text_role, (b, 1, 1)) == 0)
    return {"embeddings": jnp.where(is_query, q, v)}

  def _unit(self, v):
    return v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12) if self.normalize else v

  def _texts(self, input_ids, input_mask, segment_ids, deterministic):
    """[B, S, T] -> [B, S, H or V]: the encoder and the pooling (and normalisation) per text."""
    b, s, t = input_ids.shape
    flat = lambda x: None if x is None else x.reshape(b * s, t)  # noqa: E731
    enc = BertModel(self.config, name="bert")(flat(input_ids), flat(input_mask), flat(segment_ids),
                                              deterministic=deterministic)
    if self.pooling in MLM_POOLINGS:   # the pre-training MLM head at every token (params["mlm"])
      logits = LanguageModelHead(self.config, name="mlm")(enc["sequence_output"], enc["word_embeddings"])
      v = splade_pool(logits, flat(input_mask))
    elif self.pooling in LEXICAL_POOLINGS:   # a weight per token (params["term_weight"]); 1 at init: term frequency
      w = nn.Dense(1, kernel_init=nn.initializers.zeros, bias_init=nn.initializers.ones, dtype=jnp.float32,
                   param_dtype=jnp.float32, name="term_weight")(enc["sequence_output"].astype(jnp.float32))
      v = lexical_pool(jax.nn.relu(w[..., 0]), flat(input_ids), flat(input_mask), self.config.vocab_size,
                       saturate=self.pooling == "lexical_log")
    else:
      v = pool(enc, flat(input_mask), self.pooling).astype(jnp.float32)
    return self._unit(v).reshape(b, s, -1)


def mnrl_sums(embeddings, weights, scale: float) -> dict:
  """MultipleNegativesRankingLoss sums: embeddings [B, S, H] (query, positive[, negatives...]), weights [B] (0 =
  padding row, left out as a query and as a candidate)."""
  e = embeddings / jnp.maximum(jnp.linalg.norm(embeddings, axis=-1, keepdims=True), 1e-12)
  b, s = e.shape[0], e.shape[1]
  q = e[:, 0]                                                    # [B, H]
  cands = jnp.concatenate([e[:, j] for j in range(1, s)], 0)     # [B (S-1), H]: positives, then negatives
  logits = scale * q @ cands.T                                   # [B, B (S-1)]
  valid = jnp.tile(weights > 0, s - 1)[None, :]
  logits = jnp.where(valid, logits, -1e9)
  target = jnp.arange(b)
  nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, target[:, None], 1)[:, 0]
  correct = (jnp.argmax(logits, -1) == target).astype(jnp.float32)
  return {"task_loss_sum": jnp.sum(nll * weights), "task_weight_sum": jnp.sum(weights),
          "task_correct_sum": jnp.sum(correct * weights)}


# ---- reading -------------------------------------------------------------------------------------------
def _split_file(data_dir: str, split: str) -> str:
  for ext in ("tsv", "jsonl"):
    path = os.path.join(data_dir, f"{split}.{ext}")
    if os.path.exists(path):
      return path
  raise FileNotFoundError(os.path.join(data_dir, f"{split}.tsv (or .jsonl)"))


def _number(s: str) -> Optional[float]:
  try:
    return float(s)
  except ValueError:
    return None


def read_pairs(path: str, split: str = "train") -> common.ExampleSet:
  """The rows of one TSV / JSONL file (module docstring); a row without a positive is a TaskDataError."""
  examples = []
  with open(path, encoding="utf-8-sig") as f:
    for n, line in enumerate(f, 1):
      line = line.rstrip("\n").rstrip("\r")
      if not line.strip():
        continue
      if path.endswith(".jsonl"):
        try:
          row = json.loads(line)
        except json.JSONDecodeError as e:
          raise common.TaskDataError(path, n, f"not a JSON object ({e.msg})") from None
        if not isinstance(row, dict):
          raise common.TaskDataError(path, n, "not a JSON object")
        query = row.get("query", row.get("anchor", row.get("text_a")))
        positive = row.get("positive", row.get("text_b"))
        negatives, score = row.get("negative", row.get("negatives")), row.get("score")
        negatives = [] if negatives is None else [negatives] if isinstance(negatives, str) else negatives
        if not isinstance(negatives, list) or not all(isinstance(x, str) for x in negatives):
          raise common.TaskDataError(path, n, "\"negative\" is a passage or a list of passages (strings)")
        score = None if score is None else float(score)
      else:
        cols = line.split("\t")
        query = cols[0]
        positive = cols[1] if len(cols) > 1 else None
        score = _number(cols[2]) if len(cols) == 3 else None
        negatives = cols[2:] if score is None else []
      if not isinstance(query, str) or not query.strip():
        raise common.TaskDataError(path, n, "no query (first column / \"query\")")
      if not isinstance(positive, str) or not positive.strip():
        raise common.TaskDataError(path, n, "no positive: a row is query<TAB>positive[<TAB>negative...] (JSONL: "
                                            "{\"query\", \"positive\"[, \"negative\"]}), or "
                                            "text_a<TAB>text_b<TAB>score")
      examples.append(PairExample(f"{path}:{n}", query, positive, tuple(x for x in negatives if x.strip()), score))
  return common.finish(examples, path, split, common.SkipReport(source=path))


def negative_columns(pairs: Sequence[PairExample], source: Optional[str] = None) -> List[List[str]]:
  """The hard negatives training uses, one column per negative slot: as many as every row has (the first ones
  of a longer row). With `source`, a warning counts the rows whose negatives go unused."""
  k = min((len(e.negatives) for e in pairs), default=0)
  unused = sum(len(e.negatives) > k for e in pairs)
  if source is not None and unused and k:
    _log.warning("%s: %d of %d rows have more hard negatives than the %d every row has; training uses each row's "
                 "first %d", source, unused, len(pairs), k, k)
  elif source is not None and unused:
    _log.warning("%s: %d of %d rows have hard negatives, the others none; training uses in-batch negatives only",
                 source, unused, len(pairs))
  return [[e.negatives[j] for e in pairs] for j in range(k)]


def read_corpus(data_dir: str, split: str) -> List[str]:
  """The passages of `{split}_corpus.*` or `corpus.*` (one per line; id<TAB>passage reads the passage)."""
  for name in CORPUS_NAMES:
    path = os.path.join(data_dir, name.format(split=split))
    if os.path.exists(path):
      with open(path, encoding="utf-8-sig") as f:
        return [l.rstrip("\n").split("\t")[-1] for l in f if l.strip()]
  return []


# ---- retrieval metrics -----------------------------------------------------------------------------------
def retrieval_metrics(ranks: np.ndarray) -> Dict[str, float]:
  """recall@1, recall@10, MRR@10 and nDCG@10 of 1-based ranks of each query's one relevant passage."""
  r = np.asarray(ranks, np.float64)
  return {"recall@1": float(np.mean(r <= 1)), "recall@10": float(np.mean(r <= 10)),
          "mrr@10": float(np.mean(np.where(r <= 10, 1.0 / r, 0.0))),
          "ndcg@10": float(np.mean(np.where(r <= 10, 1.0 / np.log2(r + 1.0), 0.0)))}


def rank_of_relevant(queries: np.ndarray, passages: np.ndarray, relevant: Sequence[int]) -> np.ndarray:
  """1-based rank of passage relevant[i] for query i by cosine similarity (ties count against it)."""
  q = queries / np.maximum(np.linalg.norm(queries, axis=-1, keepdims=True), 1e-12)
  p = passages / np.maximum(np.linalg.norm(passages, axis=-1, keepdims=True), 1e-12)
  sims = q @ p.T
  own = sims[np.arange(len(q)), np.asarray(relevant)]
  return 1 + np.sum(sims > own[:, None], axis=1)


class EmbeddingTask(Task):
  """Contrastive sentence embeddings; see the module docstring."""
  name = "embedding"
  kind = "embedding"
  head = "bi_encoder"
  main_metric = "ndcg@10"
  label_keys = ()
  eval_loss = False            # evaluation rows are single texts; the metrics rank them
  uses_pooling = True
  pooling = "mean"
  extra_poolings = SPARSE_POOLINGS
  test_splits = ("test",)

  def __init__(self, scale: float = DEFAULT_SCALE, normalize: bool = True, on_error: str = "raise",
               query_encoder: str = ""):
    super().__init__(on_error)
    if not scale > 0:
      raise ValueError(f"embedding scale={scale}; expected > 0 (sentence-transformers: 20)")
    if query_encoder not in QUERY_ENCODERS:
      raise ValueError(f"embedding.query_encoder={query_encoder!r}; expected '' (the model encodes queries) or "
                       "'idf' (inference-free: a query is its tokens weighted by IDF; pooling=splade, lexical or "
                       "lexical_log)")
    self.scale, self.normalize, self.query_encoder = float(scale), bool(normalize), query_encoder
    self.extra_input_keys = ("text_role",) if query_encoder else ()
    self._corpus: Dict[str, List[str]] = {}
    self._idf: Optional[np.ndarray] = None

  def init_groups(self) -> tuple:
    return ("mlm",) if self.pooling in MLM_POOLINGS else ()

  @classmethod
  def from_config(cls, name, config, label_list=None):
    e = config.get("embedding", {}) or {}
    return cls(scale=float(e.get("scale", DEFAULT_SCALE)), normalize=bool(e.get("normalize", True)),
               on_error=config.on_error, query_encoder=str(e.get("query_encoder", "") or ""))

  @classmethod
  def from_info(cls, name, info):
    said = info.get("sentence_embedding", {})
    return cls(scale=float(said.get("scale", DEFAULT_SCALE)), normalize=bool(said.get("normalize", True)),
               query_encoder=str(said.get("query_encoder", "") or ""))

  def head_options(self) -> dict:
    said = {"pooling": self.pooling, "normalize": self.normalize, "scale": self.scale}
    if self.query_encoder:
      said["query_encoder"] = self.query_encoder
    return {"pooling": self.pooling, "sentence_embedding": said}

  # ---- data -------------------------------------------------------------------------------------------
  def prepare(self, data_dir=None, use_tfds=False, **_):
    if use_tfds:
      raise ValueError("task=embedding reads local files only")
    if self.query_encoder and self.pooling not in SPARSE_POOLINGS:
      raise ValueError(f"embedding.query_encoder={self.query_encoder!r} weights a query's tokens in the "
                       f"vocabulary space, so the passages need pooling=splade, lexical or lexical_log "
                       f"(pooling={self.pooling!r})")
    if data_dir:   # STS-only dev data: Spearman selects the best checkpoint
      try:
        dev = read_pairs(_split_file(data_dir, "dev"), "dev")
        if dev.examples and all(e.score is not None for e in dev.examples):
          self.main_metric = "spearman"
      except FileNotFoundError:
        pass
    return self

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if data_dir is None:
      raise ValueError("task=embedding reads files: give data_dir")
    es = read_pairs(_split_file(data_dir, split), split)
    self._corpus[split] = read_corpus(data_dir, split)
    return es

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    cls_id, sep_id = common.special_ids(tokenizer)
    examples = list(example_set)

    def rows(texts):
      ids = [[cls_id] + tokenizer.encode(t)[:max_seq_length - 2] + [sep_id] for t in texts]
      return common.model_inputs(ids, [[0] * len(r) for r in ids], max_seq_length)

    if is_training:
      pairs = [e for e in examples if e.score is None]
      if not pairs:
        raise common.TaskDataError(example_set.source, None, "no (query, positive) rows to train on (scored "
                                                             "pairs only evaluate)")
      cols = [[e.query for e in pairs], [e.positive for e in pairs]] + negative_columns(pairs, example_set.source)
      parts = [rows(c) for c in cols]
      out = {k: np.stack([p[k] for p in parts], 1) for k in parts[0]}
      if self.query_encoder:
        out["text_role"] = np.tile(np.asarray([0] + [1] * (len(cols) - 1), np.int32), (len(pairs), 1))
        self._idf = self.passage_idf(example_set, tokenizer)
      return out
    texts, role, index = self._eval_texts(example_set, examples)
    out = {k: v[:, None] for k, v in rows(texts).items()}
    out["text_role"] = np.asarray(role, np.int32)
    out["text_index"] = np.asarray(index, np.int32)
    return out

  def passage_idf(self, example_set, tokenizer) -> np.ndarray:
    """The table query_encoder=idf starts from: BM25 idf over a read training split's passages (its corpus file,
    the positives of its retrieval rows, and the negatives training uses), each distinct text once; 0 for [CLS],
    [SEP] and [PAD]."""
    pairs = [e for e in example_set if e.score is None]
    negatives = [t for col in negative_columns(pairs) for t in col]
    passages = dict.fromkeys(self._corpus.get(getattr(example_set, "split", "train"), []) +
                             [e.positive for e in pairs] + negatives)
    rows = tokenization.fast_batch_tokenizer(tokenizer).encode_batch(list(passages))
    return bm25_idf(rows, len(tokenizer.vocab), common.special_ids(tokenizer) + (tokenizer.vocab.get("[PAD]", 0),))

  def _eval_texts(self, example_set, examples):
    """Queries / text_a (role 0), then passages / text_b (role 1): the corpus and every positive, each once.
    Texts alone (prediction) are role 0, or passages (1) for an inference-free model (query_encoder)."""
    texts = [e.query for e in examples]
    role, index = [1 if self.query_encoder else 0] * len(texts), list(range(len(texts)))
    if not examples or examples[0].positive is None:   # prediction: texts alone
      return texts, role, index
    role = [0] * len(texts)
    passages: Dict[str, int] = {}
    for p in self._corpus.get(getattr(example_set, "split", ""), []) + [e.positive for e in examples]:
      passages.setdefault(p, len(passages))
    texts += list(passages)
    role += [1] * len(passages)
    index += list(range(len(passages)))
    return texts, role, index

  def build_head(self, bert_cfg, dropout_rate=None):
    idf = None if self._idf is None else np.pad(self._idf, (0, max(0, bert_cfg.vocab_size - len(self._idf))))
    init = None if idf is None else (lambda key, shape: jnp.asarray(idf[:shape[0]], jnp.float32))
    return BiEncoder(bert_cfg, self.pooling, self.normalize, query_encoder=self.query_encoder, idf_init=init)

  def loss_sums(self, outputs, batch):
    return mnrl_sums(outputs["embeddings"], batch["example_weight"].astype(jnp.float32), self.scale)

  # ---- predictions ------------------------------------------------------------------------------------
  def predict(self, example_set, features, outputs):
    """{"queries": [Q, H], "passages": [P, H], "passage_texts": [...]} of an evaluation split."""
    emb = np.asarray(outputs["embeddings"])[:, 0]
    role = np.asarray(features["text_role"])
    texts, _, _ = self._eval_texts(example_set, list(example_set))
    return {"queries": emb[role == 0], "passages": emb[role == 1],
            "passage_texts": [t for t, r in zip(texts, role) if r == 1]}

  def evaluate(self, example_set, predictions, split=None):
    examples = list(example_set)
    if not examples or examples[0].positive is None:
      return {}
    q, p = predictions["queries"], predictions["passages"]
    lookup = {t: i for i, t in enumerate(predictions["passage_texts"])}
    out: Dict[str, float] = {}
    retr = [i for i, e in enumerate(examples) if e.score is None]
    if retr:
      ranks = rank_of_relevant(q[retr], p, [lookup[examples[i].positive] for i in retr])
      out.update(retrieval_metrics(ranks))
      out["num_passages"] = float(len(p))
    sts = [i for i, e in enumerate(examples) if e.score is not None]
    if len(sts) >= 2:
      a = q[sts] / np.maximum(np.linalg.norm(q[sts], axis=-1, keepdims=True), 1e-12)
      b = p[[lookup[examples[i].positive] for i in sts]]
      b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
      rho = stats.spearmanr(np.sum(a * b, -1), [examples[i].score for i in sts]).correlation
      out["spearman"] = float(rho) if np.isfinite(rho) else math.nan
    return out

  def write_predictions(self, output_dir, split, example_set, predictions):
    """{split}_retrieval.jsonl: each query's top 10 passages by cosine."""
    examples = [e for e in example_set if e.score is None]
    if not examples or examples[0].positive is None:
      return []
    q = predictions["queries"][[i for i, e in enumerate(example_set) if e.score is None]]
    p = predictions["passages"]
    sims = (q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), 1e-12)) @ \
        (p / np.maximum(np.linalg.norm(p, axis=-1, keepdims=True), 1e-12)).T
    top = np.argsort(-sims, axis=1)[:, :10]
    lines = [json.dumps({"query": e.query, "positive": e.positive,
                         "top10": [predictions["passage_texts"][j] for j in row]}, ensure_ascii=False)
             for e, row in zip(examples, top)]
    path = os.path.join(output_dir, f"embedding_{split}_retrieval.jsonl")
    write_text_atomic(path, "\n".join(lines) + "\n")
    return [path]

  # ---- raw-input prediction ---------------------------------------------------------------------------
  def text_examples(self, texts, text_pairs=None):
    return [PairExample(f"input:{i}", t) for i, t in enumerate(texts)]

  def readable_predictions(self, examples, features, outputs):
    emb = np.asarray(outputs["embeddings"])[:, 0]
    return [{"embedding": [round(float(x), 6) for x in v]} for v in emb]
