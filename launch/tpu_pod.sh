#!/usr/bin/env bash
# Pre-trains on a Cloud TPU VM pod slice. Every worker runs the same train.py (one JAX process per worker;
# train.py initialises jax.distributed itself on a multi-host slice) and reads its own shard of the data.
#
#   export TPU_NAME=bert-v4-64 ZONE=us-central2-b WORKDIR=gs://my-bucket/runs/bert_large
#   launch/tpu_pod.sh setup                 # venv + jax[tpu] + requirements.txt + this checkout, every worker
#   launch/tpu_pod.sh train --config.data.input_files='gs://my-bucket/bert_data/train-*.tfrecord' \
#       --config.data.vocab_file=gs://my-bucket/bert_data/vocab.txt --config.mesh.shape='(-1,4,1)'
#   launch/tpu_pod.sh status                # each worker's process state, the last metrics.jsonl row
#   launch/tpu_pod.sh tail                  # follow worker 0's log (WORKER=3 for another)
#   launch/tpu_pod.sh stop                  # SIGTERM -> checkpoint -> exit 143; prints the step
#   launch/tpu_pod.sh supervise --config... # train, then watch: a worker exiting 75 (a host died or stalled)
#                                           # or 143 (preempted) -> stop the others, train again (resumes),
#                                           # up to MAX_RESTARTS times; 0 -> done; anything else -> stop
#
# Arguments after `train` reach train.py exactly as typed (each one is quoted with printf %q for the remote
# shell). WORKDIR may be a gs:// path: checkpoints, metrics and configs are written there directly (no
# gcsfuse). Running `train` again with the same WORKDIR resumes from the latest complete checkpoint.
#
# Environment:
#   TPU_NAME, ZONE   the slice (required); PROJECT: gcloud project (default: gcloud's configured one)
#   WORKDIR          train.py --workdir (required by train/status/stop), local to the workers or gs://
#   CONFIG           train.py --config (default configs/pretrain.py:size=large,preset=lamb_pod)
#   REPO_URL, REF    setup clones REPO_URL at REF on every worker; without REPO_URL it copies `git archive REF`
#                    of this checkout (REF default HEAD: committed files only)
#   REMOTE_DIR       code directory on the workers, relative to $HOME (default bert_jax)
#   VENV             virtual environment on the workers, relative to $HOME (default bert_jax_venv)
#   RUN_DIR          pid file, exit code and log of each worker, relative to $HOME (default bert_jax_run);
#                    train.log is the current run's, train.log.1 .. .5 the previous runs' (a supervised
#                    restart keeps the log that says why it restarted, e.g. a stalled host's thread stacks)
#   JAX_TPU_SPEC     what setup installs for JAX (default jax[tpu]; pin it, e.g. 'jax[tpu]==0.6.2')
#   STOP_TIMEOUT     seconds `stop` waits for the checkpoint and the exit (default 900)
#   WORKER           the worker `tail` follows (default 0)
#   MAX_RESTARTS     supervise: restarts before giving up (default 10); POLL_SECONDS: how often it looks (30)
#   STATE_DIR        supervise's restart count and last reason, read by `status` (default
#                    ~/.bert_jax_supervise/TPU_NAME on this machine)
#   DRY_RUN=1        print every command instead of running it
#
# train.py's exit code is kept in RUN_DIR/exit_code: 0 finished, 2 user error (see the log), 130 SIGINT and
# 143 SIGTERM (both after saving a checkpoint: `train` again resumes), 75 another host died or stalled (the
# log's last line names it; `train` again resumes), anything else a crash.
set -euo pipefail

