"""Predictions from a fine-tuned work directory on raw text (for notebooks and scripts). No TensorFlow.

    from bert_jax.finetune.predict import Predictor, predict
    p = Predictor.from_workdir("/tmp/ft_snow")              # reads DIR/best_checkpoint
    p.predict(["这本书很好", "不喜欢"])
    # classification: [{"label": "1", "probabilities": {"0": 0.08, "1": 0.92}}, ...]
    # regression (stsb): [{"score": 3.71}, ...]                 (text_pairs= for sentence pairs)
    p.predict(["John Smith lives in New York ."])             # ner: words = whitespace split, CJK per character
    # [{"words": [...], "tags": ["B-PER", ...], "entities": [{"type": "PER", "start": 0, "end": 1,
    #   "text": "John Smith"}]}]
    p.predict(["where is the cafe ?"], text_pairs=["The Café de Flore is in Paris."])   # squad: question, context
    # [{"answer": "Paris", "probability": 0.71, "nbest": [...], "null_odds": ...}]
    p.predict(["体育新闻"])                                     # multilabel: [{"labels": [...], "probabilities": {...}}]
    p.predict_choices([{"context": "...", "question": "...", "choices": ["A", "B"]}])   # c3 / multiple_choice
    # [{"label": 1, "answer": "B", "probabilities": [0.2, 0.8]}]
    predict(workdir, texts, text_pairs=None)                  # the same with a cached Predictor

The task, label list, casing and max_seq_length come from best_checkpoint/finetune_info.json, so the inputs
are processed exactly as in training. Inputs are run in fixed-size padded batches (one compile).
"""

from __future__ import annotations

import functools
import os
from typing import Dict, List, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.evaluation import ner as ner_eval
from bert_jax.finetune import data as ft
from bert_jax.finetune import model as fm
from bert_jax.finetune.tasks import get_task
from bert_jax.finetune.tasks.classification import ClassificationExample
from bert_jax.finetune.tasks.multilabel import MultilabelExample
from bert_jax.finetune.tasks.multiple_choice import MultipleChoiceExample
from bert_jax.finetune.tasks.ner import NerExample
from bert_jax.finetune.tasks.squad import SquadExample
from bert_jax.input_pipeline import tokenization
from bert_jax.pretrained import Pretrained, load_pretrained
from bert_jax.training.train_step import compute_dtype


def split_words(text: str) -> List[str]:
  """NER input words: whitespace-separated, with every CJK character a word of its own (as the Chinese
  CoNLL files are character-level)."""
  return tokenization.split_isolating(text, lambda ch: tokenization.is_chinese_char(ord(ch)))


def entity_text(words: Sequence[str]) -> str:
  """An entity's surface text from its words: CJK characters joined directly ("北", "京" -> "北京"), any other
  words with spaces ("New", "York" -> "New York")."""
  cjk = all(len(w) == 1 and tokenization.is_chinese_char(ord(w)) for w in words)
  return ("" if cjk else " ").join(words)


def _task_from_info(info: dict):
  task = _task_by_name(info)
  task.pooling = info.get("pooling", "cls")
  return task


def _task_by_name(info: dict):
  name = info["task"]
  if name in ("c3", "multiple_choice"):
    return get_task(name)
  if name == "multilabel":
    return get_task("multilabel", label_list=info["label_list"], threshold=float(info.get("multilabel_threshold", 0.5)),
                    separator=info.get("multilabel_separator", "|"))
  if name.startswith("squad"):
    return get_task(name, doc_stride=int(info.get("doc_stride", 128)),
                    max_query_length=int(info.get("max_query_length", 64)),
                    n_best_size=int(info.get("n_best_size", 20)),
                    max_answer_length=int(info.get("max_answer_length", 30)),
                    null_score_diff_threshold=float(info.get("null_score_diff_threshold", 0.0)))
  if name == "ner":
    return get_task("ner", label_list=info["label_list"], scheme=info.get("ner_scheme", "BIO"),
                    mode=info.get("ner_mode", "conlleval"), crf=bool(info.get("crf", False)))
  if info.get("kind") in ("classification", "regression") and name not in ("classification",):
    return get_task(name)
  return get_task("classification", label_list=info["label_list"], is_regression=info["kind"] == "regression")


