"""An encoder family defined only here, registered with one line, pre-trains through the public step factory and
end to end through pretrain.loop.train_and_evaluate (checkpointed, resumed, loaded in bert_jax.predict): the
model, the step, sharding, the plan and the loop need no change for a new family (models/encoders/__init__.py's
contract). Without the line the config is refused with one line listing the registered families."""

import json
import logging
import os

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

import task_fixtures as testing

from bert_jax import logs
from bert_jax.convert import mapping
from bert_jax.engine import optimizers, sharding
from bert_jax.engine import train_step as ts
from bert_jax.errors import UserError
from bert_jax.models import BertConfig, BertForPreTraining, axes, encoders, objectives
from bert_jax.models.layers import activation, dense, layer_norm
from bert_jax.predict import FeatureExtractor
from bert_jax.pretrain import flops
from bert_jax.pretrain import loop as pretrain
from bert_jax.pretrained.load import load_workdir_params
from test_reliability_cli import pretrain_config
from test_training_sharding import make_batch, run_config

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "was", "hello", "world", "jax", "bert", "model"]


class MeanPoolEncoder(nn.Module):
  """Each layer adds a dense map of (token + the masked mean of the sequence) to every token, then LayerNorm:
  the simplest token mixer that is not attention. [B, T, H] -> [B, T, H]."""

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, input_mask, causal=False):
    cfg = self.config
    if causal:
      raise ValueError("the meanpool encoder mixes in future tokens; it cannot serve a causal target")
    m = input_mask[..., None].astype(x.dtype)
    for i in range(cfg.num_hidden_layers):
      mean = jnp.sum(x * m, axis=1, keepdims=True) / jnp.maximum(jnp.sum(m, axis=1, keepdims=True), 1)
      h = activation(cfg.hidden_act)(dense(cfg, cfg.hidden_size, (axes.EMBED, axes.MLP), f"mix_{i}",
                                           bias_axis=axes.MLP)(x + mean))
      h = nn.Dropout(cfg.hidden_dropout_prob)(h, deterministic=self.deterministic)
      x = layer_norm(cfg, f"LayerNorm_{i}")(x + h)
    return x * m


class MeanPoolFamily(encoders.EncoderFamily):
  name = "meanpool"
  module = MeanPoolEncoder

  @classmethod
  def check_config(cls, config):
    if config.num_hidden_layers < 1:
      raise ValueError(f"BertConfig.num_hidden_layers={config.num_hidden_layers}; the meanpool encoder needs >= 1")


@pytest.fixture
def meanpool(monkeypatch):
  monkeypatch.setattr(encoders, "FAMILIES", dict(encoders.FAMILIES))   # this test's registration ends with it
  encoders.register(MeanPoolFamily)                                       # the one line a new family needs


def _model_fields(encoder):
  config = run_config(lr=3e-3)
  config.optimizer.schedule = "constant"
  config.model.encoder = encoder
  config.model.vocab_size = 96
  return config


def test_a_family_registered_in_one_line_pretrains_through_the_step_factory(meanpool):
  config = _model_fields("meanpool")
  cfg = ts.build_model_config(config.model, 96)
  assert cfg.encoder == "meanpool"
  model = BertForPreTraining(cfg)
  mesh = sharding.make_mesh((-1, 1, 1))          # data parallel over the 8 simulated devices
  tx, _ = optimizers.optimizer_from_run_config(config)
  state, shardings = ts.create_train_state(config, model, mesh, tx)
  flat = traverse_util.flatten_dict(flax.core.unfreeze(state.params))
  encoder_params = sorted("/".join(p[2:]) for p in flat if p[:2] == ("bert", "encoder"))
  assert encoder_params == sorted(f"{m}_{i}/{leaf}" for i in range(cfg.num_hidden_layers)
                                  for m, leaf in (("LayerNorm", "bias"), ("LayerNorm", "scale"), ("mix", "bias"),
                                                  ("mix", "kernel")))
  before = np.asarray(flat[("bert", "encoder", "mix_0", "kernel")])
  step = ts.make_train_step(config, model, tx, mesh, shardings)
  batch = make_batch(batch=16)
  losses = []
  for _ in range(15):
    state, metrics = step(state, batch)
    losses.append(ts.normalize(metrics)["mlm_loss"])
  assert np.isfinite(losses).all() and losses[-1] < 0.8 * losses[0], losses
  after = np.asarray(state.params["bert"]["encoder"]["mix_0"]["kernel"])
  assert not np.allclose(before, after)          # the gradient reached the family's own parameters


def test_a_family_stating_no_flops_is_counted_from_its_initialised_parameters_and_says_so_once(meanpool, caplog):
  cfg = BertConfig.from_size("tiny", vocab_size=96, encoder="meanpool")     # L2/H128
  x, mask = jnp.zeros((2, 16, cfg.hidden_size), jnp.float32), jnp.ones((2, 16), jnp.int32)
  initialised = MeanPoolEncoder(cfg).init(jax.random.PRNGKey(0), x, mask)["params"]
  count = sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(initialised))
  assert count == 2 * (128 * 128 + 128 + 2 * 128) == 33_536     # per layer: dense H^2 + H, LayerNorm 2H
  assert encoders.family("meanpool").params(cfg) == count
  logs.forget(encoders.log.name)                                # another test may have had the note said
  with caplog.at_level(logging.INFO, logger=encoders.log.name):
    assert encoders.family("meanpool").flops_per_sequence(cfg, 64) == 6.0 * count * 64
    mlm_head = objectives.OBJECTIVES["mlm"]().flops(cfg, 128, 20)
    assert flops.flops_per_sequence(cfg, 128, 20, ("mlm",)) == 6.0 * count * 128 + mlm_head   # what the MFU reads
  notes = [r.getMessage() for r in caplog.records if "encoder='meanpool'" in r.getMessage()]
  assert len(notes) == 1, notes                                  # two counts, one note
  assert "6 per parameter per token" in notes[0] and "attention" in notes[0] and "not counted" in notes[0]


