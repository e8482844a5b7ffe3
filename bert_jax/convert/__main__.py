"""Command line: python -m bert_jax.convert {import-tf, import-hf, import-uer, export-hf, zoo, rank} [--flags].

Run `python -m bert_jax.convert COMMAND --help` for each command's flags.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys

from bert_jax import cli
from bert_jax.convert import hf_albert, rank
from bert_jax.convert import hf_electra, hf_modernbert
from bert_jax.convert.google_tf import import_tf_checkpoint
from bert_jax.convert.hf import import_hf, resolve_model_folder, write_hf
from bert_jax.convert.mapping import ConversionError
from bert_jax.convert.uer import import_uer
from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.pretrained import zoo
from bert_jax.pretrained.load import load_pretrained


def _bool(s: str) -> bool:
  if s.lower() in ("1", "true", "yes"):
    return True
  if s.lower() in ("0", "false", "no"):
    return False
  raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


def build_parser() -> argparse.ArgumentParser:
  # cli.ArgumentParser: a bad flag or command is one `error:` line (it was argparse's usage block), and --help
  # lists --verbose and --strict
  p = cli.ArgumentParser(prog="python -m bert_jax.convert", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="command", required=True)

  t = sub.add_parser("import-tf", help="Google TF1 checkpoint (BERT, ELECTRA or ALBERT) -> DIR")
  t.add_argument("--checkpoint", required=True,
                 help="checkpoint prefix (e.g. .../bert_model.ckpt), one of its files, or its folder")
  t.add_argument("--config", default=None,
                 help="bert_config.json (default: next to the checkpoint; albert_config.json for ALBERT)")
  t.add_argument("--vocab", default=None, help="vocab.txt (default: next to the checkpoint)")
  t.add_argument("--generator_config", default=None,
                 help="ELECTRA: the generator's config JSON, read for its num_attention_heads (default: "
                      "generator.json next to the checkpoint, as in HFL's zips)")
  t.add_argument("--generator_heads", type=int, default=None,
                 help="ELECTRA: the generator's attention heads (default: --generator_config's, else "
                      "google-research/electra's hidden / 64)")
  t.add_argument("--output", required=True, help="output directory")
  t.add_argument("--do_lower_case", type=_bool, default=None,
                 help="tokenizer casing (default: from the folder name 'uncased'/'cased', else the vocab)")

  h = sub.add_parser("import-hf", help="Hugging Face BERT, ALBERT, ELECTRA or ModernBERT folder -> DIR")
  h.add_argument("--input", required=True, help="folder with config.json, model.safetensors, vocab.txt")
  h.add_argument("--output", required=True, help="output directory")
  h.add_argument("--vocab", default=None, help="vocab.txt (default: in the folder, or from tokenizer.json)")
  h.add_argument("--do_lower_case", type=_bool, default=None,
                 help="tokenizer casing (default: tokenizer_config.json, else guessed from the vocab)")
  h.add_argument("--ignore", default="",
                 help="comma-separated regexes of source keys to drop on purpose, e.g. '^classifier\\.'")

  u = sub.add_parser("import-uer", help="UER-py BERT checkpoint (model.bin + config.json) -> DIR")
  u.add_argument("--input", required=True, help="UER state dict: model.bin (torch, weights only) or .safetensors")
  u.add_argument("--config", required=True, help="UER's model config.json (e.g. models/bert/base_config.json)")
  u.add_argument("--vocab", default=None, help="vocab.txt (default: vocab.txt beside --input)")
  u.add_argument("--output", required=True, help="output directory")
  u.add_argument("--do_lower_case", type=_bool, default=None, help="tokenizer casing (default: from the vocab)")

  e = sub.add_parser("export-hf", help="DIR -> Hugging Face folder (ALBERT's layout for embedding_size > 0)")
  e.add_argument("--input", required=True, help="our checkpoint directory")
  e.add_argument("--output", required=True, help="output Hugging Face folder")
  e.add_argument("--heads", default="auto", choices=("auto", "pretraining", "mlm", "none"),
                 help="pretraining: BertForPreTraining; mlm: BertForMaskedLM; none: bare BertModel (the Albert* "
                      "classes for an ALBERT model); auto (default): the first of these whose heads the "
                      "checkpoint holds trained (not initialised at conversion); for a fine-tuned task head, "
                      "its BertFor* / AlbertFor* / ModernBertFor* class (sequence / token classification, QA, "
                      "multiple choice)")

  z = sub.add_parser("zoo", help="list the registry of public checkpoints")
  z.add_argument("--name", default=None, help="show one entry with its download and convert commands")
  z.add_argument("--filter", default="", help="only names/languages/corpora containing this text")

  r = sub.add_parser("rank", help="rank checkpoints by masked-LM loss on a sample of a text file")
  r.add_argument("--checkpoints", required=True, help="comma-separated checkpoint dirs or zoo names")
  r.add_argument("--text", required=True, help="unlabeled text, one sentence/paragraph per line")
  r.add_argument("--num_sequences", type=int, default=64)
  r.add_argument("--max_seq_length", type=int, default=128)
  r.add_argument("--masked_lm_prob", type=float, default=0.15)
  r.add_argument("--batch_size", type=int, default=16)
  r.add_argument("--seed", type=int, default=0)
  r.add_argument("--output_json", default=None)
  return p


def _check_paths(args) -> None:
  """The files a user names by flag exist, and --output is a directory or can be one, before any conversion
  work (an --output naming a file was a FileExistsError traceback after the import; a missing --vocab an
  errno message that did not say which flag)."""
  for flag in ("vocab", "config", "generator_config", "text"):
    path = getattr(args, flag, None)
    if path and not os.path.isfile(path):
      raise UserError(f"--{flag}={path}: " + ("a directory; expected a file" if os.path.isdir(path)
                                                else "no such file"))
  for pattern in (x for x in (getattr(args, "ignore", "") or "").split(",") if x):
    try:
      re.compile(pattern)
    except re.error as e:   # was a re.error traceback from inside the importer
      raise UserError(f"--ignore: {pattern!r} is not a regular expression ({e})") from None
  for flag in ("num_sequences", "max_seq_length", "batch_size"):
    value = getattr(args, flag, None)
    if value is not None and value < 1:
      raise UserError(f"--{flag}={value}; expected >= 1")
  output = getattr(args, "output", None)
  if args.command in ("import-tf", "import-hf", "import-uer", "export-hf") and output:
    parent = os.path.dirname(os.path.abspath(output))
    while parent and not os.path.exists(parent) and os.path.dirname(parent) != parent:
      parent = os.path.dirname(parent)
    if os.path.exists(output) and not os.path.isdir(output):
      raise UserError(f"--output={output} is a file; expected a directory (created if absent)")
    if not os.path.isdir(parent):
      raise UserError(f"--output={output}: {parent} is a file, so the directory cannot be created")
    held = sorted(os.listdir(output)) if os.path.isdir(output) else []
    if held:
      # Re-converting into the same folder is a normal workflow, so this is no error, but it was silent: a
      # mistyped --output replaced another model's files without a word.
      shown = ", ".join(held[:6]) + (f", ... ({len(held)} entries)" if len(held) > 6 else "")
      print(f"warning: --output={output} is not empty ({shown}); files of the same name are overwritten",
            file=sys.stderr)


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  if args.command == "zoo":
    if args.name:
      if args.name not in zoo.REGISTRY:
        # One `error:` line (exit 2) as every other mistake; a folder's name also said nothing at all.
        close = difflib.get_close_matches(args.name, list(zoo.REGISTRY), n=3)
        raise UserError(f"--name={args.name!r} is not a zoo model name; "
                        + (f"did you mean {close}?" if close else "`python -m bert_jax.convert zoo` lists the names"))
      x = zoo.REGISTRY[args.name]
      print(f"{x.name}: {x.size}, {x.params:,} params, {x.language}, {'cased' if x.cased else 'uncased'}, "
            f"{x.corpus}{'; ' + x.note if x.note else ''}\nformat: {x.fmt}; source: {x.url}"
            + (f" (also on Hugging Face: {x.hf_repo})" if x.hf_repo else "")
            + f"\nto fetch and convert:\n{x.how_to_convert()}")
      return 0
    f = args.filter.lower()
    entries = [x for x in zoo.REGISTRY.values()
               if not f or f in x.name.lower() or f in x.language.lower() or f in x.corpus.lower()]
    print(zoo.format_table(entries))
    return 0

  _check_paths(args)
  if args.command == "import-hf":
    resolved = resolve_model_folder(args.input)
    if resolved != args.input:
      print(f"reading the model in {resolved} ({args.input} has no config.json; this subfolder holds the model)")
      args.input = resolved
  try:
    if args.command == "import-tf" and hf_electra.is_electra_tf_checkpoint(args.checkpoint):
      folder = (args.checkpoint if os.path.isdir(args.checkpoint)   # the unzipped folder, or a prefix in it
                else os.path.dirname(os.path.abspath(args.checkpoint)))
      # HFL's Chinese ELECTRA zips ship discriminator.json (+ generator.json) instead of a config.json.
      config = args.config or next((os.path.join(folder, n) for n in ("config.json", "discriminator.json")
                                    if os.path.exists(os.path.join(folder, n))), os.path.join(folder, "config.json"))
      generator_json = args.generator_config or next(
          (p for p in [os.path.join(folder, "generator.json")] if os.path.isfile(p)), None)
      _, _, _, report = hf_electra.import_tf_electra(args.checkpoint, config, args.output, vocab_file=args.vocab,
                                                     do_lower_case=args.do_lower_case,
                                                     generator_config=generator_json,
                                                     generator_heads=args.generator_heads)
      print(report.summary())
      print(f"wrote {args.output}")
    elif args.command == "import-tf":
      if args.generator_heads is not None or args.generator_config:
        raise UserError(f"--generator_heads / --generator_config apply to ELECTRA checkpoints (electra/ and "
                        f"generator/ variables); {args.checkpoint} is not one")
      _, _, report = import_tf_checkpoint(args.checkpoint, args.output, config_file=args.config,
                                          vocab_file=args.vocab, do_lower_case=args.do_lower_case)
      print(report.summary())
      print(f"wrote {args.output}")
    elif args.command == "import-hf" and hf_electra.is_electra_folder(args.input):
      ignore = [x for x in args.ignore.split(",") if x]
      _, _, report = hf_electra.import_hf_electra(args.input, args.output, vocab_file=args.vocab,
                                                  do_lower_case=args.do_lower_case, ignore=ignore)
      print(report.summary())
      print(f"wrote {args.output}")
    elif args.command == "import-hf":
      ignore = [x for x in args.ignore.split(",") if x]
      importer = (hf_modernbert.import_hf_modernbert if hf_modernbert.is_modernbert_folder(args.input) else
                  hf_albert.import_hf_albert if hf_albert.is_albert_folder(args.input) else import_hf)
      _, _, report = importer(args.input, args.output, vocab_file=args.vocab, do_lower_case=args.do_lower_case,
                              ignore=ignore)
      print(report.summary())
      print(f"wrote {args.output}")
    elif args.command == "import-uer":
      _, _, report = import_uer(args.input, args.config, args.output, vocab_file=args.vocab,
                                do_lower_case=args.do_lower_case)
      print(report.summary())
      print(f"wrote {args.output}")
    elif args.command == "export-hf" and hf_electra.is_electra_dir(args.input):
      report = hf_electra.export_electra(args.input, args.output, heads=args.heads)
      print(f"wrote {report.loaded} tensors to {args.output}")
      for n in report.notes:
        print(n)
    elif args.command == "export-hf":
      ckpt = load_pretrained(args.input)
      writer = (hf_modernbert.write_modernbert if hf_modernbert.is_modernbert(ckpt.config) else
                hf_albert.write_albert if hf_albert.is_albert(ckpt.config) else write_hf)
      report = writer(ckpt, args.output, heads=args.heads, source=args.input)
      print(f"wrote {report.loaded} tensors to {args.output}")
      for n in report.notes:
        print(n)
    elif args.command == "rank":
      rows = rank.rank_checkpoints([c for c in args.checkpoints.split(",") if c], args.text,
                                   num_sequences=args.num_sequences, max_seq_length=args.max_seq_length,
                                   masked_lm_prob=args.masked_lm_prob, seed=args.seed,
                                   batch_size=args.batch_size)
      print(rank.format_table(rows))
      if args.output_json:   # temp + fsync + rename: a reader never sees half a table
        fileio.write_text_atomic(args.output_json, json.dumps(rows, indent=2) + "\n")
  except (ConversionError, FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError,
          PermissionError, ValueError) as err:
    # A missing or malformed input: one `error:` line and exit 2 via cli.run_plain_main (--verbose: the
    # traceback), like every other entry point.
    raise UserError(str(err)) from err
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback); --strict
