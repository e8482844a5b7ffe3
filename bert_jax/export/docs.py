"""signature.json and README.md of an export: what goes in, what comes out, the labels, the tokenizer, and a
command that serves it (TF Serving's docker line for the SavedModel, onnxruntime's Python lines for ONNX)."""

from __future__ import annotations

import json
import os

INPUT_NOTES = {"word_mask": " (1 at each word's first piece: the CRF's chain)",
               "window_continues": " (1: the row is a later window of its sentence; 0 for a whole sentence)",
               "window_continued": " (1: a further window of the sentence follows; 0 for a whole sentence)",
               "choice_mask": " (1 for a real choice, 0 for padding)"}


def signature(fmt: str, head, tokenizer: dict, result: dict) -> dict:
  if fmt == "savedmodel":
    inputs = {"serving_default": {"text": "string [batch] (raw UTF-8 text)"}}
    if head.pairs:
      names = ("question", "context") if head.kind == "squad" else ("text", "text_pair")
      inputs["pairs"] = {"text": f"string [batch] ({names[0]})", "text_pair": f"string [batch] ({names[1]})"}
    if head.kind == "multiple_choice":
      inputs = {"serving_default": {
          "context": "string [batch] (\"\" for none)", "question": "string [batch]",
          "choices": "string [batch, num_choices] (\"\" pads a question with fewer choices)"}}
    extra = {"label": "string [batch] arg-max label"} if head.kind == "classification" else {}
    if head.kind == "multiple_choice":
      extra = {"answer": "int32 [batch] index of the arg-max choice"}
    if head.kind == "ner":
      what = "Viterbi" if head.crf else "arg-max"
      extra = {"tags": f"string [batch, length] {what} tag at each word's first piece, '' elsewhere (the "
                       "first window)",
               "word_start": "int32 [batch, length]",
               "word_tags": f"string [batch, words] the {what} tag of every word of the whole sentence (a long "
                            "one split into windows as predict splits it), '' pads",
               "words": "string [batch, words] the words (whitespace split, CJK characters one each), '' pads"}
    if head.kind == "squad":
      extra = {"answer": "string [batch] predict's answer: the context's characters from its first token to "
                         "its last, picked over every doc-stride window as predict picks it ('' for none)",
               "probability": "float32 [batch] predict's: the answer's share of the n-best softmax",
               "nbest_text": "string [batch, n_best] predict's n-best answers, de-duplicated by text ('' pads; "
                             "v2: one more, the null answer '')",
               "nbest_probability": "float32 [batch, n_best] their softmax (0 pads)",
               "nbest_start_logit": "float32 [batch, n_best]", "nbest_end_logit": "float32 [batch, n_best]",
               "answer_token_start": "int32 [batch] the answer's first token in the context's tokens (-1: none)",
               "answer_token_end": "int32 [batch] its last token (-1: none)",
               "answer_start_logit": "float32 [batch]", "answer_end_logit": "float32 [batch]"}
      if head.task.version_2_with_negative:
        extra["null_odds"] = "float32 [batch] the least [CLS] start + end logit - the answer's (predict's)"
    outputs = {**head.outputs, **extra, "input_mask": "int32 [batch, length]"}
    if head.kind in ("ner", "squad"):   # the per-token outputs of a long input: its first window
      outputs = {k: v + " (each text's first window)" if k in head.outputs else v for k, v in outputs.items()}
  elif fmt == "sentence-transformers":
    inputs = {"texts": "list of str (SentenceTransformer.encode)"}
    outputs = {"embedding": head.outputs["embedding"]}
  else:
    bits = 64 if fmt == "onnx" else 32
    inputs = {k: f"int{bits} [{', '.join(dims)}]{INPUT_NOTES.get(k, '')}" for k, dims in head.inputs.items()}
    outputs = head.outputs
  if getattr(head, "query_idf", None) is not None:
    outputs = dict(outputs, embedding=outputs["embedding"] + " (a passage's: the model encodes documents)")
    if fmt == "sentence-transformers":
      outputs["query_embedding"] = ("SparseEncoder.encode_query: the set of the query's tokens, each at its "
                                    "IDF (SparseStaticEmbedding)" + (", L2-normalised" if head.normalize else ""))
    else:
      outputs["query_embedding"] = ("not in the model: a query is the set of its tokens (no [CLS] / [SEP]), "
                                    "each at its weight in query_idf.json, over the same vocabulary" +
                                    (", L2-normalised" if head.normalize else ""))
  return {"format": fmt, "takes": "raw text" if fmt in ("savedmodel", "sentence-transformers") else "token ids",
          "inputs": inputs, "outputs": outputs, "head": head.describe(), "labels": head.labels,
          "tokenizer": tokenizer, "files": result.get("files", []),
          "parity": {"max_abs_diff": result["max_abs_diff"], "tolerance": result["tolerance"],
                     "texts": result["parity_texts"], "against": "python -m bert_jax.predict"},
          "source": head.pre.directory}


def readme(fmt: str, head, sig: dict, output: str) -> str:
  name = os.path.basename(output.rstrip("/")) or "model"
  lines = [f"# {name}: {head.kind} ({fmt})", "", _serve(fmt, head, name), "",
           f"Exported by `python -m bert_jax.export {fmt}` from `{head.pre.directory}`. "
           f"Parity with `python -m bert_jax.predict`: max |diff| {sig['parity']['max_abs_diff']:.2g} on "
           f"{sig['parity']['texts']} texts (tolerance {sig['parity']['tolerance']:g}).", "",
           "Inputs:", "", "```json", json.dumps(sig["inputs"], indent=2, ensure_ascii=False), "```", "",
           "Outputs:", "", "```json", json.dumps(sig["outputs"], indent=2, ensure_ascii=False), "```", ""]
  if head.labels:
    lines += [f"Labels (in output order): {', '.join(head.labels)}", ""]
  lines += ["The tokenizer, special tokens and limits are in `signature.json`.", ""]
  return "\n".join(lines)


