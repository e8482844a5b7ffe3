"""The experiments' command lines check their flags before any work: an unknown stage, task, case or arm, a
bad number or a work dir that cannot be written is a UserError naming the flag (one `error:` line and exit 2
under bert_jax.cli.run_plain_main). Before, `budget_recipe --stages=bogus` ran nothing and exited 0,
`objectives --stages=bogus` and `finetune_tables --tasks=bogus` started training, `multihost_faults
--cases=bogus` spent minutes on the clean run first, and a work dir that is a file was a traceback."""

import os
import re
import subprocess
import sys

import pytest

from bert_jax.errors import UserError
from experiments import budget_recipe, finetune_tables, multihost_faults, objectives, runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_choices_and_numbers_are_checked_naming_the_flag():
  assert runs.choices_list("--stages", " a, b ", ("a", "b", "c")) == ["a", "b"]
  with pytest.raises(UserError, match=r"^--stages='a,x': unknown value 'x'; expected a comma-separated list of a, b$"):
    runs.choices_list("--stages", "a,x", ("a", "b"))
  with pytest.raises(UserError, match=r"^--stages=','"):
    runs.choices_list("--stages", ",", ("a",))
  assert runs.number_list("--seeds", "0,1", int, lo=0) == [0, 1]
  assert runs.number_list("--rates", "0.1,0", float, lo=0) == [0.1, 0.0]
  for text in ("a", "0", ""):
    with pytest.raises(UserError, match="^--budgets="):
      runs.number_list("--budgets", text, int, lo=1)


def test_make_workdir_names_a_path_it_cannot_write(tmp_path):
  assert runs.make_workdir("--workdir", str(tmp_path / "new")) == str(tmp_path / "new")
  (tmp_path / "f").write_text("x")
  for bad in (tmp_path / "f", tmp_path / "f" / "sub"):
    with pytest.raises(UserError, match=f"^--workdir={bad}: cannot write there"):
      runs.make_workdir("--workdir", str(bad))


