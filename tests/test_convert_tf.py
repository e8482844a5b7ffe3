"""Google TF1 checkpoints: a checkpoint written here with Google's variable names (tf.compat.v1 Saver) from
known weights imports with outputs equal to the reference (transformers' BertForPreTraining holding the same
weights); optimizer slots are ignored and reported; unknown names, shape mismatches and missing variables
are errors naming them."""

import json

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bert_jax.convert import google_tf  # noqa: E402
from bert_jax.pretrained import params_dir  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.convert.mapping import ConversionError  # noqa: E402
from bert_jax.models import BertForPreTraining  # noqa: E402

HIDDEN, LAYERS, HEADS, FFN, MAX_POS = 64, 2, 4, 128, 64


def _reference_model(vocab_size):
  """A transformers BertForPreTraining with every tensor perturbed (no zero biases / unit scales left)."""
  torch.manual_seed(0)
  cfg = transformers.BertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=MAX_POS)
  model = transformers.BertForPreTraining(cfg)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.05 * torch.randn_like(p))
  return model.eval()


def _google_variables(model):
  """The reference weights under Google's TF1 names, converted by hand (independently of bert_jax.convert):
  "." -> "/", layer.N -> layer_N, LayerNorm weight/bias -> gamma/beta, Linear weight [out,in] -> kernel [in,out],
  cls.predictions.bias -> output_bias, seq_relationship weight -> output_weights (kept [2, H], as Google)."""
  out = {}
  for key, value in model.state_dict().items():
    if not value.is_floating_point() or key.startswith("cls.predictions.decoder."):
      continue                                                  # buffers; decoder is tied to word_embeddings
    v = value.numpy().copy()
    if key == "cls.predictions.bias":
      out["cls/predictions/output_bias"] = v
      continue
    if key.startswith("cls.seq_relationship."):
      out["cls/seq_relationship/" + ("output_weights" if key.endswith("weight") else "output_bias")] = v
      continue
    name = key.replace(".layer.", ".layer_").replace(".", "/")
    name = name.replace("LayerNorm/weight", "LayerNorm/gamma").replace("LayerNorm/bias", "LayerNorm/beta")
    if name.endswith("_embeddings/weight"):
      name = name[:-len("/weight")]
    elif name.endswith("/weight"):
      name, v = name[:-len("weight")] + "kernel", v.T.copy()
    out[name] = v
  return out


def _write_tf1_checkpoint(prefix, variables):
  import tensorflow as tf
  graph = tf.Graph()
  with graph.as_default():
    for name, value in variables.items():
      tf.compat.v1.get_variable(name, initializer=tf.constant(value), use_resource=False)
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session(graph=graph) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, prefix, write_meta_graph=False)


