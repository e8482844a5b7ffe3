"""Entity-level NER scoring compatible with conlleval (BIO) and seqeval (BIO, BIOES), and CoNLL output files.

    get_entities(tags, mode="conlleval") -> [(type, start, end_inclusive), ...]
    evaluate(gold_seqs, pred_seqs, mode="conlleval") -> {
        "precision", "recall", "f1", "accuracy",                  # fractions in [0, 1]
        "num_gold", "num_pred", "num_correct", "num_tokens",
        "per_type": {type: {"precision", "recall", "f1", "support" (#gold), "num_pred", "num_correct"}}}
    write_conll(path, sentences, gold_seqs, pred_seqs)   # "token gold pred" lines, blank between sentences
    conlleval_report(result) -> str                      # conlleval.pl's text report

Modes:
  "conlleval" (default): the chunk rules of conlleval.pl, which seqeval's default mode also uses: an I-X
      after O or after another type starts a new entity, so ill-formed sequences are scored leniently
      (identical to `conlleval` for BIO/IOB1 and to `seqeval.metrics.classification_report` for BIO/BIOES).
  "strict": only well-formed entities count, as seqeval's mode="strict": BIO (IOB2) entities are B-X I-X*,
      BIOES entities are S-X or B-X I-X* E-X; the scheme is given by `scheme=` ("BIO" or "BIOES").

Tags are strings like "B-PER", "I-PER", "E-PER", "S-PER", "O". Sentences are scored separately (an entity
never spans a sentence boundary). Precision is 0 when nothing is predicted, recall 0 when there is no gold
entity, F1 0 when both are 0 (conlleval and seqeval's zero_division=0).
"""

from __future__ import annotations

import collections
import os
from typing import Dict, List, Sequence, Tuple

Entity = Tuple[str, int, int]


def _split(tag: str) -> Tuple[str, str]:
  """("B", "PER") from "B-PER"; ("O", "") from "O"; a bare prefix gets type "_" like seqeval."""
  if tag in ("O", "", "."):
    return "O", ""
  prefix, _, type_ = tag.partition("-")
  return prefix, (type_ or "_")


def _end_of_chunk(prev_tag, tag, prev_type, type_) -> bool:
  if prev_tag in ("E", "S"):
    return True
  if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
    return True
  return prev_tag != "O" and prev_type != type_


def _start_of_chunk(prev_tag, tag, prev_type, type_) -> bool:
  if tag in ("B", "S"):
    return True
  if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
    return True
  return tag != "O" and prev_type != type_


def _entities_lenient(tags: Sequence[str]) -> List[Entity]:
  out: List[Entity] = []
  prev_tag, prev_type, begin = "O", "", 0
  for i, t in enumerate(list(tags) + ["O"]):
    tag, type_ = _split(t)
    if _end_of_chunk(prev_tag, tag, prev_type, type_):
      out.append((prev_type, begin, i - 1))
    if _start_of_chunk(prev_tag, tag, prev_type, type_):
      begin = i
    prev_tag, prev_type = tag, type_
  return out


def _entities_strict(tags: Sequence[str], scheme: str) -> List[Entity]:
  out: List[Entity] = []
  parsed = [_split(t) for t in tags]
  n = len(parsed)
  i = 0
  while i < n:
    tag, type_ = parsed[i]
    if scheme == "BIOES" and tag == "S":
      out.append((type_, i, i))
      i += 1
      continue
    if tag != "B":
      i += 1
      continue
    j = i + 1
    while j < n and parsed[j] == ("I", type_):
      j += 1
    if scheme == "BIO":
      out.append((type_, i, j - 1))
      i = j
    else:  # BIOES: needs a closing E-X
      if j < n and parsed[j] == ("E", type_):
        out.append((type_, i, j))
        i = j + 1
      else:
        i = j
  return out


def _check_tags(tags: Sequence[str], scheme: str):
  allowed = {"BIO": {"B", "I", "O"}, "BIOES": {"B", "I", "O", "E", "S"}}[scheme]
  for t in tags:
    if _split(t)[0] not in allowed:
      raise ValueError(f"tag {t!r} is not valid in the {scheme} scheme")


def get_entities(tags: Sequence[str], mode: str = "conlleval", scheme: str = "BIO") -> List[Entity]:
  """Entities of one sentence as (type, start, end) with `end` inclusive."""
  if mode == "conlleval":
    return _entities_lenient(tags)
  if mode == "strict":
    scheme = scheme.upper()
    if scheme not in ("BIO", "BIOES"):
      raise ValueError(f"scheme must be 'BIO' or 'BIOES', got {scheme!r}")
    _check_tags(tags, scheme)
    return _entities_strict(tags, scheme)
  raise ValueError(f"mode must be 'conlleval' or 'strict', got {mode!r}")


def _prf(correct: int, num_pred: int, num_gold: int):
  p = correct / num_pred if num_pred else 0.0
  r = correct / num_gold if num_gold else 0.0
  f = 2 * p * r / (p + r) if p + r else 0.0
  return p, r, f