@pytest.mark.parametrize("module, flags, named", [
    (budget_recipe, ["--stages=bogus"], "--stages='bogus': unknown value 'bogus'"),
    (budget_recipe, ["--stages=ablation,reprot"], "unknown value 'reprot'"),
    (objectives, ["--stages=bogus"], "--stages='bogus': unknown value 'bogus'"),
    (objectives, ["--arms=bogus"], "--arms='bogus': unknown arm"),
    (objectives, ["--budgets=0"], "--budgets='0'"),
    (multihost_faults, ["--cases=bogus"], "--cases='bogus': unknown value 'bogus'"),
    (multihost_faults, ["--steps=0"], "--steps=0"),
])
def test_a_bad_flag_is_a_user_error_before_any_work(tmp_path, module, flags, named):
  argv = flags if module is multihost_faults else [f"--workdir={tmp_path / 'w'}", *flags]
  with pytest.raises(UserError, match=named.replace("(", r"\(")):
    module.main(argv)
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("flag, named", [("--stages=bogus", "--stages='bogus'"), ("--tasks=sentimnt", "--tasks=")])
def test_finetune_tables_names_an_unknown_stage_or_task(tmp_path, capsys, flag, named):
  assert finetune_tables.main([f"--workdir={tmp_path / 'w'}", "--scale=medium", flag]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: {named}") and len(err.strip().splitlines()) == 1, err


def test_an_experiment_entry_point_prints_one_error_line_and_exits_2(tmp_path):
  (tmp_path / "f").write_text("x")
  proc = subprocess.run([sys.executable, "-m", "experiments.budget_recipe", f"--workdir={tmp_path / 'f'}"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip().splitlines() == [f"error: --workdir={tmp_path / 'f'}: cannot write there (File exists)"]


def test_pod_memory_checks_meshes_batches_and_presets_before_compiling():
  import types
  from experiments import pod_memory
  good = types.SimpleNamespace(devices="8", presets="lamb_pod", meshes="8x1x1,2x4x1", batches="4,8", size="large")
  configs, meshes, batches = pod_memory.check_args(good, 8)
  assert list(configs) == ["lamb_pod"] and meshes == [("8x1x1", (8, 1, 1)), ("2x4x1", (2, 4, 1))]
  assert batches == (4, 8)
  for field, value, named in (("meshes", "abc", "--meshes='abc'"), ("meshes", "4x1x1", "product is the 8 devices"),
                              ("batches", "8", "--batches='8'"), ("batches", "8,8", "two different"),
                              ("presets", "bogus", "unknown preset 'bogus'"), ("size", "huge", "size='huge'")):
    bad = types.SimpleNamespace(**dict(vars(good), **{field: value}))
    with pytest.raises(UserError, match=re.escape(named)):
      pod_memory.check_args(bad, 8)


def test_fast_attention_checks_seeds_and_rates_before_building_data(tmp_path):
  from experiments import fast_attention
  for flag, named in (("--seeds=a", "--seeds='a'"), ("--rates=0.1,x", "--rates='0.1,x'"), ("--rates=1.5", "[0, 1)")):
    with pytest.raises(UserError, match=re.escape(named)):
      fast_attention.main([f"--workdir={tmp_path / 'w'}", flag])
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("flag, named", [("--sizes=abc", "--sizes='abc'"), ("--workers=0", "--workers='0'"),
                                         ("--shard_size=big", "--shard_size='big'")])
def test_bench_input_pipeline_checks_scale_flags_before_any_row(flag, named):
  proc = subprocess.run([sys.executable, "experiments/bench_input_pipeline.py", "--only=scale", flag], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"error: {named}"), lines


def test_baselines_names_a_data_dir_without_the_task_folders(tmp_path):
  from experiments import baselines
  with pytest.raises(UserError, match=re.escape(f"--data_dir={tmp_path}: no sentiment/ or ner/ folder")):
    baselines.main([f"--data_dir={tmp_path}"])
  (tmp_path / "sentiment").mkdir()
  (tmp_path / "ner").mkdir()
  with pytest.raises(UserError, match=re.escape("--output=")):
    baselines.main([f"--data_dir={tmp_path}", f"--output={tmp_path / 'no' / 'out.json'}"])


def test_corpus_choice_and_finetune_heads_check_the_workdir_first(tmp_path):
  from experiments import corpus_choice, finetune_heads
  (tmp_path / "f").write_text("x")
  with pytest.raises(UserError, match="^--workdir=.*: cannot write there"):
    corpus_choice.main([f"--workdir={tmp_path / 'f'}"])
  with pytest.raises(UserError, match="^--workdir=.*: no results.json"):
    corpus_choice.main([f"--workdir={tmp_path / 'empty'}", "--render_only"])
  with pytest.raises(UserError, match="^--seed_check='x'"):
    corpus_choice.main([f"--workdir={tmp_path / 'empty'}", "--seed_check=x"])
  with pytest.raises(UserError, match="^--workdir=.*: cannot write there"):
    finetune_heads.main([f"--workdir={tmp_path / 'f'}"])
  with pytest.raises(UserError, match="^--evals=0"):
    finetune_heads.main([f"--workdir={tmp_path / 'w'}", "--evals=0"])


def test_device_check_and_multiple_choice_diag_check_their_flags(tmp_path):
  from experiments import device_check, multiple_choice_diag
  with pytest.raises(UserError, match=r"^--steps=0"):
    device_check.main(["--steps=0", "--skip_bench"])
  with pytest.raises(UserError, match=re.escape(f"--vocab_file={tmp_path / 'none'}: no such file")):
    multiple_choice_diag.main([f"--data_dir={tmp_path}", f"--vocab_file={tmp_path / 'none'}",
                               f"--checkpoint={tmp_path}"])
  with pytest.raises(UserError, match=re.escape(f"--checkpoint={tmp_path / 'none'}: no such directory")):
    multiple_choice_diag.main([f"--data_dir={tmp_path}", f"--vocab_file={tmp_path / 'none'}",
                               f"--checkpoint={tmp_path / 'none'}"])


def test_a_smoke_run_does_not_default_to_the_committed_results(tmp_path):
  # `budget_recipe --quick` / `objectives --quick` wrote their smoke figures over experiments/*.md and .json
  here = os.path.join(ROOT, "experiments")
  for module, name in ((budget_recipe, "budget_recipe.md"), (objectives, "objectives.md")):
    quick = module.parse_args([f"--workdir={tmp_path}", "--quick"])
    assert module.output_path(quick, str(tmp_path)) == str(tmp_path / name)
    full = module.parse_args([f"--workdir={tmp_path}"])
    assert module.output_path(full, str(tmp_path)) == os.path.join(here, name)
    given = module.parse_args([f"--workdir={tmp_path}", "--quick", "--output=x.md"])
    assert module.output_path(given, str(tmp_path)) == "x.md"
  reduced = objectives.parse_args([f"--workdir={tmp_path}", "--scale=reduced"])
  assert objectives.output_path(reduced, str(tmp_path)) == str(tmp_path / "objectives.md")


def test_default_outputs_are_the_committed_files_from_any_working_directory(tmp_path, monkeypatch):
  # finetune_tables' --output / --plot_dir and finetune_heads' --plot were relative to the cwd ("experiments/...")
  import argparse
  from experiments import finetune_heads
  monkeypatch.chdir(tmp_path)
  seen = {}
  real = argparse.ArgumentParser.parse_args

  def capture(self, args=None, namespace=None):
    ns = real(self, args, namespace)
    seen.update(vars(ns))
    raise UserError("stop")

  monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
  for module in (finetune_tables, finetune_heads):
    with pytest.raises(UserError, match="stop"):
      module.main(["--workdir=w"])
  here = os.path.join(ROOT, "experiments")
  assert seen["plot"] == os.path.join(here, "plots", "finetune_heads.png")
  seen.clear()
  with pytest.raises(UserError, match="stop"):
    finetune_tables.main(["--workdir=w"])
  assert seen["output"] == os.path.join(here, "finetune_tables.md") and seen["plot_dir"] == os.path.join(here, "plots")
