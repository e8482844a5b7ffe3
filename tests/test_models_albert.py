"""ALBERT: factorised embeddings (model.embedding_size) and cross-layer sharing (model.share_layers) against
transformers' AlbertModel / AlbertForPreTraining on random weights (torch on CPU), Hugging Face import and
export round trips, one compiled layer under scan, and preset=albert."""

import json
import os

import flax
import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bert_jax.convert import hf_albert, mapping  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.convert.mapping import ConversionError, init_params  # noqa: E402
from bert_jax.pretrained import params_dir  # noqa: E402
from bert_jax.models import BertConfig, BertForPreTraining, count_params, dummy_inputs  # noqa: E402

from configs import pretrain as pretrain_config  # noqa: E402

VOCAB = 40


def _hf_config(groups=1, layers=3, inner=1):
  return transformers.AlbertConfig(vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=layers,
                                   num_hidden_groups=groups, inner_group_num=inner, num_attention_heads=4,
                                   intermediate_size=37,
                                   max_position_embeddings=24, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, VOCAB, size=(3, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  mask[2, 4:] = 0
  ids[mask == 0] = 0
  segment_ids = np.zeros_like(ids)
  segment_ids[0, 6:] = 1
  return ids, mask, segment_ids


def _hf_folder(path, groups=1, layers=3, cls=None, seed=0, inner=1):
  """A random-weight transformers ALBERT saved with safetensors; every tensor perturbed (zero biases and unit
  LayerNorm scales would hide a swapped bias or scale)."""
  torch.manual_seed(seed)
  model = (cls or transformers.AlbertForPreTraining)(_hf_config(groups, layers, inner))
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.05 * torch.randn_like(p))
  model.save_pretrained(str(path))
  (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                            [f"w{i}" for i in range(VOCAB - 5)]) + "\n")
  return model.eval()


def _ours(config, params):
  ids, mask, segment_ids = _inputs()
  positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape).astype(np.int32)
  model = BertForPreTraining(config, targets=("mlm", "sop"))
  return jax.jit(model.apply)({"params": params}, ids, mask, segment_ids, positions)


def _reference(model):
  ids, mask, segment_ids = _inputs()
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                 token_type_ids=torch.tensor(segment_ids, dtype=torch.long), output_hidden_states=True)


def _max_diffs(ours, ref):
  mask = _inputs()[1][..., None] > 0      # padded positions are not compared (HF and we differ there freely)
  seq = np.abs(np.asarray(ours["sequence_output"]) - ref.hidden_states[-1].numpy())
  mlm = np.abs(np.asarray(ours["mlm_logits"]) - ref.prediction_logits.numpy())
  return (float(np.where(mask, seq, 0).max()), float(np.where(mask, mlm, 0).max()),
          float(np.abs(np.asarray(ours["sop_logits"]) - ref.sop_logits.numpy()).max()))


@pytest.mark.slow   # torch reference model + XLA compiles (2-5 s on 2 idle cores)
@pytest.mark.parametrize("groups", [1, 3], ids=["shared", "per_layer"])
def test_import_albert_for_pretraining_matches_transformers(tmp_path, groups):
  ref = _hf_folder(tmp_path / "hf", groups=groups)
  config, params, report = hf_albert.import_hf_albert(str(tmp_path / "hf"))
  assert config.embedding_size == 16 and config.share_layers == (groups == 1) and config.hidden_act == "gelu_new"
  assert report.fresh_groups == []
  # 5 embedding tensors + projection 2, 16 per layer (stored once when shared), pooler 2, MLM 5, SOP 2.
  assert report.loaded == 5 + 2 + 16 * (1 if groups == 1 else 3) + 2 + 5 + 2
  seq, mlm, sop = _max_diffs(_ours(config, params), _reference(ref))
  print(f"ALBERT ({'shared' if groups == 1 else 'per-layer'}) vs transformers: sequence {seq:.1e}, "
        f"MLM {mlm:.1e}, SOP {sop:.1e}")
  assert seq < 1e-4 and mlm < 1e-4 and sop < 1e-4


