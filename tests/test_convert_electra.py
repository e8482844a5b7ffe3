"""ELECTRA checkpoints: a Hugging Face ElectraForPreTraining imports with outputs equal to transformers' (the
discriminator's logits and ElectraModel's hidden states), exports back to a folder transformers loads with no
missing or unexpected keys and the same logits, and re-imports exactly; a released generator
(ElectraForMaskedLM) imports as a BERT MLM; a google-research/electra TF checkpoint (written here under the
repository's variable names) imports as the full generator + discriminator model, both halves equal to
transformers'."""

import json
import os

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bert_jax.convert import hf_electra  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.convert.mapping import ConversionError  # noqa: E402
from bert_jax.models import BertForPreTraining  # noqa: E402
from bert_jax.models.electra import ElectraDiscriminator, ElectraForPreTraining  # noqa: E402
from bert_jax.pretrained import load_pretrained  # noqa: E402

H, GEN_H, LAYERS, HEADS, FFN, MAX_POS = 64, 32, 2, 4, 96, 64


def _perturb(model):
  torch.manual_seed(1)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.05 * torch.randn_like(p))
  return model.eval()


def _discriminator(vocab_size, embedding_size=H):
  torch.manual_seed(0)
  cfg = transformers.ElectraConfig(vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=H, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=MAX_POS)
  return _perturb(transformers.ElectraForPreTraining(cfg))


def _generator(vocab_size, embedding_size=H, disc=None, hidden=GEN_H):
  """An ElectraForMaskedLM of width `hidden`; with `disc`, its embeddings are the discriminator's (shared, as
  google-research/electra trains them)."""
  torch.manual_seed(2)
  cfg = transformers.ElectraConfig(vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=hidden,
                                   num_hidden_layers=LAYERS, num_attention_heads=1, intermediate_size=4 * hidden,
                                   max_position_embeddings=MAX_POS)
  gen = _perturb(transformers.ElectraForMaskedLM(cfg))
  if disc is not None:
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
  return gen


def _save(model, folder, tiny_vocab):
  model.save_pretrained(folder)
  with open(os.path.join(folder, "vocab.txt"), "w") as f:
    f.write(open(tiny_vocab).read())
  return str(folder)


def _inputs(vocab_size):
  rng = np.random.default_rng(0)
  ids = rng.integers(5, vocab_size, (3, 16)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 9:] = 0
  mask[2, 5:] = 0
  ids[mask == 0] = 0
  seg = np.zeros_like(ids)
  seg[0, 8:] = 1
  return ids, mask, seg


def _torch_out(model, ids, mask, seg):
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                 token_type_ids=torch.tensor(seg, dtype=torch.long), output_hidden_states=True)


def _vocab_size(tiny_vocab):
  return sum(1 for _ in open(tiny_vocab))


