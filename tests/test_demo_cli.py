"""`python demo.py` checks its flags and its work dir before building any data: a mistake is one `error:` line
naming the flag and exit 2, not a traceback minutes later (e.g. an unknown --corpora failed at pre-training,
after the data and the baselines)."""

import os
import subprocess
import sys

import pytest

from bert_jax.errors import UserError
from experiments import demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("flags, named", [
    (["--corpora=wiki"], "--corpora='wiki': unknown corpus 'wiki'; expected a comma-separated list of news, reviews"),
    (["--corpora=,"], "--corpora=','"),
    (["--pretrain_steps=0"], "--pretrain_steps=0"),
    (["--sentiment_steps=0"], "--sentiment_steps=0"),
    (["--ner_steps=-5"], "--ner_steps=-5"),
    (["--pretrain_steps=abc"], "--pretrain_steps: invalid int value: 'abc'"),
    (["--no_such_flag"], "unrecognized arguments: --no_such_flag"),
    (["--ner_head=lstm"], "argument --ner_head: invalid choice: 'lstm' (choose from 'crf', 'softmax')"),
])
def test_a_bad_flag_is_a_user_error_naming_it(tmp_path, flags, named):
  with pytest.raises(UserError, match=named.replace("(", r"\(").replace(")", r"\)")):
    demo.parse_args([f"--workdir={tmp_path}", *flags])


def test_good_flags_parse(tmp_path):
  args = demo.parse_args([f"--workdir={tmp_path}", "--corpora=reviews", "--sentiment_steps=-1", "--ner_steps=3"])
  assert args.corpora == "reviews" and args.sentiment_steps == -1 and args.ner_steps == 3
  assert args.ner_head == "crf"           # the project's best NER recipe (experiments/finetune_heads.md)
  assert demo.parse_args([f"--workdir={tmp_path}", "--ner_head=softmax"]).ner_head == "softmax"


def _results(quick):
  score = {"dev": 0.5, "test": 0.577, "test_examples": 300}
  return {"model": "BERT-tiny", "smoke_check": quick, "ner_head": "crf", "majority_test_accuracy": 0.577,
          "bert": {"sentiment": dict(score), "ner": dict(score)}, "bert_no_pretraining": {}, "baselines": None}


def test_a_quick_table_says_its_scores_are_a_smoke_check_and_the_full_one_does_not():
  """Both BERT columns at the majority class and NER F1 0.0 read like a failure, and nothing said why."""
  quick, full = demo.results_table(_results(True)), demo.results_table(_results(False))
  assert quick.startswith("**Smoke check, not results.** --quick is a smoke check that every stage runs")
  assert "Smoke check" not in full and full.startswith("| task (test split")
  assert "| People's Daily NER (300 test sentences), crf head |" in full


def test_a_workdir_that_is_a_file_is_one_error_line_and_exit_2(tmp_path):
  (tmp_path / "a_file").write_text("x")
  for workdir, named in ((tmp_path / "a_file", "exists and is not a directory"),
                         (tmp_path / "a_file" / "out", "cannot write there")):
    proc = subprocess.run([sys.executable, "demo.py", f"--workdir={workdir}", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --workdir={workdir}") and named in lines[0], lines
    assert "[1/5]" not in proc.stdout          # nothing was built


def test_an_unknown_corpus_stops_before_the_data_stage(tmp_path):
  proc = subprocess.run([sys.executable, "demo.py", f"--workdir={tmp_path / 'out'}", "--corpora=wiki"], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
      "error: --corpora='wiki': unknown corpus 'wiki'; expected a comma-separated list of news, reviews"], proc.stderr
  assert not (tmp_path / "out").exists()


def test_a_workdir_holding_other_runs_is_refused_and_left_alone(tmp_path):
  # `--workdir=runs` used to rmtree runs/pretrain/ (the demo's pre-training folder) without a word
  (tmp_path / "pretrain").mkdir()
  (tmp_path / "pretrain" / "precious.txt").write_text("weeks of training")
  with pytest.raises(UserError, match="not empty and not an earlier demo's work dir"):
    demo.parse_args([f"--workdir={tmp_path}"])
  assert (tmp_path / "pretrain" / "precious.txt").read_text() == "weeks of training"


def test_an_earlier_demo_workdir_is_accepted(tmp_path):
  (tmp_path / "new").mkdir()
  demo.parse_args([f"--workdir={tmp_path / 'new'}"])            # empty
  (tmp_path / "marked").mkdir()
  (tmp_path / "marked" / demo.MARKER).write_text("")
  (tmp_path / "marked" / "pretrain").mkdir()
  demo.parse_args([f"--workdir={tmp_path / 'marked'}"])
  (tmp_path / "old" / "data").mkdir(parents=True)                # a demo's from before the marker
  (tmp_path / "old" / "data" / "manifest.json").write_text("{}")
  demo.parse_args([f"--workdir={tmp_path / 'old'}"])
