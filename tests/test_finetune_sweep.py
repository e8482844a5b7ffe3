"""Fine-tuning sweeps (bert_jax/finetune/sweep.py): grid parsing and checks, the report's statistics and
selection rules, resume and shards, on tiny runs."""

import json
import os
import re

import pytest

import task_fixtures as testing
from bert_jax.errors import UserError
from bert_jax.finetune import sweep

from test_finetune_tasks import make_config


@pytest.fixture
def config(tmp_path):
  data = testing.write_classification(str(tmp_path / "data"))
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  c = make_config("classification", data, vocab, num_train_epochs=1.0, batch_size=8, eval_batch_size=8,
                  do_predict=False, save_best_checkpoint=False)
  c.model.num_hidden_layers = 1
  c.mesh.shape = (8, 1, 1)
  return c


def test_grid_values_take_the_type_of_the_config_field(config):
  grid = sweep.parse_grid("optimizer.learning_rate=1e-4,3e-4; num_train_epochs=3,10;crf=true", config)
  assert grid == {"optimizer.learning_rate": [1e-4, 3e-4], "num_train_epochs": [3.0, 10.0], "crf": [True]}
  assert len(sweep.grid_points(grid)) == 4
  assert sweep.grid_points(grid)[1] == {"optimizer.learning_rate": 1e-4, "num_train_epochs": 10.0, "crf": True}


@pytest.mark.parametrize("text,message", [
    ("optimizer.learnig_rate=1e-4", "no field 'optimizer.learnig_rate'; did you mean optimizer.learning_rate"),
    # by closeness of the dotted names, abbreviations too: it suggested optimizer.b2 or optimizer.b1
    ("optimizer.lr=1e-4", "no field 'optimizer.lr'; did you mean optimizer.learning_rate or learning_rate?"),
    # a ',' where ';' separates axes: it said the value 'num_train_epochs=1' is not a float
    ("optimizer.learning_rate=1e-5,3e-5,num_train_epochs=1,2", "optimizer.learning_rate='1e-5,3e-5,num_train_epochs="
     "1,2' has a value holding '=' ('num_train_epochs=1'): separate grid axes with ';', e.g. "
     "--grid='optimizer.learning_rate=1e-5,3e-5;num_train_epochs=1,2'"),
    ("batch_size=eight", "batch_size='eight' is not an int"),
    ("num_train_epochs=3;num_train_epochs=4", "num_train_epochs is given twice"),
    ("optimizer.learning_rate", "is not FIELD=V1,V2"),
    ("seed=1,2", "seed is set by --seeds"),
    ("num_train_epochs=3,3", "lists a value twice"),
    ("optimizer.learning_rate=1e-4,,3e-4", "optimizer.learning_rate='1e-4,,3e-4' has an empty value"),   # was dropped
    ("num_train_epochs=3,", "num_train_epochs='3,' has an empty value"),
])
def test_a_bad_grid_is_one_user_error_naming_the_field(config, text, message):
  with pytest.raises(UserError, match=re.escape(message)):
    sweep.parse_grid(text, config)


def test_a_value_the_plan_rejects_fails_before_any_run(config, tmp_path):
  with pytest.raises(UserError, match=r"grid point optimizer.learning_rate=-5.*learning_rate"):
    sweep.run_sweep(config, "optimizer.learning_rate=1e-3,-5", 2, str(tmp_path / "sw"))
  assert not os.path.exists(tmp_path / "sw" / "runs")


def test_work_units_split_points_then_seed_groups_over_shards():
  assert sweep.work_units(3, [0, 1], 2) == [[(0, 0), (0, 1)], [(1, 0), (1, 1)], [(2, 0), (2, 1)]]
  units = sweep.work_units(1, [0, 1, 2, 3, 4], 2)
  assert units == [[(0, 0), (0, 1), (0, 2)], [(0, 3), (0, 4)]]
  assert sweep.parse_shard("1/4") == (1, 4)
  with pytest.raises(UserError, match="0 <= I < N"):
    sweep.parse_shard("4/4")


def _fake_run(workdir, point, seed, dev, test):
  d = sweep.run_dir(workdir, point, seed)
  os.makedirs(d)
  with open(os.path.join(d, "eval_results.json"), "w") as f:
    json.dump({"dev": {"accuracy": dev}, "test": {"accuracy": test}, "best": {"step": 3}}, f)


