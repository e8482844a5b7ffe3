"""Small fixture writers in the standard file formats, for tests and smoke runs of fine-tuning.

    vocab = write_vocab(tmp_dir)                       # English words, accents, Chinese characters
    glue_root = write_glue(tmp_dir, tasks=None)        # GLUE layout: CoLA/, SST-2/, ..., MNLI/, diagnostic/
    squad_dir = write_squad(tmp_dir, version_2_with_negative=False)   # train-v1.1.json, dev-v1.1.json
    ner_dir = write_conll(tmp_dir)                      # train.txt, dev.txt, test.txt (with -DOCSTART-)
    cls_dir = write_classification(tmp_dir)             # ChnSentiCorp style train/dev/test.tsv
    text = write_word_documents(path, words, 40)        # pre-training text: a sentence per line, blank lines

Every file follows the real release's layout (headers, column positions, a BOM on MRPC, MNLI's 12/16/10
columns), so a reader that passes here reads the real data.
"""

from __future__ import annotations

import json
import os
import random
from typing import Iterable, Optional, Sequence

VOCAB_TOKENS = (
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "a", "an", "cat", "dog", "sat", "on", "mat", "is", "was", "in", "of", "and", "to", "who", "what",
    "where", "when", "did", "does", "play", "##ed", "##ing", "##s", "run", "good", "bad", "not", "hello",
    "world", "paris", "france", "cafe", "zurich", "city", "capital", "river", "won", "game", "team", "year",
    "john", "smith", "lives", "new", "york", "berlin", "germany", "bert", "model", "1990", "museum",
    ".", ",", "!", "?", "'", "-", "(", ")",
    "北", "京", "是", "中", "国", "的", "首", "都", "上", "海", "很", "好", "不", "这", "本", "书", "电", "影",
    "看", "喜", "欢", "我", "在", "住", "城", "市", "哪", "里", "。", "，", "？",
)


def write_vocab(directory: str, extra: Iterable[str] = ()) -> str:
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, "vocab.txt")
  seen, lines = set(), []
  for t in list(VOCAB_TOKENS) + list(extra):
    if t not in seen:
      seen.add(t)
      lines.append(t)
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return path


def write_word_documents(path, words: Sequence[str], num_documents: int, sentences=(3, 7), seed: int = 0) -> str:
  """Raw pre-training text in Google's format: `num_documents` documents of random sentences ("w w w .")
  drawn from `words`, one sentence per line, a blank line after each document."""
  rng = random.Random(seed)
  with open(path, "w", encoding="utf-8") as f:
    for _ in range(num_documents):
      for _ in range(rng.randint(*sentences)):
        f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + " .\n")
      f.write("\n")
  return str(path)


def _write(path: str, lines, bom: bool = False):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="\n") as f:
    f.write("\n".join(lines) + "\n")


_SENTS = ["the cat sat on the mat .", "the dog was not good .", "a cat is a good cat !", "the dog sat .",
          "hello world .", "the mat was bad .", "a dog run ##s .", "the cat play ##ed ."]
_PAIRS = [(s, _SENTS[(i + 3) % len(_SENTS)]) for i, s in enumerate(_SENTS)]
_NLI = ["entailment", "neutral", "contradiction"]


