r"""How much the passage moves a multiple-choice model's scores: at random init and for a fine-tuned checkpoint.

  python -m experiments.multiple_choice_diag --data_dir=DATA/sentiment_mc --vocab_file=DATA/vocab.txt \
      --checkpoint=/tmp/ft_mc/best_checkpoint [--questions=200]

For `questions` dev questions of a two-choice set it prints, for the checkpoint and for a fresh random init of
the same architecture: the spread of the scores over all rows, the mean and spread over passages of the score
difference s(choice 0) - s(choice 1), its correlation with the gold answer, and the spread of the pooled
vector over rows. A model that ignores the passage has a difference that does not vary with it (issue 25).
"""

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.finetune.tasks import get_task  # noqa: E402
from bert_jax.input_pipeline.tokenization import FullTokenizer  # noqa: E402
from bert_jax.models import heads  # noqa: E402
from bert_jax.models.bert import BertModel  # noqa: E402
from bert_jax.pretrained import load_pretrained  # noqa: E402


def passage_sensitivity(cfg, params, features):
  """{score_std, diff_mean, diff_std_over_passages, diff_label_corr, pooled_std_over_rows} of a two-choice set."""
  model = heads.BertForMultipleChoice(cfg)
  scores = np.asarray(model.apply({"params": params}, features["input_ids"], features["input_mask"],
                                  features["segment_ids"], choice_mask=features["choice_mask"])["logits"])
  b, c, t = features["input_ids"].shape
  flat = {k: features[k].reshape(b * c, t) for k in ("input_ids", "input_mask", "segment_ids")}
  enc = BertModel(cfg).apply({"params": params["bert"]}, flat["input_ids"], flat["input_mask"],
                                   flat["segment_ids"])
  diff = scores[:, 0] - scores[:, 1]
  return {"score_std": float(scores.std()), "diff_mean": float(diff.mean()),
          "diff_std_over_passages": float(diff.std()),
          "diff_label_corr": float(np.corrcoef(diff, features["label_ids"] == 0)[0, 1]),
          "pooled_std_over_rows": float(np.asarray(enc["pooled_output"]).std(0).mean())}


def main(argv=None):
  parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--data_dir", required=True, help="a C3-format two-choice set (data/snownlp_mc.py)")
  parser.add_argument("--vocab_file", required=True)
  parser.add_argument("--checkpoint", required=True, help="a fine-tuned best_checkpoint/ directory")
  parser.add_argument("--questions", type=int, default=200, help="dev questions to score")
  parser.add_argument("--max_seq_length", type=int, default=64)
  args = parser.parse_args(argv)
  for flag in ("data_dir", "checkpoint"):
    if not os.path.isdir(getattr(args, flag)):
      raise UserError(f"--{flag}={getattr(args, flag)}: no such directory")
  if not os.path.isfile(args.vocab_file):
    raise UserError(f"--vocab_file={args.vocab_file}: no such file")
  if args.questions < 1 or args.max_seq_length < 8:
    raise UserError(f"--questions={args.questions} / --max_seq_length={args.max_seq_length}; expected >= 1 / >= 8")
  tok = FullTokenizer(args.vocab_file, do_lower_case=True)
  task = get_task("c3")
  examples = list(task.read("dev", args.data_dir))[:args.questions]
  features = task.featurize(examples, tok, args.max_seq_length)
  ck = load_pretrained(args.checkpoint)
  cfg = ck.config.replace(dtype="float32")
  fresh = heads.BertForMultipleChoice(cfg).init(
      jax.random.PRNGKey(0), features["input_ids"][:2], features["input_mask"][:2], features["segment_ids"][:2],
      choice_mask=features["choice_mask"][:2])["params"]
  for name, params in (("checkpoint", ck.params), ("random init", nn.unbox(fresh))):
    r = passage_sensitivity(cfg, params, features)
    print(f"{name:12s} " + "  ".join(f"{k} {v:.3g}" for k, v in r.items()))


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
