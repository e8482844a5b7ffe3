"""Fine-tuned BERT (and ALBERT, ELECTRA) heads through `convert export-hf` / `import-hf` against transformers
(PyTorch, fp32, random weights): a fine-tuned checkpoint of each head kind exports to its BertFor* class with our
logits within 1e-4; an imported BertForSequenceClassification / ...ForTokenClassification answers `predict
classify` as transformers does and exports back bit for bit; what the classes cannot compute (a CRF, another
pooling) is one `error:` line."""

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")   # torch: the reference implementation only
transformers = pytest.importorskip("transformers")

import task_fixtures as testing  # noqa: E402
from bert_jax import cli  # noqa: E402
from bert_jax.convert import hf as hf_convert  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.models import BertConfig  # noqa: E402
from bert_jax.models import heads  # noqa: E402
from bert_jax.predict.__main__ import main as predict_main  # noqa: E402
from bert_jax.pretrained import params_dir  # noqa: E402
from bert_jax.pretrained.load import load_pretrained  # noqa: E402

TOL = 1e-4
SEQ_LABELS = ["neg", "neu", "pos"]
MULTI_LABELS = ["sport", "news", "tech", "art"]
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
WORDS = [t for t in testing.VOCAB_TOKENS if t.isalpha() and t.isascii() and t.islower()]
TEXTS = [[WORDS[(7 * i + 3 * j) % len(WORDS)] for j in range(n)] for i, n in enumerate((20, 5, 11, 1))]
# kind -> (our head module, finetune_info.json fields, transformers class)
KINDS = {
    "classification": ("sequence", {"task": "sst2", "kind": "classification", "head": "sequence_classification",
                                    "label_list": SEQ_LABELS}, "BertForSequenceClassification"),
    "regression": ("sequence", {"task": "stsb", "kind": "regression", "head": "sequence_classification",
                                "label_list": None}, "BertForSequenceClassification"),
    "multilabel": ("sequence", {"task": "multilabel", "kind": "multilabel", "head": "sequence_classification",
                                "label_list": MULTI_LABELS}, "BertForSequenceClassification"),
    "ner": ("token", {"task": "ner", "kind": "ner", "head": "token_classification", "label_list": NER_LABELS,
                      "crf": False}, "BertForTokenClassification"),
    "squad": ("qa", {"task": "squad_v1", "kind": "squad", "head": "question_answering", "label_list": None},
              "BertForQuestionAnswering"),
    "c3": ("choice", {"task": "c3", "kind": "classification", "head": "multiple_choice", "label_list": None},
           "BertForMultipleChoice"),
}


def _config(vocab_size, **kw):
  return BertConfig(**dict(dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=64), **kw))


def _module(shape, config, num_labels):
  return {"sequence": lambda: heads.BertForSequenceClassification(config, num_labels=num_labels),
          "token": lambda: heads.BertForTokenClassification(config, num_labels=num_labels),
          "qa": lambda: heads.BertForQuestionAnswering(config),
          "choice": lambda: heads.BertForMultipleChoice(config)}[shape]()