LIBTPU_INDEX=https://storage.googleapis.com/jax-releases/libtpu_releases.html
REMOTE_DIR=${REMOTE_DIR:-bert_jax}
VENV=${VENV:-bert_jax_venv}
RUN_DIR=${RUN_DIR:-bert_jax_run}
CONFIG=${CONFIG:-configs/pretrain.py:size=large,preset=lamb_pod}
JAX_TPU_SPEC=${JAX_TPU_SPEC:-jax[tpu]}
STOP_TIMEOUT=${STOP_TIMEOUT:-900}
MAX_RESTARTS=${MAX_RESTARTS:-10}
POLL_SECONDS=${POLL_SECONDS:-30}
REF=${REF:-}
REPO_URL=${REPO_URL:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {  # usage [MESSAGE]: one error line (or, without a message, the usage line) and exit 2 (a user error)
  if [ $# -gt 0 ]; then echo "error: $1" >&2; exit 2; fi
  echo "usage: $0 setup|train [train.py flags]|supervise [train.py flags]|status|tail|stop   (env: TPU_NAME, ZONE, WORKDIR; see the header)" >&2
  exit 2
}

require() {  # require VAR WHAT: one error line naming the unset variable and exit 2 (a bare :? expansion exited 1)
  if [ -z "${!1:-}" ]; then echo "error: $1 is not set: set $1 ($2)" >&2; exit 2; fi
}

q() {  # each argument quoted for a bash command line, joined by spaces
  local out="" a
  for a in "$@"; do out+="${out:+ }$(printf '%q' "$a")"; done
  printf '%s' "$out"
}

run() {  # runs a command, or prints it (quoted) with DRY_RUN=1
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%s\n' "$(q "$@")"
  else
    "$@"
  fi
}

gcloud_tpu() {  # gcloud compute tpus tpu-vm SUBCOMMAND ... --zone --project
  local sub=$1; shift
  local project=()
  if [ -n "${PROJECT:-}" ]; then project=(--project="$PROJECT"); fi
  run gcloud compute tpus tpu-vm "$sub" "$@" --zone="$ZONE" "${project[@]}"
}

on_workers() {  # on_workers WORKER SCRIPT: runs the bash SCRIPT over ssh (WORKER: all or a number)
  gcloud_tpu ssh "$TPU_NAME" --worker="$1" --command="$2"
}

need_workdir() { require WORKDIR "train.py --workdir, e.g. gs://my-bucket/runs/bert_large"; }

# Remote scripts start with this prelude: the paths, absolute from the worker's home directory.
prelude() {
  cat <<EOF
set -euo pipefail
cd
code=\$(realpath -m -- $(q "$REMOTE_DIR")); venv=\$(realpath -m -- $(q "$VENV"))
run_dir=\$(realpath -m -- $(q "$RUN_DIR")); pidfile=\$run_dir/train.pid; rcfile=\$run_dir/exit_code
log=\$run_dir/train.log; host=\$(hostname)
alive() { [ -f "\$pidfile" ] && ps -o args= -p "\$(cat "\$pidfile")" 2>/dev/null | grep -q train.py; }
EOF
}

cmd_setup() {
  local script
  script="$(prelude)
if alive; then echo \"\$host: a run is live (pid \$(cat \"\$pidfile\")); stop it first\" >&2; exit 1; fi
"
  if [ -n "$REPO_URL" ]; then
    script+="rm -rf \"\$code\"
git clone --quiet $(q "$REPO_URL") \"\$code\"
"
    if [ -n "$REF" ]; then
      script+="git -C \"\$code\" fetch --quiet origin $(q "$REF")
git -C \"\$code\" checkout --quiet --detach FETCH_HEAD
"
    fi
  else
    local archive=bert_jax_code.tar.gz
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    run git -C "$HERE/.." archive --format=tar.gz -o "$TMP/$archive" "${REF:-HEAD}"
    gcloud_tpu scp "$TMP/$archive" "$TPU_NAME:$archive" --worker=all
    script+="rm -rf \"\$code\" && mkdir -p \"\$code\"
tar -xzf $archive -C \"\$code\" && rm -f $archive
"
  fi
  script+="[ -x \"\$venv/bin/python\" ] || python3 -m venv \"\$venv\" || {
  sudo apt-get -qq update && sudo apt-get -qq install -y python3-venv && python3 -m venv \"\$venv\"; }
\"\$venv/bin/python\" -m pip install -q -U pip
\"\$venv/bin/python\" -m pip install -q $(q "$JAX_TPU_SPEC") -f $LIBTPU_INDEX -r \"\$code/requirements.txt\"
echo \"\$host: \$(\"\$venv/bin/python\" -c 'import jax; print(\"jax\", jax.__version__)') in \$venv, code in \$code\"
"
  on_workers all "$script"
}

cmd_train() {
  need_workdir
  # The wrapper bash records train.py's pid (SIGTERM goes to train.py alone) and, when it ends, its exit code.
  # shellcheck disable=SC2016  # expanded by the wrapper on the worker
  local wrapper='"$@" & child=$!; echo "$child" > "$PIDFILE"; wait "$child" && rc=0 || rc=$?; echo "$rc" > "$RCFILE"'
  on_workers all "$(prelude)
if alive; then echo \"\$host: already running (pid \$(cat \"\$pidfile\")); stop it first\" >&2; exit 1; fi
mkdir -p \"\$run_dir\" && rm -f \"\$pidfile\" \"\$rcfile\"
for n in 4 3 2 1; do if [ -f \"\$log.\$n\" ]; then mv -f \"\$log.\$n\" \"\$log.\$((n + 1))\"; fi; done
if [ -s \"\$log\" ]; then mv -f \"\$log\" \"\$log.1\"; fi
cd \"\$code\"
PIDFILE=\$pidfile RCFILE=\$rcfile nohup bash -c $(q "$wrapper") train \"\$venv/bin/python\" train.py \
$(q --config="$CONFIG" --workdir="$WORKDIR" "$@") > \"\$log\" 2>&1 < /dev/null &
for _ in \$(seq 50); do [ -s \"\$pidfile\" ] && break; sleep 0.1; done
echo \"\$host: started train.py (pid \$(cat \"\$pidfile\")), log \$log\""
}

# Prints train.py's state on each worker; `report` adds the last checkpoint and metrics row (worker 0).
state_script() {
  cat <<'EOF'
if alive; then echo "$host: running (pid $(cat "$pidfile"), $(ps -o etime= -p "$(cat "$pidfile")" | tr -d ' ') elapsed)"
elif [ -f "$rcfile" ]; then
  rc=$(cat "$rcfile")
  case $rc in
    0) why="finished";; 2) why="user error, see $log";; 130) why="stopped by SIGINT after its checkpoint";;
    143) why="stopped by SIGTERM after its checkpoint";; 75) why="stopped: a host died or stalled, $(tail -n 1 "$log")";;
    *) why="failed, see $log";;
  esac
  echo "$host: exited $rc ($why)"
