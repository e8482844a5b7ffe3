r"""Time to detection, exit codes and last lines of a two-host train.py job under each multi-host fault.

Each case runs `train.py` as 2 processes x 2 CPU devices (launch/local_cluster.py: jax.distributed on
127.0.0.1, gloo) on a fresh work dir, injects the fault, waits for both processes, then restarts both
and lets the run finish; the restart's final MLM loss is compared with an uninterrupted run's.

    python experiments/multihost_faults.py --out=experiments/multihost_faults.md          # every case
    python experiments/multihost_faults.py --cases=dead_host,stall_data --steps=40        # some
    python experiments/multihost_faults.py --cases=dead_coordinator --heartbeat=60 --steps=60
        # host 0 killed at the default heartbeat timeout: host 1's exit 75 and `error:` line, in seconds

Cases:
  dead_host        SIGKILL host 1 once the first checkpoint is complete
  dead_coordinator SIGKILL host 0 (the jax.distributed coordinator) at the same point; host 1's guard catches
                   JAX's abort and exits 75 with its line (bert_jax/engine/coordinator.py)
  frozen_host      SIGSTOP host 1 (no heartbeats; killed with SIGCONT + SIGKILL after both others end)
  stall_data       stall_data@STEP:1 (host 1's data iterator blocks; heartbeats go on)
  killed_mid_save  die_in_save@CKPT:1 (host 1 SIGKILLed while writing checkpoint CKPT)
  preempt_all      SIGTERM to both hosts
  preempt_one      SIGTERM to host 1 only
  preempt_joining  SIGTERM to host 1 while it joins the job (host 0 held with SIGSTOP until a second later):
                   both stop at start-up, exit 143

stall_data and killed_mid_save are injected from outside bert_jax: both hosts run tests/fault_injection.py
--fault=..., which patches host 1's process (its data iterator, its checkpoint save) and then runs train.py.

"detected after" is the time from the fault (the kill or signal; for the injected faults, host 1's own
report of it in its log, read by polling) to the last surviving host's exit, measured by polling every 0.1 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "launch"))
from local_cluster import Cluster  # noqa: E402  launch/ is scripts, not a package
sys.path.insert(0, REPO)
from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from experiments import runs  # noqa: E402

FAULT_INJECTION = os.path.join("tests", "fault_injection.py")   # train.py with a fault patched in, per host
CASES = ("dead_host", "dead_coordinator", "frozen_host", "stall_data", "killed_mid_save", "preempt_all",
         "preempt_one", "preempt_joining")
WORDS = "the a cat dog sat on mat run play is was hello world jax bert model train data".split()


def write_corpus(d: str, docs: int = 200) -> None:
  rng = np.random.default_rng(0)
  with open(os.path.join(d, "vocab.txt"), "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS) + "\n")
  for name, n in (("train-0.txt", docs), ("train-1.txt", docs), ("eval.txt", 20)):
    with open(os.path.join(d, name), "w") as f:
      f.write("\n\n".join("\n".join(" ".join(rng.choice(WORDS, size=rng.integers(4, 12))) + " ."
                                    for _ in range(rng.integers(2, 6))) for _ in range(n)) + "\n")


def flags(d: str, workdir: str, args, *extra) -> list:
  return ["--config=configs/pretrain.py:size=tiny,runlocal", f"--workdir={workdir}",
          f"--config.data.input_files={d}/train-0.txt,{d}/train-1.txt", f"--config.data.eval_input_files={d}/eval.txt",
          f"--config.data.vocab_file={d}/vocab.txt", f"--config.num_train_steps={args.steps}",
          f"--config.checkpoint_every_steps={args.ckpt}", "--config.progress_bar=false",
          f"--config.distributed.heartbeat_timeout_s={args.heartbeat}", f"--config.watchdog.min_s={args.min_s}",
          "--config.watchdog.compile_s=600", "--config.watchdog.eval_s=300", "--config.watchdog.checkpoint_s=300",
          *extra]


def final_loss(workdir: str) -> float:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(l) for l in f if l.strip()][-1]["mlm_loss"]


def wait_ckpt(workdir: str, cluster: Cluster, timeout: float = 900) -> bool:
  d = os.path.join(workdir, "checkpoints")
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and all(c is None for c in cluster.poll()):
    if os.path.isdir(d) and any(n.isdigit() for n in os.listdir(d)):
      return True
    time.sleep(0.1)
  return False


def run_case(case: str, d: str, base: str, args, env) -> dict:
  workdir, logs = os.path.join(base, case), os.path.join(base, case + "_logs")
  fault = {"stall_data": f"stall_data@{args.ckpt + 3}:1", "killed_mid_save": f"die_in_save@{2 * args.ckpt}:1"}
  if case in fault:
    cluster = Cluster([f"--fault={fault[case]}", *flags(d, workdir, args)], logs, env=env,
                      script=FAULT_INJECTION).start()
  else:   # preempt_joining: --verbose shows JAX's `Connecting to JAX distributed service` line, its moment
    extra = ["--verbose"] if case == "preempt_joining" else []
    cluster = Cluster(flags(d, workdir, args, *extra), logs, env=env).start()
  t_fault = None
  try:
    if case in ("stall_data", "killed_mid_save"):
      needle = "blocks for good" if case == "stall_data" else "SIGKILL during the save"
      cluster.wait_for_text(1, needle, timeout=1200)
      t_fault = time.monotonic()
    elif case == "preempt_joining":   # host 0 held before it serves, so host 1 waits to join when the signal comes
      cluster.signal(0, signal.SIGSTOP)
      cluster.wait_for_text(1, "Connecting to JAX distributed service", timeout=1200)
      t_fault = time.monotonic()
      cluster.signal(1, signal.SIGTERM)
      time.sleep(1)
      cluster.signal(0, signal.SIGCONT)
    else:
      wait_ckpt(workdir, cluster)
      t_fault = time.monotonic()
      if case == "dead_host":
        cluster.signal(1, signal.SIGKILL)
      elif case == "dead_coordinator":
        cluster.signal(0, signal.SIGKILL)
      elif case == "frozen_host":
        cluster.signal(1, signal.SIGSTOP)
      elif case == "preempt_all":
        cluster.signal(0, signal.SIGTERM)
        cluster.signal(1, signal.SIGTERM)
      elif case == "preempt_one":
        cluster.signal(1, signal.SIGTERM)
    survivors = {"dead_host": [0], "dead_coordinator": [1], "frozen_host": [0], "killed_mid_save": [0]}.get(case, [0, 1])
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and any(cluster.poll()[i] is None for i in survivors):
      time.sleep(0.1)
    codes = cluster.poll()
  finally:
    cluster.kill()
  detected = max(cluster.ended.get(i, time.monotonic()) for i in survivors) - t_fault
  out = {"case": case, "codes": cluster.poll(), "survivor_codes": codes, "detected_s": round(detected, 1),
         "last_lines": [cluster.last_line(i) for i in range(2)],
         "checkpoints": sorted(os.listdir(os.path.join(workdir, "checkpoints")))}
  restart = Cluster(flags(d, workdir, args), logs + "_restart", env=env).start()
  try:
    out["restart_codes"] = restart.wait(timeout=1200)
  finally:
    restart.kill()
  resumed = re.search(r"resumed from \S+ at step (\d+)", restart.text(0))
  out["resumed_from"] = int(resumed.group(1)) if resumed else None
  out["restart_final_mlm_loss"] = final_loss(workdir) if out["restart_codes"] == [0, 0] else None
  return out


def main(argv=None) -> int:
  p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--cases", default=",".join(CASES))
  p.add_argument("--steps", type=int, default=40)
  p.add_argument("--ckpt", type=int, default=10, help="checkpoint every this many steps")
  p.add_argument("--heartbeat", type=float, default=10.0, help="config.distributed.heartbeat_timeout_s")
  p.add_argument("--min_s", type=float, default=10.0, help="config.watchdog.min_s")
  p.add_argument("--out", default="", help="a Markdown table of the results (and .json beside it)")
  args = p.parse_args(argv)
  cases = runs.choices_list("--cases", args.cases, CASES)     # before the clean run's minutes
  for flag, value in (("--steps", args.steps), ("--ckpt", args.ckpt), ("--heartbeat", args.heartbeat),
                      ("--min_s", args.min_s)):
    if value <= 0:
      raise UserError(f"{flag}={value}; expected a number > 0")
  base = tempfile.mkdtemp(prefix="multihost_faults_")
  d = os.path.join(base, "corpus")
  os.makedirs(d)
  write_corpus(d)
  env = dict(os.environ, BERT_JAX_COMPILATION_CACHE_DIR=os.path.join(base, "xla_cache"))
  clean = Cluster(flags(d, os.path.join(base, "clean"), args), os.path.join(base, "clean_logs"), env=env).start()
  clean_codes = clean.wait(timeout=1200)
  clean.kill()
  reference = final_loss(os.path.join(base, "clean")) if clean_codes == [0, 0] else None
  print(f"clean run: exit {clean_codes}, {clean.ended[0] - clean.started:.0f} s, final mlm_loss {reference}",
        flush=True)
  results = []
  for case in cases:
    r = run_case(case, d, base, args, env)
    r["equal_to_clean"] = r["restart_final_mlm_loss"] == reference
    results.append(r)
    print(json.dumps(r), flush=True)
  if args.out:
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
      json.dump({"args": vars(args), "clean_codes": clean_codes, "clean_final_mlm_loss": reference,
                 "results": results}, f, indent=1)
    rows = ["| case | exit codes (host 0, host 1) | detected after | last line of host 0 | last line of host 1 | "
            "checkpoints left | restart: resumed from, exit, final MLM loss = clean |", "|---|---|---|---|---|---|---|"]
    for r in results:
      rows.append(f"| {r['case']} | {r['codes']} | {r['detected_s']} s | `{r['last_lines'][0][:300]}` | "
                  f"`{r['last_lines'][1][:300]}` | {', '.join(r['checkpoints'])} | {r['resumed_from']}, "
                  f"{r['restart_codes']}, {r['equal_to_clean']} |")
    with open(args.out, "a") as f:
      f.write(f"\n## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {vars(args)}\n\n"
              f"clean run: exit {clean_codes}, final MLM loss {reference}\n\n" + "\n".join(rows) + "\n")
  shutil.rmtree(base, ignore_errors=True)
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
