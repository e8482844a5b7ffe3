"""Entity-level NER scoring with seqeval (conlleval-compatible and strict), and CoNLL output files.

    get_entities(tags, mode="conlleval") -> [(type, start, end_inclusive), ...]
    evaluate(gold_seqs, pred_seqs, mode="conlleval") -> {
        "precision", "recall", "f1", "accuracy",                  # fractions in [0, 1]
        "num_gold", "num_pred", "num_correct", "num_tokens",
        "per_type": {type: {"precision", "recall", "f1", "support" (#gold), "num_pred", "num_correct"}}}
    write_conll(path, sentences, gold_seqs, pred_seqs)   # "token gold pred" lines, blank between sentences
    conlleval_report(result) -> str                      # conlleval.pl's text report

The figures are seqeval's (`seqeval.metrics.classification_report`, micro average for the totals,
`accuracy_score` for the token accuracy); this module adds the conlleval counts and text report and the
CoNLL files, which seqeval does not provide.

Modes:
  "conlleval" (default): seqeval's default mode, which chunks by conlleval.pl's rules: an I-X after O or
      after another type starts a new entity, so ill-formed sequences are scored leniently (identical to
      `conlleval` for BIO/IOB1, and it also reads BIOES).
  "strict": seqeval's mode="strict" with scheme=IOB2 (`scheme="BIO"`) or IOBES (`scheme="BIOES"`): only
      well-formed entities count (B-X I-X*, or S-X / B-X I-X* E-X); a tag outside the scheme is an error.

Tags are strings like "B-PER", "I-PER", "E-PER", "S-PER", "O". Sentences are scored separately (an entity
never spans a sentence boundary). Precision is 0 when nothing is predicted, recall 0 when there is no gold
entity, F1 0 when both are 0 (conlleval and seqeval's zero_division=0); with no entity on either side all
three are 0.
"""

from __future__ import annotations

import collections
import os
from typing import Dict, List, Optional, Sequence, Tuple

from bert_jax.fileio import write_text_atomic

Entity = Tuple[str, int, int]

_SCHEMES = {"BIO": "IOB2", "BIOES": "IOBES"}     # seqeval.scheme's class for each tag scheme


def _seqeval():
  """seqeval's (metrics, scheme, sequence_labeling) modules, imported where entities are scored: the
  fine-tuning loop imports this module, and an image without seqeval (the GPU machine's) can still train."""
  from seqeval import metrics, scheme
  from seqeval.metrics import sequence_labeling
  return metrics, scheme, sequence_labeling


def _scheme_class(mode: str, scheme: str) -> Optional[type]:
  """seqeval's scheme class for strict mode; None for the conlleval-compatible default mode."""
  if mode == "conlleval":
    return None
  if mode == "strict":
    key = scheme.upper()
    if key not in _SCHEMES:
      raise ValueError(f"scheme must be 'BIO' or 'BIOES', got {scheme!r}")
    return getattr(_seqeval()[1], _SCHEMES[key])
  raise ValueError(f"mode must be 'conlleval' or 'strict', got {mode!r}")


def _strict_entities(seqs: List[List[str]], scheme: str, scheme_cls) -> List[List[Entity]]:
  """Per sentence, seqeval's strict entities as (type, start, end inclusive)."""
  try:
    by_sentence = _seqeval()[1].Entities(seqs, scheme_cls).entities
  except (KeyError, IndexError, ValueError) as err:
    # seqeval raises ValueError for a prefix outside the scheme and KeyError/IndexError for tags that
    # have no known prefix at all; all of them mean the same to the caller.
    raise ValueError(f"tag sequence is not valid in the {scheme.upper()} scheme: {err}") from err
  # seqeval's Entity.end is exclusive.
  return [[(e.tag, e.start, e.end - 1) for e in sent] for sent in by_sentence]


def _sentence_entities(seqs: List[List[str]], mode: str, scheme: str) -> List[List[Entity]]:
  scheme_cls = _scheme_class(mode, scheme)
  if scheme_cls is None:
    # One call per sentence: seqeval's own flattening of nested lists would give offsets into the
    # concatenation rather than into the sentence.
    get_entities = _seqeval()[2].get_entities
    return [get_entities(s) for s in seqs]
  return _strict_entities(seqs, scheme, scheme_cls)


