"""Fine-tuned ModernBERT heads through `convert import-hf` / `export-hf` against transformers (PyTorch, fp32,
random weights): an imported ModernBertForSequenceClassification answers `predict classify` with transformers'
probabilities (or scores), a ModernBertForTokenClassification with its argmax tags, within 1e-4; export-hf of
a fine-tuned checkpoint writes the class back with equal logits; what cannot be kept or written is said."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")   # torch: the reference implementation only
transformers = pytest.importorskip("transformers")

import task_fixtures as testing  # noqa: E402
from bert_jax.convert import hf_modernbert  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.finetune import loop as finetune_loop  # noqa: E402
from bert_jax.models import BertForSequenceClassification, BertForTokenClassification  # noqa: E402
from bert_jax.models.heads import BertForMultipleChoice, BertForQuestionAnswering  # noqa: E402
from bert_jax.predict.__main__ import main as predict_main  # noqa: E402
from bert_jax.pretrained import params_dir  # noqa: E402
from bert_jax.pretrained.load import load_pretrained  # noqa: E402

from test_convert_modernbert import (VOCAB, _batch, _hf_config, _max_diff, _randomise,  # noqa: E402
                                     _save, _torch)
from test_finetune_tasks import make_config  # noqa: E402

TOL = 1e-4
# word lists of the texts (every word is one vocab entry, so the ids are [CLS] + words + [SEP]); 38 tokens span
# several windows of 16
TEXTS = [[f"w{(7 * i + 3 * j) % 59}" for j in range(n)] for i, n in enumerate((36, 5, 19, 1))]
SEQ_LABELS = {"single": ["neg", "neu", "pos"], "multi": ["sport", "news", "tech", "art"], "regression": ["LABEL_0"]}
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _ids(words):
  return [2] + [VOCAB.index(w) for w in words] + [3]


def _hf_logits(model, words):
  with torch.no_grad():
    return model(input_ids=torch.tensor([_ids(words)])).logits[0].numpy()


def _texts_file(tmp_path):
  path = tmp_path / "texts.txt"
  path.write_text("".join(" ".join(w) + "\n" for w in TEXTS), encoding="utf-8")
  return str(path)


def _classify(model_dir, tmp_path):
  out = tmp_path / "preds.jsonl"
  assert predict_main(["classify", "--model", model_dir, "--input", _texts_file(tmp_path), "--output",
                       str(out)]) == 0
  return [json.loads(l) for l in out.read_text(encoding="utf-8").splitlines()]


def _sequence_model(problem, pooling="cls", seed=5):
  labels = SEQ_LABELS[problem]
  kw = dict(num_labels=len(labels), id2label=dict(enumerate(labels)), classifier_pooling=pooling,
            num_hidden_layers=3, local_attention=16, max_position_embeddings=128)
  if problem != "single":
    kw["problem_type"] = {"multi": "multi_label_classification", "regression": "regression"}[problem]
  return _randomise(transformers.ModernBertForSequenceClassification(_hf_config(**kw)), seed=seed)


def _token_model(labels=NER_LABELS, seed=7):
  cfg = _hf_config(num_labels=len(labels), id2label=dict(enumerate(labels)), num_hidden_layers=2,
                   local_attention=16, global_attn_every_n_layers=2, max_position_embeddings=128)
  return _randomise(transformers.ModernBertForTokenClassification(cfg), seed=seed)


@pytest.mark.parametrize("problem,pooling", [("single", "mean"), ("multi", "cls"), ("regression", "cls")])
def test_imported_sequence_classifier_predicts_transformers_probabilities(tmp_path, problem, pooling):
  hf_model = _sequence_model(problem, pooling)
  folder = _save(hf_model, tmp_path / "hf")
  out = str(tmp_path / "ours")
  assert convert_main(["import-hf", "--input", folder, "--output", out, "--do_lower_case", "true"]) == 0
  info = json.load(open(os.path.join(out, "finetune_info.json")))
  assert (info["task"], info["kind"]) == {"single": ("classification", "classification"),
                                          "multi": ("multilabel", "multilabel"),
                                          "regression": ("classification", "regression")}[problem]
  rows = _classify(out, tmp_path)
  assert len(rows) == len(TEXTS)
  for words, row in zip(TEXTS, rows):
    logits = _hf_logits(hf_model, words)
    if problem == "regression":
      assert abs(row["score"] - float(logits[0])) < TOL
      continue
    want = (1 / (1 + np.exp(-logits)) if problem == "multi" else np.exp(logits) / np.sum(np.exp(logits)))
    got = np.array([row["probabilities"][l] for l in SEQ_LABELS[problem]])
    assert float(np.max(np.abs(got - want))) < TOL, (words, got, want)
    if problem == "single":
      assert row["label"] == SEQ_LABELS[problem][int(np.argmax(logits))]


def test_imported_token_classifier_tags_are_transformers_argmax(tmp_path):
  hf_model = _token_model()
  folder = _save(hf_model, tmp_path / "hf")
  out = str(tmp_path / "ours")
  assert convert_main(["import-hf", "--input", folder, "--output", out, "--do_lower_case", "true"]) == 0
  info = json.load(open(os.path.join(out, "finetune_info.json")))
  assert (info["task"], info["label_list"], info["ner_scheme"]) == ("ner", NER_LABELS, "BIO")
  rows = _classify(out, tmp_path)
  for words, row in zip(TEXTS, rows):
    logits = _hf_logits(hf_model, words)[1:-1]            # the words' tokens, without [CLS] / [SEP]
    assert row["tags"] == [NER_LABELS[i] for i in np.argmax(logits, axis=-1)]
    # no tie the 1e-4 parity could break: the best logit leads the second by more
    top2 = np.sort(logits, axis=-1)[:, -2:]
    assert np.all(top2[:, 1] - top2[:, 0] > TOL)


def test_token_classifier_whose_labels_are_no_tags_is_reported_not_imported(tmp_path):
  folder = _save(_token_model(labels=["LABEL_0", "LABEL_1", "LABEL_2"], seed=8), tmp_path / "hf")
  config, params, report = hf_modernbert.import_hf_modernbert(folder, str(tmp_path / "ours"))
  assert "classifier" not in params and report.fresh_groups == ["mlm"]
  assert any("not imported" in n and "BIO/BIOES" in n for n in report.notes)
  assert not os.path.exists(tmp_path / "ours" / "finetune_info.json")


def test_ignore_drops_a_head_that_would_be_kept(tmp_path):
  folder = _save(_sequence_model("single", seed=6), tmp_path / "hf")
  _, params, report = hf_modernbert.import_hf_modernbert(folder, str(tmp_path / "ours"), ignore=[r"^classifier\."])
  assert sorted(params) == ["bert", "mlm"]
  assert any("not imported (--ignore drops it)" in n for n in report.notes)
  assert not os.path.exists(tmp_path / "ours" / "finetune_info.json")


@pytest.mark.slow   # import, two forward passes of ours and three of transformers' (~10 s on a loaded machine)
@pytest.mark.parametrize("arch", ["ModernBertForQuestionAnswering", "ModernBertForMultipleChoice"])
def test_question_answering_and_multiple_choice_heads_match_transformers_and_export_back(tmp_path, arch):
  cfg = _hf_config(num_hidden_layers=2, local_attention=16, global_attn_every_n_layers=2, max_position_embeddings=128,
                   classifier_pooling="mean")
  hf_model = _randomise(getattr(transformers, arch)(cfg), seed=9)
  folder = _save(hf_model, tmp_path / "hf")
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  assert convert_main(["import-hf", "--input", folder, "--output", ours]) == 0
  ckpt = load_pretrained(ours)
  qa = arch == "ModernBertForQuestionAnswering"
  assert (ckpt.finetune_info["task"], ckpt.finetune_info["head"]) == (
      ("squad_v1", "question_answering") if qa else ("multiple_choice", "multiple_choice"))
  ids, mask = _batch(length=40, real=(40, 23), seed=15)
  if qa:
    out = BertForQuestionAnswering(ckpt.config).apply({"params": ckpt.params}, jnp.asarray(ids), jnp.asarray(mask))
    with torch.no_grad():
      want = hf_model(input_ids=_torch(ids), attention_mask=_torch(mask))
    for key in ("start_logits", "end_logits"):
      assert _max_diff(out[key], getattr(want, key).numpy(), mask) < TOL
  else:                                          # 2 questions x 2 choices of 40 / 23 tokens
    ids, mask = np.stack([ids, ids[::-1]]), np.stack([mask, mask[::-1]])
    out = BertForMultipleChoice(ckpt.config).apply({"params": ckpt.params}, jnp.asarray(ids), jnp.asarray(mask),
                                                   choice_mask=jnp.ones(ids.shape[:2]))
    with torch.no_grad():
      want = hf_model(input_ids=_torch(ids), attention_mask=_torch(mask)).logits.numpy()
    assert float(np.max(np.abs(np.asarray(out["logits"]) - want))) < TOL
  assert convert_main(["export-hf", "--input", ours, "--output", back]) == 0
  assert json.load(open(os.path.join(back, "config.json")))["architectures"] == [arch]
  source, reloaded = (getattr(transformers, arch).from_pretrained(f, attn_implementation="eager").eval()
                      for f in (folder, back))
  with torch.no_grad():
    a, b = (m(input_ids=_torch(ids), attention_mask=_torch(mask)) for m in (source, reloaded))
  for key in (("start_logits", "end_logits") if qa else ("logits",)):
    assert np.array_equal(getattr(a, key).numpy(), getattr(b, key).numpy())


@pytest.mark.slow   # import, export and two transformers loads; the fast tier is at its 3-minute cap
def test_export_of_an_imported_classifier_is_the_class_transformers_loads_with_equal_logits(tmp_path):
  hf_model = _sequence_model("single", "mean", seed=11)
  folder = _save(hf_model, tmp_path / "hf")
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  assert convert_main(["import-hf", "--input", folder, "--output", ours]) == 0
  assert convert_main(["export-hf", "--input", ours, "--output", back]) == 0
  cfg = json.load(open(os.path.join(back, "config.json")))
  assert cfg["architectures"] == ["ModernBertForSequenceClassification"]
  assert (cfg["id2label"], cfg["problem_type"], cfg["classifier_pooling"]) == (
      {"0": "neg", "1": "neu", "2": "pos"}, "single_label_classification", "mean")
  # bit-exact against the source folder loaded the same way (the in-memory model differs from any reload by
  # ~2e-7: transformers recomputes its rotary tables at load)
  load = transformers.AutoModelForSequenceClassification.from_pretrained
  source, reloaded = (load(f, attn_implementation="eager").eval() for f in (folder, back))
  for words in TEXTS:
    assert np.array_equal(_hf_logits(source, words), _hf_logits(reloaded, words))
  # and --heads=mlm refuses the MLM head the import initialised (the kept head does not make it trained)
  with pytest.raises(UserError, match="randomly initialised"):
    convert_main(["export-hf", "--input", ours, "--output", str(tmp_path / "mlm"), "--heads", "mlm"])


@pytest.mark.parametrize("field,value,match", [("pooling", "max", "pooling='max'"), ("crf", True, "crf=true")])
def test_export_refuses_a_head_the_transformers_class_cannot_compute(tmp_path, field, value, match):
  hf_model = _sequence_model("single", seed=12) if field == "pooling" else _token_model(seed=12)
  folder = _save(hf_model, tmp_path / "hf")
  ours = str(tmp_path / "ours")
  hf_modernbert.import_hf_modernbert(folder, ours)
  path = os.path.join(ours, "finetune_info.json")
  info = json.load(open(path))
  json.dump(dict(info, **{field: value}), open(path, "w"))
  with pytest.raises(UserError, match=match):
    convert_main(["export-hf", "--input", ours, "--output", str(tmp_path / "back")])


@pytest.mark.slow   # two fine-tuning runs of 2 steps on a tiny model, each exported and loaded (~40 s)
@pytest.mark.parametrize("task", ["sst2", "ner"])
def test_finetune_continues_from_an_imported_head_and_its_work_dir_exports_to_transformers(tmp_path, task):
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  labels = ["0", "1"] if task == "sst2" else NER_LABELS
  kw = dict(vocab_size=params_dir.count_vocab_lines(vocab), hidden_size=32, intermediate_size=48,
            num_hidden_layers=3, num_attention_heads=2, max_position_embeddings=64, local_attention=8,
            num_labels=len(labels), id2label=dict(enumerate(labels)), pad_token_id=0)
  cls = (transformers.ModernBertForSequenceClassification if task == "sst2" else
         transformers.ModernBertForTokenClassification)
  hf_model = _randomise(cls(transformers.ModernBertConfig(**kw)), seed=13)
  hf_model.save_pretrained(tmp_path / "hf")
  (tmp_path / "hf" / "vocab.txt").write_text(open(vocab, encoding="utf-8").read(), encoding="utf-8")
  converted, workdir, back = (str(tmp_path / n) for n in ("converted", "ft", "back"))
  assert convert_main(["import-hf", "--input", str(tmp_path / "hf"), "--output", converted,
                       "--do_lower_case", "true"]) == 0
  data = testing.write_glue(str(tmp_path / "glue"), ["sst2"]) if task == "sst2" else testing.write_conll(
      str(tmp_path / "conll"))
  finetune_loop.run(make_config(task, data, "", init_checkpoint=converted, load_head=True, max_train_steps=2),
                    workdir)
  init_report = json.load(open(os.path.join(workdir, "init_report.json")))
  assert "classifier/kernel" in init_report["loaded"] and "classifier/kernel" not in init_report["initialised"]
  tuned = load_pretrained(workdir)
  imported = load_pretrained(converted)
  assert not np.array_equal(tuned.params["classifier"]["kernel"], imported.params["classifier"]["kernel"])
  assert tuned.finetune_info["label_list"] == labels

  assert convert_main(["export-hf", "--input", workdir, "--output", back]) == 0
  assert json.load(open(os.path.join(back, "config.json")))["architectures"] == [cls.__name__]
  reloaded = cls.from_pretrained(back, attn_implementation="eager").eval()
  ids, mask = _batch(length=40, real=(40, 23), seed=14)
  ids = np.minimum(ids, kw["vocab_size"] - 1)
  head = (BertForSequenceClassification(tuned.config, num_labels=2) if task == "sst2" else
          BertForTokenClassification(tuned.config, num_labels=len(labels)))
  ours = np.asarray(head.apply({"params": tuned.params}, jnp.asarray(ids), jnp.asarray(mask))["logits"])
  with torch.no_grad():
    want = reloaded(input_ids=_torch(ids), attention_mask=_torch(mask)).logits.numpy()
  diff = np.abs(ours - want)
  assert float(np.max(diff if task == "sst2" else diff[mask.astype(bool)])) < TOL
