"""Official SQuAD v1.1 / v2.0 scoring (EM and F1), plus CMRC2018-style scoring for Chinese.

The numbers equal the official `evaluate-v1.1.py` / `evaluate-v2.0.py` scripts (they are percentages,
0-100, as those scripts print):

    normalize_answer(s)       lower, drop punctuation, drop the articles a/an/the, collapse whitespace
    exact_match_score(pred, gold) / f1_score(pred, gold)     one pair, v1.1 definitions
    evaluate_v1(dataset, predictions)  -> {"exact_match", "f1", "total", "missing"}
    evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0)
        -> {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
            "NoAns_total", "missing"} and, when `na_probs` is given, "best_exact", "best_exact_thresh",
            "best_f1", "best_f1_thresh" (the official script's --na-prob-file outputs).

`dataset` is the official JSON's "data" list (articles -> paragraphs -> qas), or a mapping
{qid: [gold answer texts]} (an empty list means unanswerable). `predictions` is {qid: text}.
A question without a prediction scores 0 and is counted in "missing" (v1.1's script does the same; v2.0's
would crash).

CJK text: the English tokenisation (whitespace split) would treat a Chinese answer as one token, so in a
Chinese dataset (most questions' first gold answer holds CJK characters) CJK characters are tokenised one per
token (Latin words and digits stay whole words): `language="auto"` (default). In an English dataset (SQuAD,
whose dev set has a few answers in Chinese or Japanese script) "auto" is the official whitespace tokenisation,
so the numbers stay the official script's; `language="en"` is that always. `language="zh"` applies CMRC2018's official scorer instead: punctuation
(ASCII and Chinese) removed, mixed character/word segmentation, F1 from the longest common substring,
EM on the punctuation-free lower-cased strings. The segmentation is written here (the runs between CJK
characters are split on whitespace, where the official script uses NLTK's word_tokenize), so this module
imports nothing from bert_jax.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

# --------------------------------------------------------------------------------------------------------
# Official normalisation and per-pair scores.
# --------------------------------------------------------------------------------------------------------
_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
  """Lower text and remove punctuation, articles and extra whitespace (the official function)."""
  s = s.lower()
  s = "".join(ch for ch in s if ch not in _PUNCT)
  s = _ARTICLES.sub(" ", s)
  return " ".join(s.split())


def _is_cjk(ch: str) -> bool:
  cp = ord(ch)
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
          or 0x2A700 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F
          or 0x3040 <= cp <= 0x30FF or 0xAC00 <= cp <= 0xD7AF)


def _mixed_segmentation(text: str, is_single: Callable[[str], bool]) -> List[str]:
  """Tokens of `text`: each character for which `is_single` holds on its own, the runs between them split
  on whitespace ("ab 中c" -> ["ab", "中", "c"]).

  The scheme of CMRC2018's official `mixed_segmentation`, which isolates CJK characters and punctuation;
  the runs are split on whitespace rather than with nltk.word_tokenize, so no NLTK is needed.
  """
  out: List[str] = []
  run = ""
  for ch in text:
    if is_single(ch):
      out.extend(run.split())
      run = ""
      out.append(ch)
    else:
      run += ch
  out.extend(run.split())
  return out


def _tokens(normalized: str) -> List[str]:
  """Whitespace tokens; CJK characters become single-character tokens."""
  return _mixed_segmentation(normalized, _is_cjk)


def exact_match_score(prediction: str, ground_truth: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def _overlap_f1(pred: List[str], gold: List[str]) -> float:
  """Harmonic mean of token precision and recall over the bag-of-tokens overlap (0.0 when none)."""
  common = collections.Counter(pred) & collections.Counter(gold)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred)
  recall = num_same / len(gold)
  return 2 * precision * recall / (precision + recall)


def _split(normalized: str, cjk_chars: bool) -> List[str]:
  """The official whitespace tokens, or with `cjk_chars` CJK characters one token each (_tokens)."""
  return _tokens(normalized) if cjk_chars else normalized.split()


def f1_score(prediction: str, ground_truth: str, cjk_chars: bool = True) -> float:
  """v1.1 token F1 (0.0 when nothing overlaps, including when both are empty); cjk_chars=False is the official
  whitespace tokenisation exactly."""
  return _overlap_f1(_split(normalize_answer(prediction), cjk_chars),
                     _split(normalize_answer(ground_truth), cjk_chars))


def compute_exact(a_gold: str, a_pred: str) -> int:
  """v2.0 exact match."""
  return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str, cjk_chars: bool = True) -> float:
  """v2.0 F1: when either side has no tokens (a no-answer), 1 if both have none else 0."""
  gold = _split(normalize_answer(a_gold), cjk_chars)
  pred = _split(normalize_answer(a_pred), cjk_chars)
  if not gold or not pred:
    return float(gold == pred)
  return _overlap_f1(pred, gold)


# --------------------------------------------------------------------------------------------------------
# CMRC2018 scoring (Chinese).
# --------------------------------------------------------------------------------------------------------
_ZH_PUNCT = frozenset("-:_*^/\\~`+=，。：？！“”；’《》……·、「」（）－～『』" + string.punctuation
                      + "\u2018\u2019\u201c\u201d\u300a\u300b\u3010\u3011\uff08\uff09\uff0c\uff1a\uff1b")


def _zh_segment(text: str) -> List[str]:
  """CMRC2018 mixed segmentation: CJK characters and punctuation one each, other runs as words."""
  return _mixed_segmentation(text.lower().strip(), lambda ch: _is_cjk(ch) or ch in _ZH_PUNCT)


def _zh_remove_punct(text: str) -> str:
  return "".join(ch for ch in text.lower().strip() if ch not in _ZH_PUNCT and not ch.isspace())


def _longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
  best = 0
  prev = [0] * (len(b) + 1)
  for i in range(1, len(a) + 1):
    cur = [0] * (len(b) + 1)
    for j in range(1, len(b) + 1):
      if a[i - 1] == b[j - 1]:
        cur[j] = prev[j - 1] + 1
        if cur[j] > best:
          best = cur[j]
    prev = cur
  return best


def cmrc_f1(prediction: str, ground_truth: str) -> float:
  """CMRC2018 F1 (0-1): longest common substring of mixed segments, punctuation removed."""
  pred = [t for t in _zh_segment(prediction) if t not in _ZH_PUNCT]
  gold = [t for t in _zh_segment(ground_truth) if t not in _ZH_PUNCT]
  lcs = _longest_common_substring(gold, pred)
  if lcs == 0:
    return 0.0
  precision, recall = lcs / len(pred), lcs / len(gold)
  return 2 * precision * recall / (precision + recall)


def cmrc_exact(prediction: str, ground_truth: str) -> float:
  return float(_zh_remove_punct(prediction) == _zh_remove_punct(ground_truth))


# --------------------------------------------------------------------------------------------------------
# Dataset-level evaluation.
# --------------------------------------------------------------------------------------------------------
Dataset = Union[Sequence[Mapping], Mapping[str, Sequence[str]]]


def gold_answers(dataset: Dataset) -> "collections.OrderedDict[str, List[str]]":
  """{qid: [gold texts]} from the official "data" list (or passes a mapping through)."""
  if isinstance(dataset, Mapping):
    if "data" in dataset and isinstance(dataset["data"], list):
      dataset = dataset["data"]
    else:
      return collections.OrderedDict((k, list(v)) for k, v in dataset.items())
  out: "collections.OrderedDict[str, List[str]]" = collections.OrderedDict()
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        out[qa["id"]] = [a["text"] for a in qa.get("answers", [])]
  return out


def _cjk_answers(golds: Mapping[str, Sequence[str]]) -> bool:
  """Most answered questions' first gold answer contains CJK characters (a Chinese dataset, CMRC2018-like)."""
  firsts = [a[0] for a in golds.values() if a and a[0].strip()]
  return 2 * sum(has_cjk(a) for a in firsts) > len(firsts) > 0


