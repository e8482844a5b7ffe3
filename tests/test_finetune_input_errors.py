"""A new user's mistakes with fine-tuning input, each one `error:` line or a counted `warning:` (no traceback),
on the standard release layouts; fast (data reading and plan checks only, no training)."""

import json
import os
import re

import pytest

import task_fixtures as testing
from bert_jax import input_warnings
from bert_jax.errors import UserError
from bert_jax.finetune import loop as finetune_loop
from bert_jax.finetune import sweep
from bert_jax.finetune.plan import resolve_finetune
from bert_jax.input_pipeline import tokenization

from test_finetune_tasks import make_config


def _load(c, workdir):
  plan = resolve_finetune(c, workdir)
  tok = tokenization.load_tokenizer(plan.vocab_file, do_lower_case=plan.do_lower_case)
  return finetune_loop.load_data(plan, tok)


@pytest.mark.parametrize("content", ["", "index\tsentence1\tsentence2\tlabel\n"])
def test_an_empty_split_file_is_a_user_error_naming_it(tmp_path, content):
  """An empty dev.tsv (or one with only its header) was a ValueError traceback, exit 1."""
  data = testing.write_glue(str(tmp_path / "glue"), tasks=["rte"])
  vocab = testing.write_vocab(str(tmp_path / "v"))
  with open(os.path.join(data, "RTE", "dev.tsv"), "w", encoding="utf-8") as f:
    f.write(content)
  with pytest.raises(UserError, match=r"RTE/dev.tsv: split 'dev' has no examples \(the file is empty"):
    _load(make_config("rte", data, vocab), str(tmp_path / "run"))


def test_a_split_whose_rows_were_all_skipped_says_so(tmp_path):
  data = testing.write_glue(str(tmp_path / "glue"), tasks=["rte"])
  vocab = testing.write_vocab(str(tmp_path / "v"))
  with open(os.path.join(data, "RTE", "dev.tsv"), "w", encoding="utf-8") as f:
    f.write("index\tsentence1\tsentence2\tlabel\n0\tonly one sentence\n")
  with pytest.raises(UserError, match=r"no examples \(all 1 row\(s\) skipped: .*missing columns"):
    _load(make_config("rte", data, vocab, on_error="skip"), str(tmp_path / "run"))


def test_a_missing_default_dev_split_is_an_input_warning_repeated_at_exit(tmp_path):
  """Without dev.tsv the run has no dev score and no best checkpoint: it was a log line only; now an input
  warning (`warning:` at exit; --strict: an error)."""
  data = testing.write_glue(str(tmp_path / "glue"), tasks=["qnli"])
  vocab = testing.write_vocab(str(tmp_path / "v"))
  os.remove(os.path.join(data, "QNLI", "dev.tsv"))
  input_warnings.clear_input_warnings()
  try:
    _, eval_data, _ = _load(make_config("qnli", data, vocab), str(tmp_path / "run"))
    assert eval_data == []
    assert any("eval split 'dev' not found" in w and "QNLI" in w for w in input_warnings.input_warnings())
    input_warnings.set_strict(True)
    with pytest.raises(UserError, match="eval split 'dev' not found"):
      _load(make_config("qnli", data, vocab), str(tmp_path / "run2"))
  finally:
    input_warnings.set_strict(False)
    input_warnings.clear_input_warnings()


def test_conll_release_file_names_pass_the_plan_check(tmp_path):
  """docs/finetuning.md: NER reads the CoNLL-2003 release's eng.train/eng.testa/eng.testb; the plan's
  training-file check refused such a folder ("has no training file")."""
  src = testing.write_conll(str(tmp_path / "c"))
  d = tmp_path / "conll"
  d.mkdir()
  for ours, theirs in (("train", "eng.train"), ("dev", "eng.testa"), ("test", "eng.testb")):
    os.rename(os.path.join(src, f"{ours}.txt"), str(d / theirs))
  vocab = testing.write_vocab(str(tmp_path / "v"))
  train, eval_data, test_data = _load(make_config("ner", str(d), vocab), str(tmp_path / "run"))
  assert len(train.examples) == len(testing.CONLL_SENTENCES)
  assert [e.split for e in eval_data] == ["dev"] and [t.split for t in test_data] == ["test"]