@pytest.mark.slow   # matplotlib (two spread plots): ~3 s
def test_best_and_median_rules_select_different_points(tmp_path):
  """Point 0 has the single best dev run (0.9) but a low median; point 1 is steady (median 0.8)."""
  devs = {0: [0.9, 0.5, 0.5], 1: [0.8, 0.8, 0.7]}
  for rule, want, result in (("best", 0, {"dev": 0.9, "test": 0.55, "seed": 0}), ("median", 1, None)):
    w = str(tmp_path / rule)
    os.makedirs(w)
    spec = {"task": "classification", "main_metric": "accuracy", "dev_split": "dev", "test_splits": ["test"],
            "grid": {"num_train_epochs": [3.0, 10.0]}, "seeds": [0, 1, 2], "select": rule,
            "points": [{"index": i, "settings": {"num_train_epochs": e}, "label": f"num_train_epochs={e:g}"}
                       for i, e in enumerate((3.0, 10.0))]}
    with open(os.path.join(w, sweep.SPEC_NAME), "w") as f:
      json.dump(spec, f)
    for p, ds in devs.items():
      for s, d in enumerate(ds[:2 if p == 1 and rule == "best" else 3]):
        _fake_run(w, p, s, d, d - 0.35 + 0.1 * p if s == 0 else d)
    out = sweep.write_report(w)
    assert out["selected"] == want
    if result:
      assert out["result"] == result
      assert out["runs_missing"] == 1
    else:
      assert out["result"] == {"dev": 0.8, "test": pytest.approx(0.7)}   # tests 0.55, 0.8, 0.7
    table = open(os.path.join(w, sweep.TABLE_NAME)).read()
    assert f"**num_train_epochs={(3.0, 10.0)[want]:g}** (selected)" in table
    assert os.path.getsize(os.path.join(w, sweep.PLOT_NAME)) > 1000
  p0 = out["points"][0]["dev"]
  assert p0["median"] == 0.5 and p0["min"] == 0.5 and p0["max"] == 0.9 and p0["n"] == 3


def test_median_does_not_select_a_point_whose_seeds_mostly_diverged(tmp_path):
  """Point 0's one surviving seed (0.95; two diverged) was its 'median' and won; under median a point needs a dev
  score on more than half of its seeds, and the table says why it is not selectable."""
  w = str(tmp_path)
  spec = {"task": "classification", "main_metric": "accuracy", "dev_split": "dev", "test_splits": ["test"],
          "grid": {"num_train_epochs": [3.0, 10.0]}, "seeds": [0, 1, 2], "select": "median",
          "points": [{"index": i, "settings": {"num_train_epochs": e}, "label": f"num_train_epochs={e:g}"}
                     for i, e in enumerate((3.0, 10.0))]}
  with open(os.path.join(w, sweep.SPEC_NAME), "w") as f:
    json.dump(spec, f)
  _fake_run(w, 0, 0, 0.95, 0.9)
  for s in (1, 2):
    os.makedirs(sweep.run_dir(w, 0, s))
    with open(os.path.join(sweep.run_dir(w, 0, s), sweep.ERROR_NAME), "w") as f:
      json.dump({"error": "non-finite loss", "status": "diverged"}, f)
  for s, d in enumerate((0.8, 0.8, 0.7)):
    _fake_run(w, 1, s, d, d)
  out = sweep.collect(w)
  assert out["selected"] == 1 and [p["selectable"] for p in out["points"]] == [False, True]
  assert "num_train_epochs=3 (not selectable: 1 of 3 seeds have a dev score" in sweep.table_markdown(out)
  assert sweep.collect(w, "best")["selected"] == 0          # BERT's rule: any finished run is a candidate
  for s in range(3):                                        # no point with a majority: nothing selected
    os.remove(os.path.join(sweep.run_dir(w, 1, s), "eval_results.json"))
  out = sweep.collect(w)
  assert out["selected"] is None and "more than half of its 3 seeds" in sweep.nothing_selected(out)


