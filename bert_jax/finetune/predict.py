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
are processed exactly as in training. Inputs are run in fixed-size batches (one compile): packed, several
inputs per row (`packing=True`, the default, for the kinds that pack: finetune/data.py), else padded; the
answers are the same either way, in input order.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Dict, List, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.finetune import data as ft
from bert_jax.finetune import model as fm
from bert_jax.finetune.tasks import Task, task_class
from bert_jax.finetune.tasks.common import PredictInputError
from bert_jax.finetune.tasks.ner import entity_text, split_words  # noqa: F401  (this module's API)
from bert_jax.input_pipeline import example_packing, tokenization
from bert_jax.pretrained import Pretrained, load_pretrained
from bert_jax.engine.train_step import compute_dtype

_log = logging.getLogger(__name__)


def task_from_info(info: dict) -> Task:
  """The task of a fine-tuned checkpoint, rebuilt by its kind from finetune_info.json ("task" names the
  registry entry; older files without the head options get the defaults)."""
  task = task_class(info["task"]).from_info(info["task"], info)
  task.pooling = info.get("pooling", "cls")
  task.truncation = info.get("truncation", task.truncation)
  task.truncation_head_fraction = float(info.get("truncation_head_fraction", task.truncation_head_fraction))
  return task


def missing_pairs_warning(task: Task, info: dict) -> Optional[str]:
  """The warning for single texts given to a model fine-tuned on sentence pairs (GLUE's MRPC/QQP/STS-B/NLI
  tasks, or classification with text_b): it scores them, but not as it was trained; None otherwise."""
  spec = getattr(task, "spec", None)
  if spec is not None:
    pairs = spec.labelled is not None and spec.labelled.text_b is not None
  else:
    pairs = getattr(task, "kind", "") in ("classification", "regression") and bool(
        str((info.get("classification") or {}).get("text_b") or "").strip())
  if not pairs:
    return None
  return (f"the {info.get('task')} model was fine-tuned on sentence pairs but got single texts; give text_pairs= "
          "(command line: --pairs, with text<TAB>text_pair lines)")


def predict_cap(task: Task, cfg, packing: bool, max_examples_per_row: int) -> int:
  """Examples per packed row for a Predictor (0: padded rows): packing asked for, and a task and encoder family
  that keep packed examples apart; a task that cannot (SQuAD, multiple choice) runs padded, as it trained.
  UserError for a cap below 1."""
  if not packing or task.packing_refusal():
    return 0
  if int(max_examples_per_row) < 1:
    raise PredictInputError(f"max_examples_per_row={max_examples_per_row}; expected >= 1 (or packing=false)")
  try:
    cfg.replace(max_examples_per_row=int(max_examples_per_row))
  except ValueError:    # an encoder family that cannot keep the examples of a row apart (EncoderFamily.packs)
    return 0
  return int(max_examples_per_row)


class Predictor:
  """A fine-tuned model with its tokenizer and task; see the module docstring."""

  def __init__(self, checkpoint: Pretrained, batch_size: int = 32, packing: bool = True,
               max_examples_per_row: int = 16):
    info = checkpoint.finetune_info
    if not info or "task" not in info:
      raise PredictInputError(f"{checkpoint.directory}: no finetune_info.json; this is not a fine-tuned "
                              "checkpoint (give a finetune.py work dir or its best_checkpoint/)")
    self.info = info
    self.task = task_from_info(info)
    self.max_seq_length = int(info["max_seq_length"])
    self.tokenizer = tokenization.load_tokenizer(checkpoint.require_vocab(),
                                                  do_lower_case=bool(info["do_lower_case"]))
    cfg = checkpoint.config.replace(dtype=compute_dtype("auto"), scan_layers=False)
    self.cap = predict_cap(self.task, cfg, packing, max_examples_per_row)
    self.model = fm.build_model(self.task, cfg.replace(max_examples_per_row=self.cap))
    self.params = jax.device_put(checkpoint.params)
    self.batch_size = batch_size
    self._warned_pairs = False
    model = self.model
    self._keys = tuple(self.task.model_input_keys) + tuple(self.task.extra_input_keys)
    self._forward = jax.jit(lambda p, batch: fm.row_outputs(fm.apply_model(model, p, batch)))

  @classmethod
  def from_workdir(cls, workdir: str, batch_size: int = 32, packing: bool = True) -> "Predictor":
    """`workdir` is a fine-tuning work directory or its best_checkpoint/ directory."""
    return cls(load_pretrained(workdir), batch_size, packing)

  def _outputs(self, features) -> Dict[str, np.ndarray]:
    layout = None
    if self.cap:
      layout, features = ft.pack_split(self.task, features, self.max_seq_length, self.cap)
    outs: Dict[str, list] = {}
    for batch in ft.iterate_batches(features, self._keys, self.batch_size):
      real = ft.real_rows(batch)
      out = self._forward(self.params, {k: jnp.asarray(batch[k]) for k in self._keys})
      for k, v in out.items():
        outs.setdefault(k, []).append(np.asarray(v)[:real])
    outs = {k: np.concatenate(v, 0) for k, v in outs.items()}
    if layout is not None:
      outs = example_packing.unpack_outputs(outs, layout, self.task.token_level)
    return outs

  def predict(self, texts: Sequence[Union[str, Sequence[str]]],
              text_pairs: Optional[Sequence[str]] = None) -> List[dict]:
    if isinstance(texts, str):
      raise TypeError("predict takes a list of texts; wrap a single text in a list")
    if text_pairs is not None and len(text_pairs) != len(texts):
      raise PredictInputError(f"{len(texts)} texts but {len(text_pairs)} text_pairs; give one pair per text")
    if not len(texts):
      return []
    if text_pairs is None and any(not isinstance(t, str) for t in texts):
      # (text_a, text_b) pairs, as the signature allows: they reached the tokenizer as tuples (a TypeError)
      if not all(isinstance(t, (tuple, list)) and len(t) == 2 and all(isinstance(x, str) for x in t)
                 for t in texts):
        raise TypeError("predict takes texts as strings, or (text_a, text_b) pairs of strings, or texts and "
                        "text_pairs= of equal length")
      texts, text_pairs = [t[0] for t in texts], [t[1] for t in texts]
    if text_pairs is None and not self._warned_pairs:
      warning = missing_pairs_warning(self.task, self.info)
      if warning:
        self._warned_pairs = True
        _log.warning("%s", warning)
    examples = self.task.text_examples(texts, text_pairs)
    feats = self.task.featurize(examples, self.tokenizer, self.max_seq_length)
    return self.task.readable_predictions(examples, feats, self._outputs(feats))

  def predict_choices(self, questions: Sequence[dict]) -> List[dict]:
    """Multiple choice: dicts {"context", "question", "choices": [...]} -> [{"label" (index), "answer",
    "probabilities"}]."""
    examples = self.task.choice_examples(questions)
    if not examples:
      return []
    feats = self.task.featurize(examples, self.tokenizer, self.max_seq_length)
    return self.task.readable_predictions(examples, feats, self._outputs(feats))


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
