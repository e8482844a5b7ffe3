r"""Builds a BERT WordPiece vocab from raw text.

    python -m bert_jax.input_pipeline.build_vocab --input_files='data/*.txt' --vocab_size=8000 \
        --output=vocab.txt [--do_lower_case] [--min_frequency=2]

Output: one token per line, ids = line numbers: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then every
character seen (and its "##" continuation form when it occurs inside a word), then learned multi-character
pieces, up to `vocab_size` entries (an error when the special tokens and the characters alone need more). Text is split with BERT's basic tokenizer first, so every CJK ideograph
is its own word: a Chinese corpus yields a character vocab (plus pieces for the digits/Latin words in it).

Training uses the Hugging Face `tokenizers` WordPiece trainer (Rust) when installed; otherwise a small
pure-Python BPE-style trainer (same output format, slower; fine for a few MB of text).

A byte-level BPE tokenizer.json instead (ModernBERT's kind of tokenizer; `vocab_file` may name it):

    python -m bert_jax.input_pipeline.build_vocab --model=bpe --input_files='data/*.txt' --vocab_size=8000 \
        --output=tokenizer.json [--no-do_lower_case]

It is GPT-2's byte-level BPE as ModernBERT's: no unknown token (every byte has a piece), a space before a word
kept in its first piece ("Ġword"), the BERT-style specials [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 ([MASK]
takes the space before it, as ModernBERT's) and a
post-processor that adds "[CLS] A [SEP]" / "[CLS] A [SEP] B [SEP]", trained by the `tokenizers` BPE trainer;
`--do_lower_case` adds a Lowercase normaliser. transformers' PreTrainedTokenizerFast(tokenizer_file=...) loads it.
"""

from __future__ import annotations

import argparse
import collections
import os
from typing import Dict, Iterable, List, Optional, Sequence

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.input_pipeline import checks
from bert_jax import fileio
from bert_jax.input_pipeline import text_io
from bert_jax.input_pipeline import tokenization

SPECIAL_TOKENS = list(tokenization.SPECIAL_TOKENS)  # [PAD] [UNK] [CLS] [SEP] [MASK] -> ids 0..4


def _iter_lines(files: Sequence[str], stats: text_io.ReadStats) -> Iterable[str]:
  for doc in text_io.read_documents(files, stats, text_io.Utf8Rule(flag="")):   # a GBK file: the iconv fix
    yield from doc


