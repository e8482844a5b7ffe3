#!/usr/bin/env bash
# Pre-trains on a Cloud TPU VM pod slice: the same command runs on every worker (--worker=all); each worker
# is one JAX process, jax.distributed is initialised automatically on TPU VMs, each host reads its own shard.
#
#   TPU_NAME=bert-v4-64 ZONE=us-central2-b BUCKET=my-bucket launch/tpu_pod.sh setup
#   TPU_NAME=bert-v4-64 ZONE=us-central2-b BUCKET=my-bucket launch/tpu_pod.sh train \
#       --config.data.input_files='/gcs/my-bucket/bert_data/train-*.tfrecord'
#   TPU_NAME=bert-v4-64 ZONE=us-central2-b BUCKET=my-bucket launch/tpu_pod.sh tail      # process 0's log
#   TPU_NAME=bert-v4-64 ZONE=us-central2-b launch/tpu_pod.sh stop                        # SIGTERM -> checkpoint
#
# The work dir, data and vocab live in a GCS bucket mounted with gcsfuse at /gcs/$BUCKET on every worker
# (the loop writes POSIX files; Orbax writes the checkpoint shards of all hosts into the same directory).
# Re-running `train` with the same WORKDIR resumes from its latest complete checkpoint (after a preemption
# too: SIGTERM makes every host save at the same step). Extra arguments are passed to train.py.
set -euo pipefail

: "${TPU_NAME:?set TPU_NAME (the TPU VM pod slice)}"
: "${ZONE:?set ZONE (e.g. us-central2-b)}"
PROJECT_FLAG=${PROJECT:+--project=$PROJECT}
REPO_URL=${REPO_URL:-https://github.com/YOUR_ORG/bert_jax.git}
REPO_DIR=${REPO_DIR:-bert_jax}
CONFIG=${CONFIG:-configs/pretrain.py:size=large,preset=lamb_pod}
WORKDIR=${WORKDIR:-/gcs/${BUCKET:-BUCKET}/runs/bert_large_lamb}
VOCAB=${VOCAB:-/gcs/${BUCKET:-BUCKET}/bert_data/vocab.txt}
LOG=${LOG:-\$HOME/bert_pretrain.log}

on_all() {  # runs a shell command on every worker of the slice, in parallel
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=all --command="$1"
}

cmd=${1:-train}; shift || true
case "$cmd" in
  setup)
    : "${BUCKET:?set BUCKET (GCS bucket mounted at /gcs/BUCKET)}"
    on_all "set -e
      sudo apt-get -qq update && sudo apt-get -qq install -y gcsfuse || true
      mkdir -p /gcs/$BUCKET 2>/dev/null || (sudo mkdir -p /gcs/$BUCKET && sudo chown \$USER /gcs/$BUCKET)
      mountpoint -q /gcs/$BUCKET || gcsfuse --implicit-dirs $BUCKET /gcs/$BUCKET
      [ -d $REPO_DIR ] || git clone $REPO_URL $REPO_DIR
      cd $REPO_DIR && git pull --ff-only
      pip install -q -U 'jax[tpu]' && pip install -q -r requirements.txt"
    ;;
  train)
    # nohup: the run survives the ssh session; every worker logs to its own $LOG.
    on_all "cd $REPO_DIR && nohup python train.py --config=$CONFIG --workdir=$WORKDIR \
      --config.data.vocab_file=$VOCAB $* > $LOG 2>&1 &"
    ;;
  tail)
    gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=0 --command="tail -f $LOG"
    ;;
  stop)
    on_all "pkill -TERM -f 'python train.py' || true"
    ;;
  *)
    echo "usage: $0 setup|train|tail|stop [train.py flags]" >&2
    exit 2
    ;;
esac
