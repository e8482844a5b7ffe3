"""What an export serves: the head of a checkpoint as one pure JAX function of token ids, its outputs, its
tokenizer, and predict's answer on the same texts (the parity reference). No TensorFlow.

    head = resolve_head(load_model("runs/ft_sst2"), task_head="auto")
    head.kind                 # features | classification | regression | multilabel | ner | squad | multiple_choice
    head.inputs               # {"input_ids": ("batch", "length"), ...}: the exported function's inputs, in order
    head.apply_fn()(params, *(feats[k] for k in head.inputs))   # {"probabilities": [B, C]} (float32)
    feats = head.featurize(texts, pairs)                    # what predict feeds the model (numpy int32)
    ref = head.reference(texts, pairs)                      # predict's outputs on the same rows
    head.whole_reference(texts, pairs)    # NER / SQuAD: predict's answer over a long input's windows

Outputs per kind (what `predict` returns, before it is made readable):
  features        embedding [B, H] (pooling; L2-normalised when normalize); [B, V] for pooling=splade
  classification  probabilities [B, C] (softmax; labels = the label list)
  regression      score [B]
  multilabel      probabilities [B, K] (independent sigmoids)
  ner             tag_probabilities [B, T, C] (softmax per token; a word's tag is read at its first piece)
  ner with a CRF  tag_ids [B, T] int32 (the Viterbi path over each word's first piece, 0 elsewhere) and
                  emissions [B, T, C]; it takes word_mask [B, T] and window_continues / window_continued [B]
                  besides the ids (the chain runs over the words; a window inside a sentence lifts the scheme's
                  start / end constraints), as predict feeds the CRF head
  squad           start_logits, end_logits [B, T]
  multiple_choice probabilities [B, C] (softmax over the choices; padded choices 0); every id input is
                  [B, C, T] (one row per choice) and choice_mask [B, C] says which choices are real
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Dict, List, Optional, Sequence, Tuple

import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune import model as fm
from bert_jax.finetune.predict import Predictor, missing_pairs_warning, task_from_info
from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.embedding import BiEncoder
from bert_jax.models import BertModel
from bert_jax.models.heads import MLM_POOLINGS, POOLINGS, SPARSE_POOLINGS, pool
from bert_jax.predict import (FeatureExtractor, make_tokenizer, query_idf, sentence_max_length, sentence_pipeline,
                              sparse_head_params)
from bert_jax.pretrained import Pretrained

KINDS = ("features", "classification", "regression", "multilabel", "ner", "squad", "multiple_choice")
TASK_HEADS = ("auto", "task", "features")
OUTPUTS = {
    "features": {"embedding": "[batch, hidden] float32 sentence vector"},
    "classification": {"probabilities": "[batch, num_labels] float32 softmax over `labels`"},
    "regression": {"score": "[batch] float32"},
    "multilabel": {"probabilities": "[batch, num_labels] float32 independent sigmoids over `labels`"},
    "ner": {"tag_probabilities": "[batch, length, num_labels] float32 softmax per token over `labels`; a word's "
                                 "tag is read at its first word piece"},
    "squad": {"start_logits": "[batch, length] float32", "end_logits": "[batch, length] float32"},
    "multiple_choice": {"probabilities": "[batch, num_choices] float32 softmax over each question's choices "
                                         "(0 for the padded ones: choice_mask 0)"},
}
# [B, T, ...]: compared on real tokens
TOKEN_OUTPUTS = ("tag_probabilities", "start_logits", "end_logits", "tag_ids", "emissions")
CRF_OUTPUTS = {"tag_ids": "[batch, length] int32 Viterbi tag id over `labels` at each word's first piece "
                          "(word_mask 1), 0 elsewhere: predict's tags",
               "emissions": "[batch, length, num_labels] float32 the CRF's emission scores"}
ID_INPUTS = {"input_ids": ("batch", "length"), "input_mask": ("batch", "length"), "segment_ids": ("batch", "length")}
# The CRF head's extra inputs, as ner.NerTask.featurize writes them (see the module docstring).
CRF_INPUTS = {"word_mask": ("batch", "length"), "window_continues": ("batch",), "window_continued": ("batch",)}
CHOICE_INPUTS = {**{k: ("batch", "choices", "length") for k in ID_INPUTS}, "choice_mask": ("batch", "choices")}


def _l2(v):
  return v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


@dataclasses.dataclass
class ServingHead:
  """A checkpoint's head as served (see the module docstring)."""
  pre: Pretrained
  kind: str
  labels: Optional[List[str]]
  pooling: str
  normalize: bool
  max_seq_length: int
  pairs: bool                      # the model was trained on text pairs (squad: question, context)
  truncation: str = "head"
  max_query_length: int = 64       # squad
  task: object = None
  crf: bool = False                # ner: a CRF tagger (Viterbi tag ids out)

  @property
  def outputs(self) -> Dict[str, str]:
    return CRF_OUTPUTS if self.crf else OUTPUTS[self.kind]

  @property
  def inputs(self) -> Dict[str, Tuple[str, ...]]:
    """The exported function's inputs in order, each with its named dimensions (all integer)."""
    if self.kind == "multiple_choice":
      return CHOICE_INPUTS
    return {**ID_INPUTS, **CRF_INPUTS} if self.crf else ID_INPUTS

  @property
  def params(self) -> dict:
    if self.kind == "features":   # a sparse pooling reads its head too (SPLADE: the masked-LM head)
      return sparse_head_params(self.pre, self.pooling) if self.pooling in SPARSE_POOLINGS else {
          "bert": self.pre.params["bert"]}
    return self.pre.params

  def apply_fn(self):
    """(params, *inputs in the order of self.inputs) -> {output: array}: the exported function (float32
    outputs; the CRF's tag_ids int32)."""
    # Sliding-window layers (modernbert) as the masked T x T attention: the blocked path sizes its blocks from
    # the length and picks itself by comparing the length with the window, which a length-polymorphic export
    # (jax.export, jax2tf) cannot decide ("t <= 129 is inconclusive"). Same numbers on every real token
    # (local_attention.py; the export's parity check runs predict's blocked path against it).
    cfg = self.pre.config.replace(dtype="float32", scan_layers=False, local_attention_impl="dense")
    kind, pooling, normalize = self.kind, self.pooling, self.normalize
    if kind == "features" and pooling in SPARSE_POOLINGS:
      sparse = BiEncoder(cfg, pooling, normalize)

      def sparse_features(params, input_ids, input_mask, segment_ids):
        return {"embedding": sparse.apply({"params": params}, input_ids, input_mask, segment_ids)["embeddings"][:, 0]}
      return sparse_features
    if kind == "features":
      model = BertModel(cfg)

      def features(params, input_ids, input_mask, segment_ids):
        enc = model.apply({"params": params["bert"]}, input_ids, input_mask, segment_ids, deterministic=True)
        v = pool(enc, input_mask, pooling).astype(jnp.float32)
        return {"embedding": _l2(v) if normalize else v}
      return features
    model = fm.build_model(self.task, cfg)

    names = tuple(self.inputs)

    def task_head(params, *inputs):
      out = fm.apply_model(model, params, dict(zip(names, inputs)))
      return transform(kind, {k: v if jnp.issubdtype(v.dtype, jnp.integer) else v.astype(jnp.float32)
                              for k, v in out.items()}, jnp)
    return task_head

  @functools.cached_property
  def predictor(self) -> Predictor:
    """The fine-tuned Predictor the references run (made once: reference and whole_reference share it)."""
    return Predictor(self.pre, batch_size=8)

  # ---- inputs as predict builds them ------------------------------------------------------------------
  def tokenizer(self):
    return make_tokenizer(self.pre)

  def featurize(self, texts: Sequence, pairs: Optional[Sequence[str]] = None,
                windows: bool = False) -> Dict[str, np.ndarray]:
    """self.inputs as numpy int32 (input_ids, input_mask, segment_ids [N, max_seq_length], ...), exactly as
    predict builds them: one row per text, the first window of a long SQuAD context / NER sentence, or with
    windows=True every window's row and example_index [N] (the text of each). Multiple choice takes
    predict_choices' questions, {"context", "question", "choices": [...]}, as `texts`."""
    tok = self.tokenizer()
    if self.kind == "features":
      cls, sep = tok.vocab["[CLS]"], tok.vocab["[SEP]"]
      rows = [[cls] + tok.encode(t)[:self.max_seq_length - 2] + [sep] for t in texts]
      return common.model_inputs(rows, [[0] * len(r) for r in rows], self.max_seq_length)
    if self.kind == "multiple_choice":
      examples = self.task.choice_examples(list(texts))
    else:
      examples = self.task.text_examples(list(texts), None if pairs is None else list(pairs))
    feats = self.task.featurize(examples, tok, self.max_seq_length)
    if windows and "example_index" in feats:
      return {k: np.asarray(feats[k]) for k in (*self.inputs, "example_index")}
    first = np.unique(np.asarray(feats.get("example_index", np.arange(len(texts)))), return_index=True)[1]
    return {k: np.asarray(feats[k])[first] for k in self.inputs}

  @functools.cached_property
  def query_idf(self) -> Optional[np.ndarray]:
    """The IDF table [V] of an inference-free sparse model's query side (predict.query_idf), else None: the
    exported model encodes passages (documents); its queries are the set of their tokens at these weights."""
    return query_idf(self.pre) if self.kind == "features" and self.pooling in SPARSE_POOLINGS else None

  def query_reference(self, texts: Sequence[str]) -> Dict[str, np.ndarray]:
    """predict's query vectors (FeatureExtractor.encode_queries) for an inference-free model, else {}."""
    if self.query_idf is None:
      return {}
    fx = FeatureExtractor(self.pre.directory, pooling=self.pooling, normalize=self.normalize,
                          max_seq_length=self.max_seq_length, pre=self.pre)
    return {"query_embedding": fx.encode_queries(list(texts))}

  def reference(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
    """predict's outputs on `texts` (float32 numpy, one row per text): FeatureExtractor.encode for features,
    the fine-tuned Predictor's head outputs (made probabilities as above) for the task heads."""
    if self.kind == "features":
      fx = FeatureExtractor(self.pre.directory, pooling=self.pooling, normalize=self.normalize,
                            max_seq_length=self.max_seq_length, pre=self.pre)
      return {"embedding": fx.encode(list(texts))}
    p = self.predictor
    feats = self.featurize(texts, pairs)
    feats["example_weight"] = np.ones(len(texts), np.float32)
    return transform(self.kind, p._outputs(feats), np)

  def whole_reference(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
    """predict's answer over the whole input where it reads several windows (the SavedModel serves it too):
    NER words and word_tags [N, most words] ("" pads), one tag per word of the whole sentence; SQuAD answer [N]
    (the text), probability [N], answer_start_logit / answer_end_logit [N] (its n-best entry's; 0 without
    one), nbest_text / nbest_probability / nbest_start_logit / nbest_end_logit [N, n_best_size (+ 1 for v2)]
    ("" / 0 pad) and, v2, null_odds [N]. {} for the other kinds."""
    if self.kind not in ("ner", "squad"):
      return {}
    got = self.predictor.predict(list(texts), None if pairs is None else list(pairs))
    if self.kind == "ner":
      width = max(len(g["words"]) for g in got)
      pad = lambda rows: np.array([list(r) + [""] * (width - len(r)) for r in rows], dtype=object)  # noqa: E731
      return {"words": pad([g["words"] for g in got]), "word_tags": pad([g["tags"] for g in got])}
    spans = [next((x for x in g["nbest"] if x["text"]), {"start_logit": 0.0, "end_logit": 0.0}) for g in got]
    width = self.task.n_best_size + int(self.task.version_2_with_negative)
    nbest = lambda k, pad: [[x[k] for x in g["nbest"]] + [pad] * (width - len(g["nbest"])) for g in got]  # noqa
    out = {"answer": np.array([g["answer"] for g in got], dtype=object),
           "answer_start_logit": np.array([x["start_logit"] for x in spans], np.float32),
           "answer_end_logit": np.array([x["end_logit"] for x in spans], np.float32),
           "probability": np.array([g["probability"] for g in got], np.float32),
           "nbest_text": np.array(nbest("text", ""), dtype=object),
           "nbest_probability": np.array(nbest("probability", 0.0), np.float32),
           "nbest_start_logit": np.array(nbest("start_logit", 0.0), np.float32),
           "nbest_end_logit": np.array(nbest("end_logit", 0.0), np.float32)}
    if self.task.version_2_with_negative:
      out["null_odds"] = np.array([g["null_odds"] for g in got], np.float32)
    return out

  def describe(self) -> dict:
    """signature.json's head part."""
    d = {"kind": self.kind, "outputs": self.outputs, "labels": self.labels, "max_seq_length": self.max_seq_length,
         "pairs": self.pairs}
    if self.kind in ("features", "classification", "regression", "multilabel"):
      d["pooling"] = self.pooling
    if self.kind == "features":
      d["normalize"] = self.normalize
    if self.kind == "squad":
      d["max_query_length"] = self.max_query_length
      d.update({k: getattr(self.task, k) for k in ("doc_stride", "n_best_size", "max_answer_length",
                                                   "version_2_with_negative", "null_score_diff_threshold")})
    if self.kind == "ner":
      d["crf"] = self.crf
      if self.crf:
        d["scheme"] = self.task.scheme
    if self.kind == "multiple_choice":
      d["pooling"] = self.pooling
      d["num_choices"] = "any (choice_mask marks the real ones)"
    return d


def transform(kind: str, out: dict, xp) -> Dict:
  """A head's raw outputs -> the served ones (xp: jax.numpy or numpy)."""
  def softmax(x):
    e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)
  if kind == "classification":
    return {"probabilities": softmax(out["logits"])}
  if kind == "regression":
    return {"score": out["logits"][:, 0]}
  if kind == "multilabel":
    return {"probabilities": 1.0 / (1.0 + xp.exp(-out["logits"]))}
  if kind == "ner" and "crf_tags" in out:   # the CRF head: its Viterbi path and the emissions
    return {"tag_ids": out["crf_tags"].astype(xp.int32), "emissions": out["logits"]}
  if kind == "ner":
    return {"tag_probabilities": softmax(out["logits"])}
  if kind == "multiple_choice":
    return {"probabilities": softmax(out["logits"])}
  if kind == "squad":
    return {"start_logits": out["start_logits"], "end_logits": out["end_logits"]}
  raise ValueError(kind)


def resolve_head(pre: Pretrained, task_head: str = "auto", pooling: Optional[str] = None,
                 normalize: Optional[bool] = None, max_seq_length: Optional[int] = None) -> ServingHead:
  """The head an export serves, every choice checked here (one UserError each)."""
  if task_head not in TASK_HEADS:
    raise UserError(f"--task_head={task_head!r}; expected one of {', '.join(TASK_HEADS)}")
  if "bert" not in pre.params:
    raise UserError(f"{pre.directory}: no encoder parameters (params['bert'])")
  info = pre.finetune_info or {}
  if task_head == "task" and not info:
    raise UserError(f"--task_head=task: {pre.directory} is not fine-tuned (no finetune_info.json); its only head "
                    "is features")
  limit = int(pre.config.max_position_embeddings)
  if max_seq_length is not None and not 2 <= int(max_seq_length) <= limit:
    raise UserError(f"--max_seq_length={max_seq_length}; expected 2..{limit} (the model's position table)")
  use_task = bool(info) and task_head != "features" and info.get("kind") != "embedding"
  if not use_task:
    default_pool, default_norm = sentence_pipeline(pre)
    pooling = pooling or default_pool
    if pooling not in POOLINGS + SPARSE_POOLINGS:
      raise UserError(f"--pooling={pooling!r}; expected one of {', '.join(POOLINGS + SPARSE_POOLINGS)}")
    if pooling in MLM_POOLINGS and ("mlm" not in pre.params or "mlm" in pre.fresh_groups()):
      raise UserError(f"--pooling={pooling} reads the masked-LM head (params['mlm']), which {pre.directory} "
                      "lacks; use --pooling=mean")
    msl = int(max_seq_length or info.get("max_seq_length") or min(sentence_max_length(pre), limit))
    return ServingHead(pre, "features", None, pooling, default_norm if normalize is None else bool(normalize),
                       msl, pairs=False)
  if pooling or normalize is not None:
    raise UserError("--pooling / --normalize apply to --task_head=features; the task head keeps the pooling it "
                    f"was fine-tuned with ({info.get('pooling', 'cls')})")
  task = task_from_info(info)
  kind = "multiple_choice" if getattr(task, "takes_choices", False) else task.kind
  if kind not in KINDS:
    raise UserError(f"the {info['task']} head (kind {kind!r}) has no serving form; kinds that export: "
                    f"{', '.join(KINDS)} (--task_head=features exports the encoder)")
  trained = int(info["max_seq_length"])
  msl = int(max_seq_length or trained)
  pairs = kind == "squad" or _trained_on_pairs(task, info)
  return ServingHead(pre, kind, None if task.label_list is None else list(task.label_list),
                     getattr(task, "pooling", "cls"), False, msl, pairs,
                     truncation=getattr(task, "truncation", "head"),
                     max_query_length=int(getattr(task, "max_query_length", 64)), task=task,
                     crf=bool(getattr(task, "crf", False)))


def _trained_on_pairs(task, info: dict) -> bool:
  return missing_pairs_warning(task, info) is not None