def _train_with_tokenizers(lines: List[str], vocab_size: int, do_lower_case: bool,
                           min_frequency: int) -> List[str]:
  # lazy: Hugging Face `tokenizers` is optional (the pure-Python trainer otherwise; ImportError selects it)
  from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top
  tok = Tokenizer(models.WordPiece(unk_token=tokenization.UNK))
  tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                              strip_accents=do_lower_case, lowercase=do_lower_case)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=SPECIAL_TOKENS, continuing_subword_prefix="##",
                                      show_progress=False)
  tok.train_from_iterator(lines, trainer=trainer, length=len(lines))
  vocab = tok.get_vocab()
  return [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def train_bpe(lines: Iterable[str], vocab_size: int, do_lower_case: bool, min_frequency: int):
  """A byte-level BPE `tokenizers.Tokenizer` trained on `lines` (module docstring)."""
  # lazy: Hugging Face `tokenizers` is optional for WordPiece vocabs, needed for a tokenizer.json
  from tokenizers import (AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers,  # pylint: disable=g-import-not-at-top
                          processors, trainers)
  tok = Tokenizer(models.BPE())
  if do_lower_case:
    tok.normalizer = normalizers.Lowercase()
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
  tok.decoder = decoders.ByteLevel()
  # [MASK] takes the space before it, as ModernBERT's and RoBERTa's ("is [MASK]" -> "is", "[MASK]")
  specials = [AddedToken(t, lstrip=t == tokenization.MASK, special=True) for t in SPECIAL_TOKENS]
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
  tok.train_from_iterator(lines, trainer=trainer)
  cls, sep = tok.token_to_id(tokenization.CLS), tok.token_to_id(tokenization.SEP)
  tok.post_processor = processors.TemplateProcessing(
      single=f"{tokenization.CLS} $A {tokenization.SEP}",
      pair=f"{tokenization.CLS} $A {tokenization.SEP} $B:1 {tokenization.SEP}:1",
      special_tokens=[(tokenization.CLS, cls), (tokenization.SEP, sep)])
  return tok


def _train_python(lines: Iterable[str], vocab_size: int, do_lower_case: bool,
                  min_frequency: int) -> List[str]:
  """A simple WordPiece-style trainer: characters, then greedy most-frequent pair merges."""
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  word_counts = collections.Counter()
  for line in lines:
    word_counts.update(basic.tokenize(line))
  # Each word as a tuple of symbols: first char plain, the rest "##"-prefixed.
  words = {w: [w[0]] + ["##" + c for c in w[1:]] for w in word_counts}
  alphabet = collections.Counter()
  for w, n in word_counts.items():
    for s in words[w]:
      alphabet[s] += n
  vocab = list(SPECIAL_TOKENS)
  vocab_set = set(vocab)
  for s, _ in sorted(alphabet.items(), key=lambda kv: (-kv[1], kv[0])):
    if s not in vocab_set:
      vocab.append(s)
      vocab_set.add(s)
  while len(vocab) < vocab_size:
    pairs = collections.Counter()
    for w, n in word_counts.items():
      syms = words[w]
      for a, b in zip(syms, syms[1:]):
        pairs[(a, b)] += n
    if not pairs:
      break
    (a, b), n = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
    if n < min_frequency:
      break
    merged = a + (b[2:] if b.startswith("##") else b)
    for w, syms in words.items():
      i, out = 0, []
      while i < len(syms):
        if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
          out.append(merged)
          i += 2
        else:
          out.append(syms[i])
          i += 1
      words[w] = out
    if merged not in vocab_set:
      vocab.append(merged)
      vocab_set.add(merged)
  return vocab   # longer than vocab_size only when the alphabet is: build_vocab raises VocabSizeError


class NoTextError(UserError, ValueError):
  """The input files hold no text: one `error:` line from the CLI, a ValueError for library callers."""


class VocabSizeError(UserError, ValueError):
  """vocab_size cannot hold the special tokens and the corpus' characters (one `error:` line from the CLI)."""


def build_vocab(input_files, vocab_size: int, output: str, do_lower_case: bool = True,
                min_frequency: int = 2, backend: str = "auto", verbose: bool = True,
                model: str = "wordpiece") -> List[str]:
  """Trains a WordPiece vocab on `input_files` (comma-separated globs or a list) and writes `output`
  (model="bpe": a byte-level BPE tokenizer.json, module docstring).

  Returns the token list (index = id), at most `vocab_size` entries. Raises ValueError (NoTextError) when
  the files hold no text, and (VocabSizeError) when vocab_size cannot hold the special tokens and every
  character of the corpus.
  """
  files = text_io.expand_globs(input_files)
  stats = text_io.ReadStats()
  lines = list(_iter_lines(files, stats))
  if not lines:
    raise NoTextError(f"no text in {files} (empty or only blank lines: {stats.empty_files})")
  if model == "bpe":
    return _write_bpe(lines, files, stats, vocab_size, output, do_lower_case, min_frequency, verbose)
  tokens: Optional[List[str]] = None
  if backend in ("auto", "tokenizers"):
    try:
      tokens = _train_with_tokenizers(lines, vocab_size, do_lower_case, min_frequency)
    except ImportError:
      if backend == "tokenizers":
        raise
  if tokens is None:
    tokens = _train_python(lines, vocab_size, do_lower_case, min_frequency)
  if tokens[:len(SPECIAL_TOKENS)] != SPECIAL_TOKENS:
    raise RuntimeError(f"trainer did not put {SPECIAL_TOKENS} first: {tokens[:8]}")
  if len(tokens) > vocab_size:
    # Both trainers keep every character seen (the `tokenizers` one whatever vocab_size says; truncating
    # would silently map the dropped characters to [UNK]), so the alphabet alone passes vocab_size.
    raise VocabSizeError(
        f"--vocab_size={vocab_size} cannot hold the {len(SPECIAL_TOKENS)} special tokens and the "
        f"{len(tokens) - len(SPECIAL_TOKENS):,} characters (with their '##' forms inside words) of "
        f"{len(files)} input file(s); expected --vocab_size >= {len(tokens):,} (more leaves room for "
        f"learned pieces)")
  fileio.makedirs(fileio.dirname(output))
  fileio.write_text_atomic(output, "".join(t + "\n" for t in tokens))
  if verbose:
    for line in stats.summary_lines():
      print(line)
    print(f"wrote {len(tokens):,} tokens to {output}")
  return tokens


def _write_bpe(lines, files, stats, vocab_size: int, output: str, do_lower_case: bool, min_frequency: int,
               verbose: bool) -> List[str]:
  alphabet = 256 + len(SPECIAL_TOKENS)      # the byte-level alphabet always stays: merges come after it
  if vocab_size < alphabet:
    raise VocabSizeError(f"--vocab_size={vocab_size} cannot hold the {len(SPECIAL_TOKENS)} special tokens and the "
                         f"256 byte pieces of a byte-level BPE; expected --vocab_size >= {alphabet} (more leaves "
                         "room for merges)")
  tok = train_bpe(lines, vocab_size, do_lower_case, min_frequency)
  tokens = [t for t, _ in sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])]
  if tokens[:len(SPECIAL_TOKENS)] != SPECIAL_TOKENS:
    raise RuntimeError(f"trainer did not put {SPECIAL_TOKENS} first: {tokens[:8]}")
  fileio.makedirs(fileio.dirname(output))
  fileio.write_text_atomic(output, tok.to_str(pretty=True))
  if verbose:
    for line in stats.summary_lines():
      print(line)
    print(f"wrote a byte-level BPE tokenizer of {len(tokens):,} tokens to {output}")
  return tokens