def write_glue(root: str, tasks: Optional[Iterable[str]] = None, n: int = 8) -> str:
  """Writes GLUE task folders under `root` in the release's exact layouts; returns `root`."""
  tasks = set(tasks or ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax"])
  rng = range(n)
  s = lambda i: _SENTS[i % len(_SENTS)]  # noqa: E731
  p = lambda i: _PAIRS[i % len(_PAIRS)]  # noqa: E731
  if "cola" in tasks:
    for split in ("train", "dev"):
      _write(os.path.join(root, "CoLA", f"{split}.tsv"),
             [f"gj04\t{i % 2}\t{'' if i % 2 else '*'}\t{s(i)}" for i in rng])
    _write(os.path.join(root, "CoLA", "test.tsv"), ["index\tsentence"] + [f"{i}\t{s(i)}" for i in rng])
  if "sst2" in tasks:
    for split in ("train", "dev"):
      _write(os.path.join(root, "SST-2", f"{split}.tsv"), ["sentence\tlabel"] + [f"{s(i)} \t{i % 2}" for i in rng])
    _write(os.path.join(root, "SST-2", "test.tsv"), ["index\tsentence"] + [f"{i}\t{s(i)}" for i in rng])
  if "mrpc" in tasks:
    head = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    for split in ("train", "dev"):
      _write(os.path.join(root, "MRPC", f"{split}.tsv"),
             [head] + [f"{i % 2}\t{700000 + i}\t{800000 + i}\t{p(i)[0]}\t{p(i)[1]}" for i in rng], bom=True)
    _write(os.path.join(root, "MRPC", "test.tsv"),
           ["index\t#1 ID\t#2 ID\t#1 String\t#2 String"]
           + [f"{i}\t{700000 + i}\t{800000 + i}\t{p(i)[0]}\t{p(i)[1]}" for i in rng])
  if "stsb" in tasks:
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for split in ("train", "dev"):
      _write(os.path.join(root, "STS-B", f"{split}.tsv"),
             [head + "\tscore"] + [f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{p(i)[0]}\t"
                                   f"{p(i)[1]}\t{(i * 0.625) % 5:.3f}" for i in rng])
    _write(os.path.join(root, "STS-B", "test.tsv"),
           [head] + [f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{p(i)[0]}\t{p(i)[1]}"
                     for i in rng])
  if "qqp" in tasks:
    for split in ("train", "dev"):
      _write(os.path.join(root, "QQP", f"{split}.tsv"),
             ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
             + [f"{100 + i}\t{2 * i}\t{2 * i + 1}\t{p(i)[0]}\t{p(i)[1]}\t{i % 2}" for i in rng])
    _write(os.path.join(root, "QQP", "test.tsv"),
           ["id\tquestion1\tquestion2"] + [f"{i}\t{p(i)[0]}\t{p(i)[1]}" for i in rng])
  if "mnli" in tasks:
    base = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t" \
           "sentence2_parse\tsentence1\tsentence2"
    row = lambda i: (f"{i}\t{31193 + i}\t{31193 + i}n\tfiction\t( ( {p(i)[0]} ) )\t( {p(i)[1]} )\t"  # noqa: E731
                     f"(ROOT (S {p(i)[0]}))\t(ROOT (S {p(i)[1]}))\t{p(i)[0]}\t{p(i)[1]}")
    _write(os.path.join(root, "MNLI", "train.tsv"),
           [base + "\tlabel1\tgold_label"] + [f"{row(i)}\t{_NLI[i % 3]}\t{_NLI[i % 3]}" for i in rng])
    for kind in ("matched", "mismatched"):
      _write(os.path.join(root, "MNLI", f"dev_{kind}.tsv"),
             [base + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"]
             + [f"{row(i)}\t" + "\t".join([_NLI[i % 3]] * 5) + f"\t{_NLI[i % 3]}" for i in rng])
      _write(os.path.join(root, "MNLI", f"test_{kind}.tsv"), [base] + [row(i) for i in rng])
  for task, folder, cols, labels in (("qnli", "QNLI", ("question", "sentence"), ["entailment", "not_entailment"]),
                                     ("rte", "RTE", ("sentence1", "sentence2"), ["entailment", "not_entailment"]),
                                     ("wnli", "WNLI", ("sentence1", "sentence2"), ["0", "1"])):
    if task in tasks:
      for split in ("train", "dev"):
        _write(os.path.join(root, folder, f"{split}.tsv"),
               [f"index\t{cols[0]}\t{cols[1]}\tlabel"]
               + [f"{i}\t{p(i)[0]}\t{p(i)[1]}\t{labels[i % 2]}" for i in rng])
      _write(os.path.join(root, folder, "test.tsv"),
             [f"index\t{cols[0]}\t{cols[1]}"] + [f"{i}\t{p(i)[0]}\t{p(i)[1]}" for i in rng])
  if "ax" in tasks:
    _write(os.path.join(root, "diagnostic", "diagnostic.tsv"),
           ["index\tsentence1\tsentence2"] + [f"{i}\t{p(i)[0]}\t{p(i)[1]}" for i in rng])
  return root


# Contexts chosen to exercise exact-text mapping: accents, a sub-word answer, Chinese.
SQUAD_PARAGRAPHS = [
    ("Cafe", "The Café de Flore is in Paris, the capital of France. It was new in the 1990s.",
     [("q1", "where is the cafe ?", "Paris", None), ("q2", "what is the capital of france ?", "France", None),
      ("q3", "when was it new ?", "1990", None)]),
    ("Zurich", "Zürich is a city on a river. John Smith lives in Zürich and in New York.",
     [("q4", "who lives in zurich ?", "John Smith", None), ("q5", "what is zurich ?", "a city", None),
      ("q9", "where does john smith live ?", "Zürich", "last")]),
    ("北京", "北京是中国的首都。上海是中国的城市。",
     [("q6", "中国的首都是哪里？", "北京", None), ("q7", "上海是什么？", "中国的城市", None)]),
]
UNANSWERABLE = [("Zurich", "q8", "where does the cat play ?")]


def squad_json(version_2_with_negative: bool = False) -> dict:
  data = []
  for title, context, qas in SQUAD_PARAGRAPHS:
    out_qas = []
    for qid, q, ans, start in qas:
      start = {None: context.find(ans), "last": context.rfind(ans)}.get(start, start)
      qa = {"id": qid, "question": q, "answers": [{"text": ans, "answer_start": start}]}
      if version_2_with_negative:
        qa["is_impossible"] = False
      out_qas.append(qa)
    if version_2_with_negative:
      for t, qid, q in UNANSWERABLE:
        if t == title:
          out_qas.append({"id": qid, "question": q, "answers": [], "is_impossible": True,
                          "plausible_answers": [{"text": "John Smith", "answer_start": context.index("John")}]})
    data.append({"title": title, "paragraphs": [{"context": context, "qas": out_qas}]})
  return {"version": "v2.0" if version_2_with_negative else "1.1", "data": data}


def write_squad(directory: str, version_2_with_negative: bool = False) -> str:
  os.makedirs(directory, exist_ok=True)
  v = "v2.0" if version_2_with_negative else "v1.1"
  obj = squad_json(version_2_with_negative)
  for split in ("train", "dev"):
    with open(os.path.join(directory, f"{split}-{v}.json"), "w", encoding="utf-8") as f:
      json.dump(obj, f, ensure_ascii=False)
  return directory


CONLL_SENTENCES = [
    (["John", "Smith", "lives", "in", "New", "York", "."], ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"]),
    (["The", "cat", "sat", "in", "Berlin", "."], ["O", "O", "O", "O", "B-LOC", "O"]),
    (["Bert", "won", "the", "game", "in", "Germany", "."], ["B-PER", "O", "O", "O", "O", "B-LOC", "O"]),
    (["我", "住", "在", "北", "京", "。"], ["O", "O", "O", "B-LOC", "I-LOC", "O"]),
]


def write_conll(directory: str, with_pos: bool = True) -> str:
  """train/dev/test.txt in CoNLL-2003 layout (`word POS chunk NER`, -DOCSTART- lines) or two columns."""
  os.makedirs(directory, exist_ok=True)
  for split in ("train", "dev", "test"):
    lines = ["-DOCSTART- -X- -X- O" if with_pos else "-DOCSTART- O", ""]
    for words, tags in CONLL_SENTENCES:
      for w, t in zip(words, tags):
        lines.append(f"{w} NNP B-NP {t}" if with_pos else f"{w}\t{t}")
      lines.append("")
    _write(os.path.join(directory, f"{split}.txt"), lines)
  return directory


CLASSIFICATION_ROWS = [("1", "这本书很好"), ("0", "这电影不好"), ("1", "我很喜欢这本书"), ("0", "不喜欢"),
                       ("1", "上海很好"), ("0", "这本书不好看")]


def write_classification(directory: str) -> str:
  """ChnSentiCorp-style `label\\ttext_a` files with a header row."""
  for split in ("train", "dev", "test"):
    _write(os.path.join(directory, f"{split}.tsv"),
           ["label\ttext_a"] + [f"{l}\t{t}" for l, t in CLASSIFICATION_ROWS])
  return directory