def test_import_albert_of_other_groupings_unrolls_them_with_transformers_outputs(tmp_path):
  """num_hidden_groups=2 of 3 layers, inner_group_num=2 (the groupings of ALBERT's ablations, no release) were
  refused; they import unrolled into 6 layers, each holding its group's weights, with transformers' outputs,
  and export back as one group per layer (the same function)."""
  ref = _hf_folder(tmp_path / "hf", groups=2, layers=3, inner=2)
  config, params, report = hf_albert.import_hf_albert(str(tmp_path / "hf"))
  assert (config.num_hidden_layers, config.share_layers) == (6, False) and "unrolled into 6 layers" in report.summary()
  # layers 0-1 and 2-3 run group 0's inner layers 0, 1 (int(i / 1.5) = 0 for source layers 0, 1), 4-5 group 1's
  enc = params["bert"]["encoder"]
  np.testing.assert_array_equal(enc["layer_0"]["ffn"]["output"]["bias"], enc["layer_2"]["ffn"]["output"]["bias"])
  assert not np.array_equal(enc["layer_0"]["ffn"]["output"]["bias"], enc["layer_1"]["ffn"]["output"]["bias"])
  assert not np.array_equal(enc["layer_2"]["ffn"]["output"]["bias"], enc["layer_4"]["ffn"]["output"]["bias"])
  seq, mlm, sop = _max_diffs(_ours(config, params), _reference(ref))
  assert seq < 1e-4 and mlm < 1e-4 and sop < 1e-4
  out = tmp_path / "back"
  params_dir.save_params_dir(str(tmp_path / "ours"), config, params, str(tmp_path / "hf" / "vocab.txt"))
  assert convert_main(["export-hf", f"--input={tmp_path / 'ours'}", f"--output={out}"]) == 0
  back = transformers.AlbertForPreTraining.from_pretrained(str(out)).eval()
  assert (back.config.num_hidden_layers, back.config.num_hidden_groups, back.config.inner_group_num) == (6, 6, 1)
  assert np.abs(_reference(back).prediction_logits.numpy() - _reference(ref).prediction_logits.numpy()).max() < 1e-5


@pytest.mark.slow   # torch reference model + XLA compiles (2-5 s on 2 idle cores)
def test_import_bare_albert_model_matches_and_initialises_heads(tmp_path):
  ref = _hf_folder(tmp_path / "hf", cls=transformers.AlbertModel)
  config, params, report = hf_albert.import_hf_albert(str(tmp_path / "hf"))
  assert report.fresh_groups == ["mlm", "sop"]
  ids, mask, segment_ids = _inputs()
  from bert_jax.models import BertModel
  ours = jax.jit(BertModel(config).apply)({"params": params["bert"]}, ids, mask, segment_ids)
  with torch.no_grad():
    out = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
              token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
  real = mask[..., None] > 0
  assert np.abs(np.where(real, np.asarray(ours["sequence_output"]) - out.last_hidden_state.numpy(), 0)).max() < 1e-4
  assert np.abs(np.asarray(ours["pooled_output"]) - out.pooler_output.numpy()).max() < 1e-4


@pytest.mark.slow   # torch reference model + XLA compiles (2-5 s on 2 idle cores)
def test_export_albert_round_trip_loads_into_transformers_without_missing_keys(tmp_path):
  _hf_folder(tmp_path / "hf", seed=3)
  ours_dir, out_dir = str(tmp_path / "ours"), str(tmp_path / "out")
  assert convert_main(["import-hf", f"--input={tmp_path / 'hf'}", f"--output={ours_dir}"]) == 0
  assert convert_main(["export-hf", f"--input={ours_dir}", f"--output={out_dir}"]) == 0
  cfg = json.load(open(os.path.join(out_dir, "config.json")))
  assert cfg["model_type"] == "albert" and cfg["architectures"] == ["AlbertForPreTraining"]
  assert cfg["num_hidden_groups"] == 1 and cfg["embedding_size"] == 16
  model, info = transformers.AlbertForPreTraining.from_pretrained(out_dir, output_loading_info=True)
  assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
  config, params, _ = hf_albert.import_hf_albert(str(tmp_path / "hf"))
  seq, mlm, sop = _max_diffs(_ours(config, params), _reference(model.eval()))
  assert seq < 1e-4 and mlm < 1e-4 and sop < 1e-4
  # Back again: bit for bit.
  config2, params2, _ = hf_albert.import_hf_albert(out_dir)
  assert config2 == config
  same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), params, params2)
  assert all(jax.tree.leaves(same))
  # The bare encoder layout loads into AlbertModel with no report at all.
  assert convert_main(["export-hf", f"--input={ours_dir}", f"--output={out_dir}_bare", "--heads=none"]) == 0
  _, info = transformers.AlbertModel.from_pretrained(out_dir + "_bare", output_loading_info=True)
  assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info