elif [ -f "$pidfile" ]; then echo "$host: not running, no exit code (killed?), see $log"
else echo "$host: never started"; fi
EOF
}

report() {
  on_workers 0 "$(prelude)
cd \"\$code\" && \"\$venv/bin/python\" launch/run_info.py $(q "$WORKDIR")"
}

supervise_state() {  # the supervisor's folder on this machine (restart count, last reason, stop request)
  printf '%s' "${STATE_DIR:-$HOME/.bert_jax_supervise/$TPU_NAME}"
}

cmd_status() {
  need_workdir
  on_workers all "$(prelude)
$(state_script)"
  local st max; st=$(supervise_state)
  if [ -f "$st/restarts" ]; then
    max=$(cat "$st/max_restarts" 2>/dev/null || echo "$MAX_RESTARTS")     # the supervisor's, not this shell's
    echo "supervise: $(cat "$st/restarts") restart(s) of at most $max; last reason: $(cat "$st/last_reason" 2>/dev/null || echo none)"
  fi
  report
}

# One line per worker: "rc=running", "rc=<exit code> <host>: <last log line>" or "rc=none <host>: ..." (killed
# together with its wrapper, e.g. a rebooted VM, or never started).
rc_script() {
  cat <<'EOF'
if alive; then echo "rc=running"; elif [ -f "$rcfile" ]; then echo "rc=$(cat "$rcfile") $host: $(tail -n 1 "$log")"
else echo "rc=none $host: train.py is gone and left no exit code (killed with its wrapper, or never started)"; fi
EOF
}

# SIGTERM (+ SIGCONT: a frozen one acts on it too) to every live train.py, then after STOP_TIMEOUT s SIGKILL
# (a stuck one).
stop_all_script() {
  cat <<EOF
if alive; then
  pid=\$(cat "\$pidfile"); kill -TERM "\$pid" 2>/dev/null || true; kill -CONT "\$pid" 2>/dev/null || true
  for ((i = 0; i < $(q "$STOP_TIMEOUT") * 10; i++)); do alive || break; sleep 0.1; done
  if alive; then kill -CONT "\$pid" 2>/dev/null || true; kill -KILL "\$pid" 2>/dev/null || true; fi
fi
EOF
}

