"""engine/periodic.py: which steps log, evaluate, checkpoint and stop, for every loop; and engine/run_files.py."""

import json
import os

import pytest

from bert_jax.engine import periodic, run_files, timing
from bert_jax.finetune import loop
from bert_jax.finetune.plan import resolve_finetune

import task_fixtures as testing
from test_finetune_tasks import make_config


def due_steps(predicate, total):
  return [s for s in range(1, total + 1) if predicate(s)]


# ---- every ---------------------------------------------------------------------------------------------------
def test_every_multiples_and_the_last_step():
  assert due_steps(lambda s: periodic.every(s, 4, last=10), 10) == [4, 8, 10]


def test_every_without_last_is_only_the_multiples():
  assert due_steps(lambda s: periodic.every(s, 4), 10) == [4, 8]


def test_every_zero_or_negative_is_off_even_at_the_last_step():
  assert due_steps(lambda s: periodic.every(s, 0, last=10), 10) == []
  assert due_steps(lambda s: periodic.every(s, -3, last=10), 10) == []


def test_every_is_never_due_before_the_first_step():
  # 0 % n == 0: without the guard, "nothing ran yet" would log an empty window
  assert not periodic.every(0, 5, last=0)
  assert periodic.every(1, 1)


# ---- Schedule ------------------------------------------------------------------------------------------------
def test_log_every_10_of_150_steps():
  due = periodic.Schedule(150, log_every=10)
  assert due_steps(due.log, 150) == list(range(10, 151, 10))


def test_log_at_the_last_step_when_it_is_no_multiple():
  assert due_steps(periodic.Schedule(23, log_every=10).log, 23) == [10, 20, 23]


def test_log_at_a_phase_end():
  # pre-training's phases: 7 steps at length 128, then to 10; the phase's last step logs (its last loss)
  due = periodic.Schedule(10, log_every=5)
  assert due_steps(lambda s: due.log(s, end=7), 7) == [5, 7]


def test_evaluate_every_75_of_150_and_off():
  assert due_steps(periodic.Schedule(150, eval_every=75).evaluate, 150) == [75, 150]
  assert due_steps(periodic.Schedule(150, eval_every=40).evaluate, 150) == [40, 80, 120, 150]
  assert due_steps(periodic.Schedule(150).evaluate, 150) == []


def test_checkpoint_every_and_always_at_the_end():
  due = periodic.Schedule(10, checkpoint_every=4)
  assert due_steps(due.checkpoint, 10) == [4, 8, 10]
  assert due_steps(lambda s: due.checkpoint(s, end=6), 6) == [4, 6]


def test_checkpoint_every_zero_still_saves_the_end():
  due = periodic.Schedule(10, checkpoint_every=0)
  assert due_steps(due.checkpoint, 10) == [10]
  assert due_steps(lambda s: due.checkpoint(s, end=3), 3) == [3]


def test_fine_tuning_eval_every_zero_is_each_epoch():
  # 3 epochs of 4 steps, cut at 10 steps: epochs end at 4 and 8, and the run's last step evaluates too
  due = periodic.Schedule.epochs(10, steps_per_epoch=4, log_every=1, eval_every=0)
  assert due_steps(due.evaluate, 10) == [4, 8, 10]


def test_fine_tuning_eval_interval_wins_over_epochs():
  due = periodic.Schedule.epochs(10, steps_per_epoch=4, log_every=1, eval_every=3)
  assert due_steps(due.evaluate, 10) == [3, 6, 9, 10]


def test_fine_tuning_without_evaluation_never_evaluates():
  due = periodic.Schedule.epochs(10, steps_per_epoch=4, log_every=1, eval_every=3, evaluate=False)
  assert due_steps(due.evaluate, 10) == []
  assert due_steps(due.log, 10) == list(range(1, 11))


def test_epoch_fraction():
  due = periodic.Schedule.epochs(12, steps_per_epoch=4, log_every=1, eval_every=0)
  assert [due.epoch(s) for s in (1, 2, 4, 5, 8, 12)] == [0.25, 0.5, 1.0, 1.25, 2.0, 3.0]


