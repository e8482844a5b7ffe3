"""SQuAD post-processing: start/end logits of doc-stride windows -> answer text, n-best lists, null odds.

The algorithm is Google's run_squad.py `write_predictions`: per window, the `n_best_size` highest start and
end logits are paired; a pair is kept when both tokens are context tokens, the start token has its
"max context" in this window, end >= start and the span is at most `max_answer_length` tokens. Candidates of
all windows of a question are ranked by start+end logit, de-duplicated by text, and the top `n_best_size`
get softmax probabilities. For SQuAD v2 the null score is the smallest [CLS] start+end logit over the
windows; `null_odds[qid] = null score - best non-null score`, and the prediction is "" when it exceeds
`null_score_diff_threshold`.

Unlike Google's code, the answer text is cut straight out of the original context with the character
offsets of the start and end tokens (`token_char_spans`), so it is the EXACT original text: accents,
case, Chinese characters and inner whitespace are kept, and a sub-word answer ("1990" in "1990s") is
possible. No `get_final_text` heuristic is needed.

    result = postprocess_predictions(examples, features, start_logits, end_logits,
                                     n_best_size=20, max_answer_length=30,
                                     version_2_with_negative=False, null_score_diff_threshold=0.0)
    result.predictions   # {qid: text}
    result.nbest         # {qid: [{"text", "probability", "start_logit", "end_logit"}, ...]}
    result.null_odds     # {qid: float} (v2 only, else {})
    paths = write_prediction_files(output_dir, result)   # predictions.json, nbest_predictions.json,
                                                         # null_odds.json (v2)
Inputs:
  examples: sequence of objects (or dicts) with `qas_id` and `context_text`
            (bert_jax.finetune.tasks.squad.SquadExample).
  features: mapping with numpy arrays, one row per window (the output of
            bert_jax.finetune.tasks.squad.convert_examples_to_features):
              example_index [N] int       -> row of `examples`
              token_char_spans [N, T, 2]  -> (start, end) character offsets of each context token in
                                             `context_text`; -1 for [CLS], question, [SEP] and padding
              token_is_max_context [N, T] -> whether this window is the token's best-context window
  start_logits, end_logits: [N, T] float, the model outputs for the same rows (drop eval padding rows).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from typing import Dict, List, Mapping, Sequence

import numpy as np

from bert_jax.fileio import write_text_atomic


@dataclasses.dataclass
class SquadPredictions:
  predictions: Dict[str, str]
  nbest: Dict[str, List[dict]]
  null_odds: Dict[str, float]
  version_2_with_negative: bool = False


def _get(obj, name):
  return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def _softmax(scores: Sequence[float]) -> List[float]:
  if not scores:
    return []
  m = max(scores)
  exps = [math.exp(s - m) for s in scores]
  total = sum(exps)
  return [e / total for e in exps]


def _feature_candidates(start: np.ndarray, end: np.ndarray, spans: np.ndarray, max_ctx: np.ndarray,
                        n_best_size: int, max_answer_length: int):
  """(start_index, end_index, start_logit, end_logit) of the valid pairs among the top-n logits."""
  n = min(n_best_size, start.shape[0])
  starts = np.argsort(-start, kind="stable")[:n]
  ends = np.argsort(-end, kind="stable")[:n]
  s = np.repeat(starts, len(ends))
  e = np.tile(ends, len(starts))
  ok = ((spans[s, 0] >= 0) & (spans[e, 0] >= 0) & max_ctx[s] & (e >= s) & (e - s + 1 <= max_answer_length))
  s, e = s[ok], e[ok]
  return [(int(a), int(b), float(start[a]), float(end[b])) for a, b in zip(s, e)]


def postprocess_predictions(examples: Sequence, features: Mapping[str, np.ndarray], start_logits, end_logits,
                            *, n_best_size: int = 20, max_answer_length: int = 30,
                            version_2_with_negative: bool = False,
                            null_score_diff_threshold: float = 0.0) -> SquadPredictions:
  """Answer text per question from window logits (see module docstring)."""
  start_logits = np.asarray(start_logits, dtype=np.float64)
  end_logits = np.asarray(end_logits, dtype=np.float64)
  example_index = np.asarray(features["example_index"])
  spans = np.asarray(features["token_char_spans"])
  max_ctx = np.asarray(features["token_is_max_context"]).astype(bool)
  n = example_index.shape[0]
  if start_logits.shape != end_logits.shape or start_logits.shape[0] != n:
    raise ValueError(f"logits {start_logits.shape}/{end_logits.shape} do not match {n} feature rows "
                     "(drop the padding rows of the last eval batch)")
  if start_logits.shape[1] != spans.shape[1]:
    raise ValueError(f"logits have {start_logits.shape[1]} positions, features {spans.shape[1]}")

  by_example: Dict[int, List[int]] = collections.defaultdict(list)
  for row, ex in enumerate(example_index.tolist()):
    by_example[ex].append(row)

  predictions: Dict[str, str] = collections.OrderedDict()
  nbest_all: Dict[str, List[dict]] = collections.OrderedDict()
  null_odds: Dict[str, float] = collections.OrderedDict()
  for ex_i, example in enumerate(examples):
    qid = _get(example, "qas_id")
    context = _get(example, "context_text")
    rows = by_example.get(ex_i, [])
    prelim = []  # (score, row, start_index, end_index, start_logit, end_logit); row -1 = null
    score_null = math.inf
    null_start = null_end = 0.0
    for row in rows:
      if version_2_with_negative:
        null_score = start_logits[row, 0] + end_logits[row, 0]
        if null_score < score_null:
          score_null = float(null_score)
          null_start, null_end = float(start_logits[row, 0]), float(end_logits[row, 0])
      for s, e, sl, el in _feature_candidates(start_logits[row], end_logits[row], spans[row], max_ctx[row],
                                              n_best_size, max_answer_length):
        prelim.append((sl + el, row, s, e, sl, el))
    if version_2_with_negative and rows:
      prelim.append((null_start + null_end, -1, 0, 0, null_start, null_end))
    prelim.sort(key=lambda p: p[0], reverse=True)  # stable: ties keep window order

    seen = set()
    nbest = []
    for score, row, s, e, sl, el in prelim:
      if len(nbest) >= n_best_size:
        break
      if row < 0:
        text = ""
      else:
        text = context[int(spans[row, s, 0]):int(spans[row, e, 1])]
      if text in seen:
        continue
      seen.add(text)
      nbest.append({"text": text, "start_logit": sl, "end_logit": el})
    if version_2_with_negative and rows and "" not in seen:
      nbest.append({"text": "", "start_logit": null_start, "end_logit": null_end})
    if not nbest:
      nbest.append({"text": "", "start_logit": 0.0, "end_logit": 0.0})
    probs = _softmax([x["start_logit"] + x["end_logit"] for x in nbest])
    nbest_json = [{"text": x["text"], "probability": p, "start_logit": x["start_logit"],
                   "end_logit": x["end_logit"]} for x, p in zip(nbest, probs)]
    nbest_all[qid] = nbest_json
    best_non_null = next((x for x in nbest if x["text"]), None)
    if not version_2_with_negative:
      predictions[qid] = nbest_json[0]["text"]
    else:
      if best_non_null is None:
        # No valid span at all: unanswerable with certainty (a large finite odds keeps JSON valid).
        diff = 1e9
      else:
        diff = (score_null if rows else 0.0) - best_non_null["start_logit"] - best_non_null["end_logit"]
      null_odds[qid] = float(diff)
      predictions[qid] = "" if diff > null_score_diff_threshold else best_non_null["text"]
  return SquadPredictions(predictions, nbest_all, null_odds, version_2_with_negative)


def write_prediction_files(output_dir: str, result: SquadPredictions, prefix: str = "") -> Dict[str, str]:
  """Writes predictions.json, nbest_predictions.json and (v2) null_odds.json; returns {kind: path}."""
  os.makedirs(output_dir, exist_ok=True)
  paths = {"predictions": os.path.join(output_dir, f"{prefix}predictions.json"),
           "nbest": os.path.join(output_dir, f"{prefix}nbest_predictions.json")}
  items = [("predictions", result.predictions), ("nbest", result.nbest)]
  if result.version_2_with_negative:
    paths["null_odds"] = os.path.join(output_dir, f"{prefix}null_odds.json")
    items.append(("null_odds", result.null_odds))
  for kind, obj in items:
    write_text_atomic(paths[kind], json.dumps(obj, ensure_ascii=False, indent=2) + "\n")
  return paths