def test_albert_conversion_refuses_what_it_cannot_map(tmp_path):
  _hf_folder(tmp_path / "hf", layers=4)
  cfg_path = tmp_path / "hf" / "config.json"
  d = json.loads(cfg_path.read_text())
  cfg_path.write_text(json.dumps(dict(d, num_hidden_groups=5)))      # more groups than layers
  with pytest.raises(ConversionError, match="num_hidden_groups=5"):
    hf_albert.import_hf_albert(str(tmp_path / "hf"))
  cfg_path.write_text(json.dumps(dict(d, num_hidden_groups=2)))      # a group the weights lack: named
  with pytest.raises(ConversionError, match="albert_layer_groups.1.albert_layers.0"):
    hf_albert.import_hf_albert(str(tmp_path / "hf"))
  albert_like = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=37, embedding_size=16, share_layers=True)
  with pytest.raises(ConversionError, match="hf_albert"):
    mapping.name_table(albert_like)


def _tiny(**kw):
  return BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                    intermediate_size=37, embedding_size=16, share_layers=True, **kw)


def _dot_count(config):
  model = BertForPreTraining(config, targets=("mlm", "sop"))
  variables = jax.eval_shape(model.init, jax.random.key(0), *dummy_inputs(config))
  jaxpr = jax.make_jaxpr(lambda v: model.apply(v, *dummy_inputs(config)))(variables)
  return str(jaxpr).count("dot_general")


@pytest.mark.slow   # three XLA compiles and four traces (~3 s on 2 idle cores)
def test_shared_layers_one_parameter_set_and_one_compiled_layer_under_scan():
  config = _tiny()
  model = BertForPreTraining(config, targets=("mlm", "sop"))
  params = init_params(config, targets=("mlm", "sop"))      # NumPy: no XLA compile of init
  deeper = BertForPreTraining(config.replace(num_hidden_layers=8), targets=("mlm", "sop"))
  deeper_params = jax.eval_shape(deeper.init, jax.random.key(0), *dummy_inputs(config))["params"]
  assert count_params(params) == count_params(flax.linen.unbox(deeper_params))   # depth costs no parameters
  assert list(params["bert"]["encoder"]) == ["shared"]
  # Scanned or not: the same parameter tree and the same outputs.
  ids, mask, segment_ids = _inputs()
  positions = np.zeros((3, 2), np.int32)
  plain = jax.jit(model.apply)({"params": params}, ids, mask, segment_ids, positions)
  scanned_model = BertForPreTraining(config.replace(scan_layers=True), targets=("mlm", "sop"))
  scanned_params = jax.eval_shape(scanned_model.init, jax.random.key(0), *dummy_inputs(config))["params"]
  assert jax.tree.structure(flax.linen.unbox(scanned_params)) == jax.tree.structure(params)
  scanned = jax.jit(scanned_model.apply)({"params": params}, ids, mask, segment_ids, positions)
  np.testing.assert_allclose(scanned["sequence_output"], plain["sequence_output"], atol=1e-5)
  # One compiled layer: under scan the program does not grow with depth; unrolled it does.
  assert _dot_count(config.replace(scan_layers=True)) == _dot_count(config.replace(scan_layers=True,
                                                                                   num_hidden_layers=8))
  assert _dot_count(config) < _dot_count(config.replace(num_hidden_layers=8))