def test_two_grid_points_that_are_the_same_run_are_an_error(tmp_path):
  """learning_rate is an alias of optimizer.learning_rate: the grid's four points were two runs, each twice."""
  data = testing.write_classification(str(tmp_path / "data"))
  vocab = testing.write_vocab(str(tmp_path / "v"))
  c = make_config("classification", data, vocab)
  with pytest.raises(UserError, match=r"--grid: points .* resolve to the same run config"):
    sweep.run_sweep(c, "optimizer.learning_rate=1e-4,3e-4;learning_rate=1e-4,3e-4", 1, str(tmp_path / "sw"))
  # -1 resolves to the tiny model's 3e-4
  with pytest.raises(UserError, match=r"points 'optimizer.learning_rate=-1' and 'optimizer.learning_rate=0.0003'"):
    sweep.run_sweep(c, "optimizer.learning_rate=-1,3e-4", 1, str(tmp_path / "sw2"))
  assert not os.path.exists(tmp_path / "sw" / "runs")


def test_reproduce_paper_run_resolves_relative_dirs_against_the_callers_directory(tmp_path, monkeypatch, capsys):
  """run.py starts each sweep with cwd=<repository>: a relative --output_dir put the runs under the
  repository and the table (read relative to the caller) came out empty."""
  from experiments.reproduce_paper import run
  monkeypatch.chdir(tmp_path)
  assert run.main(["--root=root", "--output_dir=out", "--tasks=mrpc", "--glue_dir=glue", "--seeds=1",
                   "--dry_run"]) == 0
  line = capsys.readouterr().out
  assert f"--workdir={tmp_path / 'out' / 'mrpc'}" in line
  assert f"--config.init_checkpoint={tmp_path / 'root' / 'converted'}" in line
  assert f"--config.data_dir={tmp_path / 'glue'}" in line


def test_squad_v2_files_for_task_squad_v1_are_one_error_naming_the_files_looked_for(tmp_path):
  """train-v2.0.json passes the plan's train* check; the loop then raised FileNotFoundError (a traceback)."""
  data = testing.write_squad(str(tmp_path / "squad"), version_2_with_negative=True)
  vocab = testing.write_vocab(str(tmp_path / "v"))
  with pytest.raises(UserError, match=r"task squad_v1: no train split .*train-v1.1.json"):
    _load(make_config("squad_v1", data, vocab), str(tmp_path / "run"))


def test_a_nan_main_metric_is_never_the_best_evaluation():
  """STS-B's correlation is NaN for a constant prediction: NaN <= best is False, so it became the best and
  every later evaluation (however bad) replaced it, and eval_results.json's best was null."""
  best = finetune_loop.BestCheckpoint(None, save=False)
  assert not best.offer(float("nan"), {"w": 0}, 1, 0.5, {})
  assert best.offer(0.5, {"w": 1}, 2, 1.0, {})
  assert not best.offer(float("nan"), {"w": 2}, 3, 1.5, {})
  assert not best.offer(0.4, {"w": 3}, 4, 2.0, {})
  assert best.params == {"w": 1} and best.summary() == {"value": 0.5, "step": 2, "epoch": 1.0}


def test_a_nan_dev_score_is_no_score_in_the_sweep_selection(tmp_path):
  import json
  w = str(tmp_path / "sw")
  spec = {"task": "stsb", "main_metric": "corr", "dev_split": "dev", "test_splits": ["test"],
          "grid": {"num_train_epochs": [3.0]}, "seeds": [0, 1, 2], "select": "median",
          "points": [{"index": 0, "settings": {"num_train_epochs": 3.0}, "label": "num_train_epochs=3"}]}
  os.makedirs(w)
  with open(os.path.join(w, sweep.SPEC_NAME), "w") as f:
    json.dump(spec, f)
  for seed, dev in ((0, float("nan")), (1, 0.8), (2, 0.6)):
    d = sweep.run_dir(w, 0, seed)
    os.makedirs(d)
    with open(os.path.join(d, "eval_results.json"), "w") as f:
      json.dump({"dev": {"corr": dev}, "test": {"corr": dev}}, f)
  results = sweep.collect(w)
  assert results["points"][0]["dev"]["n"] == 2 and results["result"]["dev"] == pytest.approx(0.7)
  assert sweep.collect(w, "best")["result"]["seed"] == 1