def _score_fns(language: str, golds: Mapping[str, Sequence[str]]):
  if language == "zh":
    return (lambda g, p: cmrc_exact(p, g)), (lambda g, p: cmrc_f1(p, g))
  if language in ("auto", "en"):
    cjk = language == "auto" and _cjk_answers(golds)
    return compute_exact, (lambda g, p: compute_f1(g, p, cjk))
  raise ValueError(f"language must be 'auto', 'en' or 'zh', got {language!r}")


def evaluate_v1(dataset: Dataset, predictions: Mapping[str, str], language: str = "auto") -> Dict[str, float]:
  """SQuAD v1.1 official scores (percent): max over the gold answers, averaged over all questions."""
  golds = gold_answers(dataset)
  if not golds:
    raise ValueError("the dataset has no questions")
  if language == "zh":
    em_fn, f1_fn = cmrc_exact, cmrc_f1
  elif language in ("auto", "en"):
    cjk = language == "auto" and _cjk_answers(golds)
    em_fn, f1_fn = exact_match_score, (lambda p, g: f1_score(p, g, cjk))
  else:
    raise ValueError(f"language must be 'auto', 'en' or 'zh', got {language!r}")
  em = f1 = 0.0
  missing = 0
  for qid, answers in golds.items():
    if qid not in predictions:
      missing += 1
      continue
    pred = predictions[qid]
    em += max((em_fn(pred, g) for g in answers), default=0.0)
    f1 += max((f1_fn(pred, g) for g in answers), default=0.0)
  total = len(golds)
  return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": total, "missing": missing}