def test_an_unregistered_family_is_one_error_line_listing_the_registered_ones(meanpool):
  with pytest.raises(UserError) as e:
    ts.build_model_config(_model_fields("mixer").model, 96)
  message = str(e.value)
  assert "\n" not in message and "config.model" in message and "encoder='mixer'" in message
  assert "('transformer', 'lstm', 'modernbert', 'meanpool')" in message


def test_the_family_rules_and_the_layer_options_it_lacks_are_refused_naming_the_field(meanpool):
  tiny = BertConfig.from_size("tiny", vocab_size=96)
  with pytest.raises(ValueError, match=r"^BertConfig.num_hidden_layers=0; the meanpool encoder needs >= 1$"):
    tiny.replace(encoder="meanpool", num_hidden_layers=0)
  for option in ("scan_layers", "share_layers"):
    with pytest.raises(ValueError, match=rf"^BertConfig.{option}=True needs encoder='transformer' \(got "
                                         r"encoder='meanpool'"):
      tiny.replace(encoder="meanpool", **{option: True})


def test_a_family_without_checkpoint_names_is_refused_by_conversion_with_its_statement(meanpool):
  with pytest.raises(mapping.ConversionError, match="encoder='meanpool' has no counterpart"):
    mapping.name_table(BertConfig.from_size("tiny", vocab_size=96, encoder="meanpool"))
  with pytest.raises(mapping.ConversionError, match="encoder='lstm' has no counterpart"):
    mapping.name_table(BertConfig.from_size("tiny", vocab_size=96, encoder="lstm"))
  with pytest.raises(mapping.ConversionError, match="layer_norm_type='pre': only BERT's post-LN"):
    mapping.name_table(BertConfig.from_size("tiny", vocab_size=96, layer_norm_type="pre"))


def test_register_refuses_a_taken_name_and_a_family_without_a_module(meanpool):
  other = type("OtherTransformer", (encoders.EncoderFamily,), {"name": "transformer", "module": MeanPoolEncoder})
  with pytest.raises(ValueError, match="'transformer' is already registered"):
    encoders.register(other)
  with pytest.raises(TypeError, match="no name or no module"):
    encoders.register(type("Nameless", (encoders.EncoderFamily,), {"module": MeanPoolEncoder}))
  assert encoders.register(MeanPoolFamily) is MeanPoolFamily     # registering the same class again is harmless
  assert encoders.names() == ("transformer", "lstm", "modernbert", "meanpool")


def test_without_its_line_the_family_is_not_registered():
  assert "meanpool" not in encoders.names()
  with pytest.raises(ValueError, match=r"BertConfig.encoder='meanpool'; expected one of the registered encoder "
                                       r"families \('transformer', 'lstm', 'modernbert'\)"):
    BertConfig(encoder="meanpool")


def _pretrain_config(tmp_path, encoder: str, steps: int):
  corpus = testing.write_word_documents(tmp_path / "corpus.txt", WORDS, 30)
  (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS) + "\n",
                                      encoding="utf-8")
  return pretrain_config(tmp_path, **{
      "model.encoder": encoder, "data.input_files": corpus, "num_train_steps": steps, "checkpoint_every_steps": 2,
      "log_every_steps": 1, "progress_bar": False, "batch_size": 8, "data.max_seq_length": 32,
      "data.max_predictions_per_seq": 5})


@pytest.mark.slow         # two short pre-training runs (~30 s); the fast tier keeps the refusal below
def test_a_family_registered_in_one_line_pretrains_resumes_and_loads_in_predict(tmp_path, meanpool, caplog):
  workdir = str(tmp_path / "work")
  first = pretrain.train_and_evaluate(_pretrain_config(tmp_path, "meanpool", 2), workdir)
  assert first["step"] == 2 and np.isfinite(first["mlm_loss"])
  with caplog.at_level(logging.INFO, logger="bert_jax.pretrain.loop"):
    second = pretrain.train_and_evaluate(_pretrain_config(tmp_path, "meanpool", 4), workdir)   # a resume
  assert "resumed from" in caplog.text and second["step"] == 4
  saved_config = json.load(open(os.path.join(workdir, "model_config.json"), encoding="utf-8"))
  assert saved_config["encoder"] == "meanpool"
  hidden = saved_config["hidden_size"]
  saved = load_workdir_params(workdir)             # the family's own parameters, checkpointed
  assert np.asarray(saved["bert"]["encoder"]["mix_0"]["kernel"]).shape == (hidden, hidden)
  feats = FeatureExtractor(workdir, pooling="mean").encode(["the cat sat on the mat ."])
  assert feats.shape == (1, hidden) and np.all(np.isfinite(feats))


def test_without_its_registration_line_pretraining_is_refused_naming_the_registered_families(tmp_path):
  workdir = tmp_path / "work"
  with pytest.raises(UserError) as refused:
    pretrain.train_and_evaluate(_pretrain_config(tmp_path, "meanpool", 2), str(workdir))
  message = str(refused.value)
  assert "\n" not in message                       # one `error:` line at the entry points
  assert "encoder='meanpool'" in message and str(encoders.names()) in message
  assert not workdir.exists()                     # refused before anything was written
