"""Scorers for fine-tuning tasks: NumPy, scikit-learn, SciPy and seqeval (no TensorFlow, no JAX).

A leaf package: it imports nothing from bert_jax but the floor (`bert_jax.fileio`'s atomic writer), so every
other part can use it without cycles.

  glue               accuracy / F1 / MCC (sklearn), Pearson / Spearman (SciPy), task metric sets, GLUE TSVs
  squad              official SQuAD v1.1 / v2.0 EM and F1 (HasAns/NoAns, best thresholds), CMRC2018 scoring
  squad_postprocess  window logits -> answer text (exact original characters), n-best, null odds, JSON files
  ner                seqeval entity P/R/F1 (conlleval-compatible or strict) per type, CoNLL output files
"""
