"""One export: resolve the head, write the format into a temp folder beside --output, run it on a handful of
texts against predict (parity), write signature.json and README.md, then swap the folder in. A parity
failure leaves --output as it was and is one `error:` line.

    result = export("onnx", "runs/ft_sst2", "export/sst2_onnx")   # {"output", "head", "max_abs_diff", ...}
"""

from __future__ import annotations

import os
import shutil
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax import fileio
from bert_jax.engine.train_step import compute_dtype
from bert_jax.errors import UserError
from bert_jax.export import docs, stablehlo
from bert_jax.export.heads import TOKEN_OUTPUTS, ServingHead, resolve_head
from bert_jax.input_pipeline import tokenization
from bert_jax.predict import load_model

FORMATS = ("savedmodel", "onnx", "stablehlo", "sentence-transformers")
FP32_TOLERANCE = 1e-4
# predict computes in bfloat16 on a GPU/TPU (compute_dtype("auto")) while every export computes in float32:
# bf16 keeps 8 significant bits (relative error 2^-8 = 0.4% per rounding), which a 12-layer encoder compounds to
# a few 1e-3 on probabilities; 2e-2 bounds it with room and still catches a wrong head or wrong tokenization.
BF16_TOLERANCE = 2e-2
ST_TOLERANCE = 1e-5   # a sentence-transformers folder: SentenceTransformer.encode equals predict features to 1e-5

# Parity texts: English with casing, accents and punctuation, Chinese, mixed, digits, an empty string.
PARITY_TEXTS = ["这本书很好，我很喜欢。", "The Café de Flore is in Paris, isn't it?", "不喜欢", "hello world",
                "北京是中国的首都。 It's 1998 now!", "", "Ünïcödé  spaces\tand\ttabs", "房间太小，服务一般"]
PARITY_PAIRS = ["我也觉得不错", "Where is the cafe?", "一般", "hi", "首都在哪里？", "nothing", "tabs", "还可以"]
SQUAD_QUESTIONS = ["Where is the cafe?", "北京是什么？", "What year is it?", "who?"]
SQUAD_CONTEXTS = ["The Café de Flore is in Paris.", "北京是中国的首都。", "It's 1998 now!", "Nobody knows who."]
# Multiple choice: 2 to 4 choices (padded choices in the batch), one without a context.
CHOICE_QUESTIONS = [
    {"context": "The Café de Flore is in Paris.", "question": "Where is the cafe?", "choices": ["Paris", "Rome"]},
    {"context": "北京是中国的首都。", "question": "首都是哪里？", "choices": ["北京", "上海", "广州", "南京"]},
    {"context": "", "question": "It's 1998 now! What year is it?", "choices": ["1998", "2026", "unknown"]},
    {"context": "房间太小，服务一般", "question": "评价如何？", "choices": ["好", "不好"]}]


def tolerance() -> float:
  return FP32_TOLERANCE if compute_dtype("auto") == "float32" else BF16_TOLERANCE