def _fake_training(calls):
  """multirun.run_plans without the training: records each group and writes each run's eval_results.json
  with a dev score that depends on the run's learning rate and seed."""
  def run_plans(plans):
    calls.append([(p.optimizer.learning_rate, p.seed) for p in plans])
    out = []
    for p in plans:
      r = {"dev": {"accuracy": 0.5 + 100 * p.optimizer.learning_rate + 0.01 * p.seed}, "test": {"accuracy": 0.6},
           "best": {"step": 1}, "train": {"learning_rate": p.optimizer.learning_rate}}
      os.makedirs(p.workdir, exist_ok=True)
      with open(os.path.join(p.workdir, "eval_results.json"), "w") as f:
        json.dump(r, f)
      out.append(r)
    return out
  return run_plans


@pytest.mark.slow   # matplotlib (the spread plot): ~2 s
def test_sweep_runs_every_point_and_seed_once_and_a_rerun_skips_finished_runs(config, tmp_path, monkeypatch):
  calls = []
  monkeypatch.setattr(sweep.multirun, "run_plans", _fake_training(calls))
  w = str(tmp_path / "sw")
  grid = {"optimizer.learning_rate": [1e-3, 3e-4], "num_train_epochs": [1.0, 2.0]}
  out = sweep.run_sweep(config, grid, 2, w)
  # runs differing only in seed and learning rate form one group (one vmapped program): one per epochs value
  assert sorted(map(sorted, calls)) == [[(3e-4, 0), (3e-4, 1), (1e-3, 0), (1e-3, 1)]] * 2
  assert out["runs_missing"] == 0 and len(out["points"]) == 4
  assert out["points"][0]["settings"] == {"optimizer.learning_rate": 1e-3, "num_train_epochs": 1.0}
  assert out["selected"] in (0, 1) and out["result"]["seed"] == 1       # lr 1e-3, seed 1: 0.61 on dev
  assert os.path.exists(os.path.join(w, sweep.TABLE_NAME)) and os.path.exists(os.path.join(w, sweep.PLOT_NAME))
  calls.clear()
  os.remove(os.path.join(w, "runs", "p003_s1", "eval_results.json"))
  again = sweep.run_sweep(config, grid, 2, w)
  assert calls == [[(3e-4, 1)]]                                          # only the missing run
  assert again["points"] == out["points"]
  with pytest.raises(UserError, match="holds another sweep"):
    sweep.run_sweep(config, {"optimizer.learning_rate": [1e-3]}, 2, w)


def test_a_rerun_with_another_base_config_is_refused_not_mixed_in(config, tmp_path, monkeypatch):
  """Finished runs are skipped on a rerun, so a rerun that changed a field off the grid (here the sequence
  length) would report old runs as if trained with the new config: one error naming the field instead."""
  calls = []
  monkeypatch.setattr(sweep.multirun, "run_plans", _fake_training(calls))
  w = str(tmp_path / "sw")
  sweep.run_sweep(config, {"optimizer.learning_rate": [1e-3]}, 1, w, report=False)
  changed = config.copy_and_resolve_references()
  changed.max_seq_length = 48
  changed.multirun.enabled = False        # how runs execute may change on a resume
  with pytest.raises(UserError, match=r"another config \(config.max_seq_length: 32 in the sweep vs 48 now\)"):
    sweep.run_sweep(changed, {"optimizer.learning_rate": [1e-3]}, 1, w, report=False)
  changed.max_seq_length = config.max_seq_length
  calls.clear()
  sweep.run_sweep(changed, {"optimizer.learning_rate": [1e-3]}, 1, w, report=False)
  assert calls == []                      # resumed: nothing left to run


def test_a_missing_dev_split_fails_before_any_run(config, tmp_path, monkeypatch):
  """The sweep selects on dev: without the dev file every run would train and none could be selected."""
  calls = []
  monkeypatch.setattr(sweep.multirun, "run_plans", _fake_training(calls))
  os.remove(os.path.join(config.data_dir, "dev.tsv"))
  with pytest.raises(UserError, match=r"has no 'dev' split for task classification \(.*dev.*\), and the sweep "
                                     r"selects on it"):
    sweep.run_sweep(config, {"optimizer.learning_rate": [1e-3, 3e-4]}, 2, str(tmp_path / "sw"))
  assert calls == [] and not os.path.exists(tmp_path / "sw" / "runs")
  assert not os.path.exists(tmp_path / "sw" / sweep.SPEC_NAME)   # the corrected command is not "another sweep"
  config.do_eval = False
  with pytest.raises(UserError, match=r"config.do_eval=False: the sweep selects on the dev score"):
    sweep.run_sweep(config, {"optimizer.learning_rate": [1e-3]}, 1, str(tmp_path / "sw"))