def test_google_tf1_checkpoint_imports_with_outputs_equal_to_reference(tmp_path, tiny_vocab):
  tf = pytest.importorskip("tensorflow")
  vocab_size = sum(1 for _ in open(tiny_vocab))
  ref = _reference_model(vocab_size)
  variables = _google_variables(ref)
  # Google's names, spelled out: a few of them, and the transposed NSP weights.
  assert variables["cls/seq_relationship/output_weights"].shape == (2, HIDDEN)
  for name in ("bert/embeddings/word_embeddings", "bert/embeddings/LayerNorm/gamma",
               "bert/encoder/layer_1/attention/self/query/kernel", "bert/encoder/layer_0/attention/output/dense/bias",
               "bert/encoder/layer_1/attention/output/LayerNorm/beta", "bert/encoder/layer_0/intermediate/dense/kernel",
               "bert/encoder/layer_0/output/dense/kernel", "bert/encoder/layer_1/output/LayerNorm/gamma",
               "bert/pooler/dense/kernel", "cls/predictions/transform/dense/kernel",
               "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/output_bias",
               "cls/seq_relationship/output_bias"):
    assert name in variables, name
  assert len(variables) == 5 + 16 * LAYERS + 2 + 5 + 2
  # Optimizer state as in a checkpoint saved during pre-training.
  saved = dict(variables)
  for name in ("bert/embeddings/word_embeddings", "bert/encoder/layer_0/output/dense/kernel"):
    saved[name + "/adam_m"] = np.zeros_like(variables[name])
    saved[name + "/adam_v"] = np.ones_like(variables[name])
  saved["global_step"] = np.array(1000, np.int64)

  folder = tmp_path / "uncased_L-2_H-64_A-4"
  folder.mkdir()
  prefix = str(folder / "bert_model.ckpt")
  _write_tf1_checkpoint(prefix, saved)
  assert {n for n, _ in tf.train.list_variables(prefix)} == set(saved)   # exactly Google's names in the file
  json.dump({"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
             "hidden_size": HIDDEN, "initializer_range": 0.02, "intermediate_size": FFN,
             "max_position_embeddings": MAX_POS, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
             "type_vocab_size": 2, "vocab_size": vocab_size}, open(folder / "bert_config.json", "w"))
  (folder / "vocab.txt").write_text(open(tiny_vocab).read())

  out_dir = str(tmp_path / "converted")
  assert convert_main(["import-tf", f"--checkpoint={prefix}", f"--output={out_dir}"]) == 0
  config, params, vocab_file = params_dir.load_params_dir(out_dir)
  info = params_dir.read_info(out_dir)
  assert info["do_lower_case"] is True                  # from the folder name "uncased_..."
  assert "tokenizer: do_lower_case=True (the name 'uncased_L-2_H-64_A-4' says uncased" in "\n".join(
      info["report"]["notes"])                          # and the user is told so
  assert info["report"]["fresh_groups"] == []
  assert sorted(info["report"]["ignored"]) == sorted(set(saved) - set(variables))
  assert open(vocab_file).read() == open(tiny_vocab).read()
  # The unzipped folder works as --checkpoint too (Google's zips hold bert_model.ckpt.{index,data-*}).
  _, params_from_folder, _ = google_tf.import_tf_checkpoint(str(folder))
  assert all(jax.tree.leaves(jax.tree.map(np.array_equal, params, params_from_folder)))

  rng = np.random.default_rng(0)
  ids = rng.integers(5, vocab_size, size=(3, 16)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 9:] = 0
  mask[2, 5:] = 0
  ids[mask == 0] = 0
  segment_ids = np.zeros_like(ids)
  segment_ids[0, 8:] = 1
  positions = np.array([[1, 4, 9, 15], [2, 3, 5, 8], [1, 2, 4, 0]], np.int32)
  ours = jax.jit(BertForPreTraining(config).apply)({"params": params}, ids, mask, segment_ids, positions)
  with torch.no_grad():
    out = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
              token_type_ids=torch.tensor(segment_ids, dtype=torch.long), output_hidden_states=True)
  mlm_ref = np.take_along_axis(out.prediction_logits.numpy(), positions[..., None], axis=1)
  mlm = np.abs(np.asarray(ours["mlm_logits"]) - mlm_ref).max()
  nsp = np.abs(np.asarray(ours["nsp_logits"]) - out.seq_relationship_logits.numpy()).max()
  seq = np.abs(np.asarray(ours["sequence_output"]) - out.hidden_states[-1].numpy())[mask.astype(bool)].max()
  print(f"import-tf: MLM max abs diff {mlm:.2e}, NSP {nsp:.2e}, sequence output {seq:.2e}")
  assert mlm < 1e-4 and nsp < 1e-4 and seq < 1e-4


# ---- (d) errors, on variable dicts (no TF needed) -----------------------------------------------------------
@pytest.fixture
def google_folder(tmp_path, tiny_vocab):
  vocab_size = sum(1 for _ in open(tiny_vocab))
  folder = tmp_path / "cased_L-2_H-64_A-4"
  folder.mkdir()
  json.dump({"hidden_size": HIDDEN, "intermediate_size": FFN, "max_position_embeddings": MAX_POS,
             "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "type_vocab_size": 2,
             "vocab_size": vocab_size, "hidden_act": "gelu"}, open(folder / "bert_config.json", "w"))
  (folder / "vocab.txt").write_text(open(tiny_vocab).read())
  return str(folder / "bert_model.ckpt"), _google_variables(_reference_model(vocab_size))