@pytest.mark.slow   # torch models and a CLI round trip (~5 s each)
def test_hf_electra_imports_equal_to_transformers_exports_and_reimports_exactly(tmp_path, tiny_vocab):
  v = _vocab_size(tiny_vocab)
  ref = _discriminator(v, embedding_size=32)            # E 32 < H 64, as ELECTRA-Small's 128 < 256
  folder = _save(ref, tmp_path / "hf", tiny_vocab)
  assert convert_main(["import-hf", f"--input={folder}", f"--output={tmp_path / 'ours'}"]) == 0
  config, params, report = hf_electra.import_hf_electra(folder)
  assert report.fresh_groups == ["pooler"] and report.loaded == 5 + 2 + 16 * LAYERS + 4   # + embeddings_project
  assert config.embedding_size == 32 and params["bert"]["embeddings"]["projection"]["kernel"].shape == (32, H)
  assert set(params) == {"bert", "discriminator_predictions"}
  ids, mask, seg = _inputs(v)
  ours = jax.jit(ElectraDiscriminator(config).apply)({"params": params}, ids, mask, seg)
  out = _torch_out(ref, ids, mask, seg)
  real = mask.astype(bool)
  logits = np.abs(np.asarray(ours["disc_logits"]) - out.logits.numpy())[real].max()
  seq = np.abs(np.asarray(ours["sequence_output"]) - out.hidden_states[-1].numpy())[real].max()
  print(f"import-hf ELECTRA: discriminator logits max abs diff {logits:.2e}, sequence output {seq:.2e}")
  assert logits < 1e-4 and seq < 1e-4
  # ElectraModel (the bare encoder) gives the same hidden states.
  base = transformers.ElectraModel.from_pretrained(folder).eval()
  with torch.no_grad():
    hidden = base(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                  token_type_ids=torch.tensor(seg, dtype=torch.long)).last_hidden_state.numpy()
  assert np.abs(np.asarray(ours["sequence_output"]) - hidden)[real].max() < 1e-4

  # Export through the CLI -> transformers loads it with no report, same logits.
  exported = str(tmp_path / "exported")
  assert convert_main(["export-hf", f"--input={tmp_path / 'ours'}", f"--output={exported}"]) == 0
  back, info = transformers.ElectraForPreTraining.from_pretrained(exported, output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  assert json.load(open(os.path.join(exported, "config.json")))["model_type"] == "electra"
  again = _torch_out(back.eval(), ids, mask, seg)
  assert np.abs(again.logits.numpy() - out.logits.numpy())[real].max() < 1e-5
  _, params2, _ = hf_electra.import_hf_electra(exported)
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(params2)):
    if "pooler" not in jax.tree_util.keystr(path):
      np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))


@pytest.mark.slow   # torch models and a CLI round trip (~5 s each)
def test_hf_generator_imports_as_a_bert_mlm_with_transformers_logits(tmp_path, tiny_vocab):
  v = _vocab_size(tiny_vocab)
  ref = _generator(v, embedding_size=GEN_H)            # E = H: no projection (ELECTRA-base/large style)
  folder = _save(ref, tmp_path / "gen", tiny_vocab)
  config, params, _ = hf_electra.import_hf_electra(folder)
  assert set(params) == {"bert", "mlm"} and config.hidden_size == GEN_H
  ids, mask, seg = _inputs(v)
  positions = np.array([[1, 4, 9], [2, 3, 5], [1, 2, 4]], np.int32)
  ours = jax.jit(BertForPreTraining(config, targets=("mlm",)).apply)({"params": params}, ids, mask, seg, positions)
  want = np.take_along_axis(_torch_out(ref, ids, mask, seg).logits.numpy(), positions[..., None], axis=1)
  assert np.abs(np.asarray(ours["mlm_logits"]) - want).max() < 1e-4


def _google_names(model, scope):
  """transformers' ELECTRA weights under google-research/electra's names, by hand (independent of the package):
  electra.* -> `scope`/..., layer.N -> layer_N, LayerNorm weight/bias -> gamma/beta, Linear [out, in] ->
  kernel [in, out], dense_prediction -> dense_1, generator_lm_head.bias -> generator_predictions/output_bias."""
  out = {}
  for key, value in model.state_dict().items():
    if not value.is_floating_point() or key == "generator_lm_head.weight":
      continue
    v = value.numpy().copy()
    if key == "generator_lm_head.bias":
      out["generator_predictions/output_bias"] = v
      continue
    name = key.replace("electra.", scope + ".", 1).replace(".layer.", ".layer_").replace(".", "/")
    name = name.replace("dense_prediction", "dense_1")
    name = name.replace("LayerNorm/weight", "LayerNorm/gamma").replace("LayerNorm/bias", "LayerNorm/beta")
    if name.endswith("_embeddings/weight"):
      name = name[:-len("/weight")]
    elif name.endswith("/weight"):
      name, v = name[:-len("weight")] + "kernel", v.T.copy()
    out[name] = v
  return out