def long_text(head: ServingHead, windows: float = 2.5) -> str:
  """PARITY_TEXTS' words (English, accents, Chinese, digits) repeated to about `windows` x max_seq_length
  tokens: a NER sentence or SQuAD context that predict splits into several windows."""
  base = " ".join(t for t in PARITY_TEXTS if t.strip())
  per = max(1, len(head.tokenizer().encode(base)))
  return " ".join([base] * -(-int(windows * head.max_seq_length) // per))


def parity_inputs(head: ServingHead):
  """The texts (and pairs) the export is checked on; NER and SQuAD add one longer than a window."""
  if head.kind == "squad":
    return SQUAD_QUESTIONS + ["Where is Paris?"], SQUAD_CONTEXTS + [long_text(head)]
  if head.kind == "multiple_choice":
    return CHOICE_QUESTIONS, None
  if head.kind == "ner":   # NER refuses a text without words
    keep = [i for i, t in enumerate(PARITY_TEXTS) if t.strip()]
    return [PARITY_TEXTS[i] for i in keep] + [long_text(head)], None
  return PARITY_TEXTS, (PARITY_PAIRS if head.pairs else None)


def compare(name: str, got: Dict[str, np.ndarray], want: Dict[str, np.ndarray], mask=None) -> float:
  """Max |got - want| over the outputs predict returns; token-level outputs over the real tokens (mask). An
  integer output (a CRF's tag ids) must equal predict's exactly: one differing id is a UserError."""
  worst = 0.0
  for k, w in want.items():
    if k not in got:
      raise UserError(f"{name}: the exported model has no output {k!r}")
    if np.asarray(w).dtype == object:   # strings (a NER sentence's tags, a SQuAD answer): equal
      g, w = np.asarray(got[k], object), np.asarray(w, object)
      if g.shape != w.shape or not np.array_equal(g, w):
        bad = int(np.sum(g != w)) if g.shape == w.shape else "its shape"
        raise UserError(f"{name}: output {k!r} differs from predict's ({bad} of {w.size}: they must be equal)")
      continue
    g, w = np.asarray(got[k], np.float32), np.asarray(w, np.float32)
    if k in TOKEN_OUTPUTS and mask is not None:
      t = min(g.shape[1], w.shape[1])
      m = np.asarray(mask)[:, :t].astype(bool)
      g, w = g[:, :t][m], w[:, :t][m]
    if g.shape != w.shape:
      raise UserError(f"{name}: output {k!r} has shape {g.shape}, predict's {w.shape}")
    if np.issubdtype(np.asarray(want[k]).dtype, np.integer) and not np.array_equal(g, w):
      raise UserError(f"{name}: output {k!r} differs from predict's at {int(np.sum(g != w))} of {g.size} "
                      "positions (ids must be equal)")
    worst = max(worst, float(np.max(np.abs(g - w))) if g.size else 0.0)
  return worst


def tokenizer_info(head: ServingHead) -> dict:
  pre = head.pre
  tok = head.tokenizer()
  return {"type": "wordpiece (BERT)", "vocab": "vocab.txt", "do_lower_case": bool(tok.do_lower_case)
          if hasattr(tok, "do_lower_case") else None,
          "strip_accents": "with do_lower_case", "cjk_characters": "each a token",
          "special_tokens": {t: int(tok.vocab[t]) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
                             if t in tok.vocab},
          "template": _template(head),
          "max_seq_length": head.max_seq_length, "truncation": head.truncation,
          "source": os.path.basename(pre.require_vocab())}


def _template(head: ServingHead) -> str:
  if head.kind == "multiple_choice":
    return ("[CLS] context [SEP] question choice [SEP] per choice (segment_ids 1 from the question on; "
            "[CLS] question choice [SEP] without a context)")
  return "[CLS] text [SEP]" + (" text_pair [SEP] (segment_ids 1 from text_pair on)" if head.pairs else "")


def check_savedmodel(head: ServingHead) -> None:
  """UserError for a model the SavedModel's in-graph tokenizer cannot reproduce (checked before any work)."""
  vocab = head.pre.require_vocab()
  if tokenization.sentencepiece_json(vocab) or os.path.exists(os.path.join(os.path.dirname(vocab),
                                                                          tokenization.TOKENIZER_JSON)):
    raise UserError(f"{head.pre.directory} tokenizes with a tokenizer.json, which has no in-graph TF-Text form "
                    "here; export it as onnx or stablehlo (token ids in, with the tokenizer beside it)")
  if head.truncation != "head":
    raise UserError(f"the model was fine-tuned with truncation={head.truncation}; the SavedModel's in-graph "
                    "tokenizer truncates head-first only; export onnx or stablehlo (token ids in)")


def _swap_in(tmp: str, output: str) -> None:
  """The finished temp folder becomes `output`; an older `output` is removed only after the rename."""
  old = None
  if os.path.exists(output):
    old = output.rstrip("/") + f".old-{os.getpid()}"
    os.rename(output, old)
  os.rename(tmp, output)
  if old:
    shutil.rmtree(old, ignore_errors=True)


def check_output(output: str) -> str:
  output = os.path.abspath(output)
  if os.path.isfile(output):
    raise UserError(f"--output={output} is a file; expected a folder to write the export into")
  if os.path.isdir(output) and os.listdir(output) and not os.path.exists(os.path.join(output, "signature.json")):
    raise UserError(f"--output={output} is a non-empty folder that holds no earlier export (no signature.json); "
                    "give a new or empty folder")
  parent = os.path.dirname(output)
  try:
    os.makedirs(parent, exist_ok=True)
  except OSError as e:
    raise UserError(f"--output={output}: cannot create {parent} ({e.strerror})") from None
  return output


def export(fmt: str, model: str, output: str, task_head: str = "auto", max_seq_length: Optional[int] = None,
           batch: str = "polymorphic", pooling: Optional[str] = None, normalize: Optional[bool] = None) -> dict:
  """Writes `fmt` of `model` into `output`; see the module docstring. Returns what the closing line says."""
  if fmt not in FORMATS:
    raise UserError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
  if batch != "polymorphic" and not (batch.isdigit() and int(batch) >= 1):
    raise UserError(f"--batch={batch!r}; expected polymorphic or a positive number")
  if batch != "polymorphic" and fmt not in ("onnx", "stablehlo"):
    raise UserError(f"--batch={batch} applies to onnx and stablehlo; {fmt} takes any number of texts")
  output = check_output(output)
  pre = load_model(model)
  if fmt == "sentence-transformers":
    task_head = "features"
  head = resolve_head(pre, task_head, pooling, normalize, max_seq_length)
  if fmt == "savedmodel":
    check_savedmodel(head)
  tmp = output.rstrip("/") + f".tmp-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  try:
    result = _write(fmt, head, tmp, batch)
    texts, pairs = parity_inputs(head)
    want = head.reference(texts, pairs)
    if fmt == "savedmodel":   # it also serves predict's answer over a long input's windows
      want.update(head.whole_reference(texts, pairs))
    if fmt == "sentence-transformers":   # an inference-free model's query route too
      want.update(head.query_reference(texts))
    got, mask = result.pop("run")(texts, pairs)
    diff = compare(fmt, got, want, mask)
    tol = tolerance()
    if fmt == "sentence-transformers" and tol == FP32_TOLERANCE:
      tol = ST_TOLERANCE
    if not diff <= tol:
      raise UserError(f"{fmt} export of {pre.directory} differs from predict by {diff:.3g} on {len(texts)} texts "
                      f"(tolerance {tol:g}); nothing was written to {output}")
    result.update(max_abs_diff=diff, tolerance=tol, parity_texts=len(texts))
    signature = docs.signature(fmt, head, tokenizer_info(head), result)
    fileio.write_json_atomic(os.path.join(tmp, "signature.json"), signature)
    fileio.write_text_atomic(os.path.join(tmp, "README.md"), docs.readme(fmt, head, signature, output))
    _swap_in(tmp, output)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  result.update(output=output, head=head.kind, format=fmt)
  return result


def _write(fmt: str, head: ServingHead, tmp: str, batch: str) -> dict:
  """Writes the format's files into tmp; returns {"files", "run": (texts, pairs) -> (outputs, token mask)};
  an inference-free model's query side (its IDF table) goes beside the model as query_idf.json."""
  out = _write_model(fmt, head, tmp, batch)
  if head.query_idf is not None and fmt != "sentence-transformers":
    write_query_idf(head, os.path.join(tmp, QUERY_IDF))
    out["files"].append(QUERY_IDF)
  return out


QUERY_IDF = "query_idf.json"


def write_query_idf(head: ServingHead, path: str) -> None:
  """{token: weight} of every vocabulary entry with a weight > 0 (the form of OpenSearch's idf.json and of
  sentence-transformers' SparseStaticEmbedding.from_json): a query's vector is each of its tokens at its
  weight (once however often it occurs), then L2-normalised when the model normalises."""
  inv = {i: t for t, i in head.tokenizer().vocab.items()}
  fileio.write_json_atomic(path, {inv[i]: round(float(w), 7) for i, w in enumerate(head.query_idf)
                                  if w > 0 and i in inv})


def _write_model(fmt: str, head: ServingHead, tmp: str, batch: str) -> dict:
  if fmt == "stablehlo":
    blob = stablehlo.export_stablehlo(head, batch)
    with open(os.path.join(tmp, "model.stablehlo"), "wb") as f:
      f.write(blob)
    _copy_vocab(head, tmp)
    run = stablehlo.runner(blob, tuple(head.inputs))
    return {"files": ["model.stablehlo", "vocab.txt"], "run": _ids_runner(head, run, np.int32)}
  if fmt == "onnx":
    from bert_jax.export import onnx_export   # onnx, onnxruntime: the [serve] extra
    path = os.path.join(tmp, "model.onnx")
    try:
      onnx_export.write_onnx(head, path, batch)
    except ValueError as e:
      raise UserError(f"onnx: {e}") from None
    _copy_vocab(head, tmp)
    return {"files": ["model.onnx", "vocab.txt"], "run": _ids_runner(head, onnx_export.runner(path), np.int64)}
  if fmt == "savedmodel":
    # TensorFlow only here: the other formats run on machines without it.
    from bert_jax.export import savedmodel
    sm = os.path.join(tmp, "savedmodel")
    sigs = savedmodel.write_savedmodel(head, sm, bool(head.tokenizer().do_lower_case))
    _copy_vocab(head, tmp)
    return {"files": ["savedmodel/", "vocab.txt"], "signatures": sigs, "run": _savedmodel_runner(head, sm)}
  from bert_jax.export import st_export       # sentence-transformers and torch: the [st] extra
  st_export.write_st(head, tmp)
  return {"files": sorted(os.listdir(tmp)), "run": st_export.runner(tmp)}


def _copy_vocab(head: ServingHead, tmp: str) -> None:
  with open(head.pre.require_vocab(), "rb") as f:
    fileio.write_bytes_atomic(os.path.join(tmp, "vocab.txt"), f.read())


def _ids_runner(head: ServingHead, run, dtype):
  def go(texts: Sequence[str], pairs: Optional[Sequence[str]]):
    feats = head.featurize(texts, pairs)
    return run({k: np.asarray(v, dtype) for k, v in feats.items()}), feats["input_mask"]
  return go


def savedmodel_args(head: ServingHead, texts: Sequence, pairs: Optional[Sequence[str]]) -> Dict[str, list]:
  """The SavedModel signature's arguments for `texts` (multiple choice: predict_choices' questions, their
  choices padded with "" to the most of any)."""
  if head.kind == "multiple_choice":
    num = max(len(q["choices"]) for q in texts)
    return {"context": [str(q.get("context", "")) for q in texts], "question": [str(q.get("question", ""))
                                                                               for q in texts],
            "choices": [list(q["choices"]) + [""] * (num - len(q["choices"])) for q in texts]}
  return {"text": list(texts), **({"text_pair": list(pairs)} if pairs is not None else {})}


def _savedmodel_runner(head: ServingHead, path: str):
  def go(texts: List, pairs: Optional[List[str]]):
    import tensorflow as tf   # the savedmodel format only (its module imported it already)
    m = tf.saved_model.load(path)
    args = {k: tf.constant(v) for k, v in savedmodel_args(head, texts, pairs).items()}
    ids = {k: v.numpy() for k, v in m.signatures["tokenize_pairs" if pairs is not None else "tokenize"](**args)
           .items()}
    want = head.featurize(texts, pairs, windows=True)
    t = ids["input_ids"].shape[-1]
    same = (ids["input_ids"].shape[:-1] == want["input_ids"].shape[:-1]
            and np.array_equal(ids["input_ids"], want["input_ids"][..., :t]) and not want["input_ids"][..., t:].any()
            and np.array_equal(ids["segment_ids"], want["segment_ids"][..., :t]))
    if not same:
      bad = 0
      if ids["input_ids"].shape == want["input_ids"][..., :t].shape:
        differs = (ids["input_ids"] != want["input_ids"][..., :t]).reshape(len(ids["input_ids"]), -1)
        bad = int(np.flatnonzero(differs.any(1))[0])
        bad = int(want.get("example_index", np.arange(len(texts)))[bad])
      raise UserError(f"savedmodel: the in-graph tokenizer's ids differ from predict's on text {texts[bad]!r}; "
                      "export onnx or stablehlo (token ids in)")
    out = {k: v.numpy() for k, v in m.signatures["pairs" if pairs is not None else "serving_default"](**args)
           .items()}
    for k in ("word_tags", "words", "answer", "nbest_text"):   # strings predict returns: compared as str
      if k in out and out[k].dtype == object:   # (multiple choice's answer is an index)
        out[k] = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(out[k])
    return out, out["input_mask"]
  return go


def closing_line(result: dict) -> str:
  return (f"wrote the {result['format']} export ({result['head']}; parity with predict: max |diff| "
          f"{result['max_abs_diff']:.2g} <= {result['tolerance']:g} on {result['parity_texts']} texts) to "
          f"{result['output']}")
