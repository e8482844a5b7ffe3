"""ELECTRA: the generator's size, where replacements land and how they are labelled, Gumbel sampling against
the softmax law, no gradient through the sample, the loss against a NumPy reference, the mesh and gradient
accumulation, bf16, and a train.py run that checkpoints, resumes and hands its discriminator to fine-tuning."""

import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models import BertConfig, ElectraForPreTraining, ElectraSettings, dummy_inputs, pretraining_model
from bert_jax import logs
from bert_jax.errors import UserError
from bert_jax.models import electra, validate_targets
from bert_jax.models.objectives.electra import Electra
from bert_jax.engine import sharding
from bert_jax.engine import train_step as ts
from test_reliability_cli import files  # noqa: F401  (the pytest fixture: a tiny vocab and corpus)
from test_training_sharding import TINY, assert_trees_close, keep_gradients, make_batch, run_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_DROPOUT = TINY.replace(num_hidden_layers=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def electra_model(cfg=NO_DROPOUT, **settings):
  return pretraining_model(cfg, (Electra(ElectraSettings(**{"generator_hidden_fraction": 0.5, **settings})),))


def init(model, seed=0):
  return jax.jit(lambda k: nn.unbox(model.init({"params": k}, *dummy_inputs(model.config))["params"]))(
      jax.random.key(seed))


BATCH = {k: jnp.asarray(v) for k, v in make_batch(batch=8, length=24, preds=5).items()}


@pytest.fixture(scope="module")
def electra_step():
  """One compiled program (compiles dominate these tests): init, the model's outputs on BATCH with sample key
  0 (the key the deterministic LossFn uses), the gradient of the discriminator's loss alone, and the LossFn's
  loss and sums. Returns (params, outputs, disc-loss grads, loss, sums)."""
  model = electra_model()
  lf = ts.pretraining_loss(model)
  names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")

  def disc_loss(p, b):
    out = model.apply({"params": p}, *(b[n] for n in names), rngs={"sample": jax.random.key(0)})
    return electra.electra_sums(out, b)["disc_loss_sum"], out

  def run(key, b):
    params = nn.unbox(model.init({"params": key}, *dummy_inputs(model.config))["params"])
    (_, out), grads = jax.value_and_grad(disc_loss, has_aux=True)(params, b)
    loss, sums = lf.forward(params, b, None, lf.denominators(b))
    return params, out, grads, loss, sums

  return jax.jit(run)(jax.random.key(0), BATCH)


def test_generator_config_is_the_fraction_of_the_discriminator_with_64_wide_heads():
  base = BertConfig.from_size("base")
  gen = electra.generator_config(base, ElectraSettings(generator_hidden_fraction=1 / 3))
  # google/electra-base-generator: hidden 256, 4 heads, FFN 1024, 12 layers
  assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size, gen.num_hidden_layers) == (256, 4, 1024, 12)
  large = electra.generator_config(BertConfig.from_size("large"), ElectraSettings(0.25, generator_num_layers=6))
  assert (large.hidden_size, large.num_attention_heads, large.num_hidden_layers) == (256, 4, 6)
  tiny = electra.generator_config(BertConfig.from_size("tiny"), ElectraSettings(0.25))
  assert (tiny.hidden_size, tiny.num_attention_heads) == (32, 1)


def test_generator_width_rounding_is_said_once_naming_the_fields(caplog):
  logs.forget(electra.log.name)
  disc = BertConfig.from_size("tiny")   # H 128
  with caplog.at_level("WARNING", logger="bert_jax.models.electra"):
    gen = electra.generator_config(disc, ElectraSettings(generator_hidden_fraction=0.3))   # 38.4 -> 38
    electra.generator_config(disc, ElectraSettings(generator_hidden_fraction=0.3))
  assert gen.hidden_size == 38
  msgs = [r.getMessage() for r in caplog.records if "generator_hidden_fraction" in r.getMessage()]
  assert len(msgs) == 1, msgs
  assert "model.hidden_size=128" in msgs[0] and "hidden size 38" in msgs[0]
  caplog.clear()
  with caplog.at_level("WARNING", logger="bert_jax.models.electra"):   # exact (and .6g-rounded 1/3): silent
    electra.generator_config(BertConfig.from_size("base"), ElectraSettings(generator_hidden_fraction=0.333333))
    electra.generator_config(disc, ElectraSettings(generator_hidden_fraction=0.25))
  assert not caplog.records
  with caplog.at_level("WARNING", logger="bert_jax.models.electra"):   # 0.125 x 768 = 96: one head of 96
    gen = electra.generator_config(BertConfig.from_size("base"), ElectraSettings(generator_hidden_fraction=0.125))
  assert (gen.hidden_size, gen.num_attention_heads) == (96, 1)
  assert any("1 heads of size 96" in r.getMessage() for r in caplog.records)


