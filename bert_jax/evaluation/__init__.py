"""Scorers for fine-tuning tasks: NumPy, scikit-learn, SciPy and seqeval (no TensorFlow, no JAX).

A leaf package: it imports nothing from bert_jax, so every other part can use it without cycles.

  glue               accuracy / F1 / MCC (sklearn), Pearson / Spearman (SciPy), task metric sets, GLUE TSVs
  squad              official SQuAD v1.1 / v2.0 EM and F1 (HasAns/NoAns, best thresholds), CMRC2018 scoring
  squad_postprocess  window logits -> answer text (exact original characters), n-best, null odds, JSON files
  ner                seqeval entity P/R/F1 (conlleval-compatible or strict) per type, CoNLL output files
"""

import os as _os


def write_text_atomic(path: str, text: str) -> str:
  """Writes `text` (UTF-8) to the local `path` through a temp file, fsync and rename: a reader, or a run
  killed mid-write, sees the old file or the new one, never half of one. Returns `path`."""
  tmp = f"{path}.tmp-{_os.getpid()}"
  try:
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(text)
      f.flush()
      _os.fsync(f.fileno())
    _os.replace(tmp, path)
  finally:
    if _os.path.exists(tmp):
      _os.remove(tmp)
  return path