def test_import_tf_unknown_variable_is_an_error_listing_it(google_folder):
  prefix, variables = google_folder
  variables["bert/encoder/layer_0/attention/self/query_extra/kernel"] = np.zeros((HIDDEN, HIDDEN), np.float32)
  variables["cls/predictions/transform/dense/kernel/adam_m"] = np.zeros((HIDDEN, HIDDEN), np.float32)  # ignorable
  with pytest.raises(ConversionError) as e:
    google_tf.import_tf_checkpoint(prefix, variables=variables)
  assert "bert/encoder/layer_0/attention/self/query_extra/kernel" in str(e.value)
  assert "adam_m" not in str(e.value)


def test_import_tf_shape_mismatch_names_variable_and_both_shapes(google_folder):
  prefix, variables = google_folder
  variables["bert/encoder/layer_1/attention/self/key/kernel"] = np.zeros((HIDDEN, 32), np.float32)
  with pytest.raises(ConversionError) as e:
    google_tf.import_tf_checkpoint(prefix, variables=variables)
  msg = str(e.value)
  assert "bert/encoder/layer_1/attention/self/key/kernel" in msg and "(64, 32)" in msg and "(64, 64)" in msg


def test_import_tf_missing_variable_is_an_error_naming_it(google_folder):
  prefix, variables = google_folder
  del variables["bert/encoder/layer_1/intermediate/dense/bias"]
  with pytest.raises(ConversionError, match="bert/encoder/layer_1/intermediate/dense/bias"):
    google_tf.import_tf_checkpoint(prefix, variables=variables)
  # A partly present head group is an error too (not silently re-initialised).
  prefix, variables = google_folder
  del variables["cls/predictions/output_bias"]
  with pytest.raises(ConversionError, match="cls/predictions/output_bias"):
    google_tf.import_tf_checkpoint(prefix, variables=variables)


def test_import_tf_without_nsp_head_initialises_it_and_reports(google_folder):
  prefix, variables = google_folder
  del variables["cls/seq_relationship/output_weights"], variables["cls/seq_relationship/output_bias"]
  config, params, report = google_tf.import_tf_checkpoint(prefix, variables=variables)
  assert report.fresh_groups == ["nsp"] and "nsp" in report.summary()
  assert params["nsp"]["kernel"].shape == (HIDDEN, 2) and not params["nsp"]["bias"].any()
  np.testing.assert_array_equal(params["mlm"]["output_bias"], variables["cls/predictions/output_bias"])


def test_import_tf_vocab_larger_than_embedding_table_is_refused(google_folder, tmp_path):
  prefix, variables = google_folder
  big = tmp_path / "big_vocab.txt"
  big.write_text("".join(f"tok{i}\n" for i in range(500)))
  with pytest.raises(ConversionError, match="overflow"):
    google_tf.import_tf_checkpoint(prefix, vocab_file=str(big), variables=variables)


# google-research/albert's TF names of transformers' ALBERT keys, written out by hand (the renames of
# transformers' former load_tf_weights_in_albert, reversed), independent of the package's table.
_ALBERT_LAYER_TF = {"attention.query": "attention_1/self/query", "attention.key": "attention_1/self/key",
                    "attention.value": "attention_1/self/value", "attention.dense": "attention_1/output/dense",
                    "attention.LayerNorm": "LayerNorm", "ffn": "ffn_1/intermediate/dense",
                    "ffn_output": "ffn_1/intermediate/output/dense", "full_layer_layer_norm": "LayerNorm_1"}
_ALBERT_TF = (("albert.embeddings.", "bert/embeddings/"),
              ("albert.encoder.embedding_hidden_mapping_in.", "bert/encoder/embedding_hidden_mapping_in/"),
              ("albert.pooler.", "bert/pooler/dense/"), ("predictions.dense.", "cls/predictions/transform/dense/"),
              ("predictions.LayerNorm.", "cls/predictions/transform/LayerNorm/"),
              ("predictions.bias", "cls/predictions/output_bias"),
              ("sop_classifier.classifier.weight", "cls/seq_relationship/output_weights"),
              ("sop_classifier.classifier.bias", "cls/seq_relationship/output_bias"))