def test_generator_deeper_than_the_discriminator_is_a_config_error():
  disc = BertConfig.from_size("tiny")   # 2 layers
  with pytest.raises(UserError, match=r"config.electra.generator_num_layers=3 .*model.num_hidden_layers=2"):
    electra.generator_config(disc, ElectraSettings(0.25, generator_num_layers=3))
  assert electra.generator_config(disc, ElectraSettings(0.25, generator_num_layers=2)).num_hidden_layers == 2
  assert electra.generator_config(disc, ElectraSettings(0.25, generator_num_attention_heads=2)).num_attention_heads == 2
  with pytest.raises(UserError, match=r"config.electra.generator_num_attention_heads=3 does not divide .* 32"):
    electra.generator_config(disc, ElectraSettings(0.25, generator_num_attention_heads=3))


def test_scan_layers_with_the_lstm_encoder_is_a_config_error():
  with pytest.raises(ValueError, match=r"scan_layers=True needs encoder='transformer'.*'lstm'"):
    BertConfig.from_size("tiny", encoder="lstm", scan_layers=True)
  with pytest.raises(ValueError, match="scan_layers"):
    BertConfig.from_size("tiny", encoder="lstm").replace(scan_layers=True)


def test_electra_stands_alone_among_the_targets():
  assert validate_targets(("electra",)) == ("electra",)
  with pytest.raises(ValueError, match="stands alone"):
    validate_targets(("electra", "nsp"))


@pytest.mark.slow   # shares one compiled ELECTRA step (~9 s): the fast tier keeps the pure checks
def test_params_put_the_discriminator_where_fine_tuning_looks_and_share_the_embeddings(electra_step):
  params = electra_step[0]
  assert set(params) == {"bert", "generator", "discriminator_predictions"}
  assert set(params["bert"]) == {"embeddings", "encoder", "pooler"}
  assert "embeddings" not in params["generator"]          # the generator reads bert/embeddings
  assert params["generator"]["embeddings_project"]["kernel"].shape == (64, 32)
  assert params["generator"]["generator_predictions"]["dense"]["kernel"].shape == (32, 64)
  assert params["generator"]["output_bias"].shape == (96,)
  assert params["discriminator_predictions"]["dense_prediction"]["kernel"].shape == (64, 1)


@pytest.mark.slow   # shares one compiled ELECTRA step (~9 s): the fast tier keeps the pure checks
def test_replacements_land_only_on_masked_positions_and_labels_mark_changed_tokens(electra_step):
  out = electra_step[1]
  b = {k: np.asarray(v) for k, v in BATCH.items()}
  replaced, labels = np.asarray(out["replaced_ids"]), np.asarray(out["disc_labels"])
  original = b["input_ids"].copy()
  chosen = np.zeros_like(original, bool)
  for r in range(8):
    for p, i, w in zip(b["masked_lm_positions"][r], b["masked_lm_ids"][r], b["masked_lm_weights"][r]):
      if w > 0:
        original[r, p], chosen[r, p] = i, True
  np.testing.assert_array_equal(replaced[~chosen], original[~chosen])        # untouched elsewhere
  np.testing.assert_array_equal(labels, (replaced != original) & (b["input_mask"] > 0))
  assert labels[~chosen].sum() == 0 and 0 < labels.sum() <= chosen.sum()
  assert out["generator_logits"].shape == (8, 5, 96) and out["generator_logits"].dtype == jnp.float32
  assert out["disc_logits"].shape == (8, 24) and out["disc_logits"].dtype == jnp.float32