def test_epoch_sums_as_the_loops_always_did():
  # whole epochs + this epoch's fraction; 7 steps per epoch is where it and step / 7 part in the last bit
  due = periodic.Schedule.epochs(700, steps_per_epoch=7, log_every=1, eval_every=0)
  for s in range(1, 701):
    e = (s - 1) // 7
    assert due.epoch(s) == e + (s - e * 7) / 7
  assert any(due.epoch(s) != s / 7 for s in range(1, 701))


# ---- evals_per_epoch: the plan spreads them, the loops' schedule acts on them -------------------------------
@pytest.mark.parametrize("rows,per_epoch,expected", [
    (64, 4, [2, 4, 6, 8, 10, 12, 14, 16]),     # 8 steps per epoch / 4 evaluations = every 2 steps
    (8, 4, [1, 2]),                            # 1 step per epoch: every step, never 0 (0 means each epoch)
    (40, 2, [2, 4, 6, 8, 10]),                 # 5 steps per epoch: 5 // 2 = every 2, and the last step
])
def test_evals_per_epoch_spread_over_each_epoch(tmp_path, rows, per_epoch, expected):
  data = testing.write_classification(str(tmp_path / "data"))
  config = make_config("classification", data, testing.write_vocab(str(tmp_path / "v")), num_train_epochs=2.0,
                       evals_per_epoch=per_epoch)
  plan = resolve_finetune(config, str(tmp_path / "w"))
  schedule = plan.schedule(rows)
  due = loop.timetable(plan, schedule, evaluate=True)
  assert due_steps(due.evaluate, schedule["total_steps"]) == expected


# ---- EarlyStopping -------------------------------------------------------------------------------------------
def test_early_stopping_after_patience_evaluations_without_improvement():
  stopper = periodic.EarlyStopping(2)
  assert [stopper.update(x) for x in (True, False, True, False, False)] == [False, False, False, False, True]
  assert stopper.bad == 2


def test_early_stopping_patience_zero_never_stops():
  stopper = periodic.EarlyStopping(0)
  assert not any(stopper.update(False) for _ in range(50))


def test_early_stopping_patience_one_stops_at_the_first_miss():
  stopper = periodic.EarlyStopping(1)
  assert [stopper.update(x) for x in (True, True, False)] == [False, False, True]


# ---- TrainClock ----------------------------------------------------------------------------------------------
def test_train_clock_times_the_first_step_once():
  clock = timing.TrainClock()
  assert clock.step([1.0]) is True
  first = clock.first_step_seconds
  assert clock.step([2.0]) is False and clock.first_step_seconds == first
  s = clock.summary(3)
  assert s["train_steps"] == 3 and s["first_step_seconds"] == round(first, 2) and s["steps_per_second"] > 0


def test_train_clock_has_no_rate_from_one_step():
  clock = timing.TrainClock()
  clock.step(0)
  assert clock.summary(1)["steps_per_second"] is None
  assert timing.TrainClock().summary(0)["first_step_seconds"] == 0.0


# ---- run_files -----------------------------------------------------------------------------------------------
def test_run_files_writes_plan_config_with_resolved_and_init_report(tmp_path):
  paths = run_files.write_run_files(str(tmp_path), {"task": "ner"}, {"task": "ner", "seed": 1}, {"total_steps": 5},
                                    {"loaded": ["bert/x"]})
  assert [os.path.basename(p) for p in paths] == ["plan.json", "config.json", "init_report.json"]
  read = lambda n: json.load(open(tmp_path / n))  # noqa: E731
  assert read("plan.json") == {"task": "ner"}
  assert read("config.json") == {"task": "ner", "seed": 1, "resolved": {"total_steps": 5}}
  assert read("init_report.json") == {"loaded": ["bert/x"]}
  assert sorted(os.listdir(tmp_path)) == ["config.json", "init_report.json", "plan.json"]   # no temp files left


def test_run_files_plan_alone(tmp_path):
  run_files.write_run_files(str(tmp_path), {"steps": 3})
  assert os.listdir(tmp_path) == ["plan.json"]
  assert open(tmp_path / "plan.json").read() == '{\n  "steps": 3\n}\n'
