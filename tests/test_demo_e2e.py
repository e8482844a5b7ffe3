"""`python demo.py --quick` end to end in a temp dir: the table is printed, plots and results are written,
metrics are in range, and the classic baselines beat chance.

One test function on purpose: the run takes about a minute, and with pytest-xdist (CI: -n 2) a
module-scoped fixture would be built once per worker that receives one of the module's tests."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_quick_demo(workdir):
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)          # the demo runs on the machine's real device(s), as users run it
  env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)   # and optimised: its ~1,000 steps outweigh the compiles
  # A fresh compilation cache, as a user's default one: the from-scratch runs (the pre-trained model's
  # architecture) load the train and eval steps the pre-trained runs compiled.
  env["BERT_JAX_COMPILATION_CACHE_DIR"] = str(workdir.parent / "xla_cache")
  proc = subprocess.run([sys.executable, "demo.py", f"--workdir={workdir}", "--quick"], cwd=ROOT, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-4000:]
  return str(workdir), proc.stdout


@pytest.mark.slow
def test_quick_demo_end_to_end(tmp_path):
  workdir, out = run_quick_demo(tmp_path / "demo_quick")
  check_printed_table(out)
  check_plots_and_files(workdir)
  check_metrics(workdir)


def check_printed_table(out):
  assert "| review sentiment (300 test reviews) | accuracy % |" in out
  assert "| People's Daily NER (300 test sentences), crf head | entity F1 % |" in out   # the best recipe
  # --quick says its scores are a smoke check, above the table (they read like a failure: 57.7 = majority)
  assert "**Smoke check, not results.** --quick is a smoke check" in out
  assert out.index("Smoke check, not results") < out.index("| task (test split")
  assert "TF-IDF + LR:" in out and "CRF:" in out
  assert ", no pre-training |" in out and ", pre-trained here |" in out      # both BERT columns
  assert "| **total** |" in out and "demo finished in" in out
  for stage in ("[1/5] data", "[2/5] classic baselines", "[3/5] pre-training", "[4/5] fine-tuning",
                "[5/5] results"):
    assert stage in out


def check_plots_and_files(workdir):
  for name in ("pretraining.png", "finetuning.png", "scores.png"):
    path = os.path.join(workdir, "plots", name)
    assert os.path.getsize(path) > 5_000, path
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  for rel in ("results.json", "results.md", "pretrain/metrics.jsonl", "pretrain/vocab.txt",
              "finetune_sentiment/eval_results.json", "finetune_ner/eval_results.json",
              "finetune_ner/test_predictions.txt", "data/manifest.json", "scratch_sentiment/eval_results.json",
              "scratch_ner/eval_results.json"):
    assert os.path.exists(os.path.join(workdir, rel)), rel


def check_metrics(workdir):
  """Metrics are in range, pre-training loss fell, and the classic baselines beat chance."""
  with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
    res = json.load(f)
  assert res["quick"] is True and res["smoke_check"] is True and "not results" in res["note"]
  assert res["ner_head"] == "crf"
  with open(os.path.join(workdir, "finetune_ner", "config.json"), encoding="utf-8") as f:
    assert json.load(f)["crf"] is True
  assert res["pretraining"]["step"] == res["settings"]["pretrain_steps"]
  assert 0.0 <= res["pretraining"]["mlm_accuracy"] <= 1.0
  # The MLM loss of the last logged window is below the loss of a uniform guess over the 5,372-token vocab.
  assert res["pretraining"]["mlm_loss"] < 8.59
  with open(os.path.join(workdir, "pretrain", "metrics.jsonl"), encoding="utf-8") as f:
    rows = [json.loads(l) for l in f]
  assert rows[-1]["mlm_loss"] < rows[0]["mlm_loss"], "pre-training loss did not fall"
  assert res["pretraining_recipe"] == "preset=budget"
  with open(os.path.join(workdir, "pretrain", "config.json"), encoding="utf-8") as f:
    cfg = json.load(f)
  assert cfg["data"]["pack_sequences"] and list(cfg["targets"]) == ["mlm"]
  for key in ("sentiment", "ner"):
    for split in ("dev", "test"):
      assert 0.0 <= res["bert"][key][split] <= 1.0
      assert 0.0 <= res["bert_no_pretraining"][key][split] <= 1.0
  assert res["bert"]["sentiment"]["steps"] == res["settings"]["sentiment_steps"]
  b = res["baselines"]
  # Chance: the majority class for sentiment (about 52-58% on 300 reviews), no entities (F1 0) for NER.
  assert b["sentiment"]["test_accuracy"] > res["majority_test_accuracy"] + 0.1
  assert b["ner"]["test_f1"] > 0.3
  assert res["timing"]["total"]["wall_seconds"] > 0