def test_gumbel_samples_follow_the_tempered_softmax():
  logits = jnp.array([2.0, 1.0, 0.0, -1.0])
  for temperature in (1.0, 0.5):
    draws = electra.gumbel_sample(jax.random.key(0), jnp.broadcast_to(logits, (40_000, 4)), temperature)
    freq = np.bincount(np.asarray(draws), minlength=4) / 40_000
    want = np.asarray(jax.nn.softmax(logits / temperature))
    # binomial standard error <= 0.0025 at n = 40k: 4 sigma
    np.testing.assert_allclose(freq, want, atol=0.01)


@pytest.mark.slow   # shares one compiled ELECTRA step (~9 s): the fast tier keeps the pure checks
def test_no_gradient_flows_from_the_discriminator_loss_into_the_generator(electra_step):
  grads = jax.device_get(electra_step[2])
  assert all(np.abs(g).max() == 0.0 for g in jax.tree.leaves(grads["generator"]))
  assert np.abs(grads["bert"]["embeddings"]["word_embeddings"]["embedding"]).max() > 0


@pytest.mark.slow   # shares one compiled ELECTRA step (~9 s): the fast tier keeps the pure checks
def test_loss_is_generator_mlm_plus_lambda_times_token_bce_and_metrics_match_numpy(electra_step):
  _, out, _, loss, sums = electra_step
  b = BATCH
  logits, ids, w = map(np.asarray, (out["generator_logits"], b["masked_lm_ids"], b["masked_lm_weights"]))
  logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
  mlm = -(np.take_along_axis(logp, ids[..., None], -1)[..., 0] * w).sum() / w.sum()
  z, y, m = np.asarray(out["disc_logits"], np.float64), np.asarray(out["disc_labels"]), np.asarray(b["input_mask"])
  p = 1 / (1 + np.exp(-z))
  bce = -((y * np.log(p) + (1 - y) * np.log(1 - p)) * m).sum() / m.sum()
  np.testing.assert_allclose(float(loss), mlm + 50.0 * bce, rtol=2e-5)
  got = ts.normalize(dict(sums, loss_sum=loss))
  np.testing.assert_allclose(got["disc_accuracy"], (((z > 0) == y) * m).sum() / m.sum(), rtol=1e-6)
  np.testing.assert_allclose(got["disc_replaced_fraction"], (y * m).sum() / m.sum(), rtol=1e-6)
  assert set(got) >= {"gen_mlm_loss", "gen_mlm_accuracy", "disc_loss", "disc_recall", "disc_precision",
                      "disc_replaced_prob", "disc_original_prob"}


@pytest.mark.slow
def test_the_discriminator_mlm_adds_bert_s_head_and_its_weighted_loss():
  from bert_jax.models import BertForPreTraining
  model = electra_model(disc_mlm_weight=2.0, temperature=1e-6)
  params = init(model)
  bert_mlm = jax.eval_shape(lambda k: BertForPreTraining(NO_DROPOUT, targets=("mlm",)).init(
      {"params": k}, *dummy_inputs(NO_DROPOUT))["params"], jax.random.key(0))["mlm"]
  # BertForPreTraining's MLM head, at the same place: the checkpoint also reads as a BERT MLM
  assert jax.tree.map(lambda a: a.shape, params["mlm"]) == jax.tree.map(lambda a: a.shape, nn.unbox(bert_mlm))
  names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
  lf = ts.pretraining_loss(model)
  out, (loss, sums) = jax.jit(lambda p: (
      model.apply({"params": p}, *(BATCH[n] for n in names), rngs={"sample": jax.random.key(0)}),
      lf.forward(p, BATCH, None, lf.denominators(BATCH))))(params)
  ids, w = np.asarray(BATCH["masked_lm_ids"]), np.asarray(BATCH["masked_lm_weights"])

  def mean_ce(logits):
    logits = np.asarray(logits, np.float64)
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    return -(np.take_along_axis(logp, ids[..., None], -1)[..., 0] * w).sum() / w.sum()
  z, y, m = (np.asarray(x, np.float64) for x in (out["disc_logits"], out["disc_labels"], BATCH["input_mask"]))
  bce = ((np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))) * m).sum() / m.sum()
  want = mean_ce(out["generator_logits"]) + 50.0 * bce + 2.0 * mean_ce(out["mlm_logits"])
  np.testing.assert_allclose(float(loss), want, rtol=2e-5)
  got = ts.normalize(dict(sums, loss_sum=loss))
  np.testing.assert_allclose(got["disc_mlm_loss"], mean_ce(out["mlm_logits"]), rtol=2e-5)
  assert 0.0 <= got["disc_mlm_accuracy"] <= 1.0
  assert "mlm" not in init(electra_model())                                   # off by default


