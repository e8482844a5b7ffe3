#!/usr/bin/env bash
# Downloads Google's BERT-base checkpoints (uncased for GLUE/SQuAD, cased for CoNLL-2003 NER), converts them
# with bert_jax.convert, and builds the TFDS datasets, all under ROOT. Needs network; run once.
#   bash experiments/reproduce_paper/prepare.sh /data/bert_repro
set -euo pipefail
ROOT=${1:?usage: prepare.sh ROOT}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$ROOT/google" "$ROOT/converted" "$ROOT/tensorflow_datasets"
ROOT=$(cd "$ROOT" && pwd)   # absolute: the steps below run in $ROOT/google and in the repository
cd "$ROOT/google"
for name in uncased_L-12_H-768_A-12 cased_L-12_H-768_A-12; do
  if [ ! -f "$name/bert_model.ckpt.index" ]; then
    wget -q "https://storage.googleapis.com/bert_models/2018_10_18/$name.zip"
    unzip -q -o "$name.zip" && rm "$name.zip"
  fi
  (cd "$REPO" && python -m bert_jax.convert import-tf --checkpoint="$ROOT/google/$name/bert_model.ckpt" \
      --output="$ROOT/converted/$name")
done
# glue/* from the GLUE site, squad/v1.1 from the SQuAD site, conll2003 from its mirror (TFDS's URLs).
for ds in glue/mnli glue/qnli glue/mrpc glue/sst2 squad/v1.1 conll2003; do
  python -c "import sys, tensorflow_datasets as tfds; tfds.builder(sys.argv[1], data_dir=sys.argv[2]).download_and_prepare()" \
      "$ds" "$ROOT/tensorflow_datasets"
done
echo "ready: $ROOT/converted and $ROOT/tensorflow_datasets"