def evaluate(gold_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]], mode: str = "conlleval",
             scheme: str = "BIO") -> Dict:
  """Micro-averaged entity precision/recall/F1 with a per-type breakdown (see module docstring)."""
  if len(gold_seqs) != len(pred_seqs):
    raise ValueError(f"{len(gold_seqs)} gold sentences but {len(pred_seqs)} predicted")
  gold_by_type: Dict[str, set] = collections.defaultdict(set)
  pred_by_type: Dict[str, set] = collections.defaultdict(set)
  tokens = correct_tokens = 0
  for s, (g, p) in enumerate(zip(gold_seqs, pred_seqs)):
    if len(g) != len(p):
      raise ValueError(f"sentence {s}: {len(g)} gold tags but {len(p)} predicted tags")
    tokens += len(g)
    correct_tokens += sum(1 for a, b in zip(g, p) if a == b)
    for type_, b, e in get_entities(g, mode, scheme):
      gold_by_type[type_].add((s, b, e))
    for type_, b, e in get_entities(p, mode, scheme):
      pred_by_type[type_].add((s, b, e))
  per_type = {}
  tot_gold = tot_pred = tot_correct = 0
  for type_ in sorted(set(gold_by_type) | set(pred_by_type)):
    g, p = gold_by_type.get(type_, set()), pred_by_type.get(type_, set())
    c = len(g & p)
    pr, rc, f1 = _prf(c, len(p), len(g))
    per_type[type_] = {"precision": pr, "recall": rc, "f1": f1, "support": len(g), "num_pred": len(p),
                       "num_correct": c}
    tot_gold += len(g)
    tot_pred += len(p)
    tot_correct += c
  pr, rc, f1 = _prf(tot_correct, tot_pred, tot_gold)
  return {"precision": pr, "recall": rc, "f1": f1,
          "accuracy": correct_tokens / tokens if tokens else 0.0,
          "num_gold": tot_gold, "num_pred": tot_pred, "num_correct": tot_correct, "num_tokens": tokens,
          "per_type": per_type}


def conlleval_report(result: Dict) -> str:
  """The text conlleval.pl prints (percentages with two decimals)."""
  lines = [f"processed {result['num_tokens']} tokens with {result['num_gold']} phrases; "
           f"found: {result['num_pred']} phrases; correct: {result['num_correct']}.",
           f"accuracy: {100 * result['accuracy']:6.2f}%; precision: {100 * result['precision']:6.2f}%; "
           f"recall: {100 * result['recall']:6.2f}%; FB1: {100 * result['f1']:6.2f}"]
  for type_, m in result["per_type"].items():
    lines.append(f"{type_:>17}: precision: {100 * m['precision']:6.2f}%; recall: {100 * m['recall']:6.2f}%; "
                 f"FB1: {100 * m['f1']:6.2f}  {m['num_pred']}")
  return "\n".join(lines) + "\n"


def write_conll(path: str, sentences: Sequence[Sequence[str]], gold_seqs: Sequence[Sequence[str]],
                pred_seqs: Sequence[Sequence[str]]) -> str:
  """Writes `token gold pred` per line, a blank line after each sentence (conlleval's input format).

  For unlabelled data pass gold_seqs=None: lines are then `token pred`.
  """
  if gold_seqs is not None and len(gold_seqs) != len(sentences):
    raise ValueError(f"{len(sentences)} sentences but {len(gold_seqs)} gold sequences")
  if len(pred_seqs) != len(sentences):
    raise ValueError(f"{len(sentences)} sentences but {len(pred_seqs)} predicted sequences")
  d = os.path.dirname(path)
  if d:
    os.makedirs(d, exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for s, words in enumerate(sentences):
      preds = pred_seqs[s]
      golds = gold_seqs[s] if gold_seqs is not None else None
      if len(preds) != len(words) or (golds is not None and len(golds) != len(words)):
        raise ValueError(f"sentence {s}: {len(words)} tokens but tag sequences of other lengths")
      for k, w in enumerate(words):
        # conlleval splits on whitespace: a token containing whitespace would shift the columns.
        w = "_".join(w.split()) or "_"
        f.write(f"{w} {golds[k]} {preds[k]}\n" if golds is not None else f"{w} {preds[k]}\n")
      f.write("\n")
  return path


def read_conll_predictions(path: str) -> Tuple[List[List[str]], List[List[str]], List[List[str]]]:
  """Reads a `token gold pred` file back into (sentences, gold_seqs, pred_seqs)."""
  sents, golds, preds = [], [], []
  cur = ([], [], [])
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, start=1):
      parts = line.split()
      if not parts:
        if cur[0]:
          sents.append(cur[0]); golds.append(cur[1]); preds.append(cur[2])  # noqa: E702
          cur = ([], [], [])
        continue
      if len(parts) < 3:
        raise ValueError(f"{path}:{n}: expected 'token gold pred', got {line.rstrip()!r}")
      cur[0].append(parts[0]); cur[1].append(parts[-2]); cur[2].append(parts[-1])  # noqa: E702
  if cur[0]:
    sents.append(cur[0]); golds.append(cur[1]); preds.append(cur[2])  # noqa: E702
  return sents, golds, preds