@pytest.mark.slow   # imports the training step (optax, orbax)
def test_preset_albert_is_factorised_shared_and_sop():
  c = pretrain_config.get_config("size=base,preset=albert")
  assert tuple(c.targets) == ("mlm", "sop")
  assert c.model.embedding_size == 128 and c.model.share_layers is True
  from bert_jax.engine.train_step import model_config
  cfg = model_config(c.model, vocab_size=30000)
  assert cfg.embedding_size == 128 and cfg.share_layers and cfg.hidden_size == 768
  # ALBERT-base: ~12M parameters (the paper's Table 1), against BERT-base's ~110M.
  shapes = mapping.expected_shapes(cfg.replace(max_position_embeddings=512), targets=("mlm", "sop"))
  n = sum(int(np.prod(shape)) for shape, _ in shapes.values())
  assert 11e6 < n < 13e6, n


@pytest.mark.slow   # traces ALBERT-base's init (eval_shape, ~1-3 s)
@pytest.mark.parametrize("name", ["albert-base-v2", "voidful/albert_chinese_tiny"])
def test_zoo_albert_entries_count_the_parameters_of_the_model_they_convert_to(name):
  from bert_jax.pretrained import zoo
  x = zoo.REGISTRY[name]
  assert x.kind == "albert" and "import-hf" in x.how_to_convert()
  cfg = BertConfig(vocab_size=x.vocab_size, hidden_size=x.hidden, num_hidden_layers=x.layers,
                   num_attention_heads=x.heads, intermediate_size=x.intermediate, embedding_size=x.embedding_size,
                   share_layers=True, max_position_embeddings=x.max_positions)
  shapes = mapping.expected_shapes(cfg, targets=("mlm", "sop"))
  assert x.params == sum(int(np.prod(shape)) for shape, _ in shapes.values())
  if name == "albert-base-v2":   # AlbertModel as transformers counts it (11,683,584) + the MLM and SOP heads
    assert x.params == 11_683_584 + (768 * 128 + 128) + 2 * 128 + 30000 + (2 * 768 + 2)


@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_albert_parameters_carry_logical_axes_that_map_onto_the_mesh(scan):
  """Every ALBERT parameter has logical names of its own rank, the default rules map them onto distinct mesh
  axes, and the shared layer has no `layers` axis (it is one set of weights, scanned or not)."""
  from bert_jax.models import axes
  config = _tiny(scan_layers=scan)
  boxed = jax.eval_shape(BertForPreTraining(config, targets=("mlm", "sop")).init, jax.random.key(0),
                         *dummy_inputs(config))["params"]
  specs = flax.traverse_util.flatten_dict(flax.core.unfreeze(flax.linen.get_partition_spec(boxed)))
  shapes = flax.traverse_util.flatten_dict(flax.core.unfreeze(flax.linen.unbox(boxed)))
  rules = dict(axes.DEFAULT_RULES)
  for path, spec in specs.items():
    assert spec is not None and len(spec) == len(shapes[path].shape), path
    mesh_axes = [a for name in spec if name is not None for a in np.atleast_1d(rules.get(name) or ())]
    assert len(mesh_axes) == len(set(mesh_axes)), (path, spec)
    assert axes.LAYERS not in spec, path
  assert tuple(specs[("bert", "embeddings", "projection", "kernel")]) == (None, axes.EMBED)
  assert tuple(specs[("bert", "embeddings", "word_embeddings", "embedding")]) == (axes.VOCAB, axes.EMBED)


def test_albert_flops_count_the_projection_and_the_narrow_mlm_head():
  from bert_jax.pretrain import flops
  bert = BertConfig.from_size("base", vocab_size=30000)
  albert = bert.replace(embedding_size=128, share_layers=True)
  t, p, h, e, v = 512, 20, 768, 128, 30000
  diff = flops.flops_per_sequence(bert, t, p, ("mlm", "sop")) - flops.flops_per_sequence(albert, t, p, ("mlm", "sop"))
  # Same encoder FLOPs (a shared layer is still applied 12 times); the MLM head shrinks, the projection is added.
  assert diff == 6.0 * p * (h * h + h * v) - 6.0 * p * (h * e + e * v) - 6.0 * t * e * h