cmd_supervise() {
  need_workdir
  local st restarts=0 out codes rc reason reached
  st=$(supervise_state)
  mkdir -p "$st"
  rm -f "$st/stop_requested"
  echo 0 > "$st/restarts"; echo none > "$st/last_reason"; echo "$MAX_RESTARTS" > "$st/max_restarts"
  cmd_train "$@"
  while true; do
    sleep "$POLL_SECONDS"
    if [ -f "$st/stop_requested" ]; then echo "supervise: stopped by 'stop'"; return 0; fi
    reached=1
    out=$(on_workers all "$(prelude)
$(rc_script)") || reached=0          # a worker ssh did not reach has no line: never "finished" then
    [ "$reached" = 1 ] || echo "supervise: gcloud ssh did not reach every worker; looking again in $POLL_SECONDS s" >&2
    codes=$(printf '%s\n' "$out" | sed -n 's/^rc=\([^ ]*\).*/\1/p' | sort -u)   # one per line
    if [ "$codes" = 0 ] && [ "$reached" = 1 ]; then echo "supervise: finished after $restarts restart(s)"; return 0; fi
    # 75 (a host died or stalled, host 0 included), 134 (a JAX abort the host guard could not turn into 75) and
    # 143 (preempted) are retried; 137 (a SIGKILLed host) and none (train.py gone with its wrapper: a rebooted
    # VM) too, once nothing runs; any other code (2: a user error, 1: a crash) stops the job. A user error on any
    # worker is the job's code before a crash (launch/local_cluster.py's order): `sort -u` put 1 before 2.
    rc=$(printf '%s\n' "$codes" | grep -x 2 || printf '%s\n' "$codes" | grep -Evx '0|75|134|143|137|running|none' | head -n 1 || true)
    [ -n "$rc" ] || rc=$(printf '%s\n' "$codes" | grep -Ex '75|134|143' | head -n 1 || true)
    if [ -z "$rc" ] && [ "$reached" = 1 ] && [ -z "$(printf '%s\n' "$codes" | grep -x running || true)" ]; then
      rc=$(printf '%s\n' "$codes" | grep -Ex '137|none' | head -n 1 || true)
    fi
    [ -n "$rc" ] || continue
    reason=$(printf '%s\n' "$out" | grep -m 1 "^rc=$rc " | sed 's/^rc=[^ ]* //')
    echo "supervise: a worker exited $rc: $reason"
    on_workers all "$(prelude)
$(stop_all_script)" || true
    case $rc in
      75|134|143|137|none) ;;
      *) echo "supervise: exit $rc is not retryable (2: a user error, 1: a crash); not restarting" >&2
         printf 'exit %s: %s (not retryable: the supervisor stopped the job)\n' "$rc" "$reason" > "$st/last_reason"
         return "$rc" ;;
    esac
    if [ "$restarts" -ge "$MAX_RESTARTS" ]; then
      echo "supervise: $restarts restart(s) = MAX_RESTARTS; giving up" >&2
      printf 'exit %s: %s (MAX_RESTARTS reached: the supervisor gave up)\n' "$rc" "$reason" > "$st/last_reason"
      return 75
    fi
    if [ -f "$st/stop_requested" ]; then echo "supervise: stopped by 'stop'"; return 0; fi   # came meanwhile
    restarts=$((restarts + 1))
    echo "$restarts" > "$st/restarts"
    printf 'exit %s: %s\n' "$rc" "$reason" > "$st/last_reason"
    echo "supervise: restart $restarts of $MAX_RESTARTS (resumes from $WORKDIR)"
    # a worker ssh did not reach keeps its last exit code: the next poll restarts again (set -e ended us)
    cmd_train "$@" || echo "supervise: train did not start on every worker; the next poll decides" >&2
  done
}

cmd_stop() {
  need_workdir
  local st; st=$(supervise_state)
  if [ -d "$st" ]; then touch "$st/stop_requested"; fi     # a supervisor does not restart what we stop
  on_workers all "$(prelude)
if ! alive; then echo \"\$host: not running\"; exit 0; fi
pid=\$(cat \"\$pidfile\")
kill -TERM \"\$pid\" && echo \"\$host: SIGTERM -> train.py (pid \$pid), waiting for its checkpoint\"
kill -CONT \"\$pid\" 2>/dev/null || true     # a frozen (SIGSTOPped) one acts on it too
for ((i = 0; i < $(q "$STOP_TIMEOUT") * 10; i++)); do
  [ -f \"\$rcfile\" ] && break
  sleep 0.1
done
if [ ! -f \"\$rcfile\" ]; then echo \"\$host: still running after $(q "$STOP_TIMEOUT") s\" >&2; exit 1; fi
$(state_script)"
  report
}

cmd_tail() {
  on_workers "${WORKER:-0}" "$(prelude)
tail -n 100 -F \"\$log\""
}

[ $# -ge 1 ] || usage
cmd=$1; shift
case "$cmd" in
  setup|status|stop|tail) [ $# -eq 0 ] || usage "$cmd takes no arguments (got: $*)" ;;
  train|supervise) ;;
  *) usage "unknown subcommand '$cmd'; expected setup, train, supervise, status, tail or stop (see $0's header)" ;;
esac
require TPU_NAME "the TPU VM pod slice"
require ZONE "e.g. us-central2-b"
"cmd_$cmd" "$@"