def electra_loss_and_grads(mesh, config, model):
  state, shardings = ts.create_train_state(config, model, mesh, keep_gradients())
  step = ts.make_train_step(config, model, keep_gradients(), mesh, shardings)
  new_state, metrics = step(state, make_batch())
  return float(metrics["loss_sum"]), jax.device_get(metrics), jax.device_get(new_state.opt_state)


@pytest.mark.slow
def test_mesh_and_gradient_accumulation_match_one_device_full_batch():
  # A near-zero temperature makes the sample the generator's argmax, so micro-batches (whose sampling keys
  # differ) replace the same tokens as the full batch; dropout off for the same reason.
  model = electra_model(temperature=1e-6)
  one = electra_loss_and_grads(sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1]), run_config(), model)
  mesh = electra_loss_and_grads(sharding.make_mesh((2, 2, 2)), run_config(accum=2), model)
  np.testing.assert_allclose(mesh[0], one[0], rtol=1e-5)
  for key in ("gen_mlm_loss_sum", "disc_loss_sum", "disc_replaced_sum", "disc_weight_sum"):
    np.testing.assert_allclose(mesh[1][key], one[1][key], rtol=1e-5, atol=1e-6)
  assert_trees_close(mesh[2], one[2], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_bfloat16_compute_gives_float32_logits_and_a_finite_loss():
  model = electra_model(NO_DROPOUT.replace(dtype="bfloat16"))
  params = init(model)
  b = {k: jnp.asarray(v) for k, v in make_batch(batch=2, length=16, preds=3).items()}
  lf = ts.pretraining_loss(model)
  loss, _ = jax.jit(lambda p, b: lf.forward(p, b, jax.random.key(0), lf.denominators(b)))(params, b)
  assert np.isfinite(float(loss)) and params["generator"]["output_bias"].dtype == jnp.float32


# ---- train.py end to end -----------------------------------------------------------------------------
@pytest.mark.slow
def test_train_py_electra_checkpoints_resumes_and_fine_tuning_loads_the_discriminator(tmp_path):
  from bert_jax.pretrained import load_pretrained
  from bert_jax.pretrained.load import load_workdir_params
  import task_fixtures as testing
  words = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "was", "hello", "world", "jax", "bert", "model"]
  testing.write_word_documents(tmp_path / "corpus.txt", words, 30)
  (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + words) + "\n")
  workdir = tmp_path / "work"
  # The resumed run loads the first run's compiled step from a persistent cache (one compile, not two).
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
             BERT_JAX_COMPILATION_CACHE_DIR=str(tmp_path / "xla"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")

  def train(steps, *extra):
    cmd = [sys.executable, "train.py", "--config=configs/pretrain.py:size=tiny,runlocal", f"--workdir={workdir}",
           f"--config.data.input_files={tmp_path / 'corpus.txt'}", f"--config.data.vocab_file={tmp_path / 'vocab.txt'}",
           "--config.targets=('electra',)", "--config.data.pack_sequences=true", f"--config.num_train_steps={steps}",
           "--config.checkpoint_every_steps=4", "--config.log_every_steps=4", "--config.progress_bar=false",
           "--config.grad_accum_steps=2", *extra]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r

  train(4)
  train(8)
  rows = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines() if l.strip()]
  train_rows = [r for r in rows if "disc_loss" in r]
  assert [r["step"] for r in train_rows][-2:] == [4, 8]
  assert all(0 <= r["disc_accuracy"] <= 1 and np.isfinite(r["gen_mlm_loss"]) for r in train_rows)
  plan = json.loads((workdir / "plan.json").read_text())
  assert plan["targets"] == ["electra"] and plan["electra"]["disc_weight"] == 50.0
  saved = load_workdir_params(str(workdir))
  assert {"generator", "discriminator_predictions"} <= set(saved)
  loaded = load_pretrained(str(workdir))          # what fine-tuning and predict features start from
  assert_trees_close(loaded.params["bert"], saved["bert"], rtol=0, atol=0)
  # predict features = the discriminator's mean-pooled sequence output
  from bert_jax.predict import FeatureExtractor
  from bert_jax.models.electra import ElectraDiscriminator
  feats = FeatureExtractor(str(workdir), pooling="mean").encode(["the cat sat on the mat ."])
  assert feats.shape == (1, loaded.config.hidden_size) and np.all(np.isfinite(feats))
  # export-hf writes the discriminator as an ElectraForPreTraining that transformers loads with the same logits
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from bert_jax.convert.__main__ import main as convert_main
  assert convert_main(["export-hf", f"--input={workdir}", f"--output={tmp_path / 'hf'}"]) == 0
  hf_model, info = transformers.ElectraForPreTraining.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  ids = np.array([[2, 7, 8, 9, 10, 3]], np.int32)
  ours = ElectraDiscriminator(loaded.config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).apply(
      {"params": {k: loaded.params[k] for k in ("bert", "discriminator_predictions")}}, ids, np.ones_like(ids))
  with torch.no_grad():
    ref = hf_model.eval()(input_ids=torch.tensor(ids, dtype=torch.long)).logits.numpy()
  np.testing.assert_allclose(np.asarray(ours["disc_logits"]), ref, atol=1e-4)