def test_sentencepiece_vocab_of_the_english_alberts_loads_as_a_bert_vocab_with_ids_in_place(tmp_path):
  """albert-*-v2 ship tokenizer.json with a Unigram model: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4, then
  pieces. The vocab.txt written from it must load with this package's tokenizer (which needs [PAD] and [UNK];
  otherwise predict / fine-tune / rank stop on the imported model) and keep every id."""
  from bert_jax.input_pipeline import tokenization
  pieces = [["<pad>", 0.0], ["<unk>", 0.0], ["[CLS]", 0.0], ["[SEP]", 0.0], ["[MASK]", 0.0], ["(", -8.5],
            ["\u2581the", -2.0], ["s", -3.1]]
  (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "unk_id": 1, "vocab": pieces}}))
  out = tmp_path / "vocab.txt"
  assert hf_albert._write_vocab_from_unigram(str(tmp_path / "tokenizer.json"), str(out))
  vocab = tokenization.load_vocab(str(out))
  assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u2581the", "s")] == [0, 1, 2, 3, 4, 6, 7]


def test_albert_folder_without_model_type_imports_as_albert(tmp_path):
  """Early ALBERT uploads (brightmart's configs as converted for transformers 2.x, e.g. the Chinese ALBERTs)
  may lack "model_type"; an embedding_size with no model_type is ALBERT's (ELECTRA's configs always name
  their type), so import-hf reads the folder as ALBERT instead of refusing it as a BERT without a layout."""
  _hf_folder(tmp_path / "hf", cls=transformers.AlbertForMaskedLM)
  path = tmp_path / "hf" / "config.json"
  d = json.loads(path.read_text())
  del d["model_type"]
  path.write_text(json.dumps(d))
  assert convert_main(["import-hf", f"--input={tmp_path / 'hf'}", f"--output={tmp_path / 'ours'}"]) == 0
  assert json.loads((tmp_path / "ours" / "model_config.json").read_text())["embedding_size"] == 16


_ENGLISH = [
    "The quick brown fox jumps over the lazy dog.", "A man is playing a guitar on the street.",
    "Someone plays the guitar while the others are singing.", "The stock market fell sharply today.",
    "Researchers trained the model for three days on eight machines.", "She didn't like the movie's ending.",
    "Paris is the capital and the most populous city of France.", "They were walking slowly along the river.",
    "The results of the experiments are reported in the tables below.", "Playing games is fun, isn't it?",
    "We fine-tuned the encoder on the sentiment reviews.", "The café served ``strong'' coffee in 1990.",
]