def test_the_rule_can_change_after_the_runs(config, tmp_path, monkeypatch):
  """--select decides only the report: `--report --select=median` reports the same runs under that rule (it
  was ignored), and a rerun with another --select resumes instead of being 'another sweep'."""
  monkeypatch.setattr(sweep.multirun, "run_plans", _fake_training([]))
  monkeypatch.setattr(sweep, "plot_spread", lambda results, path: path)     # no matplotlib here
  w = str(tmp_path / "sw")
  assert sweep.run_sweep(config, {"optimizer.learning_rate": [1e-3, 3e-4]}, 2, w)["select"] == "best"
  out = sweep.write_report(w, "median")
  assert out["select"] == "median" and "(medians)" in open(os.path.join(w, sweep.TABLE_NAME)).read()
  assert sweep.run_sweep(config, {"optimizer.learning_rate": [1e-3, 3e-4]}, 2, w, select="median")["select"] == "median"
  with pytest.raises(UserError, match="--select='mean'"):
    sweep.write_report(w, "mean")


def test_a_sweep_whose_every_run_failed_is_an_error_not_an_empty_table(tmp_path):
  runs = [{"seed": 0, "status": "diverged"}, {"seed": 1, "status": "done", "dev": None}]
  results = {"main_metric": "accuracy", "runs_total": 2, "selected": None, "points": [{"runs": runs}]}
  assert sweep.nothing_selected(results).startswith("no run of the sweep has a dev accuracy: 1 of 2 runs diverged")
  assert sweep.nothing_selected(dict(results, selected=0)) is None


def test_a_shard_runs_only_its_units(config, tmp_path, monkeypatch):
  calls = []
  monkeypatch.setattr(sweep.multirun, "run_plans", _fake_training(calls))
  w = str(tmp_path / "sw")
  assert sweep.run_sweep(config, {"num_train_epochs": [1.0, 2.0, 3.0]}, 2, w, shard=(1, 2)) == {}
  assert sorted(os.listdir(os.path.join(w, "runs"))) == ["p001_s0", "p001_s1"]


@pytest.mark.parametrize("task, want", [("classification", "| 81.0 | 81.0 ± 1.0 | 80.0 | 82.0 |"),
                                         ("squad_v1", "| 81.0 | 81.0 ± 1.0 | 80.0 | 82.0 |")])
def test_the_table_prints_every_task_in_percent_once(task, want):
  """Accuracy is a fraction (x 100); SQuAD's scorer already gives percent (x 1, not 8100)."""
  k = 1.0 if task == "squad_v1" else 0.01
  st = {"median": 81 * k, "mean": 81 * k, "std": 1 * k, "min": 80 * k, "max": 82 * k, "n": 2}
  results = {"task": task, "main_metric": "f1", "select": "best", "seeds": [0, 1], "runs_total": 2,
             "runs_missing": 0, "selected": 0, "result": {"dev": 82 * k, "test": 81 * k, "seed": 1},
             "points": [{"index": 0, "label": "lr=1e-3", "dev": st, "test": st, "runs": []}]}
  table = sweep.table_markdown(results)
  assert want in table and "-> dev 82.0, test 81.0 (seed 1)" in table
  assert ("in percent" if task == "squad_v1" else "x 100") in table.splitlines()[0]


def _diverging_training(calls, diverge):
  """_fake_training, except the runs whose (learning rate, seed) is in `diverge` diverge: {"error": ...} and no
  eval_results.json, as multirun.run_plans returns for a NonFiniteError."""
  fake = _fake_training([])

  def run_plans(plans):
    calls.append([(p.optimizer.learning_rate, p.seed) for p in plans])
    out = []
    for p in plans:
      if (p.optimizer.learning_rate, p.seed) in diverge:
        out.append({"error": f"classification seed {p.seed}: non-finite loss at step 3"})
      else:
        out += fake([p])
    return out
  return run_plans