def test_electra_runs_show_and_plot_the_generator_and_the_discriminator(tmp_path):
  """An ELECTRA run logs no mlm_loss: its progress bar and loss_curve.png show the generator's MLM and the
  discriminator (a row each) instead of an empty MLM panel."""
  from bert_jax.pretrain import loop as pretrain
  rows = [{"step": s, "loss": 30.0 - s, "gen_mlm_loss": 6.0 - 0.1 * s, "gen_mlm_accuracy": 0.01 * s,
           "disc_loss": 0.6 - 0.01 * s, "disc_accuracy": 0.7 + 0.01 * s} for s in (10, 20, 30)]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert [c[0] for c in pretrain.curve_pairs(*rows)] == ["gen_mlm_loss", "disc_loss"]
  assert [c[0] for c in pretrain.curve_pairs({"mlm_loss": 5.0, "mlm_accuracy": 0.1})] == ["mlm_loss"]
  path = pretrain.plot_loss_curve(str(tmp_path))
  from PIL import Image
  width, height = Image.open(path).size
  assert (width, height) == (1100, 800)                     # two rows of (loss, accuracy) at 4 in x 100 dpi


def test_electra_training_flops_count_the_generator_by_hand():
  from bert_jax.pretrain import flops
  from bert_jax.models.objectives import electra as electra_objective
  disc = BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=16)
  gen = electra.generator_config(disc, ElectraSettings(generator_hidden_fraction=0.5))   # H 4, FFN 16
  assert (gen.hidden_size, gen.intermediate_size) == (4, 16)
  # T = 4, P = 2. Discriminator: 6 x 600 params x 4 + 12 x 16 x 8 (attention) + head 6 x 4 x (64 + 8) = 17,664.
  # Generator: 6 x 244 x 4 + 12 x 16 x 4 + MLM head 6 x 2 x (4 x 8 + 8 x 10) + projection 6 x 4 x 8 x 4 = 8,736.
  settings = ElectraSettings(generator_hidden_fraction=0.5)
  assert electra_objective.electra_flops_per_sequence(disc, gen, 4, 2) == 17_664 + 8_736
  # the MFU that pre-training logs for targets=("electra",) counts the same FLOPs (it counted the bare encoder)
  assert flops.flops_per_sequence(disc, 4, 2, (Electra(settings),)) == 17_664 + 8_736
  assert flops.mfu(10.0, disc, 4, 2, 2, 1e6, (Electra(settings),)) == 10.0 * (17_664 + 8_736) / 2e6
  # by name: the default settings' generator (1/4 width: H 2, 1 head)
  default_gen = electra.generator_config(disc, ElectraSettings())
  assert flops.flops_per_sequence(disc, 4, 2, ("electra",)) == electra_objective.electra_flops_per_sequence(
      disc, default_gen, 4, 2)
  # the discriminator's own MLM head (disc_mlm_weight > 0) costs what BERT's does: 6 x 2 x (8 x 8 + 8 x 10)
  both = ElectraSettings(generator_hidden_fraction=0.5, disc_mlm_weight=1.0)
  assert flops.flops_per_sequence(disc, 4, 2, (Electra(both),)) == 17_664 + 8_736 + 1_728


