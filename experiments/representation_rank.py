r"""How many directions does an encoder use? Residual-stream norm and effective rank per layer, on real text.

  python -m experiments.representation_rank --tsv=DATA/sentiment/dev.tsv --checkpoints=DIR_A,DIR_B

For each checkpoint (a pre-training work dir, a params directory or a zoo name: bert_jax.pretrained), the first
`--examples` rows of the TSV's `--column` (default text_a, the fine-tuning TSVs' text column) are tokenized with
the checkpoint's own vocab and run through its encoder (`bert` params; ELECTRA: the discriminator). Over every
non-padding token it reports, after each encoder layer and at the encoder's output:
  |h|   the mean L2 norm of the token states (pre-LN: the residual stream, which no layer norm bounds);
  rank  the effective rank of the centred token states: exp(entropy of sigma_i^2 / sum sigma^2) over their
        singular values (Roy & Vetterli 2007): H for isotropic states, 1 when a single direction carries them.

Why: a discriminator that cannot yet tell the generator's samples from the original tokens can only learn a
per-token prior, a scalar; experiments/objectives.md shows ELECTRA-mini's encoder collapsing to rank ~1-2 in
that regime (BERT-mini's MLM keeps ~90), and that such a checkpoint fine-tunes below a random initialisation.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List

import numpy as np

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax.errors import UserError  # noqa: E402


def effective_rank(states: np.ndarray) -> float:
  """exp(entropy) of the normalised squared singular values of the centred rows of `states` [N, H]."""
  x = np.asarray(states, np.float64)
  x = x - x.mean(axis=0)
  sv2 = np.linalg.svd(x, compute_uv=False) ** 2
  total = sv2.sum()
  if total <= 0:
    return 0.0
  p = sv2[sv2 > 0] / total
  return float(np.exp(-(p * np.log(p)).sum()))


def read_texts(path: str, column: str, limit: int) -> List[str]:
  """The `column` of the first `limit` rows of a TSV with a header row (the fine-tuning readers' TSV rules:
  literal quotes, UTF-8); UserError naming the file (and line) otherwise."""
  from bert_jax.finetune.tasks.common import read_tsv_lines
  if not os.path.isfile(path):
    raise UserError(f"--tsv={path}: no such file")
  lines = read_tsv_lines(path)
  _, header = next(lines, (None, None))
  if not header or column not in header:
    raise UserError(f"{path}: the header row {header} has no column {column!r} (--column)")
  at = header.index(column)
  texts = []
  for line, row in lines:
    if len(row) <= at:
      raise UserError(f"{path}:{line}: {len(row)} fields, expected at least {at + 1} (column {column!r})")
    texts.append(row[at])
    if len(texts) == limit:
      break
  if not texts:
    raise UserError(f"{path}: no rows below the header")
  return texts


def encode(texts: List[str], vocab_file: str, do_lower_case: bool, max_seq_length: int) -> Dict[str, np.ndarray]:
  """[CLS] text [SEP], truncated and padded as the fine-tuning tasks pack a single sentence."""
  from bert_jax.finetune.tasks.common import model_inputs, pack_pair, special_ids
  from bert_jax.input_pipeline.tokenization import FullTokenizer
  tok = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  cls_id, sep_id = special_ids(tok)
  packed = [pack_pair(tok.convert_tokens_to_ids(tok.tokenize(t)), None, cls_id, sep_id, max_seq_length)
            for t in texts]
  return model_inputs([ids for ids, _ in packed], [seg for _, seg in packed], max_seq_length)


def layer_stats(config, params, ids: np.ndarray, mask: np.ndarray) -> List[Dict[str, float]]:
  """[{"name", "norm", "rank"}] after each encoder layer (in order) and at the encoder's output."""
  import jax.numpy as jnp
  from bert_jax.models.bert import BertModel
  bert = params.get("bert", params)
  _, state = BertModel(config.replace(dtype="float32")).apply(
      {"params": bert}, jnp.asarray(ids), jnp.asarray(mask), capture_intermediates=True, mutable=["intermediates"])
  encoder = state["intermediates"]["encoder"]
  layers = sorted((k for k in encoder if k.startswith("layer_")), key=lambda k: int(k.split("_")[1]))
  keep = mask > 0
  out = []
  for name, value in [(k, encoder[k]["__call__"][0]) for k in layers] + [("output", encoder["__call__"][0])]:
    states = np.asarray(value, np.float64)[keep]
    out.append({"name": name, "norm": float(np.linalg.norm(states, axis=-1).mean()),
                "rank": effective_rank(states)})
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--checkpoints", required=True, help="comma-separated checkpoints (dirs or zoo names)")
  p.add_argument("--tsv", required=True, help="a TSV with a header row, e.g. a fine-tuning task's dev.tsv")
  p.add_argument("--column", default="text_a")
  p.add_argument("--examples", type=int, default=256)
  p.add_argument("--max_seq_length", type=int, default=64)
  p.add_argument("--verbose", action="store_true", help="tracebacks on errors")
  args = p.parse_args(argv)
  try:
    if args.examples < 2 or args.max_seq_length < 3:
      raise UserError(f"--examples={args.examples} / --max_seq_length={args.max_seq_length}: expected at least "
                       "2 examples and 3 positions")
    texts = read_texts(args.tsv, args.column, args.examples)
    from bert_jax.pretrained import load_pretrained
    print(f"{len(texts)} rows of {args.tsv} ({args.column}), {args.max_seq_length} positions")
    print("| checkpoint | layer norm | " + "per layer: |h| / effective rank (of H) |", "|---|---|---|", sep="\n")
    for name in filter(None, args.checkpoints.split(",")):
      ck = load_pretrained(name)
      inputs = encode(texts, ck.require_vocab(), True if ck.do_lower_case is None else ck.do_lower_case,
                      args.max_seq_length)
      cells = "; ".join(f"{s['name']} {s['norm']:.0f} / {s['rank']:.1f}"
                        for s in layer_stats(ck.config, ck.params, inputs["input_ids"], inputs["input_mask"]))
      print(f"| {name} | {ck.config.layer_norm_type} | {cells} (of {ck.config.hidden_size}) |", flush=True)
  except (UserError, FileNotFoundError) as e:   # a flag, file or row; anything else is a bug: traceback
    if args.verbose:
      raise
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