@pytest.mark.slow
def test_google_electra_tf_checkpoint_imports_generator_and_discriminator(tmp_path, tiny_vocab):
  tf = pytest.importorskip("tensorflow")
  from test_convert_tf import _write_tf1_checkpoint
  v = _vocab_size(tiny_vocab)
  disc = _discriminator(v, embedding_size=32)           # E 32 -> H 64 (electra/embeddings_project)
  gen = _generator(v, embedding_size=32, disc=disc, hidden=16)   # Hg 16 on the shared 32-wide embeddings
  variables = _google_names(disc, "electra")
  variables.update({k: a for k, a in _google_names(gen, "generator").items() if "/embeddings/" not in k})
  for name in ("electra/embeddings/word_embeddings", "electra/encoder/layer_1/attention/self/query/kernel",
               "discriminator_predictions/dense/kernel", "discriminator_predictions/dense_1/bias",
               "generator/embeddings_project/kernel", "generator/encoder/layer_0/output/LayerNorm/gamma",
               "generator_predictions/dense/kernel", "generator_predictions/LayerNorm/beta",
               "generator_predictions/output_bias"):
    assert name in variables, name
  saved = dict(variables, global_step=np.array(7, np.int64), temperature=np.array(1.0, np.float32))
  saved["electra/encoder/layer_0/output/dense/kernel/adam_m"] = np.zeros_like(
      variables["electra/encoder/layer_0/output/dense/kernel"])
  prefix = str(tmp_path / "model.ckpt-7")
  _write_tf1_checkpoint(prefix, saved)
  assert {n for n, _ in tf.train.list_variables(prefix)} == set(saved)
  (tmp_path / "vocab.txt").write_text(open(tiny_vocab).read())
  config_file = tmp_path / "config.json"
  config_file.write_text(json.dumps(disc.config.to_dict()))
  config, generator, params, report = hf_electra.import_tf_electra(prefix, str(config_file), str(tmp_path / "out"))
  assert (generator.hidden_size, generator.num_hidden_layers) == (16, LAYERS)
  assert "electra/embeddings_project/kernel" in variables and variables["generator/embeddings_project/kernel"].shape == (32, 16)
  assert sorted(report.ignored) == sorted(set(saved) - set(variables))

  ids, mask, seg = _inputs(v)
  positions = np.array([[1, 4, 9], [2, 3, 5], [1, 2, 4]], np.int32)
  model = ElectraForPreTraining(config, generator)
  ours = jax.jit(model.apply)({"params": params}, ids, mask, seg, positions)
  gen_want = np.take_along_axis(_torch_out(gen, ids, mask, seg).logits.numpy(), positions[..., None], axis=1)
  assert np.abs(np.asarray(ours["generator_logits"]) - gen_want).max() < 1e-4
  disc_only = jax.jit(ElectraDiscriminator(config).apply)(
      {"params": {k: params[k] for k in ("bert", "discriminator_predictions")}}, ids, mask, seg)
  real = mask.astype(bool)
  assert np.abs(np.asarray(disc_only["disc_logits"]) - _torch_out(disc, ids, mask, seg).logits.numpy())[real].max() < 1e-4

  # The generator exports as an ElectraForMaskedLM that transformers loads with the same logits.
  exported = str(tmp_path / "gen_hf")
  hf_electra.write_electra(load_pretrained(str(tmp_path / "out")), exported, heads="mlm")
  back, info = transformers.ElectraForMaskedLM.from_pretrained(exported, output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  got = np.take_along_axis(_torch_out(back.eval(), ids, mask, seg).logits.numpy(), positions[..., None], axis=1)
  assert np.abs(got - gen_want).max() < 1e-4


def test_missing_generator_or_weight_is_an_error_naming_it(tmp_path, tiny_vocab):
  v = _vocab_size(tiny_vocab)
  disc = _discriminator(v)
  (tmp_path / "vocab.txt").write_text(open(tiny_vocab).read())
  (tmp_path / "config.json").write_text(json.dumps(disc.config.to_dict()))
  variables = _google_names(disc, "electra")
  # A discriminator alone (was refused, pointing at Hugging Face's TF converter, gone in transformers 5) imports
  # as the discriminator, with transformers' logits.
  config, generator, params, report = hf_electra.import_tf_electra(
      str(tmp_path / "x.ckpt"), str(tmp_path / "config.json"), variables=variables)
  assert generator is None and set(params) == {"bert", "discriminator_predictions"}
  assert report.fresh_groups == ["pooler"] and "no generator/ variables" in report.summary()
  ids, mask, seg = _inputs(v)
  ours = jax.jit(ElectraDiscriminator(config).apply)({"params": params}, ids, mask, seg)
  want = _torch_out(disc, ids, mask, seg).logits.numpy()
  assert np.abs(np.asarray(ours["disc_logits"]) - want)[mask > 0].max() < 1e-4
  with pytest.raises(ConversionError, match="no generator/encoder/layer_0"):
    hf_electra.import_tf_electra(str(tmp_path / "x.ckpt"), str(tmp_path / "config.json"),
                                 variables=dict(variables, **{"generator/output_bias": np.zeros(v, np.float32)}))
  gen = _generator(v, embedding_size=H, disc=disc)
  variables.update({k: a for k, a in _google_names(gen, "generator").items() if "/embeddings/" not in k})
  del variables["electra/encoder/layer_1/intermediate/dense/bias"]
  with pytest.raises(ConversionError, match="electra/encoder/layer_1/intermediate/dense/bias"):
    hf_electra.import_tf_electra(str(tmp_path / "x.ckpt"), str(tmp_path / "config.json"), variables=variables)


@pytest.mark.parametrize("name", ["google/electra-small-discriminator", "google/electra-base-generator",
                                  "hfl/chinese-electra-180g-small-ex-discriminator"])
def test_zoo_electra_entries_count_what_transformers_builds_from_their_architecture(name):
  from bert_jax.pretrained import zoo
  x = zoo.REGISTRY[name]
  cfg = transformers.ElectraConfig(vocab_size=x.vocab_size, embedding_size=x.embedding_size or x.hidden,
                                   hidden_size=x.hidden, num_hidden_layers=x.layers, num_attention_heads=x.heads,
                                   intermediate_size=x.intermediate, max_position_embeddings=x.max_positions)
  cls = transformers.ElectraForMaskedLM if x.kind == "electra-generator" else transformers.ElectraForPreTraining
  with torch.device("meta"):                        # shapes only: no memory, no init time
    model = cls(cfg)
  assert x.params == sum(p.numel() for p in model.parameters())
  assert "import-hf" in x.how_to_convert() and x.fmt == "hf"


@pytest.mark.slow   # torch model and a CLI round trip
def test_imported_released_generator_exports_back_as_electra_for_masked_lm(tmp_path, tiny_vocab):
  """A released generator (ElectraForMaskedLM, E != H as electra-base-generator's 768 vs 256) imports as a
  BERT MLM; `export-hf --heads=mlm` writes it back as an ElectraForMaskedLM with the same logits."""
  v = _vocab_size(tiny_vocab)
  ref = _generator(v, embedding_size=H)               # E 64 -> Hg 32: electra.embeddings_project
  folder = _save(ref, tmp_path / "gen", tiny_vocab)
  ours, exported = str(tmp_path / "ours"), str(tmp_path / "exported")
  assert convert_main(["import-hf", f"--input={folder}", f"--output={ours}"]) == 0
  assert convert_main(["export-hf", f"--input={ours}", f"--output={exported}", "--heads=mlm"]) == 0
  back, info = transformers.ElectraForMaskedLM.from_pretrained(exported, output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  ids, mask, seg = _inputs(v)
  real = mask.astype(bool)
  want = _torch_out(ref, ids, mask, seg).logits.numpy()
  assert np.abs(_torch_out(back.eval(), ids, mask, seg).logits.numpy() - want)[real].max() < 1e-5
  from bert_jax.errors import UserError
  with pytest.raises(UserError, match="--heads=mlm"):   # no discriminator head: the message says what works
    convert_main(["export-hf", f"--input={ours}", f"--output={tmp_path / 'x'}", "--heads=pretraining"])
  # the default (auto) writes what the params hold: the generator
  assert convert_main(["export-hf", f"--input={ours}", f"--output={tmp_path / 'auto'}"]) == 0
  assert json.load(open(tmp_path / "auto" / "config.json"))["architectures"] == ["ElectraForMaskedLM"]


def _google_electra_folder(folder, tiny_vocab):
  """A folder holding a google-research/electra checkpoint electra_small.* (discriminator under electra/, the
  generator under generator/ sharing its embeddings) and vocab.txt: (folder, discriminator, generator)."""
  pytest.importorskip("tensorflow")
  from test_convert_tf import _write_tf1_checkpoint
  v = _vocab_size(tiny_vocab)
  disc = _discriminator(v)
  gen = _generator(v, embedding_size=H, disc=disc)
  variables = _google_names(disc, "electra")
  variables.update({k: a for k, a in _google_names(gen, "generator").items() if "/embeddings/" not in k})
  folder.mkdir()
  _write_tf1_checkpoint(str(folder / "electra_small"), variables)
  (folder / "vocab.txt").write_text(open(tiny_vocab).read())
  return folder, disc, gen


@pytest.mark.slow   # writes a TF checkpoint
def test_import_tf_electra_takes_a_checkpoint_folder_with_its_config_and_vocab(tmp_path, tiny_vocab):
  folder, disc, _ = _google_electra_folder(tmp_path / "electra_small", tiny_vocab)   # google-research/electra's zip
  (folder / "config.json").write_text(json.dumps(disc.config.to_dict()))
  assert convert_main(["import-tf", f"--checkpoint={folder}", f"--output={tmp_path / 'out'}"]) == 0
  assert set(load_pretrained(str(tmp_path / "out")).params) == {"bert", "discriminator_predictions", "generator"}
  # fill-mask names the way to the generator's MLM head, and that way works
  from bert_jax.errors import UserError
  from bert_jax.predict import FillMask
  with pytest.raises(UserError, match="is an ELECTRA model.*--heads=mlm"):
    FillMask(str(tmp_path / "out"))
  assert convert_main(["export-hf", f"--input={tmp_path / 'out'}", f"--output={tmp_path / 'gen_hf'}",
                       "--heads=mlm"]) == 0
  assert convert_main(["import-hf", f"--input={tmp_path / 'gen_hf'}", f"--output={tmp_path / 'gen'}"]) == 0
  assert len(FillMask(str(tmp_path / "gen")).predict(["a [MASK] b"], top_k=3)[0]["masks"][0]["candidates"]) == 3
  with pytest.raises(FileNotFoundError, match="missing.txt"):   # the vocab the user named, not vocab.txt
    hf_electra.import_hf_electra(_save(disc, tmp_path / "hf", tiny_vocab), vocab_file=str(tmp_path / "missing.txt"))


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_hugging_face_dtype_key_is_not_taken_as_the_compute_dtype(dtype):
  """transformers >= 4.56 writes the stored weights' torch dtype as config.json's "dtype" (null in a fresh
  config's to_dict()); it is not our compute dtype."""
  from bert_jax.convert import hf, hf_albert
  d = dict(vocab_size=99, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=96,
           embedding_size=32, dtype=dtype)
  assert hf_electra.electra_config_to_bert(dict(d, model_type="electra"), "c").dtype == "float32"
  assert hf_albert.hf_config_to_albert(dict(d, model_type="albert"), "c").dtype == "float32"
  assert hf.hf_config_to_bert(dict(d, model_type="bert", embedding_size=0), "c").dtype == "float32"


def test_fine_tuned_electra_folder_error_names_the_ignore_flag(tmp_path, tiny_vocab):
  """Most ELECTRA folders on the Hub are fine-tuned (ElectraForSequenceClassification): the refusal says how
  to drop the task head, and with --ignore the encoder imports."""
  v = _vocab_size(tiny_vocab)
  cfg = transformers.ElectraConfig(vocab_size=v, embedding_size=32, hidden_size=H, num_hidden_layers=1,
                                   num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=MAX_POS)
  folder = _save(transformers.ElectraForSequenceClassification(cfg), tmp_path / "cls", tiny_vocab)
  with pytest.raises(ConversionError, match=r"classifier\.out_proj\.weight.*--ignore="):
    hf_electra.import_hf_electra(folder)
  _, params, _ = hf_electra.import_hf_electra(folder, ignore=[r"^classifier\."])
  assert set(params) == {"bert"}


def test_zoo_hfl_small_ex_has_the_embedding_width_of_its_published_config():
  """ymcui/Chinese-ELECTRA's config/small_ex_discriminator_config.json: 24 layers, hidden 256, embedding_size
  256 (not Small's 128): no E -> H projection, 24.6M parameters."""
  from bert_jax.pretrained import zoo
  x = zoo.REGISTRY["hfl/chinese-electra-180g-small-ex-discriminator"]
  assert (x.layers, x.hidden, x.embedding_size or x.hidden) == (24, 256, 256)
  assert round(x.params / 1e5) == 246


@pytest.mark.slow   # writes a TF checkpoint
def test_import_tf_electra_reads_the_discriminator_json_of_hfl_zips(tmp_path, tiny_vocab):
  """HFL's Chinese ELECTRA TF zips hold electra_small.* + vocab.txt + discriminator.json + generator.json (no
  config.json): import-tf takes discriminator.json by default."""
  folder, disc, gen = _google_electra_folder(tmp_path / "chinese_electra_small_L-12_H-256_A-4", tiny_vocab)
  (folder / "discriminator.json").write_text(json.dumps(disc.config.to_dict()))
  (folder / "generator.json").write_text(json.dumps(gen.config.to_dict()))
  assert convert_main(["import-tf", f"--checkpoint={folder / 'electra_small'}", f"--output={tmp_path / 'out'}"]) == 0
  assert convert_main(["import-tf", f"--checkpoint={folder}", f"--output={tmp_path / 'out2'}"]) == 0


@pytest.mark.slow
def test_export_refuses_a_projection_that_hugging_face_electra_cannot_hold(tmp_path, tiny_vocab):
  """model.embedding_size = hidden_size still projects E -> H (ALBERT's convention); transformers' ELECTRA
  projects only when embedding_size != hidden_size, so writing the folder without the projection would give
  other logits: the export is an error naming the way out, not a silent drop."""
  from bert_jax.models import BertConfig
  from bert_jax.pretrained import params_dir
  v = _vocab_size(tiny_vocab)
  config = BertConfig(vocab_size=v, hidden_size=H, num_hidden_layers=1, num_attention_heads=HEADS,
                      intermediate_size=FFN, max_position_embeddings=MAX_POS, embedding_size=H)
  model = ElectraDiscriminator(config)
  import flax
  params = flax.linen.unbox(model.init(jax.random.key(0), *[np.asarray(x) for x in _inputs(v)])["params"])
  assert "projection" in params["bert"]["embeddings"]
  ckpt = str(tmp_path / "ours")
  params_dir.save_params_dir(ckpt, config, jax.device_get(params), tiny_vocab, info={"format": "hf_electra"})
  with pytest.raises(ConversionError, match="embedding_size"):
    hf_electra.export_electra(ckpt, str(tmp_path / "hf"))


@pytest.mark.slow   # torch models
def test_shared_layer_electra_exports_each_layer_with_the_same_outputs(tmp_path, tiny_vocab):
  """model.share_layers with targets=("electra",): transformers' ELECTRA has no sharing, so the one layer is
  written as each of the L layers (the same function); the generator never shares. Both folders load with no
  missing keys and give our logits."""
  import flax
  from bert_jax.models import BertConfig
  from bert_jax.models.electra import ElectraSettings, generator_config
  from bert_jax.pretrained import params_dir
  v = _vocab_size(tiny_vocab)
  config = BertConfig(vocab_size=v, hidden_size=H, num_hidden_layers=3, num_attention_heads=HEADS,
                      intermediate_size=FFN, max_position_embeddings=MAX_POS, embedding_size=32, share_layers=True)
  gen = generator_config(config, ElectraSettings(generator_hidden_fraction=0.5))
  ids, mask, seg = _inputs(v)
  positions = np.array([[1, 4, 9], [2, 3, 5], [1, 2, 4]], np.int32)
  model = ElectraForPreTraining(config, gen)
  params = flax.linen.unbox(model.init(jax.random.key(0), ids, mask, seg, positions)["params"])
  params = jax.tree.map(lambda x: np.asarray(x) + 0.05 * np.random.default_rng(0).standard_normal(x.shape, np.float32), params)
  assert "shared" in params["bert"]["encoder"]
  ckpt = str(tmp_path / "ours")
  params_dir.save_params_dir(ckpt, config, params, tiny_vocab, info={"format": "hf_electra"})
  disc = ElectraDiscriminator(config).apply({"params": {k: params[k] for k in ("bert", "discriminator_predictions")}},
                                            ids, mask, seg)["disc_logits"]
  real = mask.astype(bool)
  hf_electra.export_electra(ckpt, str(tmp_path / "disc"))
  back, info = transformers.ElectraForPreTraining.from_pretrained(str(tmp_path / "disc"), output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  assert np.abs(_torch_out(back.eval(), ids, mask, seg).logits.numpy() - np.asarray(disc))[real].max() < 1e-4
  hf_electra.export_electra(ckpt, str(tmp_path / "gen"), heads="mlm")
  back, info = transformers.ElectraForMaskedLM.from_pretrained(str(tmp_path / "gen"), output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  ours = np.asarray(model.apply({"params": params}, ids, mask, seg, positions)["generator_logits"])
  got = np.take_along_axis(_torch_out(back.eval(), ids, mask, seg).logits.numpy(), positions[..., None], axis=1)
  assert np.abs(got - ours).max() < 1e-4


def test_generator_of_another_hidden_act_than_gelu_is_refused_both_ways(tmp_path, tiny_vocab):
  """transformers' ElectraForMaskedLM applies 'gelu' in generator_predictions whatever hidden_act says; ours
  applies hidden_act (as google-research/electra): such a generator was converted with other logits (1e-4 off
  for gelu_new, far more for relu). Import and export --heads=mlm now refuse it, naming the field."""
  from bert_jax.errors import UserError
  v = _vocab_size(tiny_vocab)
  gen = _generator(v, embedding_size=GEN_H)
  gen.config.hidden_act = "relu"
  folder = _save(gen, tmp_path / "gen_relu", tiny_vocab)
  with pytest.raises(UserError, match="hidden_act='relu'.*ElectraForMaskedLM applies 'gelu'"):
    convert_main(["import-hf", f"--input={folder}", f"--output={tmp_path / 'x'}"])
  # a gelu generator imports; the same params declared relu do not export as ElectraForMaskedLM
  gen.config.hidden_act = "gelu"
  folder = _save(gen, tmp_path / "gen", tiny_vocab)
  assert convert_main(["import-hf", f"--input={folder}", f"--output={tmp_path / 'ours'}"]) == 0
  config_file = tmp_path / "ours" / "model_config.json"
  config_file.write_text(json.dumps(dict(json.loads(config_file.read_text()), hidden_act="relu")))
  with pytest.raises(UserError, match="hidden_act='relu'"):
    convert_main(["export-hf", f"--input={tmp_path / 'ours'}", f"--output={tmp_path / 'back'}", "--heads=mlm"])


@pytest.mark.slow
def test_tf_generator_heads_come_from_the_flag_or_generator_config_not_a_fixed_64(tmp_path, tiny_vocab):
  """The generator's head count is not in a TF checkpoint's shapes: a generator of 2 heads of 16 (not
  google-research/electra's hidden // 64 = 1) imports with transformers' logits only when --generator_heads or its
  generator config says 2; a head count that does not divide its width, or a config of another generator, is an
  error naming it."""
  from bert_jax.models.electra import ElectraSettings, generator_config
  v = _vocab_size(tiny_vocab)
  disc = _discriminator(v)
  torch.manual_seed(2)
  cfg = transformers.ElectraConfig(vocab_size=v, embedding_size=H, hidden_size=GEN_H, num_hidden_layers=LAYERS,
                                   num_attention_heads=2, intermediate_size=4 * GEN_H, max_position_embeddings=MAX_POS)
  gen = _perturb(transformers.ElectraForMaskedLM(cfg))
  gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
  gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
  variables = _google_names(disc, "electra")
  variables.update({k: a for k, a in _google_names(gen, "generator").items() if "/embeddings/" not in k})
  (tmp_path / "vocab.txt").write_text(open(tiny_vocab).read())
  (tmp_path / "config.json").write_text(json.dumps(disc.config.to_dict()))
  (tmp_path / "generator.json").write_text(json.dumps(gen.config.to_dict()))
  ckpt, conf = str(tmp_path / "x.ckpt"), str(tmp_path / "config.json")
  ids, mask, seg = _inputs(v)
  positions = np.array([[1, 4, 9], [2, 3, 5], [1, 2, 4]], np.int32)
  want = np.take_along_axis(_torch_out(gen, ids, mask, seg).logits.numpy(), positions[..., None], axis=1)

  def gen_error(**kw):
    config, generator, params, report = hf_electra.import_tf_electra(ckpt, conf, variables=variables, **kw)
    out = jax.jit(ElectraForPreTraining(config, generator).apply)({"params": params}, ids, mask, seg, positions)
    return generator.num_attention_heads, np.abs(np.asarray(out["generator_logits"]) - want).max(), report

  heads, err, report = gen_error()
  assert heads == 1 and err > 1e-3 and "hidden // 64" in report.summary()   # the rule: one 32-wide head
  assert "tokenizer: do_lower_case=True (the vocab holds no capitalised word pieces" in report.summary()
  heads, err, report = gen_error(generator_heads=2)
  assert heads == 2 and err < 1e-4 and "--generator_heads" in report.summary()
  assert "--config.electra.generator_num_attention_heads=2" in report.summary()
  heads, err, _ = gen_error(generator_config=str(tmp_path / "generator.json"))
  assert heads == 2 and err < 1e-4
  with pytest.raises(ConversionError, match=r"--generator_heads=3: .*hidden size 32"):
    hf_electra.import_tf_electra(ckpt, conf, variables=variables, generator_heads=3)
  (tmp_path / "other.json").write_text(json.dumps(dict(gen.config.to_dict(), hidden_size=64)))
  with pytest.raises(ConversionError, match=r"other.json: hidden_size=64, but the checkpoint's generator has "
                                            r"hidden_size=32"):
    hf_electra.import_tf_electra(ckpt, conf, variables=variables, generator_config=str(tmp_path / "other.json"))
  # continued pre-training rebuilds the same generator from the settings the report names
  rebuilt = generator_config(hf_electra.electra_config_to_bert(disc.config.to_dict(), "config.json"),
                             ElectraSettings(generator_hidden_fraction=GEN_H / H, generator_num_attention_heads=2))
  assert (rebuilt.hidden_size, rebuilt.num_attention_heads) == (GEN_H, 2)


def test_tf_electra_config_of_another_size_names_the_field_that_differs(tmp_path, tiny_vocab):
  """A --config whose hidden_size is not the checkpoint's was reported as 'no google variable:
  electra/embeddings_project/kernel' (a projection the config's E != H implied), not as the field."""
  v = _vocab_size(tiny_vocab)
  disc = _discriminator(v)
  (tmp_path / "vocab.txt").write_text(open(tiny_vocab).read())
  d = disc.config.to_dict()
  (tmp_path / "config.json").write_text(json.dumps(dict(d, hidden_size=48, num_hidden_layers=3)))
  with pytest.raises(ConversionError, match=r"config.json does not describe this checkpoint: hidden_size=48 but the "
                                            r"checkpoint has 64 .*num_hidden_layers=3 but the checkpoint has 2"):
    hf_electra.import_tf_electra(str(tmp_path / "x.ckpt"), str(tmp_path / "config.json"),
                                 variables=_google_names(disc, "electra"))
