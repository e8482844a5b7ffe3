r"""Command line: python -m bert_jax.export {savedmodel, onnx, stablehlo, sentence-transformers} [--flags].

  python -m bert_jax.export savedmodel --model=runs/ft_chnsenticorp --output=export/senti_tf
  python -m bert_jax.export onnx --model=runs/ft_chnsenticorp --output=export/senti_onnx
  python -m bert_jax.export stablehlo --model=converted/minilm --output=export/minilm_hlo --task_head=features
  python -m bert_jax.export sentence-transformers --model=converted/minilm --output=export/minilm_st

--model takes what predict takes: a fine-tuning work dir, a pre-training work dir, a converted params dir or a
zoo name. Each export is run on a handful of texts and compared with predict before it is kept (1e-4 in
float32); it writes signature.json and a README.md with a serving command. Mistakes print one `error:` line.
"""

from __future__ import annotations

import argparse
import os
import sys

# TensorFlow's and XLA's start-up notices (oneDNN, CUDA probes: "E0000 ... cuInit") behind --verbose.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv else "3")

from bert_jax import cli  # noqa: E402
from bert_jax.export import writer  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
  p = cli.ArgumentParser(prog="python -m bert_jax.export", description=__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("format", choices=writer.FORMATS)
  p.add_argument("--model", required=True, help="work dir, params dir or zoo name")
  p.add_argument("--output", required=True, help="folder to write (replaced only when the export passes)")
  p.add_argument("--task_head", default="auto", help="auto (the fine-tuned head, else features) | task | features")
  p.add_argument("--max_seq_length", type=int, default=None, help="default: the fine-tuned length, else 128")
  p.add_argument("--batch", default="polymorphic", help="polymorphic, or a fixed batch size (onnx, stablehlo)")
  p.add_argument("--pooling", default=None, help="features: cls | first | mean | max | last | lexical (learned "
                 "weights of the text's tokens) | lexical_log (log(1 + those)) | splade (the MLM head's sparse "
                 "vector) (default: recorded)")
  p.add_argument("--normalize", default=None, action=argparse.BooleanOptionalAction,
                 help="features: L2-normalise (default: what the model records)")
  return p


def main(argv) -> int:
  args = build_parser().parse_args(argv)
  result = writer.export(args.format, args.model, args.output, args.task_head, args.max_seq_length, args.batch,
                         args.pooling, args.normalize)
  print(writer.closing_line(result))
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)