def _albert_google_variables(model, prefix=""):
  import re
  out = {}
  for key, value in model.state_dict().items():
    if not value.is_floating_point() or key.startswith("predictions.decoder"):
      continue
    v, name = value.numpy().copy(), key
    for a, b in _ALBERT_TF:
      name = name.replace(a, b)
    m = re.match(r"albert\.encoder\.albert_layer_groups\.(\d+)\.albert_layers\.0\.(.*)\.(weight|bias)$", name)
    if m:
      name = f"bert/encoder/transformer/group_{m[1]}/inner_group_0/{_ALBERT_LAYER_TF[m[2]]}/{m[3]}"
    name = name.replace(".", "/")
    if "LayerNorm" in name:
      name = name.replace("/weight", "/gamma").replace("/bias", "/beta")
    if name.endswith("_embeddings/weight"):
      name = name[:-len("/weight")]
    elif name.endswith("/weight") and "output_weights" not in name:
      name, v = name[:-len("weight")] + "kernel", v.T.copy()
    out[prefix + name] = v
  return out


@pytest.mark.parametrize("groups,prefix", [(1, ""), (3, "module/")], ids=["shared", "per_layer_tf_hub"])
def test_google_research_albert_tf_checkpoint_imports_with_transformers_outputs(google_folder, tmp_path, groups,
                                                                                prefix):
  """google-research/albert's TF checkpoints (bert/encoder/transformer/group_0/inner_group_0/..., an
  albert_config.json whose 'gelu' is the tanh approximation) were refused, pointing at a converter that
  transformers 5 no longer has; they import with the outputs of the same weights in transformers' ALBERT."""
  _, _ = google_folder
  vocab_size = sum(1 for _ in open(tmp_path / "vocab.txt"))
  torch.manual_seed(0)
  cfg = transformers.AlbertConfig(vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                                  num_hidden_groups=groups, num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=MAX_POS, hidden_act="gelu_new")
  ref = transformers.AlbertForPreTraining(cfg)
  with torch.no_grad():
    for p in ref.parameters():
      p.add_(0.05 * torch.randn_like(p))
  ref.eval()
  folder = tmp_path / "albert_base_zh"          # Google's zips: albert_config.json, vocab_chinese.txt
  folder.mkdir()
  json.dump({k: cfg.to_dict()[k] for k in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                                             "num_hidden_groups", "num_attention_heads", "intermediate_size",
                                             "max_position_embeddings", "type_vocab_size", "inner_group_num")}
            | {"hidden_act": "gelu", "net_structure_type": 0, "layers_to_keep": []},
            open(folder / "albert_config.json", "w"))
  (folder / "vocab_chinese.txt").write_text((tmp_path / "vocab.txt").read_text())
  variables = _albert_google_variables(ref, prefix)
  variables["bert/embeddings/word_embeddings/lamb_m"] = np.zeros((vocab_size, 16), np.float32)   # ignorable
  config, params, report = google_tf.import_tf_checkpoint(str(folder / "model.ckpt-best"), variables=variables)
  assert config.hidden_act == "gelu_new" and config.share_layers == (groups == 1) and report.fresh_groups == []
  rng = np.random.default_rng(0)
  ids = rng.integers(5, vocab_size, (2, 10)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 6:] = 0
  segment_ids = np.zeros_like(ids)
  positions = np.broadcast_to(np.arange(10), ids.shape).astype(np.int32)
  ours = jax.jit(BertForPreTraining(config, targets=("mlm", "sop")).apply)({"params": params}, ids, mask,
                                                                            segment_ids, positions)
  with torch.no_grad():
    out = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
              token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
  real = mask[..., None] > 0
  assert np.abs(np.where(real, np.asarray(ours["mlm_logits"]) - out.prediction_logits.numpy(), 0)).max() < 1e-4
  assert np.abs(np.asarray(ours["sop_logits"]) - out.sop_logits.numpy()).max() < 1e-4
  # more groups than layers is refused naming the config file
  json.dump(dict(json.load(open(folder / "albert_config.json")), num_hidden_groups=5),
            open(folder / "albert_config.json", "w"))
  with pytest.raises(ConversionError, match="albert_config.json: num_hidden_groups=5"):
    google_tf.import_tf_checkpoint(str(folder / "model.ckpt-best"), variables=variables)


