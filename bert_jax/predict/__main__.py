r"""Command line: python -m bert_jax.predict {fill-mask, features, classify} [--flags].

  python -m bert_jax.predict fill-mask --model=runs/bert_tiny --text="今天天气很[MASK]。" --top_k=5
  python -m bert_jax.predict features --model=converted/minilm --input=texts.txt --output=features.npy \
      --pooling=mean                                   # or --output=features.jsonl ({"text", "embedding"})
  python -m bert_jax.predict classify --model=runs/chnsenticorp --input=reviews.txt [--output=preds.jsonl]
      # one JSON row per input line: {"line": 1, "text": "...", "label": "pos", "probabilities": {...}}

--model takes a zoo name, a converted directory, a pre-training or a fine-tuning work dir. Texts are packed
several to a row, each attending only to itself (--packing=false: one padded row per text; the same outputs,
in the same order). Input files have one text per line (classify --pairs: `text<TAB>text_pair`; multiple-choice models: one JSON question per line).
Mistakes in the flags or inputs print one `error: ...` line and exit with status 2.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys

import numpy as np

from bert_jax import cli, fileio
from bert_jax import predict as lib
from bert_jax.errors import UserError


def _bool(value: str) -> bool:
  v = str(value).strip().lower()
  if v in ("true", "1", "yes"):
    return True
  if v in ("false", "0", "no"):
    return False
  raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _add_packing(parser) -> None:
  parser.add_argument("--packing", type=_bool, default=True, metavar="{true,false}",
                      help="pack several texts per row (default true; false: one padded row per text)")


def build_parser() -> argparse.ArgumentParser:
  # cli.ArgumentParser: a bad flag or command is one `error:` line (it was argparse's usage block), and --help
  # lists --verbose and --strict
  p = cli.ArgumentParser(prog="python -m bert_jax.predict", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="command", required=True)
  f = sub.add_parser("fill-mask", help="top-k tokens for each [MASK] (needs the masked-LM head)")
  f.add_argument("--model", required=True, help="zoo name or checkpoint / work directory")
  f.add_argument("--text", action="append", default=[], help="text with [MASK] (repeatable)")
  f.add_argument("--input", default="", help="file of texts with [MASK], one per line")
  f.add_argument("--top_k", type=int, default=5, help="candidates per mask")
  f.add_argument("--output", default="", help="write JSON lines here instead of a table on stdout")
  f.add_argument("--batch_size", type=int, default=16)
  f.add_argument("--max_seq_length", type=int, default=128)
  _add_packing(f)
  e = sub.add_parser("features", help="sentence vectors of a text file -> .npy or .jsonl")
  e.add_argument("--model", required=True)
  e.add_argument("--input", required=True, help="one text per line (row i of the output = line i)")
  e.add_argument("--output", required=True, help="features.npy ([N, H] float32; [N, V] for splade / lexical[_log]) or "
                 "features.jsonl")
  e.add_argument("--pooling", default=None, help="cls | first | mean | max | last | splade (the masked-LM head's "
                 "vocabulary-sized vector) | lexical (a learned weight per token, summed per vocabulary entry) "
                 "| lexical_log (log(1 + that sum)) "
                 "(default: what the model records, e.g. an imported "
                 "sentence-transformers model's Pooling, else mean)")
  e.add_argument("--normalize", default=None, action=argparse.BooleanOptionalAction,
                 help="L2-normalise the vectors (default: what the model records, else no)")
  e.add_argument("--queries", action="store_true", help="the texts are queries: for an inference-free sparse "
                 "model (fine-tuned with embedding.query_encoder=idf) each is the set of its tokens at their IDF "
                 "weight; other models encode queries as passages")
  e.add_argument("--batch_size", type=int, default=32)
  e.add_argument("--max_seq_length", type=int, default=None,
                 help="default: the model's recorded sentence max_seq_length, else 128")
  _add_packing(e)
  c = sub.add_parser("classify", help="predictions of a fine-tuned work dir on a text file")
  c.add_argument("--model", required=True, help="fine-tuning work dir (or its best_checkpoint/)")
  c.add_argument("--input", required=True, help="one text per line")
  c.add_argument("--pairs", action="store_true", help="lines are text<TAB>text_pair (pair tasks, SQuAD)")
  c.add_argument("--output", default="", help="JSON lines here (default: stdout)")
  c.add_argument("--batch_size", type=int, default=32)
  _add_packing(c)
  return p


def _jsonl(rows) -> bytes:
  return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def with_inputs(rows, texts, pairs=None) -> list:
  """Each prediction row led by the input it answers: {"line": its 1-based line number in --input, "text"
  (and "text_pair" with --pairs), then the task's fields}. Rows carried only the label and probabilities, so
  a reader had to count lines to know which text a prediction was for (empty lines are rows too)."""
  out = []
  for i, row in enumerate(rows):
    lead = {"line": i + 1, "text": texts[i]}
    if pairs is not None:
      lead["text_pair"] = pairs[i]
    out.append({**lead, **{k: v for k, v in row.items() if k not in lead}})
  return out


def _check_output(path: str) -> None:
  """--output is a file name whose folder exists or can be made, checked before the model runs (a folder under
  a file, or a missing folder, was a NotADirectoryError / FileNotFoundError traceback after the predictions)."""
  if not path:
    return
  if os.path.isdir(path):
    raise UserError(f"--output={path} is a directory; expected a file name")
  parent = os.path.dirname(os.path.abspath(path))
  up = parent
  while not os.path.exists(up) and os.path.dirname(up) != up:
    up = os.path.dirname(up)
  if not os.path.isdir(up):
    raise UserError(f"--output={path}: {up} is a file, so the folder cannot be created")
  os.makedirs(parent, exist_ok=True)


def run(args) -> int:
  for flag in ("batch_size", "max_seq_length", "top_k"):   # 0 was a ZeroDivisionError traceback (batch_size)
    value = getattr(args, flag, None)
    if value is not None and value < 1:
      raise UserError(f"--{flag}={value}; expected >= 1")
  _check_output(getattr(args, "output", ""))
  if args.command == "fill-mask":
    texts = list(args.text) + (lib.read_lines(args.input) if args.input else [])
    if not texts:
      raise UserError("give --text='...[MASK]...' or --input=FILE")
    rows = lib.FillMask(args.model, args.batch_size, args.max_seq_length, args.packing).predict(texts, args.top_k)
    if args.output:
      fileio.write_bytes_atomic(args.output, _jsonl(rows))
      print(f"wrote {len(rows)} rows to {args.output}")
    else:
      for r in rows:
        print(r["text"])
        for m in r["masks"]:
          print(f"  [MASK] at {m['position']}: " + "  ".join(f"{c['token']} ({c['score']:.3f})"
                                                          for c in m["candidates"]))
    return 0
  if args.command == "features":
    ext = os.path.splitext(args.output)[1].lower()
    if ext not in (".npy", ".jsonl"):
      raise UserError(f"--output={args.output}: expected a .npy or .jsonl file name")
    texts = lib.read_lines(args.input)
    if not texts:
      raise UserError(f"--input={args.input} is empty")
    fx = lib.FeatureExtractor(args.model, args.pooling, args.batch_size, args.max_seq_length, args.packing,
                              normalize=args.normalize)
    vecs = fx.encode_queries(texts) if args.queries else fx.encode(texts)
    if ext == ".npy":
      buf = io.BytesIO()
      np.save(buf, vecs)
      fileio.write_bytes_atomic(args.output, buf.getvalue())
    else:
      fileio.write_bytes_atomic(args.output, _jsonl({"text": t, "embedding": [round(float(x), 6) for x in v]}
                                        for t, v in zip(texts, vecs)))
    note = f"; {fx.truncated} text(s) truncated to {fx.max_seq_length} tokens" if fx.truncated else ""
    if fx.layout is not None:   # the padding share before and after packing
      print(f"packed {fx.layout.describe()}", file=sys.stderr)
    norm = ", L2-normalised" if fx.normalize else ""
    how = f"{fx.pooling}-pooled{norm}"
    if fx.query_idf is not None:   # an inference-free model: which side these vectors are
      how = f"IDF-weighted query{norm}" if args.queries else f"{fx.pooling}-pooled passage{norm}"
    print(f"wrote {vecs.shape[0]} x {vecs.shape[1]} {how} features to {args.output}{note}")
    return 0
  lines = lib.read_lines(args.input)
  if not lines:
    raise UserError(f"--input={args.input} is empty")
  pairs = None
  if args.pairs:
    bad = [i + 1 for i, l in enumerate(lines) if "\t" not in l]
    if bad:
      raise UserError(f"--pairs: line(s) {bad[:5]} of {args.input} have no tab (expected text<TAB>text_pair)")
    lines, pairs = zip(*(l.split("\t", 1) for l in lines))
  rows = with_inputs(lib.classify(args.model, list(lines), None if pairs is None else list(pairs), args.batch_size,
                                  args.packing), lines, pairs)
  if args.output:
    fileio.write_bytes_atomic(args.output, _jsonl(rows))
    print(f"wrote {len(rows)} predictions to {args.output}")
  else:
    sys.stdout.write(_jsonl(rows).decode("utf-8"))
  return 0


def main(argv=None) -> int:
  try:
    return run(build_parser().parse_args(argv))
  except UserError as err:
    print(f"error: {err}", file=sys.stderr)
    return UserError.exit_code


def _main_raising(argv) -> int:
  """main without its own UserError handling: cli.run_plain_main prints the `error:` line (exit 2) and, with
  --verbose, the traceback, as python -m bert_jax.convert does (--verbose was an unrecognised argument here)."""
  return run(build_parser().parse_args(argv))


if __name__ == "__main__":
  cli.run_plain_main(_main_raising)