@pytest.mark.parametrize("overrides, message", [
    ({"electra.disc_weight": 0.0}, r"config.electra.disc_weight=0.0; expected > 0"),
    ({"electra.generator_hidden_fraction": 1.5}, r"config.electra.generator_hidden_fraction=1.5; expected > 0 and <= 1"),
    ({"electra.temperature": -1.0}, r"config.electra.temperature=-1.0; expected > 0"),
    ({"electra.initial_temperature": 0.0}, r"config.electra.initial_temperature=0.0; expected > 0"),
    ({"electra.temperature_anneal_steps": -1}, r"config.electra.temperature_anneal_steps=-1; expected >= 0"),
    ({"electra.disc_mlm_weight": -0.5}, r"config.electra.disc_mlm_weight=-0.5; expected >= 0"),
    ({"targets": ("electra", "mlm")}, r"config.targets=.*'electra' .* stands alone"),
])
def test_plan_checks_the_electra_fields_naming_them(files, tmp_path, overrides, message):
  from bert_jax import errors
  from bert_jax.pretrain.plan import resolve_pretrain
  from test_reliability_cli import pretrain_config
  config = pretrain_config(files, targets=("electra",))
  for key, value in overrides.items():
    node, (*parents, leaf) = config, key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  with pytest.raises(errors.UserError, match=message):
    resolve_pretrain(config, str(tmp_path / "work"), num_devices=8, process_count=1)


def test_plan_resolves_the_electra_settings_and_describes_them(files, tmp_path):
  from bert_jax.pretrain.plan import resolve_pretrain
  from test_reliability_cli import pretrain_config
  plan = resolve_pretrain(pretrain_config(files, targets=("electra",), **{"electra.generator_hidden_fraction": 0.5}),
                          str(tmp_path / "work"), num_devices=8, process_count=1)
  assert plan.objectives == (Electra(ElectraSettings(generator_hidden_fraction=0.5)),)
  assert "generator H x 0.5, lambda 50" in plan.describe()
  assert plan.to_dict()["electra"]["disc_weight"] == 50.0
  bert = resolve_pretrain(pretrain_config(files), str(tmp_path / "w2"), num_devices=8, process_count=1)
  assert [o.settings for o in bert.objectives] == [None, None] and "electra" not in bert.to_dict()
  annealed = resolve_pretrain(pretrain_config(files, targets=("electra",), **{
      "electra.initial_temperature": 100.0, "electra.temperature_anneal_steps": 30, "electra.disc_bias_init": -1.2,
      "electra.disc_mlm_weight": 0.5}), str(tmp_path / "w3"), num_devices=8, process_count=1)
  assert annealed.objectives[0].settings == ElectraSettings(initial_temperature=100.0, temperature_anneal_steps=30, disc_bias_init=-1.2,
                                             disc_mlm_weight=0.5)
  assert ("temperature 100 -> 1 over 30 steps, disc bias -1.2 at init, discriminator MLM x 0.5"
          in annealed.describe())