def test_import_tf_takes_any_file_of_the_checkpoint_as_its_prefix(tmp_path):
  """Users pass bert_model.ckpt.data-00000-of-00001 or .meta as often as the prefix (only .index was taken:
  'TF checkpoint not found: ...data-00000-of-00001')."""
  prefix = tmp_path / "bert_model.ckpt"
  for suffix in (".index", ".meta", ".data-00000-of-00001"):
    (tmp_path / ("bert_model.ckpt" + suffix)).write_bytes(b"")
  for given in ("", ".index", ".meta", ".data-00000-of-00001"):
    assert google_tf._checkpoint_prefix(str(prefix) + given) == str(prefix)
  with pytest.raises(FileNotFoundError, match="other.ckpt.index"):
    google_tf._checkpoint_prefix(str(tmp_path / "other.ckpt.data-00000-of-00001"))


def test_import_tf_with_another_models_config_lists_a_few_mismatches_not_every_tensor(google_folder):
  """A bert_config.json of another size mismatches every tensor (hundreds for BERT-base): the error lists ten
  and counts the rest, and asks whether the config is this checkpoint's."""
  prefix, variables = google_folder
  config_file = prefix[:-len("bert_model.ckpt")] + "bert_config.json"
  json.dump(dict(json.load(open(config_file)), hidden_size=2 * HIDDEN), open(config_file, "w"))
  with pytest.raises(ConversionError) as e:
    google_tf.import_tf_checkpoint(prefix, variables=variables)
  msg = str(e.value)
  assert "is it this checkpoint's config?" in msg and "bert/embeddings/word_embeddings" in msg
  assert len(msg.splitlines()) == 12 and msg.splitlines()[-1].startswith("  ... and ")


def test_import_tf_unsupported_hidden_act_names_the_config_file(google_folder):
  prefix, variables = google_folder
  config_file = prefix[:-len("bert_model.ckpt")] + "bert_config.json"
  json.dump(dict(json.load(open(config_file)), hidden_act="mish"), open(config_file, "w"))
  with pytest.raises(ConversionError, match="bert_config.json: hidden_act='mish' is not supported"):
    google_tf.import_tf_checkpoint(prefix, variables=variables)


def test_import_tf_of_a_tf2_object_based_checkpoint_names_the_format_and_lists_a_few(google_folder):
  """A TF2 tf.train.Checkpoint (the Model Garden's BERT: .../.ATTRIBUTES/VARIABLE_VALUE names) listed every
  one of its hundreds of names; now twenty, a count, and what the names are."""
  prefix, _ = google_folder
  variables = {f"encoder/layer_with_weights-{i}/kernel/.ATTRIBUTES/VARIABLE_VALUE": np.zeros(2, np.float32)
               for i in range(30)}
  with pytest.raises(ConversionError, match=r"30 google variable.*\.\.\. and 10 more; these are a TF2 object-based"):
    google_tf.import_tf_checkpoint(prefix, variables=variables)


@pytest.mark.slow   # imports TensorFlow
def test_a_torn_tf_checkpoint_is_one_error_naming_it(tmp_path):
  """A truncated .data-* or a foreign .index was TensorFlow's IndexError / OpError traceback."""
  pytest.importorskip("tensorflow")
  prefix = str(tmp_path / "bert_model.ckpt")
  _write_tf1_checkpoint(prefix, {"bert/pooler/dense/bias": np.arange(512, dtype=np.float32)})
  with open(prefix + ".data-00000-of-00001", "r+b") as f:
    f.truncate(100)
  with pytest.raises(ConversionError, match=r"bert_model.ckpt: not a readable TF checkpoint \(IndexError"):
    google_tf.read_tf_checkpoint(prefix)
  (tmp_path / "bert_model.ckpt.index").write_text("garbage")
  with pytest.raises(ConversionError, match="bert_model.ckpt: not a readable TF checkpoint"):
    google_tf.read_tf_checkpoint(str(tmp_path))


def test_import_tf_cased_folder_name_keeps_case_and_says_so(google_folder, tmp_path):
  """Google's cased_L-12_H-768_A-12.zip unzips to a folder named cased_...: no lowercasing, and the report
  names the reason (the user sees which casing the converted model tokenizes with)."""
  prefix, variables = google_folder
  out = str(tmp_path / "out")
  _, _, report = google_tf.import_tf_checkpoint(prefix, out, variables=variables)
  assert params_dir.read_info(out)["do_lower_case"] is False
  assert "tokenizer: do_lower_case=False (the name 'cased_L-2_H-64_A-4' says cased" in report.summary()