def _serve(fmt: str, head, name: str) -> str:
  if fmt == "savedmodel" and head.kind == "multiple_choice":
    body = '{"inputs": {"context": ["..."], "question": ["..."], "choices": [["...", "..."]]}}'
    return ("```bash\n"
            f"mkdir -p serving/{name}/1 && cp -r savedmodel/* serving/{name}/1/\n"
            f"docker run -p 8501:8501 -v \"$PWD/serving/{name}:/models/{name}\" -e MODEL_NAME={name} "
            "tensorflow/serving\n"
            f"curl -d '{body}' localhost:8501/v1/models/{name}:predict\n```\n\n"
            "The graph uses TF-Text's ops (tokenizer) and XlaCallModule (the model): the serving binary must "
            "carry both. In Python: `import tensorflow_text` then `tf.saved_model.load(\"savedmodel\")`.")
  if fmt == "savedmodel":
    pair = ', "text_pair": ["..."]' if head.pairs else ""
    sig = "pairs" if head.pairs else "serving_default"
    return ("```bash\n"
            f"mkdir -p serving/{name}/1 && cp -r savedmodel/* serving/{name}/1/\n"
            f"docker run -p 8501:8501 -v \"$PWD/serving/{name}:/models/{name}\" -e MODEL_NAME={name} "
            "tensorflow/serving\n"
            f"curl -d '{{\"signature_name\": \"{sig}\", \"inputs\": {{\"text\": [\"...\"]{pair}}}}}' "
            f"localhost:8501/v1/models/{name}:predict\n```\n\n"
            "The graph uses TF-Text's ops (tokenizer) and XlaCallModule (the model): the serving binary must "
            "carry both (not tried here: no docker on the machine that wrote this). In Python: "
            "`import tensorflow_text` then `tf.saved_model.load(\"savedmodel\")`.")
  if fmt == "onnx" and head.crf:   # the word_mask input: each word's first piece
    return ("```python\n"
            "import numpy as np, onnxruntime as ort\n"
            "from bert_jax.input_pipeline.tokenization import FullTokenizer   # or any BERT WordPiece tokenizer\n"
            "tok = FullTokenizer(\"vocab.txt\", do_lower_case=...)          # signature.json: tokenizer\n"
            "pieces = [tok.encode(w) or [tok.vocab['[UNK]']] for w in \"John lives in Paris\".split()]\n"
            "ids = np.array([[tok.vocab['[CLS]']] + sum(pieces, []) + [tok.vocab['[SEP]']]], np.int64)\n"
            "word_mask = np.array([[0] + sum([[1] + [0] * (len(p) - 1) for p in pieces], []) + [0]], np.int64)\n"
            "sess = ort.InferenceSession(\"model.onnx\")\n"
            "tag_ids, emissions = sess.run(None, {\"input_ids\": ids, \"input_mask\": np.ones_like(ids), "
            "\"segment_ids\": np.zeros_like(ids), \"word_mask\": word_mask, "
            "\"window_continues\": np.zeros(1, np.int64), \"window_continued\": np.zeros(1, np.int64)})\n```"
            + _more_inputs(head))
  if fmt == "onnx":
    return ("```python\n"
            "import numpy as np, onnxruntime as ort\n"
            "from bert_jax.input_pipeline.tokenization import FullTokenizer   # or any BERT WordPiece tokenizer\n"
            "tok = FullTokenizer(\"vocab.txt\", do_lower_case=...)          # signature.json: tokenizer\n"
            "ids = np.array([[tok.vocab['[CLS]']] + tok.encode(\"some text\") + [tok.vocab['[SEP]']]], np.int64)\n"
            "sess = ort.InferenceSession(\"model.onnx\")\n"
            "out = sess.run(None, {\"input_ids\": ids, \"input_mask\": np.ones_like(ids), "
            "\"segment_ids\": np.zeros_like(ids)})\n```" + _more_inputs(head))
  if fmt == "stablehlo":
    args = ", ".join(head.inputs)
    return ("```python\n"
            "import jax, numpy as np\n"
            "exp = jax.export.deserialize(bytearray(open(\"model.stablehlo\", \"rb\").read()))\n"
            f"out = exp.call({args})   # int32; shapes in signature.json\n```" + _more_inputs(head))
  return ("```python\n"
          "from sentence_transformers import SentenceTransformer\n"
          f"vectors = SentenceTransformer(\"{name}\").encode([\"some text\"])\n```")


def _more_inputs(head) -> str:
  """The id formats' note on inputs beyond the three [batch, length] ids (a CRF tagger, multiple choice)."""
  if head.kind == "multiple_choice":
    return ("\n\nMultiple choice: every id input is [batch, choices, length], one row per choice "
            "(`[CLS] context [SEP] question choice [SEP]`, segment 1 from the question on), and `choice_mask` "
            "[batch, choices] is 1 for the real choices; `probabilities` is the softmax over them.")
  if head.crf:
    return ("\n\nCRF tagger: also `word_mask` [batch, length], 1 at each word's first piece (the Viterbi chain "
            "runs over these), and `window_continues` / `window_continued` [batch], 0 for a whole sentence (1 "
            "for the later / earlier windows of a sentence split as predict splits it). `tag_ids` is the "
            "decoded tag per word (index into signature.json's labels) at its first piece, 0 elsewhere.")
  return ""