def _inputs(vocab_size, choices=0, seed=0):
  """[CLS]-first rows of different lengths (padded), two segments in the first row; [B, C, T] with choices."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab_size, size=(3, 14)).astype(np.int32)
  ids[:, 0] = 2
  mask = np.ones_like(ids)
  mask[1, 9:] = 0
  mask[2, 4:] = 0
  ids[mask == 0] = 0
  segments = np.zeros_like(ids)
  segments[0, 7:] = 1
  if choices:
    ids, mask, segments = (np.stack([np.roll(x, i, axis=0) for i in range(choices)], axis=1)
                           for x in (ids, mask, segments))
  return ids, mask, segments


def _ours(model, params, ids, mask, segments):
  extra = {"choice_mask": jnp.ones(ids.shape[:2])} if ids.ndim == 3 else {}
  out = model.apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(segments), **extra)
  return {k: np.asarray(v) for k, v in out.items() if k in ("logits", "start_logits", "end_logits")}


def _theirs(model, ids, mask, segments):
  as_long = lambda x: torch.tensor(np.asarray(x), dtype=torch.long)  # noqa: E731
  with torch.no_grad():
    out = model(input_ids=as_long(ids), attention_mask=as_long(mask), token_type_ids=as_long(segments))
  return {k: getattr(out, k).numpy() for k in ("logits", "start_logits", "end_logits") if hasattr(out, k)
          and getattr(out, k) is not None}


def _max_diff(ours, theirs, mask):
  """Over the real tokens for per-token outputs ([B, T, ...]), else everything."""
  worst = 0.0
  for k, v in ours.items():
    d = np.abs(v - theirs[k])
    worst = max(worst, float(np.max(d[mask.astype(bool)] if d.shape[:2] == mask.shape else d)))
  return worst


def _fine_tuned(tmp_path, kind, vocab, seed=0, **info):
  """A params dir as a fine-tuning run leaves one (params: bert + the task head, finetune_info.json), the
  weights random and perturbed (fresh init's zero biases and unit scales would hide a swap)."""
  shape, fields, arch = KINDS[kind]
  config = _config(params_dir.count_vocab_lines(vocab))
  labels = fields["label_list"]
  k = len(labels) if labels else {"sequence": 1, "qa": 2, "choice": 1}.get(shape, 0)
  model = _module(shape, config, k)
  ids, mask, segments = _inputs(config.vocab_size, choices=2 if shape == "choice" else 0)
  extra = {"choice_mask": jnp.ones(ids.shape[:2])} if shape == "choice" else {}
  params = nn.unbox(model.init(jax.random.key(seed), jnp.asarray(ids), jnp.asarray(mask),
                               jnp.asarray(segments), **extra)["params"])
  leaves, tree = jax.tree.flatten(params)
  rng = np.random.default_rng(seed + 1)
  params = jax.tree.unflatten(tree, [np.asarray(x) + rng.normal(0, 0.1, x.shape).astype(np.float32)
                                     for x in leaves])
  out = str(tmp_path / f"ft_{kind}")
  params_dir.save_params_dir(out, config, params, vocab, info={"do_lower_case": True})
  ft = dict(dict(fields, num_labels=k, pooling="cls", max_seq_length=32, do_lower_case=True), **info)
  with open(os.path.join(out, params_dir.FINETUNE_INFO_NAME), "w", encoding="utf-8") as f:
    json.dump(ft, f)
  return out, model, params, (ids, mask, segments), arch


def _load(arch, folder):
  model, loading = getattr(transformers, arch).from_pretrained(folder, output_loading_info=True)
  assert not any(loading[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), loading
  return model.eval()


# classification and ner in the fast tier; the other kinds (a compile each, ~1-2 s) in the slow one
@pytest.mark.parametrize("kind", [k if k in ("classification", "ner") else pytest.param(k, marks=pytest.mark.slow)
                                  for k in KINDS])
def test_export_of_a_fine_tuned_head_is_the_bert_class_with_our_logits(tmp_path, kind):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  ours, model, params, batch, arch = _fine_tuned(tmp_path, kind, vocab)
  back = str(tmp_path / "hf")
  assert convert_main(["export-hf", "--input", ours, "--output", back]) == 0
  cfg = json.load(open(os.path.join(back, "config.json")))
  assert cfg["architectures"] == [arch]
  labels = KINDS[kind][1]["label_list"]
  if labels:
    assert cfg["id2label"] == {str(i): l for i, l in enumerate(labels)}
  assert cfg.get("problem_type") == {"classification": "single_label_classification", "regression": "regression",
                                     "multilabel": "multi_label_classification"}.get(kind)
  hf_model = _load(arch, back)
  diff = _max_diff(_ours(model, params, *batch), _theirs(hf_model, *batch), batch[1])
  print(f"export-hf {kind} -> {arch}: max abs diff {diff:.2e}")
  assert diff < TOL


def _hf_folder(tmp_path, arch, vocab, seed=3, **kw):
  """A transformers model of class `arch` (tiny, its weights perturbed) saved with our vocab."""
  config_class = getattr(transformers, arch.split("For")[0] + "Config")
  cfg = config_class(**dict(dict(vocab_size=params_dir.count_vocab_lines(vocab), hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64, max_position_embeddings=64), **kw))
  torch.manual_seed(seed)
  model = getattr(transformers, arch)(cfg)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.1 * torch.randn_like(p))
  folder = tmp_path / "hf"
  model.save_pretrained(str(folder))
  (folder / "vocab.txt").write_text(open(vocab, encoding="utf-8").read(), encoding="utf-8")
  return str(folder), model.eval()


def _classify(model_dir, tmp_path):
  texts, out = tmp_path / "texts.txt", tmp_path / "preds.jsonl"
  texts.write_text("".join(" ".join(w) + "\n" for w in TEXTS), encoding="utf-8")
  assert predict_main(["classify", "--model", model_dir, "--input", str(texts), "--output", str(out)]) == 0
  return [json.loads(l) for l in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("problem", ["single_label_classification", "ner",   # ~2.5 s each; multi-label: slow tier
                                     pytest.param("multi_label_classification", marks=pytest.mark.slow)])
def test_imported_head_predicts_transformers_outputs_and_exports_back_bit_for_bit(tmp_path, problem):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  ner = problem == "ner"
  labels = NER_LABELS if ner else SEQ_LABELS
  arch = "BertForTokenClassification" if ner else "BertForSequenceClassification"
  kw = dict(num_labels=len(labels), id2label=dict(enumerate(labels)))
  folder, hf_model = _hf_folder(tmp_path, arch, vocab, **(kw if ner else dict(kw, problem_type=problem)))
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  assert convert_main(["import-hf", "--input", folder, "--output", ours, "--do_lower_case", "true"]) == 0
  info = json.load(open(os.path.join(ours, params_dir.FINETUNE_INFO_NAME)))
  assert (info["task"], info["label_list"], info["architecture"]) == (
      {"ner": "ner", "single_label_classification": "classification",
       "multi_label_classification": "multilabel"}[problem], labels, arch)
  vocab_ids = {t: i for i, t in enumerate(open(vocab, encoding="utf-8").read().split("\n"))}
  for words, row in zip(TEXTS, _classify(ours, tmp_path)):
    ids = torch.tensor([[2] + [vocab_ids[w] for w in words] + [3]])
    with torch.no_grad():
      logits = hf_model(input_ids=ids).logits[0].numpy()
    if ner:
      assert row["tags"] == [labels[i] for i in np.argmax(logits[1:-1], axis=-1)]
      continue
    want = (1 / (1 + np.exp(-logits)) if problem == "multi_label_classification"
            else np.exp(logits) / np.sum(np.exp(logits)))
    got = np.array([row["probabilities"][l] for l in labels])
    assert float(np.max(np.abs(got - want))) < TOL, (words, got, want)

  assert convert_main(["export-hf", "--input", ours, "--output", back]) == 0
  cfg = json.load(open(os.path.join(back, "config.json")))
  assert cfg["architectures"] == [arch] and cfg["id2label"] == {str(i): l for i, l in enumerate(labels)}
  assert cfg.get("problem_type") == (None if ner else problem)
  batch = _inputs(params_dir.count_vocab_lines(vocab))
  source, reloaded = (_theirs(_load(arch, f), *batch) for f in (folder, back))
  assert np.array_equal(source["logits"], reloaded["logits"])


@pytest.mark.slow   # import, export and two transformers loads of each (2-4 s each on a loaded machine)
@pytest.mark.parametrize("arch", ["BertForQuestionAnswering", "BertForMultipleChoice"])
def test_question_answering_and_multiple_choice_heads_import_and_export_back(tmp_path, arch):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  folder, hf_model = _hf_folder(tmp_path, arch, vocab, seed=4)
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  assert convert_main(["import-hf", "--input", folder, "--output", ours]) == 0
  ckpt = load_pretrained(ours)
  qa = arch == "BertForQuestionAnswering"
  assert (ckpt.finetune_info["task"], ckpt.finetune_info["head"]) == (
      ("squad_v1", "question_answering") if qa else ("multiple_choice", "multiple_choice"))
  batch = _inputs(ckpt.config.vocab_size, choices=0 if qa else 3)
  model = heads.BertForQuestionAnswering(ckpt.config) if qa else heads.BertForMultipleChoice(ckpt.config)
  assert _max_diff(_ours(model, ckpt.params, *batch), _theirs(hf_model, *batch), batch[1]) < TOL
  assert convert_main(["export-hf", "--input", ours, "--output", back]) == 0
  source, reloaded = (_theirs(_load(arch, f), *batch) for f in (folder, back))
  for key, value in source.items():
    assert np.array_equal(value, reloaded[key])


def test_import_hf_ignore_still_drops_a_head_that_would_be_kept(tmp_path):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  folder, _ = _hf_folder(tmp_path, "BertForSequenceClassification", vocab, num_labels=3)
  _, params, report = hf_convert.import_hf(folder, str(tmp_path / "ours"), ignore=[r"^classifier\."])
  assert "classifier" not in params and any("not imported (--ignore drops it)" in n for n in report.notes)
  assert not os.path.exists(tmp_path / "ours" / params_dir.FINETUNE_INFO_NAME)


@pytest.mark.parametrize("field,value,match", [
    ("crf", True, "crf=true; BertForTokenClassification has no CRF"),
    ("pooling", "mean", "pooling='mean'; BertForSequenceClassification reads the sentence through its pooler")])
def test_export_refuses_a_head_the_bert_class_cannot_compute_in_one_error_line(tmp_path, capsys, field, value,
                                                                               match):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  ours, *_ = _fine_tuned(tmp_path, "ner" if field == "crf" else "classification", vocab, **{field: value})
  with pytest.raises(SystemExit) as exit_info:
    cli.run_plain_main(convert_main, ["export-hf", "--input", ours, "--output", str(tmp_path / "hf")])
  assert exit_info.value.code == UserError.exit_code
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and match in err[0], err
  assert not os.path.exists(tmp_path / "hf" / "model.safetensors")


def test_export_heads_none_of_a_fine_tuned_checkpoint_still_writes_the_encoder(tmp_path):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  ours, *_ = _fine_tuned(tmp_path, "ner", vocab, crf=True)
  assert convert_main(["export-hf", "--input", ours, "--output", str(tmp_path / "hf"), "--heads", "none"]) == 0
  assert json.load(open(tmp_path / "hf" / "config.json"))["architectures"] == ["BertModel"]


@pytest.mark.slow   # AlbertForSequenceClassification import, export and two transformers loads (~2 s loaded)
def test_albert_sequence_classifier_imports_and_exports_back(tmp_path):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  folder, hf_model = _hf_folder(tmp_path, "AlbertForSequenceClassification", vocab, seed=5, embedding_size=16,
                                num_labels=3, id2label=dict(enumerate(SEQ_LABELS)))
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  assert convert_main(["import-hf", "--input", folder, "--output", ours]) == 0
  ckpt = load_pretrained(ours)
  assert ckpt.finetune_info["label_list"] == SEQ_LABELS
  batch = _inputs(ckpt.config.vocab_size)
  model = heads.BertForSequenceClassification(ckpt.config, num_labels=3)
  assert _max_diff(_ours(model, ckpt.params, *batch), _theirs(hf_model, *batch), batch[1]) < TOL
  assert convert_main(["export-hf", "--input", ours, "--output", back]) == 0
  source, reloaded = (_theirs(_load("AlbertForSequenceClassification", f), *batch) for f in (folder, back))
  assert np.array_equal(source["logits"], reloaded["logits"])


@pytest.mark.slow   # a fine-tuning run of 2 steps on a tiny model per task, exported and loaded (~15 s each)
@pytest.mark.parametrize("task", ["sst2", "ner"])
def test_finetune_continues_from_an_imported_head_and_its_work_dir_exports_with_its_logits(tmp_path, task):
  from bert_jax.finetune import loop as finetune_loop
  from test_finetune_tasks import make_config

  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  labels = ["0", "1"] if task == "sst2" else NER_LABELS
  arch = "BertForSequenceClassification" if task == "sst2" else "BertForTokenClassification"
  folder, _ = _hf_folder(tmp_path, arch, vocab, seed=6, num_labels=len(labels), id2label=dict(enumerate(labels)))
  converted, workdir, back = (str(tmp_path / n) for n in ("converted", "ft", "back"))
  assert convert_main(["import-hf", "--input", folder, "--output", converted, "--do_lower_case", "true"]) == 0
  data = (testing.write_glue(str(tmp_path / "glue"), ["sst2"]) if task == "sst2"
          else testing.write_conll(str(tmp_path / "conll")))
  finetune_loop.run(make_config(task, data, "", init_checkpoint=converted, load_head=True, max_train_steps=2),
                    workdir)
  init_report = json.load(open(os.path.join(workdir, "init_report.json")))
  assert "classifier/kernel" in init_report["loaded"] and "classifier/kernel" not in init_report["initialised"]
  tuned = load_pretrained(workdir)
  assert tuned.finetune_info["label_list"] == labels
  assert not np.array_equal(tuned.params["classifier"]["kernel"],
                            load_pretrained(converted).params["classifier"]["kernel"])

  assert convert_main(["export-hf", "--input", workdir, "--output", back]) == 0
  cfg = json.load(open(os.path.join(back, "config.json")))
  assert cfg["architectures"] == [arch] and cfg["id2label"] == {str(i): l for i, l in enumerate(labels)}
  model = (heads.BertForSequenceClassification(tuned.config, num_labels=len(labels)) if task == "sst2"
           else heads.BertForTokenClassification(tuned.config, num_labels=len(labels)))
  batch = _inputs(tuned.config.vocab_size)
  assert _max_diff(_ours(model, tuned.params, *batch), _theirs(_load(arch, back), *batch), batch[1]) < TOL


@pytest.mark.parametrize("arch", ["ElectraForTokenClassification",
                                  pytest.param("ElectraForQuestionAnswering", marks=pytest.mark.slow)])
def test_electra_token_and_question_answering_heads_import_and_export_back(tmp_path, arch):
  """Their heads read every token as ours do (ElectraForSequenceClassification's dense + GELU head is none of
  ours: test_convert_electra.py); embedding_size < hidden_size (ELECTRA-Small's projection) travels too."""
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  qa = arch == "ElectraForQuestionAnswering"
  labels = None if qa else NER_LABELS
  folder, hf_model = _hf_folder(tmp_path, arch, vocab, seed=7, embedding_size=16,
                                **({} if qa else dict(num_labels=5, id2label=dict(enumerate(labels)))))
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  assert convert_main(["import-hf", "--input", folder, "--output", ours]) == 0
  ckpt = load_pretrained(ours)
  assert (ckpt.finetune_info["task"], ckpt.finetune_info["label_list"]) == (("squad_v1", None) if qa
                                                                            else ("ner", labels))
  batch = _inputs(ckpt.config.vocab_size)
  model = (heads.BertForQuestionAnswering(ckpt.config) if qa
           else heads.BertForTokenClassification(ckpt.config, num_labels=len(labels)))
  assert _max_diff(_ours(model, ckpt.params, *batch), _theirs(hf_model, *batch), batch[1]) < TOL
  assert convert_main(["export-hf", "--input", ours, "--output", back]) == 0
  assert json.load(open(os.path.join(back, "config.json")))["architectures"] == [arch]
  source, reloaded = (_theirs(_load(arch, f), *batch) for f in (folder, back))
  for key, value in source.items():
    assert np.array_equal(value, reloaded[key])