def raw_scores_v2(dataset: Dataset, predictions: Mapping[str, str], language: str = "auto"):
  """Per-question (exact, f1, has_answer) dicts, before any no-answer threshold; missing -> 0."""
  golds = gold_answers(dataset)
  exact_fn, f1_fn = _score_fns(language, golds)
  exact, f1, has_ans = {}, {}, {}
  for qid, answers in golds.items():
    # Official: a question has an answer when its answers list is non-empty (make_qid_to_has_ans: the HasAns /
    # NoAns blocks and the best-threshold search); gold texts that normalise to "" are dropped for scoring,
    # none left scores against "".
    has_ans[qid] = bool(answers)
    answers = [a for a in answers if normalize_answer(a)] or [""]
    if qid not in predictions:
      exact[qid] = f1[qid] = 0.0
      continue
    pred = predictions[qid]
    if language == "zh" and not has_ans[qid]:
      exact[qid] = f1[qid] = float(not _zh_remove_punct(pred))
      continue
    exact[qid] = float(max(exact_fn(a, pred) for a in answers))
    f1[qid] = float(max(f1_fn(a, pred) for a in answers))
  return exact, f1, has_ans


def _apply_threshold(scores, na_probs, has_ans, thresh):
  out = {}
  for qid, s in scores.items():
    out[qid] = float(not has_ans[qid]) if na_probs[qid] > thresh else s
  return out


def _find_best_thresh(predictions, scores, na_probs, has_ans):
  num_no_ans = sum(1 for v in has_ans.values() if not v)
  cur = best = float(num_no_ans)
  best_thresh = 0.0
  for qid in sorted(na_probs, key=lambda k: na_probs[k]):
    if qid not in scores:
      continue
    if has_ans[qid]:
      diff = scores[qid]
    else:
      diff = -1.0 if predictions.get(qid) else 0.0
    cur += diff
    if cur > best:
      best = cur
      best_thresh = na_probs[qid]
  return 100.0 * best / len(scores), best_thresh


def evaluate_v2(dataset: Dataset, predictions: Mapping[str, str],
                na_probs: Optional[Mapping[str, float]] = None, na_prob_thresh: float = 1.0,
                language: str = "auto") -> Dict[str, float]:
  """SQuAD v2.0 official scores (percent) with the HasAns/NoAns breakdown.

  Args:
    na_probs: {qid: no-answer score}, e.g. the null_odds.json written by post-processing. A question whose
      score exceeds `na_prob_thresh` is treated as predicted unanswerable. With na_probs the best
      thresholds ("best_exact"/"best_f1" and their "_thresh") are added, as the official --na-prob-file.
  """
  golds = gold_answers(dataset)
  if not golds:
    raise ValueError("the dataset has no questions")
  exact_raw, f1_raw, has_ans = raw_scores_v2(golds, predictions, language)
  probs = {k: 0.0 for k in golds}
  if na_probs is not None:
    probs.update({k: float(na_probs[k]) for k in golds if k in na_probs})
  exact = _apply_threshold(exact_raw, probs, has_ans, na_prob_thresh)
  f1 = _apply_threshold(f1_raw, probs, has_ans, na_prob_thresh)

  def block(qids):
    n = len(qids)
    return (100.0 * sum(exact[q] for q in qids) / n, 100.0 * sum(f1[q] for q in qids) / n, n)

  out: Dict[str, float] = {}
  out["exact"], out["f1"], out["total"] = block(list(golds))
  has = [q for q in golds if has_ans[q]]
  no = [q for q in golds if not has_ans[q]]
  if has:
    out["HasAns_exact"], out["HasAns_f1"], out["HasAns_total"] = block(has)
  if no:
    out["NoAns_exact"], out["NoAns_f1"], out["NoAns_total"] = block(no)
  out["missing"] = sum(1 for q in golds if q not in predictions)
  if na_probs is not None:
    out["best_exact"], out["best_exact_thresh"] = _find_best_thresh(predictions, exact_raw, probs, has_ans)
    out["best_f1"], out["best_f1_thresh"] = _find_best_thresh(predictions, f1_raw, probs, has_ans)
  return out


def evaluate(dataset: Dataset, predictions: Mapping[str, str], version_2_with_negative: bool = False,
             na_probs: Optional[Mapping[str, float]] = None, na_prob_thresh: float = 1.0,
             language: str = "auto") -> Dict[str, float]:
  """evaluate_v2 when `version_2_with_negative`, else evaluate_v1."""
  if version_2_with_negative:
    return evaluate_v2(dataset, predictions, na_probs, na_prob_thresh, language)
  return evaluate_v1(dataset, predictions, language)


def has_cjk(text: str) -> bool:
  """True when `text` contains CJK characters (a hint for choosing language="zh")."""
  return any(_is_cjk(c) for c in text)
