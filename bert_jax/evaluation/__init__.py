"""Scorers for fine-tuning tasks; pure NumPy/Python (no TensorFlow, no JAX).

  glue               accuracy / F1 / MCC / Pearson / Spearman, per-task metric sets, GLUE submission TSVs
  squad              official SQuAD v1.1 / v2.0 EM and F1 (HasAns/NoAns, best thresholds), CMRC2018 scoring
  squad_postprocess  window logits -> answer text (exact original characters), n-best, null odds, JSON files
  ner                conlleval/seqeval-compatible entity P/R/F1 with per-type breakdown, CoNLL output files
"""