@pytest.mark.slow
def test_predictor_takes_sentence_pairs_as_tuples(tmp_path):
  """predict's signature takes (text_a, text_b) pairs; they reached the tokenizer as tuples (TypeError)."""
  from bert_jax.finetune.predict import Predictor
  data = testing.write_glue(str(tmp_path / "glue"), tasks=["mrpc"])
  vocab = testing.write_vocab(str(tmp_path / "v"))
  out = str(tmp_path / "run")
  c = make_config("mrpc", data, vocab, max_train_steps=1, do_eval=False, do_predict=False)
  c.model.num_hidden_layers = 1
  finetune_loop.run(c, out)
  p = Predictor.from_workdir(out)
  pairs = [("the cat sat .", "the dog sat ."), ("hello world .", "a dog run ##s .")]
  got = p.predict(pairs)
  assert got == p.predict([a for a, _ in pairs], text_pairs=[b for _, b in pairs])
  assert [g["label"] in ("0", "1") for g in got] == [True, True]
  with pytest.raises(TypeError, match=r"\(text_a, text_b\) pairs"):
    p.predict([("only one",)])


def test_cmrc2018_release_file_names_are_read(tmp_path):
  """CMRC2018 ships cmrc2018_train.json / cmrc2018_dev.json (SQuAD format): the plan said 'has no training
  file' and the reader looked only for train-v1.1.json / train.json."""
  import json
  d = tmp_path / "cmrc"
  d.mkdir()
  obj = testing.squad_json()
  obj["data"] = [a for a in obj["data"] if a["title"] == "北京"]
  for split in ("train", "dev"):
    with open(d / f"cmrc2018_{split}.json", "w", encoding="utf-8") as f:
      json.dump(obj, f, ensure_ascii=False)
  vocab = testing.write_vocab(str(tmp_path / "v"))
  train, eval_data, _ = _load(make_config("squad_v1", str(d), vocab), str(tmp_path / "run"))
  assert len(train.examples) == 2 and [len(e.examples) for e in eval_data] == [2]


def test_a_grid_over_tasks_or_dev_splits_is_an_error(tmp_path):
  """The sweep selects on point 0's main metric and dev split: with task=sst2,cola on the grid CoLA's runs (mcc,
  no accuracy) were silently left out of the selection."""
  data = testing.write_glue(str(tmp_path / "glue"), tasks=["sst2", "cola"])
  vocab = testing.write_vocab(str(tmp_path / "v"))
  c = make_config("sst2", data, vocab)
  with pytest.raises(UserError, match=r"--grid: points 'task=sst2' and 'task=cola' differ in the task"):
    sweep.run_sweep(c, "task=sst2,cola", 1, str(tmp_path / "sw"))
  assert not os.path.exists(tmp_path / "sw")


@pytest.mark.slow
def test_a_rerun_in_a_used_workdir_removes_the_earlier_runs_prediction_files(tmp_path):
  """A second run (another task, or without a split) left the first run's submission files (CoLA.tsv) beside
  its own, as if it had written them; a rerun that fails on its data keeps them."""
  import json
  data = testing.write_glue(str(tmp_path / "glue"), tasks=["sst2", "rte"])
  vocab = testing.write_vocab(str(tmp_path / "v"))
  out = tmp_path / "run"
  out.mkdir()
  (out / "CoLA.tsv").write_text("index\tprediction\n0\t1\n")
  (out / "notes.txt").write_text("mine")
  (out / "eval_results.json").write_text(json.dumps({"task": "cola", "prediction_files": ["CoLA.tsv", "../x"]}))
  with open(os.path.join(data, "RTE", "train.tsv"), "w") as f:
    f.write("index\tsentence1\tsentence2\tlabel\n")
  with pytest.raises(UserError, match="no examples"):
    finetune_loop.run(make_config("rte", data, vocab), str(out))
  assert (out / "CoLA.tsv").exists() and (out / "eval_results.json").exists()
  c = make_config("sst2", data, vocab, max_train_steps=1, do_eval=False)
  c.model.num_hidden_layers = 1
  results = finetune_loop.run(c, str(out))
  assert not (out / "CoLA.tsv").exists() and (out / "notes.txt").exists() and (out / "SST-2.tsv").exists()
  assert "SST-2.tsv" in results["prediction_files"]