def _albert_sentencepiece(folder, vocab_size=300):
  """An English-ALBERT-like tokenizer.json: a SentencePiece Unigram model trained on English text, with the
  normaliser (quotes, NFKD, accents, lower case), Metaspace pre-tokenizer and [CLS]/[SEP] template that
  transformers' AlbertConverter gives albert-*-v2; <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4."""
  from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
  tok = Tokenizer(models.Unigram())
  tok.normalizer = normalizers.Sequence([
      normalizers.Replace("``", '"'), normalizers.Replace("''", '"'), normalizers.NFKD(),
      normalizers.StripAccents(), normalizers.Lowercase(), normalizers.Replace(Regex(" {2,}"), " ")])
  tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
  tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
  tok.train_from_iterator(_ENGLISH * 20, trainers.UnigramTrainer(
      vocab_size=vocab_size, special_tokens=["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], unk_token="<unk>"))
  tok.post_processor = processors.TemplateProcessing(
      single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
      special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
  os.makedirs(folder, exist_ok=True)
  tok.save(os.path.join(folder, "tokenizer.json"))
  return tok.get_vocab_size()


def test_sentencepiece_offsets_cover_the_piece_not_its_leading_space(tmp_path):
  """A word-initial piece ("\u2581b") spans its own characters ("b"), not the space before it: SQuAD answer
  spans are cut from these offsets. A lone "\u2581" piece keeps its space."""
  from bert_jax.input_pipeline import tokenization
  folder = tmp_path / "spm"
  n = _albert_sentencepiece(str(folder))
  from tokenizers import Tokenizer
  tj = json.loads((folder / "tokenizer.json").read_text())
  (folder / "vocab.txt").write_text("".join(p[0] + "\n" for p in tj["model"]["vocab"])
                                    .replace("<pad>\n", "[PAD]\n", 1).replace("<unk>\n", "[UNK]\n", 1))
  tok = tokenization.load_tokenizer(str(folder / "vocab.txt"))
  assert isinstance(tok, tokenization.SentencePieceTokenizer) and len(tok.vocab) == n
  text = "The  quick brown fox, zebra 1990 caf\u00e9"
  pieces, spans = tok.tokenize_with_offsets(text)
  assert pieces == Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).tokens
  for piece, (s, e) in zip(pieces, spans):
    if piece == "\u2581":
      assert text[s:e] == " "
    else:
      assert not text[s:e][0].isspace(), (piece, text[s:e])
  words = {text[s:e] for p, (s, e) in zip(pieces, spans) if p.startswith("\u2581") and p != "\u2581"}
  assert words and all(w == text[text.index(w):text.index(w) + len(w)] and not w.startswith(" ") for w in words)
  assert (0, 3) == spans[0] and text[0:3] == "The"


def test_english_albert_text_is_tokenized_by_its_sentencepiece_model_end_to_end(tmp_path):
  """albert-*-v2 folders hold tokenizer.json (a SentencePiece Unigram model), no vocab.txt. Imported, the
  model's text path (predict, fine-tuning, rank) must segment as SentencePiece does, not with WordPiece (which
  found almost no piece: every word [UNK]): ids equal transformers' tokenizer, features equal AlbertModel's
  on those ids, and export-hf hands the tokenizer back."""
  from bert_jax.input_pipeline import tokenization
  from bert_jax.predict import __main__ as predict_cli
  hf_dir = tmp_path / "albert-v2"
  n = _albert_sentencepiece(str(hf_dir))
  torch.manual_seed(0)
  config = transformers.AlbertConfig(vocab_size=n, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
  ref = transformers.AlbertForMaskedLM(config)
  with torch.no_grad():
    for p in ref.parameters():
      p.add_(0.05 * torch.randn_like(p))
  ref.save_pretrained(str(hf_dir))
  ref.eval()
  assert convert_main(["import-hf", f"--input={hf_dir}", f"--output={tmp_path / 'ours'}"]) == 0
  assert (tmp_path / "ours" / "tokenizer.json").exists()
  tok = tokenization.load_tokenizer(str(tmp_path / "ours" / "vocab.txt"))
  assert isinstance(tok, tokenization.SentencePieceTokenizer)
  hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(hf_dir / "tokenizer.json"))
  texts = ["The quick brown fox plays the guitar.", "Researchers reported the café's results in 1990.",
           "Unseen words: zebra xylophone"]
  unk = tok.vocab["[UNK]"]
  for t in texts:
    want = hf_tok(t)["input_ids"]
    assert [tok.vocab["[CLS]"]] + tok.encode(t) + [tok.vocab["[SEP]"]] == want
    pieces, spans = tok.tokenize_with_offsets(t)
    assert tok.convert_tokens_to_ids(pieces) == want[1:-1] and len(spans) == len(pieces)
  assert sum(i == unk for t in texts[:2] for i in tok.encode(t)) == 0
  wordpiece = tokenization.FullTokenizer(str(tmp_path / "ours" / "vocab.txt"))   # what text got before
  assert sum(i == unk for i in wordpiece.encode(texts[0])) >= 3
  assert tokenization.fast_batch_tokenizer(tok).encode_batch(texts) == [tok.encode(t) for t in texts]
  # the features of the imported model on text equal AlbertModel's on transformers' ids
  (tmp_path / "t.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
  assert predict_cli.main(["features", f"--model={tmp_path / 'ours'}", f"--input={tmp_path / 't.txt'}",
                           f"--output={tmp_path / 'f.npy'}", "--pooling=mean", "--max_seq_length=32"]) == 0
  ours = np.load(tmp_path / "f.npy")
  for i, t in enumerate(texts):
    ids = torch.tensor([hf_tok(t)["input_ids"]])
    with torch.no_grad():
      want = ref.albert(input_ids=ids).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(ours[i], want, atol=2e-4)
  # export-hf writes the tokenizer back: transformers loads it from the folder and gives the same ids
  assert convert_main(["export-hf", f"--input={tmp_path / 'ours'}", f"--output={tmp_path / 'back'}"]) == 0
  tc = json.loads((tmp_path / "back" / "tokenizer_config.json").read_text())
  assert tc["tokenizer_class"] == "AlbertTokenizer"
  back = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "back" / "tokenizer.json"))
  assert [back(t)["input_ids"] for t in texts] == [hf_tok(t)["input_ids"] for t in texts]


def _pb_varint(n):
  out = b""
  while True:
    b, n = n & 0x7F, n >> 7
    out += bytes([b | (0x80 if n else 0)])
    if not n:
      return out


def _pb_field(number, wire, payload):
  key = _pb_varint(number << 3 | wire)
  if wire == 2:
    return key + _pb_varint(len(payload)) + payload
  return key + payload


def _write_spm_model(path, tokenizer_json):
  """A SentencePiece ModelProto (the wire format, by hand: no sentencepiece package) of a tokenizer.json's
  Unigram pieces and scores: <pad> control, <unk> unknown, [CLS]/[SEP]/[MASK] user-defined, as 30k-clean.model."""
  import struct
  vocab = json.load(open(tokenizer_json))["model"]["vocab"]
  kinds = {"<pad>": 3, "<unk>": 2, "[CLS]": 4, "[SEP]": 4, "[MASK]": 4}
  data = b""
  for piece, score in vocab:
    msg = (_pb_field(1, 2, piece.encode("utf-8")) + _pb_field(2, 5, struct.pack("<f", score))
           + _pb_field(3, 0, _pb_varint(kinds.get(piece, 1))))
    data += _pb_field(1, 2, msg)
  data += _pb_field(3, 2, _pb_field(1, 2, b"identity") + _pb_field(3, 0, _pb_varint(1)))
  with open(path, "wb") as f:
    f.write(data)


def test_english_albert_tf_checkpoint_takes_the_sentencepiece_model_beside_it(tmp_path):
  """google-research/albert's English zips hold 30k-clean.model + 30k-clean.vocab, no vocab.txt: import-tf
  stopped at 'vocab not found'; it now writes the model's pieces as vocab.txt with a tokenizer.json that
  segments as the model does, and says which file it used."""
  from bert_jax.convert import google_tf
  from bert_jax.input_pipeline import tokenization
  from test_convert_tf import _albert_google_variables
  ref_dir = tmp_path / "ref"
  n = _albert_sentencepiece(str(ref_dir))
  folder = tmp_path / "albert_base"
  folder.mkdir()
  _write_spm_model(str(folder / "30k-clean.model"), str(ref_dir / "tokenizer.json"))
  (folder / "30k-clean.vocab").write_text("".join(f"{p}\t{s}\n" for p, s in
                                                  json.load(open(ref_dir / "tokenizer.json"))["model"]["vocab"]))
  torch.manual_seed(0)
  cfg = transformers.AlbertConfig(vocab_size=n, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                  hidden_act="gelu_new")
  json.dump({k: cfg.to_dict()[k] for k in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                                             "num_hidden_groups", "num_attention_heads", "intermediate_size",
                                             "max_position_embeddings", "type_vocab_size", "inner_group_num")}
            | {"hidden_act": "gelu"}, open(folder / "albert_config.json", "w"))
  variables = _albert_google_variables(transformers.AlbertForPreTraining(cfg))
  config, _, report = google_tf.import_tf_checkpoint(str(folder / "model.ckpt-best"), str(tmp_path / "out"),
                                                     variables=variables)
  assert "30k-clean.model" in report.summary() and config.vocab_size == n
  tok = tokenization.load_tokenizer(str(tmp_path / "out" / "vocab.txt"))
  assert isinstance(tok, tokenization.SentencePieceTokenizer)
  from tokenizers import Tokenizer
  want = Tokenizer.from_file(str(ref_dir / "tokenizer.json"))
  for text in ("The quick brown fox plays the guitar.", "Researchers reported the CAFÉ's results in 1990."):
    assert tok.encode(text) == want.encode(text, add_special_tokens=False).ids
  # --vocab naming the .vocab (piece<TAB>score lines) reads the .model beside it; a torn .model is one error
  _, _, report = google_tf.import_tf_checkpoint(str(folder / "model.ckpt-best"), vocab_file=str(
      folder / "30k-clean.vocab"), variables=variables)
  assert "30k-clean.model" in report.summary()
  (folder / "30k-clean.model").write_bytes(b"\x0a\xff")
  with pytest.raises(ConversionError, match="30k-clean.model: not a readable SentencePiece model"):
    google_tf.import_tf_checkpoint(str(folder / "model.ckpt-best"), variables=variables)


def test_a_bert_imported_over_an_english_albert_directory_does_not_keep_its_sentencepiece(tmp_path):
  """Importing into an --output that held an English ALBERT (vocab.txt + SentencePiece tokenizer.json) left the
  tokenizer.json beside the new WordPiece vocab.txt, and load_tokenizer read text with it."""
  from bert_jax.input_pipeline import tokenization
  src = tmp_path / "spm"
  _albert_sentencepiece(str(src))
  tj = json.loads((src / "tokenizer.json").read_text())
  (src / "vocab.txt").write_text("".join(p[0] + "\n" for p in tj["model"]["vocab"])
                                 .replace("<pad>\n", "[PAD]\n", 1).replace("<unk>\n", "[UNK]\n", 1))
  out = tmp_path / "out"
  out.mkdir()
  params_dir.copy_vocab(str(src / "vocab.txt"), str(out))
  assert isinstance(tokenization.load_tokenizer(str(out / "vocab.txt")), tokenization.SentencePieceTokenizer)
  wp = tmp_path / "wp"
  wp.mkdir()
  (wp / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n")
  params_dir.copy_vocab(str(wp / "vocab.txt"), str(out))
  assert not (out / "tokenizer.json").exists()
  tok = tokenization.load_tokenizer(str(out / "vocab.txt"))
  assert not isinstance(tok, tokenization.SentencePieceTokenizer) and tok.tokenize("the cat") == ["the", "cat"]


def test_an_export_over_an_english_albert_export_drops_its_tokenizer_json(tmp_path):
  """write_folder into a folder that held an English-ALBERT export left its SentencePiece tokenizer.json,
  which transformers' AutoTokenizer prefers over the new vocab.txt; no temp files stay behind."""
  from bert_jax.convert import hf
  src = tmp_path / "spm"
  _albert_sentencepiece(str(src))
  tj = json.loads((src / "tokenizer.json").read_text())
  (src / "vocab.txt").write_text("".join(p[0] + "\n" for p in tj["model"]["vocab"])
                                 .replace("<pad>\n", "[PAD]\n", 1).replace("<unk>\n", "[UNK]\n", 1))
  out = tmp_path / "hf_out"
  arrays = {"w": np.zeros((2, 2), np.float32)}
  hf.write_folder(str(out), arrays, {"model_type": "albert"}, str(src / "vocab.txt"), True, 64)
  assert (out / "tokenizer.json").exists()
  wp = tmp_path / "wp"
  wp.mkdir()
  (wp / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
  hf.write_folder(str(out), arrays, {"model_type": "bert"}, str(wp / "vocab.txt"), True, 64)
  assert not (out / "tokenizer.json").exists()
  assert sorted(os.listdir(out)) == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
  assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "BertTokenizer"


def test_hf_albert_folder_with_only_spiece_model_imports_with_its_tokenizer(tmp_path):
  """AlbertTokenizer (slow) folders hold spiece.model and no tokenizer.json: 'an spiece.model alone is not read'
  stopped the import; it is now read as the TF checkpoints' 30k-clean.model is."""
  from bert_jax.input_pipeline import tokenization
  from tokenizers import Tokenizer
  ref_dir = tmp_path / "ref"
  n = _albert_sentencepiece(str(ref_dir))
  hf_dir = tmp_path / "albert-slow"
  torch.manual_seed(0)
  config = transformers.AlbertConfig(vocab_size=n, embedding_size=16, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
  transformers.AlbertForMaskedLM(config).save_pretrained(str(hf_dir))
  _write_spm_model(str(hf_dir / "spiece.model"), str(ref_dir / "tokenizer.json"))
  assert convert_main(["import-hf", f"--input={hf_dir}", f"--output={tmp_path / 'ours'}"]) == 0
  tok = tokenization.load_tokenizer(str(tmp_path / "ours" / "vocab.txt"))
  assert isinstance(tok, tokenization.SentencePieceTokenizer)
  want = Tokenizer.from_file(str(ref_dir / "tokenizer.json"))
  text = "The quick brown fox plays the guitar."
  assert tok.encode(text) == want.encode(text, add_special_tokens=False).ids