def test_a_diverged_run_is_a_result_shown_in_the_table_and_not_rerun_on_resume(config, tmp_path, monkeypatch):
  """A run that diverged (NaN loss) was retried on every resume (only eval_results.json counted as done): it is
  a finished result, recorded as diverged, shown in the table and never selected; --retry_diverged reruns it."""
  calls = []
  monkeypatch.setattr(sweep.multirun, "run_plans", _diverging_training(calls, {(1e-3, 1)}))
  monkeypatch.setattr(sweep, "plot_spread", lambda results, path: path)
  w = str(tmp_path / "sw")
  grid = {"optimizer.learning_rate": [1e-3, 3e-4]}
  out = sweep.run_sweep(config, grid, 2, w)
  assert json.load(open(os.path.join(w, "runs", "p000_s1", sweep.ERROR_NAME)))["status"] == "diverged"
  assert [r["status"] for r in out["points"][0]["runs"]] == ["done", "diverged"]
  assert out["runs_diverged"] == 1 and out["runs_missing"] == 0
  assert out["result"]["seed"] == 0 and out["selected"] == 0     # lr 1e-3 seed 0: 0.6; seed 1 has no score
  table = open(os.path.join(w, sweep.TABLE_NAME)).read()
  assert "3/4 runs done, 1 diverged" in table and "| 1 (seed 1) |" in table
  calls.clear()
  again = sweep.run_sweep(config, grid, 2, w)
  assert calls == [] and again["runs_diverged"] == 1                # a resume does not rerun it
  monkeypatch.setattr(sweep.multirun, "run_plans", _diverging_training(calls, set()))
  retried = sweep.run_sweep(config, grid, 2, w, retry_diverged=True)
  assert calls == [[(1e-3, 1)]] and retried["runs_diverged"] == 0
  assert not os.path.exists(os.path.join(w, "runs", "p000_s1", sweep.ERROR_NAME))


def test_nothing_selected_names_the_diverged_runs_and_the_retry_flag():
  runs = [{"seed": 0, "status": "diverged"}, {"seed": 1, "status": "done", "dev": None}]
  results = {"main_metric": "accuracy", "runs_total": 2, "selected": None, "points": [{"runs": runs}]}
  assert "1 of 2 runs diverged" in sweep.nothing_selected(results)
  assert "--retry_diverged" in sweep.nothing_selected(results)


def test_a_larger_seeds_extends_a_finished_sweep_and_a_smaller_one_is_refused(config, tmp_path, monkeypatch):
  """Rerunning a finished sweep with more --seeds was 'another sweep'; it keeps the finished seeds, runs only
  the new ones and reports them all. Fewer seeds, another config.seed or another grid is one error naming it."""
  calls = []
  monkeypatch.setattr(sweep.multirun, "run_plans", _fake_training(calls))
  monkeypatch.setattr(sweep, "plot_spread", lambda results, path: path)
  w = str(tmp_path / "sw")
  grid = {"optimizer.learning_rate": [1e-3]}
  sweep.run_sweep(config, grid, 2, w)
  calls.clear()
  out = sweep.run_sweep(config, grid, 4, w)
  assert calls == [[(1e-3, 2), (1e-3, 3)]]
  assert out["seeds"] == [0, 1, 2, 3] and out["points"][0]["dev"]["n"] == 4 and out["result"]["seed"] == 3
  assert json.load(open(os.path.join(w, sweep.SPEC_NAME)))["seeds"] == [0, 1, 2, 3]
  with pytest.raises(UserError, match=r"holds a sweep over 4 seeds \[0, 1, 2, 3\]; --seeds=2 asks for fewer"):
    sweep.run_sweep(config, grid, 2, w)
  config.seed = 7
  with pytest.raises(UserError, match=r"config.seed 0 in the sweep vs 7 now"):
    sweep.run_sweep(config, grid, 5, w)
  config.seed = 0
  with pytest.raises(UserError, match=r"holds another sweep \(grid: .*0.001.* in the sweep vs .*0.0003.* now"):
    sweep.run_sweep(config, {"optimizer.learning_rate": [3e-4]}, 4, w)
  assert json.load(open(os.path.join(w, sweep.SPEC_NAME)))["seeds"] == [0, 1, 2, 3]   # refused: unchanged