def test_reproduce_paper_prepare_takes_a_relative_root(tmp_path):
  """prepare.sh cd's into ROOT/google: a relative ROOT then put TFDS data under ROOT/google/ROOT and the
  checkpoints relative to the repository. wget, unzip and python are stubbed (no network)."""
  import stat
  import subprocess
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  stub, log = tmp_path / "stub", tmp_path / "log"
  stub.mkdir()
  for name in ("wget", "unzip", "python"):   # wget leaves the .zip that prepare.sh removes after unzip
    touch = '\ntouch "$(basename "${@: -1}")"' if name == "wget" else ""
    (stub / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {log}{touch}\n')
    (stub / name).chmod((stub / name).stat().st_mode | stat.S_IEXEC)
  env = dict(os.environ, PATH=f"{stub}:{os.environ['PATH']}")
  work = tmp_path / "cwd"
  work.mkdir()
  subprocess.run(["bash", os.path.join(repo, "experiments", "reproduce_paper", "prepare.sh"), "rel"], cwd=work,
                 env=env, check=True, capture_output=True, timeout=60)
  lines = log.read_text().splitlines()
  root = str(work / "rel")
  assert any(f"--output={root}/converted/uncased_L-12_H-768_A-12" in l for l in lines)
  assert all(l.endswith(f"{root}/tensorflow_datasets") for l in lines if "tensorflow_datasets as tfds" in l)


@pytest.mark.parametrize("flags, message", [
    (["--tasks=mrpc,bogus", "--dry_run"], r"error: --tasks='mrpc,bogus': unknown tasks \['bogus'\]"),
    (["--seeds=0", "--dry_run"], r"error: --seeds=0: at least 1"),
    (["--seeds=x"], r"error: argument --seeds: invalid int value: 'x'"),
    (["--learning_rates=5e-5,fast", "--dry_run"], r"error: --learning_rates='5e-5,fast': 'fast' is not a positive"),
    (["--shard=4/4", "--dry_run"], r"error: --shard='4/4': expected I/N"),
    ([], r"error: --root=.*/missing: no such directory"),
])
def test_reproduce_paper_run_bad_flags_are_one_error_line_before_any_sweep(tmp_path, capsys, flags, message):
  """argparse printed its usage block and 'run.py: error:'; --seeds=0 or a missing --root failed inside each
  task's sweep after the log was opened. Now one `error:` line, exit 2, nothing written."""
  from experiments.reproduce_paper import run
  assert run.main([f"--root={tmp_path / 'missing'}", f"--output_dir={tmp_path / 'out'}"] + flags) == 2
  err = capsys.readouterr().err
  assert re.search(message, err) and len(err.strip().splitlines()) == 1 and "usage:" not in err, err
  assert not os.path.exists(tmp_path / "out")


def test_reproduce_paper_table_of_a_missing_dir_is_one_error_line(tmp_path, capsys):
  """table.py --output_dir=<missing> was a FileNotFoundError traceback from writing results.md."""
  from experiments.reproduce_paper import table
  assert table.main([f"--output_dir={tmp_path / 'missing'}"]) == 2
  assert capsys.readouterr().err.startswith(f"error: --output_dir={tmp_path / 'missing'}: no such directory")
  run = tmp_path / "out" / "mrpc" / "runs" / "p001_s0"     # a run whose sweep_spec.json is gone
  run.mkdir(parents=True)
  (run / "eval_results.json").write_text(json.dumps({"dev": {"accuracy": 0.5}}), encoding="utf-8")
  assert table.main([f"--output_dir={tmp_path / 'out'}"]) == 0
  assert "| MRPC | accuracy | 86.7 | 50.0 | 50.0 (1 seeds) | p001 |" in capsys.readouterr().out


def test_prediction_inputs_a_model_cannot_take_are_user_errors_not_tracebacks():
  """`python -m bert_jax.predict classify` on an NER model with an empty input line, or on a SQuAD model
  without --pairs, ended in a ValueError traceback (exit 1): now one error: line naming the line / flag."""
  from bert_jax.finetune.tasks import get_task
  from bert_jax.finetune.tasks.common import PredictInputError
  with pytest.raises(UserError, match=r"text 1 \(line 2 of an input file\) has no words"):
    get_task("ner", label_list=["O", "B-PER", "I-PER"]).text_examples(["John Smith", "  "])
  with pytest.raises(UserError, match=r"needs text_pairs=contexts .*--pairs"):
    get_task("squad_v1").text_examples(["where ?"])
  assert issubclass(PredictInputError, ValueError)      # callers catching ValueError keep working


@pytest.mark.parametrize("question, message", [
    ({"context": "c", "question": "q", "choices": ["a"]}, r"question 1 \(line 2 of an input file\) has 1 choice"),
    ({"context": "c", "question": "q", "choices": "ab"}, r"\"choices\" must be a list of strings, got 'ab'"),
    (["c", "q"], r"question 1 \(line 2 of an input file\) is a list; expected an object"),
])
def test_multiple_choice_prediction_inputs_are_user_errors(question, message):
  """A JSON line with one choice was a ValueError traceback, a JSON list an AttributeError, and a string of
  choices ("ab") was split into characters and predicted in silence."""
  from bert_jax.finetune.tasks import get_task
  ok = {"context": "c", "question": "q", "choices": ["a", "b"]}
  with pytest.raises(UserError, match=message):
    get_task("c3").choice_examples([ok, question])
  with pytest.raises(UserError, match="predict_choices needs a c3 / multiple_choice model"):
    get_task("classification", label_list=["0", "1"]).choice_examples([ok])


def test_a_task_field_the_task_does_not_read_is_named_not_ignored_in_silence():
  """--config.classification.text_b=sentence2 on MRPC or --config.doc_stride=64 on NER changed nothing and
  said nothing; the plan now logs a warning naming them (and every task's defaults name none)."""
  from bert_jax.finetune import plan as finetune_plan
  from bert_jax.finetune.tasks import task_names
  from test_finetune_units import load_config_module
  module = load_config_module()
  for name in task_names():
    if name in ("ax",):
      continue
    try:
      c = module.get_config(f"task={name}")
    except ValueError:      # a registry alias the config file does not take
      continue
    assert finetune_plan.ignored_fields(c) == [], name
  c = module.get_config("task=mrpc")
  c.classification.text_b, c.doc_stride = "sentence2", 64
  assert finetune_plan.ignored_fields(c) == ["classification.text_b='sentence2'", "doc_stride=64"]
  c = module.get_config("task=multilabel")
  c.classification.text_a, c.ner_scheme = "sentence", "BIOES"
  assert finetune_plan.ignored_fields(c) == ["ner_scheme='BIOES'"]
  c = module.get_config("task=squad_v1")
  c.doc_stride = 64
  assert finetune_plan.ignored_fields(c) == []


def test_single_texts_for_a_pair_model_are_named_in_a_warning():
  """`predict classify` on an MRPC model without --pairs scored each line alone, in silence."""
  from bert_jax.finetune.predict import missing_pairs_warning
  from bert_jax.finetune.tasks import get_task
  assert "fine-tuned on sentence pairs" in missing_pairs_warning(get_task("mrpc"), {"task": "mrpc"})
  assert missing_pairs_warning(get_task("sst2"), {"task": "sst2"}) is None
  cls = get_task("classification", label_list=["0", "1"])
  assert missing_pairs_warning(cls, {"task": "classification", "classification": {"text_b": "text_b"}})
  assert missing_pairs_warning(cls, {"task": "classification", "classification": {"text_b": ""}}) is None
  assert missing_pairs_warning(get_task("ner", label_list=["O"]), {"task": "ner"}) is None


@pytest.mark.parametrize("task, name", [("squad_v1", "train-v1.1.json"), ("c3", "train.json")])
def test_an_empty_json_file_says_so(tmp_path, task, name):
  """An empty SQuAD or C3 file was 'invalid JSON: Expecting value (column 1)'."""
  from bert_jax.finetune.tasks import get_task
  (tmp_path / name).write_text("\n", encoding="utf-8")
  with pytest.raises(UserError, match=rf"{name}: the file is empty; expected"):
    get_task(task).read("train", str(tmp_path))