def get_entities(tags: Sequence[str], mode: str = "conlleval", scheme: str = "BIO") -> List[Entity]:
  """Entities of one sentence as (type, start, end) with `end` inclusive (seqeval's chunking)."""
  return _sentence_entities([list(tags)], mode, scheme)[0]


def evaluate(gold_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]], mode: str = "conlleval",
             scheme: str = "BIO") -> Dict:
  """Micro-averaged entity precision/recall/F1 with a per-type breakdown (see module docstring)."""
  scheme_cls = _scheme_class(mode, scheme)
  if len(gold_seqs) != len(pred_seqs):
    raise ValueError(f"{len(gold_seqs)} gold sentences but {len(pred_seqs)} predicted")
  # seqeval accepts only lists of lists (no tuples or arrays).
  gold = [list(g) for g in gold_seqs]
  pred = [list(p) for p in pred_seqs]
  for s, (g, p) in enumerate(zip(gold, pred)):
    if len(g) != len(p):
      raise ValueError(f"sentence {s}: {len(g)} gold tags but {len(p)} predicted tags")

  # seqeval reports rates only; conlleval's report also needs the entity counts, so the entities are
  # extracted (by seqeval) once more here and counted.
  counts: Dict[str, List[int]] = collections.defaultdict(lambda: [0, 0, 0])  # type -> [gold, pred, correct]
  for g, p in zip(_sentence_entities(gold, mode, scheme), _sentence_entities(pred, mode, scheme)):
    g, p = set(g), set(p)
    for type_, _, _ in g:
      counts[type_][0] += 1
    for type_, _, _ in p:
      counts[type_][1] += 1
    for type_, _, _ in g & p:
      counts[type_][2] += 1

  num_tokens = sum(len(g) for g in gold)
  result = {"precision": 0.0, "recall": 0.0, "f1": 0.0,
            "accuracy": float(_seqeval()[0].accuracy_score(gold, pred)) if num_tokens else 0.0,
            "num_gold": 0, "num_pred": 0, "num_correct": 0, "num_tokens": num_tokens, "per_type": {}}
  if not counts:
    # No entity on either side: every rate is 0 (seqeval's zero_division=0 value). The report is skipped
    # because its macro average over zero types would be NaN with a NumPy warning.
    return result
  kw = {} if scheme_cls is None else {"mode": "strict", "scheme": scheme_cls}
  report = _seqeval()[0].classification_report(gold, pred, output_dict=True, zero_division=0, **kw)
  for type_ in sorted(counts):
    n_gold, n_pred, n_correct = counts[type_]
    row = report[type_]
    result["per_type"][type_] = {"precision": float(row["precision"]), "recall": float(row["recall"]),
                                 "f1": float(row["f1-score"]), "support": n_gold, "num_pred": n_pred,
                                 "num_correct": n_correct}
  micro = report["micro avg"]
  result.update(precision=float(micro["precision"]), recall=float(micro["recall"]),
                f1=float(micro["f1-score"]),
                num_gold=sum(c[0] for c in counts.values()), num_pred=sum(c[1] for c in counts.values()),
                num_correct=sum(c[2] for c in counts.values()))
  return result


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
  lines = []
  for s, words in enumerate(sentences):
    preds = pred_seqs[s]
    golds = gold_seqs[s] if gold_seqs is not None else None
    if len(preds) != len(words) or (golds is not None and len(golds) != len(words)):
      raise ValueError(f"sentence {s}: {len(words)} tokens but tag sequences of other lengths")
    for k, w in enumerate(words):
      # conlleval splits on whitespace: a token containing whitespace would shift the columns.
      w = "_".join(w.split()) or "_"
      lines.append(f"{w} {golds[k]} {preds[k]}\n" if golds is not None else f"{w} {preds[k]}\n")
    lines.append("\n")
  write_text_atomic(path, "".join(lines))
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
