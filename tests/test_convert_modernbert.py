"""ModernBERT checkpoints in and out against transformers (PyTorch, fp32) on random weights: hidden states, MLM
logits and classification logits within 1e-4, with padding, at 300 tokens (a window of 128: several windows);
import -> export -> import bit-exact; transformers loads the exported folder with the same logits."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")   # torch: the reference implementation only
transformers = pytest.importorskip("transformers")

from bert_jax.convert import hf_heads, hf_modernbert  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.convert.mapping import ConversionError  # noqa: E402
from bert_jax.models import (BertForPreTraining, BertForSequenceClassification,  # noqa: E402
                             BertForTokenClassification, BertModel)
from bert_jax.pretrained.load import load_pretrained  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]   # 64 ids
TOL = 1e-4


def _hf_config(**overrides):
  kw = dict(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=48, num_hidden_layers=4,
            num_attention_heads=4, max_position_embeddings=512, local_attention=128, global_attn_every_n_layers=3,
            pad_token_id=0, attn_implementation="eager")
  kw.update(overrides)
  return transformers.ModernBertConfig(**kw)


def _randomise(model, seed=0):
  """Every parameter random (norm scales around 1), so that no zero bias or unit scale hides a mapping error."""
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=gen) * 0.2
      p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)
  return model.eval()


def _save(model, folder):
  model.save_pretrained(folder)
  with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
    f.writelines(t + "\n" for t in VOCAB)
  return str(folder)


def _batch(length=300, real=(300, 217), seed=1):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, len(VOCAB), size=(len(real), length)).astype(np.int32)
  mask = np.zeros_like(ids)
  for b, n in enumerate(real):
    mask[b, :n] = 1
    ids[b, n:] = 0
  ids[:, 0] = 2
  return ids, mask


def _torch(x):
  return torch.tensor(np.asarray(x), dtype=torch.long)


def _max_diff(ours, theirs, mask):
  real = mask.astype(bool)
  return float(np.max(np.abs(np.asarray(ours)[real] - theirs[real])))


@pytest.mark.parametrize("biases", [False, True], ids=["default", "all_biases"])
def test_masked_lm_hidden_states_and_logits_match_transformers_at_300_tokens_with_padding(tmp_path, biases):
  flags = dict(norm_bias=biases, attention_bias=biases, mlp_bias=biases, classifier_bias=biases)
  hf_model = _randomise(transformers.ModernBertForMaskedLM(_hf_config(**flags)))
  folder = _save(hf_model, tmp_path / "hf")
  config, params, report = hf_modernbert.import_hf_modernbert(folder)
  assert report.fresh_groups == ["pooler"]
  assert config.encoder == "modernbert" and config.norm_bias == biases
  ids, mask = _batch()
  with torch.no_grad():
    out = hf_model(input_ids=_torch(ids), attention_mask=_torch(mask), output_hidden_states=True)
  model = BertForPreTraining(config, targets=("mlm",))
  positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape).astype(np.int32)
  ours = model.apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask), None, jnp.asarray(positions))
  hidden_diff = _max_diff(ours["sequence_output"], out.hidden_states[-1].numpy(), mask)
  # transformers' last hidden_states entry is before final_norm in some versions: compare the model output too
  base = hf_model.model(input_ids=_torch(ids), attention_mask=_torch(mask)).last_hidden_state.detach().numpy()
  hidden_diff = min(hidden_diff, _max_diff(ours["sequence_output"], base, mask))
  logit_diff = _max_diff(ours["mlm_logits"], out.logits.numpy(), mask)
  assert hidden_diff < TOL, hidden_diff
  assert logit_diff < TOL, logit_diff


def test_import_export_import_is_bit_exact_and_transformers_loads_the_export(tmp_path):
  hf_model = _randomise(transformers.ModernBertForMaskedLM(_hf_config()), seed=3)
  folder = _save(hf_model, tmp_path / "hf")
  assert convert_main(["import-hf", "--input", folder, "--output", str(tmp_path / "ours")]) == 0
  assert convert_main(["export-hf", "--input", str(tmp_path / "ours"), "--output", str(tmp_path / "back")]) == 0
  back_config = json.load(open(tmp_path / "back" / "config.json"))
  assert back_config["architectures"] == ["ModernBertForMaskedLM"]
  assert (back_config["cls_token_id"], back_config["sep_token_id"]) == (2, 3)   # the vocab's, not BPE's ids
  _, first, _ = hf_modernbert.import_hf_modernbert(folder)
  _, second, _ = hf_modernbert.import_hf_modernbert(str(tmp_path / "back"))
  flat1, flat2 = jax.tree_util.tree_leaves_with_path(first), jax.tree_util.tree_leaves_with_path(second)
  assert [p for p, _ in flat1] == [p for p, _ in flat2]
  for (path, a), (_, b) in zip(flat1, flat2):
    if path[0].key == "bert" and path[1].key == "pooler":
      continue   # initialised fresh at import (a ForMaskedLM has no pooler), not exported
    assert np.array_equal(a, b), path
  reloaded = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "back"), attn_implementation="eager")
  ids, mask = _batch(length=160, real=(160, 97), seed=4)
  with torch.no_grad():
    want = hf_model(input_ids=_torch(ids), attention_mask=_torch(mask)).logits.numpy()
    got = reloaded.eval()(input_ids=_torch(ids), attention_mask=_torch(mask)).logits.numpy()
  assert np.array_equal(want, got)
  assert load_pretrained(str(tmp_path / "ours")).config.encoder == "modernbert"


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_logits_match_transformers(tmp_path, pooling):
  hf_model = _randomise(transformers.ModernBertForSequenceClassification(
      _hf_config(num_labels=3, classifier_pooling=pooling, num_hidden_layers=3, local_attention=16)), seed=5)
  folder = _save(hf_model, tmp_path / "hf")
  state = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
  config, params, report = hf_modernbert.import_hf_modernbert(folder)
  assert report.fresh_groups == ["mlm"] and any("classifier.*" in n for n in report.notes)
  ids, mask = _batch(length=40, real=(40, 23), seed=6)
  head = BertForSequenceClassification(config, num_labels=3)
  ours = head.apply({"params": {"bert": params["bert"], "classifier": hf_heads.classifier_params(state)}},
                    jnp.asarray(ids), jnp.asarray(mask))["logits"]
  with torch.no_grad():
    want = hf_model(input_ids=_torch(ids), attention_mask=_torch(mask)).logits.numpy()
  assert float(np.max(np.abs(np.asarray(ours) - want))) < TOL


def test_token_classification_logits_match_transformers(tmp_path):
  hf_model = _randomise(transformers.ModernBertForTokenClassification(
      _hf_config(num_labels=5, num_hidden_layers=2, local_attention=16, global_attn_every_n_layers=2)), seed=7)
  folder = _save(hf_model, tmp_path / "hf")
  state = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
  config, params, _ = hf_modernbert.import_hf_modernbert(folder)
  ids, mask = _batch(length=40, real=(40, 31), seed=8)
  ours = BertForTokenClassification(config, num_labels=5).apply(
      {"params": {"bert": params["bert"], "classifier": hf_heads.classifier_params(state)}},
      jnp.asarray(ids), jnp.asarray(mask))["logits"]
  with torch.no_grad():
    want = hf_model(input_ids=_torch(ids), attention_mask=_torch(mask)).logits.numpy()
  assert _max_diff(ours, want, mask) < TOL


@pytest.mark.slow   # ~8 s: three saves and imports of the same model
def test_bare_model_with_layer_types_and_rope_parameters_from_sharded_safetensors_and_a_bin(tmp_path):
  cfg = _hf_config(num_hidden_layers=3, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5000.0},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 777.0}},
                   local_attention=16)
  hf_model = _randomise(transformers.ModernBertModel(cfg), seed=9)
  folder = tmp_path / "hf"
  hf_model.save_pretrained(folder, max_shard_size="20KB")
  assert os.path.exists(folder / "model.safetensors.index.json")   # sharded
  (folder / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
  _, sharded, _ = hf_modernbert.import_hf_modernbert(str(folder))
  for name in os.listdir(folder):   # the same weights as one pytorch_model.bin
    if name.startswith("model"):
      os.remove(folder / name)
  torch.save(hf_model.state_dict(), folder / "pytorch_model.bin")
  config, params, report = hf_modernbert.import_hf_modernbert(str(folder))
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(params)))
  assert config.layer_types == ("sliding_attention", "full_attention", "sliding_attention")
  assert (config.global_rope_theta, config.local_rope_theta) == (5000.0, 777.0)
  assert report.fresh_groups == ["pooler", "mlm"]
  ids, mask = _batch(length=50, real=(50, 33), seed=10)
  ours = BertModel(config).apply({"params": params["bert"]}, jnp.asarray(ids), jnp.asarray(mask))
  with torch.no_grad():
    want = hf_model(input_ids=_torch(ids), attention_mask=_torch(mask)).last_hidden_state.numpy()
  assert _max_diff(ours["sequence_output"], want, mask) < TOL


def test_untied_decoder_is_refused_with_the_names(tmp_path):
  hf_model = _randomise(transformers.ModernBertForMaskedLM(_hf_config(num_hidden_layers=1)))
  folder = _save(hf_model, tmp_path / "hf")
  cfg = json.load(open(os.path.join(folder, "config.json")))
  cfg["tie_word_embeddings"] = False
  json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
  with pytest.raises(ConversionError, match="tie_word_embeddings"):
    hf_modernbert.import_hf_modernbert(folder)