class Predictor:
  """A fine-tuned model with its tokenizer and task; see the module docstring."""

  def __init__(self, checkpoint: Pretrained, batch_size: int = 32):
    info = checkpoint.finetune_info
    if not info or "task" not in info:
      raise ValueError(f"{checkpoint.directory}: no finetune_info.json; this is not a fine-tuned checkpoint")
    self.info = info
    self.task = _task_from_info(info)
    self.max_seq_length = int(info["max_seq_length"])
    self.tokenizer = tokenization.FullTokenizer(checkpoint.require_vocab(), do_lower_case=bool(info["do_lower_case"]))
    cfg = checkpoint.config.replace(dtype=compute_dtype("auto"), scan_layers=False)
    self.model = fm.build_model(self.task, cfg)
    self.params = jax.device_put(checkpoint.params)
    self.batch_size = batch_size
    model = self.model
    self._keys = tuple(self.task.model_input_keys) + tuple(self.task.extra_input_keys)
    self._forward = jax.jit(lambda p, batch: {k: v for k, v in fm._apply(model, p, batch, None).items()  # pylint: disable=protected-access
                                              if k not in fm._NON_ROW_OUTPUTS})  # pylint: disable=protected-access

  @classmethod
  def from_workdir(cls, workdir: str, batch_size: int = 32) -> "Predictor":
    """`workdir` is a fine-tuning work directory or its best_checkpoint/ directory."""
    return cls(load_pretrained(workdir), batch_size)

  def _outputs(self, features) -> Dict[str, np.ndarray]:
    outs: Dict[str, list] = {}
    for batch in ft.iterate_batches(features, self._keys, self.batch_size):
      real = int(batch["example_weight"].sum())
      out = self._forward(self.params, {k: jnp.asarray(batch[k]) for k in self._keys})
      for k, v in out.items():
        outs.setdefault(k, []).append(np.asarray(v)[:real])
    return {k: np.concatenate(v, 0) for k, v in outs.items()}

  def predict(self, texts: Sequence[Union[str, Sequence[str]]],
              text_pairs: Optional[Sequence[str]] = None) -> List[dict]:
    if isinstance(texts, str):
      raise TypeError("predict takes a list of texts; wrap a single text in a list")
    if text_pairs is not None and len(text_pairs) != len(texts):
      raise ValueError(f"{len(texts)} texts but {len(text_pairs)} text_pairs")
    if not len(texts):
      return []
    kind = self.task.kind
    if self.task.head == "multiple_choice":
      raise ValueError(f"task {self.task.name} takes questions with choices: use predict_choices([{{'context', "
                       "'question', 'choices'}, ...])")
    if kind == "multilabel":
      return self._predict_multilabel(texts, text_pairs)
    if kind == "squad":
      return self._predict_squad(texts, text_pairs)
    if kind == "ner":
      return self._predict_ner(texts)
    return self._predict_sequence(texts, text_pairs)

  def _predict_sequence(self, texts, text_pairs):
    examples = [ClassificationExample(guid=f"input:{i}", text_a=t,
                                      text_b=None if text_pairs is None else text_pairs[i])
                for i, t in enumerate(texts)]
    feats = self.task.featurize(examples, self.tokenizer, self.max_seq_length)
    logits = self._outputs(feats)["logits"]
    if self.task.is_regression:
      return [{"score": float(x)} for x in logits[:, 0]]
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1))
    labels = self.task.label_list
    return [{"label": labels[int(np.argmax(p))], "probabilities": {l: float(q) for l, q in zip(labels, p)}}
            for p in probs]

  def _predict_multilabel(self, texts, text_pairs):
    examples = [MultilabelExample(guid=f"input:{i}", text_a=t, text_b=None if text_pairs is None else text_pairs[i])
                for i, t in enumerate(texts)]
    feats = self.task.featurize(examples, self.tokenizer, self.max_seq_length)
    probs = self.task.predict(examples, feats, self._outputs(feats))
    labels = self.task.label_list
    return [{"labels": [l for l, on in zip(labels, row) if on], "probabilities": dict(zip(labels, map(float, p)))}
            for row, p in zip(self.task.decide(probs), probs)]

  def predict_choices(self, questions: Sequence[dict]) -> List[dict]:
    """Multiple choice: dicts {"context", "question", "choices": [...]} -> [{"label" (index), "answer",
    "probabilities"}]."""
    if self.task.head != "multiple_choice":
      raise ValueError(f"predict_choices needs a c3 / multiple_choice model; this one is {self.task.name}")
    examples = []
    for i, q in enumerate(questions):
      choices = list(q.get("choices") or [])
      if len(choices) < 2:
        raise ValueError(f"question {i} has {len(choices)} choice(s); at least 2 are needed")
      examples.append(MultipleChoiceExample(guid=f"input:{i}", context=str(q.get("context", "")),
                                            question=str(q.get("question", "")), choices=[str(c) for c in choices]))
    if not examples:
      return []
    feats = self.task.featurize(examples, self.tokenizer, self.max_seq_length)
    probs = self.task.predict(examples, feats, self._outputs(feats))
    out = []
    for ex, p in zip(examples, probs):
      k = int(np.argmax(p))
      out.append({"label": k, "answer": ex.choices[k], "probabilities": [float(x) for x in p[:len(ex.choices)]]})
    return out

  def _predict_ner(self, texts):
    examples = []
    for i, t in enumerate(texts):
      words = split_words(t) if isinstance(t, str) else list(t)
      if not words:
        raise ValueError(f"text {i} has no words")
      examples.append(NerExample(guid=f"input:{i}", words=words, labels=None))
    feats = self.task.featurize(examples, self.tokenizer, self.max_seq_length)
    tags = self.task.predict(examples, feats, self._outputs(feats))
    out = []
    for ex, tg in zip(examples, tags):
      ents = []
      for type_, b, e in ner_eval.get_entities(tg, self.task.mode, self.task.scheme):
        ents.append({"type": type_, "start": b, "end": e, "text": entity_text(ex.words[b:e + 1])})
      out.append({"words": ex.words, "tags": tg, "entities": ents})
    return out

  def _predict_squad(self, questions, contexts):
    if contexts is None:
      raise ValueError("SQuAD prediction needs text_pairs=contexts (one per question)")
    examples = [SquadExample(qas_id=str(i), question_text=q, context_text=c)
                for i, (q, c) in enumerate(zip(questions, contexts))]
    feats = self.task.featurize(examples, self.tokenizer, self.max_seq_length, is_training=False)
    res = self.task.predict(examples, feats, self._outputs(feats))
    out = []
    for ex in examples:
      nbest = res.nbest.get(ex.qas_id, [])
      d = {"answer": res.predictions[ex.qas_id], "probability": float(nbest[0]["probability"]) if nbest else 0.0,
           "nbest": nbest}
      if ex.qas_id in res.null_odds:
        d["null_odds"] = float(res.null_odds[ex.qas_id])
      out.append(d)
    return out


@functools.lru_cache(maxsize=4)
def _cached(workdir: str, mtime: float) -> Predictor:
  del mtime
  return Predictor.from_workdir(workdir)


def predict(workdir: str, texts, text_pairs=None) -> List[dict]:
  """Predictor.from_workdir(workdir).predict(texts, text_pairs), reusing a loaded model while the
  checkpoint is unchanged."""
  path = os.path.join(workdir, "best_checkpoint")
  mtime = os.path.getmtime(path) if os.path.exists(path) else 0.0
  return _cached(os.path.abspath(workdir), mtime).predict(texts, text_pairs)