def test_the_temperature_falls_log_linearly_from_the_initial_one_and_then_stays():
  s = ElectraSettings(temperature=1.0, initial_temperature=100.0, temperature_anneal_steps=10)
  got = [float(electra.annealed_temperature(s, step)) for step in (0, 5, 10, 50)]
  np.testing.assert_allclose(got, [100.0, 10.0, 1.0, 1.0], rtol=1e-5)
  assert electra.annealed_temperature(s, None) == 1.0                         # evaluation: the final one
  assert electra.annealed_temperature(ElectraSettings(temperature=0.5), 0) == 0.5   # no annealing


def test_the_discriminator_bias_starts_where_the_config_puts_it():
  model = electra_model(disc_bias_init=-1.25)
  shapes = jax.eval_shape(lambda k: model.init({"params": k}, *dummy_inputs(model.config))["params"],
                          jax.random.key(0))
  params = jax.jit(lambda k: nn.unbox(model.init({"params": k}, *dummy_inputs(model.config))["params"]))(
      jax.random.key(0))
  bias = params["discriminator_predictions"]["dense_prediction"]["bias"]
  np.testing.assert_array_equal(np.asarray(bias), [-1.25])
  # the partitioning names survive (the bias is replicated like HF's zeros-initialised one)
  assert tuple(nn.get_partition_spec(shapes)["discriminator_predictions"]["dense_prediction"]["bias"]) == (None,)


@pytest.mark.slow
def test_the_train_step_hands_the_step_to_the_loss_and_the_sampler_follows_its_temperature():
  # The step reaches the loss as denominators["step"], once per micro-batch (accumulation sums them).
  def forward(params, batch, rng, denoms):
    seen = denoms["step"].astype(jnp.float32)
    return 0.0 * sum(jnp.sum(x) for x in jax.tree.leaves(params)), {"seen_step_sum": seen}
  loss_fn = ts.LossFn(lambda b: {}, forward)
  model = electra_model()
  mesh = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  config = run_config(accum=2)
  state, shardings = ts.create_train_state(config, model, mesh, keep_gradients())
  step = ts.make_train_step(config, model, keep_gradients(), mesh, shardings, loss_fn=loss_fn)
  seen = []
  for _ in range(3):
    state, metrics = step(state, make_batch())
    seen.append(float(metrics["seen_step_sum"]))
  assert seen == [0.0, 2.0, 4.0]
  # ELECTRA's sampler: near-uniform draws at step 0 (other sample keys, other replacements, so another
  # discriminator loss), the generator's argmax from the anneal's end on (the keys agree; no dropout here).
  model = electra_model(temperature=1e-6, initial_temperature=1e6, temperature_anneal_steps=4)
  params = init(model)
  lf = ts.pretraining_loss(model)

  @jax.jit
  def disc_loss(key, step):
    denoms = dict(lf.denominators(BATCH), step=step)
    return lf.forward(params, BATCH, key, denoms)[1]["disc_loss_sum"]
  hot = [float(disc_loss(jax.random.key(k), jnp.int32(0))) for k in (1, 2, 3)]
  cold = [float(disc_loss(jax.random.key(k), jnp.int32(4))) for k in (1, 2, 3)]
  assert len(set(hot)) > 1 and len(set(cold)) == 1


def test_the_generator_head_count_is_a_config_field_the_plan_checks_and_passes_on():
  """import-tf tells users of an imported generator with other heads to pass
  --config.electra.generator_num_attention_heads=N: the field exists in the config, is range-checked, and
  reaches ElectraSettings (and so the generator)."""
  from bert_jax.pretrain import plan  # pylint: disable=g-import-not-at-top
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top
  config = pretrain_config.get_config("tiny")
  assert config.electra.generator_num_attention_heads == -1     # a field --config.electra.* can set
  config.targets = ("electra",)
  assert plan._resolve_objectives(config, config.targets)[0].settings.generator_num_attention_heads == -1
  config.electra.generator_num_attention_heads = 4
  settings = plan._resolve_objectives(config, config.targets)[0].settings
  assert settings.generator_num_attention_heads == 4
  assert electra.generator_config(BertConfig.from_size("tiny"), settings).num_attention_heads == 4
  config.electra.generator_num_attention_heads = 0
  with pytest.raises(UserError, match="electra.generator_num_attention_heads"):
    plan._resolve_objectives(config, config.targets)
