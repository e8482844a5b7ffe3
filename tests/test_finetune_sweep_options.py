"""The stability options a sweep varies (configs/finetune.py): layer-wise learning-rate decay, re-initialised
top layers, evaluations per epoch; checked as plan rules and against hand-computed factors."""

import jax
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.errors import UserError
from bert_jax.finetune import model as fm
from bert_jax.finetune.plan import resolve_finetune
from bert_jax.models import scan_params
from bert_jax.engine import optimizers

from test_finetune_tasks import make_config


def _tree(num_layers=3):
  leaf = lambda: np.ones((2, 2), np.float32)  # noqa: E731
  enc = {f"layer_{i}": {"attention": {"query": {"kernel": leaf()}}} for i in range(num_layers)}
  return {"bert": {"embeddings": {"word_embeddings": {"embedding": leaf()}}, "encoder": enc,
                   "pooler": {"kernel": leaf()}}, "classifier": {"kernel": leaf(), "bias": np.ones(2, np.float32)}}


def test_layerwise_decay_scales_each_layer_as_electra():
  """L=3, decay 0.5: head x1, pooler x0.5, layer_2 x0.25, layer_1 x0.125, layer_0 x0.0625, embeddings x0.03125."""
  tx = optimizers.scale_by_layer_decay(0.5, 3)
  updates, _ = tx.update(_tree(), tx.init(_tree()))
  got = {k: float(np.asarray(v).flat[0]) for k, v in (
      ("head", updates["classifier"]["kernel"]), ("pooler", updates["bert"]["pooler"]["kernel"]),
      ("layer_2", updates["bert"]["encoder"]["layer_2"]["attention"]["query"]["kernel"]),
      ("layer_0", updates["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"]),
      ("embeddings", updates["bert"]["embeddings"]["word_embeddings"]["embedding"]))}
  assert got == {"head": 1.0, "pooler": 0.5, "layer_2": 0.25, "layer_0": 0.0625, "embeddings": 0.03125}
  assert optimizers.with_layerwise_lr_decay(tx, 1.0, 3) is tx     # 1.0 = off: the optimizer unchanged


def test_layerwise_decay_of_a_scanned_encoder_equals_the_unscanned_one():
  tx = optimizers.scale_by_layer_decay(0.8, 3)
  flat, _ = tx.update(_tree(), None)
  scanned = dict(_tree())
  scanned["bert"] = dict(scanned["bert"], encoder=scan_params({"bert": _tree()["bert"]})["bert"]["encoder"])
  got, _ = tx.update(scanned, None)
  stacked = got["bert"]["encoder"]["layers"]["layer"]["attention"]["query"]["kernel"]
  for i in range(3):
    np.testing.assert_allclose(stacked[i], flat["bert"]["encoder"][f"layer_{i}"]["attention"]["query"]["kernel"])


def test_reinit_top_layers_takes_the_pooler_and_top_k_layers_from_the_fresh_init():
  loaded = jax.tree.map(lambda x: x * 0 + 7, _tree())
  fresh = _tree()
  out, again = fm.reinit_top_layers(loaded, fresh, 2, 3)
  enc = out["bert"]["encoder"]
  assert enc["layer_0"]["attention"]["query"]["kernel"][0, 0] == 7
  assert enc["layer_1"]["attention"]["query"]["kernel"][0, 0] == 1 == enc["layer_2"]["attention"]["query"][
      "kernel"][0, 0]
  assert out["bert"]["pooler"]["kernel"][0, 0] == 1 and out["classifier"]["kernel"][0, 0] == 7
  assert sorted(again) == ["bert/encoder/layer_1/attention/query/kernel", "bert/encoder/layer_2/attention/query/"
                           "kernel", "bert/pooler/kernel"]


@pytest.fixture
def base(tmp_path):
  data = testing.write_classification(str(tmp_path / "data"))
  return make_config("classification", data, testing.write_vocab(str(tmp_path / "v")), batch_size=8)


def test_evals_per_epoch_sets_the_evaluation_interval(base, tmp_path):
  base.evals_per_epoch = 4
  plan = resolve_finetune(base, str(tmp_path / "w"))
  assert plan.schedule(64)["eval_every_steps"] == 2           # 8 steps per epoch / 4
  assert plan.schedule(8)["eval_every_steps"] == 1            # never 0 (0 would mean once per epoch)
  base.evals_per_epoch = 0
  base.eval_every_steps = 3
  assert resolve_finetune(base, str(tmp_path / "w")).schedule(64)["eval_every_steps"] == 3


@pytest.mark.parametrize("field,value,message", [
    ("reinit_top_layers", 3, "reinit_top_layers=3 exceeds the encoder's 2 layers"),
    ("layerwise_lr_decay", 0.0, "layerwise_lr_decay"),
    ("layerwise_lr_decay", 1.5, "layerwise_lr_decay"),
    ("evals_per_epoch", -1, "evals_per_epoch"),
])
def test_stability_fields_out_of_range_are_user_errors(base, tmp_path, field, value, message):
  base.model.num_hidden_layers = 2
  setattr(base, field, value)
  with pytest.raises(UserError, match=message):
    resolve_finetune(base, str(tmp_path / "w"))


def test_the_plan_names_a_truncation_other_than_the_head(base, tmp_path):
  assert "truncation" not in resolve_finetune(base, str(tmp_path / "w")).describe()
  base.truncation = "head_tail"
  assert "max_seq_length 32, truncation head_tail (0.25 from the start)" in resolve_finetune(
      base, str(tmp_path / "w")).describe()


def test_reinit_top_layers_without_a_checkpoint_is_a_logged_no_op(tmp_path, caplog):
  """From random init the top layers are random already: a grid over reinit_top_layers gives identical rows,
  so the plan says so."""
  data = testing.write_classification(str(tmp_path / "data"))
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  c = make_config("classification", data, vocab, reinit_top_layers=1)
  with caplog.at_level("WARNING"):
    resolve_finetune(c, str(tmp_path / "run"))
  assert "reinit_top_layers=1 has no effect without config.init_checkpoint" in caplog.text


def test_early_stopping_without_evaluation_is_a_config_error(tmp_path):
  """do_eval=False turns the evaluations during training off, so early stopping never triggered (silently)."""
  data = testing.write_classification(str(tmp_path / "data"))
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  c = make_config("classification", data, vocab, early_stopping_patience=2, do_eval=False)
  with pytest.raises(UserError, match="early_stopping_patience=2 stops on evaluations during training"):
    resolve_finetune(c, str(tmp_path / "run"))