def main(argv=None):
  p = checks.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--input_files", required=True, help="comma-separated globs of text files")
  p.add_argument("--vocab_size", type=int, required=True)
  p.add_argument("--output", required=True)
  p.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=True)
  p.add_argument("--min_frequency", type=int, default=2, help="minimum count of a merged piece")
  p.add_argument("--backend", choices=("auto", "tokenizers", "python"), default="auto")
  p.add_argument("--model", choices=("wordpiece", "bpe"), default="wordpiece",
                 help="wordpiece: vocab.txt (BERT); bpe: a byte-level BPE tokenizer.json (ModernBERT)")
  args = p.parse_args(argv)
  if (args.model == "bpe") != tokenization.is_tokenizer_json(args.output):
    p.error(f"--output={args.output!r} with --model={args.model}; expected "
            f"{'a tokenizer.json (a .json name)' if args.model == 'bpe' else 'a vocab.txt, not a .json'}")
  if args.vocab_size < len(SPECIAL_TOKENS) + 1:
    p.error(f"--vocab_size={args.vocab_size}; expected more than the {len(SPECIAL_TOKENS)} special tokens")
  if args.min_frequency < 0:   # the tokenizers trainer raised OverflowError (a traceback) on a negative count
    p.error(f"--min_frequency={args.min_frequency}; expected >= 0")
  with fileio.storage_errors_as_user_errors(f"--input_files={args.input_files!r}"):
    try:
      files = text_io.expand_globs(args.input_files)
    except FileNotFoundError as e:
      raise UserError(f"--input_files: {e}") from e
    sizes = [fileio.size(f) for f in files]
  if not any(sizes):
    raise UserError(f"--input_files={args.input_files!r}: every file is empty ({', '.join(files[:5])})")
  with fileio.storage_errors_as_user_errors(f"--input_files={args.input_files!r}"):
    checks.check_is_text(files, f"--input_files={args.input_files!r}")
  with fileio.storage_errors_as_user_errors(f"--output={args.output!r}"):
    if fileio.isdir(args.output):
      raise UserError(f"--output={args.output!r} is a directory; give a file name such as "
                      f"{fileio.join(args.output, 'vocab.txt')}")
    directory = fileio.dirname(args.output)
    fileio.makedirs(directory)
    if not fileio.is_remote(directory) and not os.access(directory, os.W_OK):
      raise UserError(f"--output={args.output!r}: its directory {directory} is not writable")
  build_vocab(files, args.vocab_size, args.output, args.do_lower_case, args.min_frequency, args.backend,
              model=args.model)
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
