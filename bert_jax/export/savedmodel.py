"""A TF SavedModel that takes raw UTF-8 text: the tokenizer inside the graph (TF-Text, the same ids as
tokenization.FullTokenizer), the model as jax2tf's StableHLO call with a polymorphic batch and length.

    write_savedmodel(head, "export/sst2")     # then, in any Python with TensorFlow + tensorflow-text:
    m = tf.saved_model.load("export/sst2")
    m.signatures["serving_default"](text=tf.constant(["这本书很好"]))            # {"probabilities", "label"}
    m.signatures["pairs"](text=tf.constant(["q"]), text_pair=tf.constant(["c"]))  # pair tasks and SQuAD
    m.signatures["tokenize"](text=...)        # input_ids, input_mask, segment_ids: what the model saw
    m.signatures["serving_default"](context=tf.constant(["..."]), question=tf.constant(["..."]),
                                    choices=tf.constant([["A", "B", ""]]))   # multiple choice: "" pads

Signatures: serving_default (single texts), pairs (text, text_pair: sentence pairs, SQuAD's question and
context), tokenize / tokenize_pairs (the ids). Outputs are heads.OUTPUTS plus, for the readers' sake,
`label` (classification: the arg-max label), `tags` (NER: the arg-max tag, or the CRF's Viterbi tag, at each
word's first piece, "" elsewhere), `answer` (multiple choice: the arg-max choice's index) and `input_mask`.
Multiple choice takes a context, a question and a [batch, num_choices] string tensor of choices per example
("" pads a question with fewer choices: choice_mask 0); each choice row is packed as multiple_choice.pack_choice
packs it. A CRF tagger gets word_mask from the words' first pieces and window_continued = 1 where the sentence
has more pieces than fit (predict's first window of it).

The length is padded to a multiple of 16 (one XLA compile per bucket, not one per length). Truncation is
Google's (head; pairs: the longer text loses tokens first); a model fine-tuned with tail / head_tail
truncation is refused (the ONNX / StableHLO exports take ids).

TensorFlow and TF-Text are imported here, so this module is imported only by the savedmodel command.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF-Text ops the graph uses)
from jax.experimental import jax2tf

from bert_jax.input_pipeline.tf_tokenization import TFBertTokenizer

LENGTH_BUCKET = 16
_CJK = (r"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
        r"\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])")


class ServingModule(tf.Module):
  """Tokenizer + converted model; see the module docstring."""

  def __init__(self, head, do_lower_case: bool):
    super().__init__()
    self.kind, self.max_len = head.kind, int(head.max_seq_length)
    self.max_query = int(head.max_query_length)
    self.tok = TFBertTokenizer(head.pre.require_vocab(), do_lower_case=do_lower_case)
    self.cls_id, self.sep_id = self.tok.special_ids["[CLS]"], self.tok.special_ids["[SEP]"]
    self.labels = tf.constant(head.labels or [""], tf.string)
    params = head.params
    self.params = tf.nest.map_structure(lambda a: tf.Variable(a, trainable=False), params)
    self.inputs, self.crf = tuple(head.inputs), head.crf
    dims = {"batch": "b", "choices": "c", "length": "t"}
    shapes = [None] + ["(" + ", ".join(dims[d] for d in shape) + ",)" for shape in head.inputs.values()]
    fn = jax2tf.convert(head.apply_fn(), with_gradient=False, polymorphic_shapes=shapes,
                        polymorphic_constraints=[f"t <= {int(head.pre.config.max_position_embeddings)}", "t >= 2"])
    self._model = fn

  # ---- tokenizer ---------------------------------------------------------------------------------------
  def _ids(self, text):
    return tf.cast(self.tok.tokenize(text), tf.int32)                # [B, (tokens)]

  def _ner_ids(self, text):
    """Per word (whitespace split, every CJK character a word, as ner.split_words), its pieces; a word whose
    characters all drop out gets one [UNK], as NER's featurize gives it. Returns ids and word_start (1 at a
    word's first piece), both [B, (tokens)]."""
    spaced = tf.strings.regex_replace(text, _CJK, r" \1 ")
    words = tf.strings.split(tf.strings.regex_replace(spaced, r"[\t\n\r\p{Zs}\x{2028}\x{2029}]", " "))
    flat = tf.cast(self.tok.tokenize(words.flat_values), tf.int32)   # [W, (pieces)]
    pieces = tf.RaggedTensor.from_row_splits(flat, words.row_splits)  # [B, (words), (pieces)]
    width = tf.maximum(flat.row_lengths(), 1)
    unk = self.tok.special_ids["[UNK]"]
    dense = tf.pad(flat.to_tensor(unk), [[0, 0], [0, 1]], constant_values=unk)   # empty rows -> [UNK]
    fixed = tf.RaggedTensor.from_tensor(dense, lengths=width)
    first = tf.RaggedTensor.from_row_lengths(
        tf.cast(tf.equal(tf.ragged.range(width).flat_values, 0), tf.int32), width)
    return pieces.with_values(fixed).merge_dims(1, 2), pieces.with_values(first).merge_dims(1, 2)

  def _pack(self, a, b=None, a_start=None):
    """[CLS] a [SEP] (b [SEP]), truncated as common.pack_pair (head), padded to the batch's longest."""
    la = a.row_lengths()
    if b is None:
      na = tf.minimum(la, self.max_len - 2)
      nb = tf.zeros_like(na)
    else:
      lb = b.row_lengths()
      if self.kind == "squad":   # the question cut to max_query_length, then the context fills the rest
        na = tf.minimum(la, self.max_query)
        nb = tf.minimum(lb, self.max_len - 3 - na)
      else:
        na, nb = _pair_lengths(la, lb, self.max_len - 3)
    a = tf.ragged.boolean_mask(a, tf.ragged.range(la) < tf.expand_dims(na, 1))
    bsz = tf.shape(la, out_type=tf.int64)[0]
    cls = tf.fill([bsz, 1], self.cls_id)
    sep = tf.fill([bsz, 1], self.sep_id)
    parts = [cls, a, sep]
    segs = [tf.zeros_like(cls), tf.zeros_like(a), tf.zeros_like(sep)]
    if b is not None:
      b = tf.ragged.boolean_mask(b, tf.ragged.range(b.row_lengths()) < tf.expand_dims(nb, 1))
      parts += [b, sep]
      segs += [tf.ones_like(b), tf.ones_like(sep)]
    ids = tf.concat(parts, axis=1)
    seg = tf.concat(segs, axis=1)
    out = {"input_ids": ids.to_tensor(0), "segment_ids": seg.to_tensor(0),
           "input_mask": tf.ones_like(ids).to_tensor(0)}
    if a_start is not None:
      a_start = tf.ragged.boolean_mask(a_start, tf.ragged.range(la) < tf.expand_dims(na, 1))
      out["word_start"] = tf.concat([tf.zeros_like(cls), a_start, tf.zeros_like(sep)], 1).to_tensor(0)
    return self._bucket(out)

  def _bucket(self, out):
    """[N, width] rows padded to a multiple of LENGTH_BUCKET: XlaCallModule compiles the model once per input
    shape, and every new length was a new compile (seconds each: p99 3.3 s at batch 1 in serving.md)."""
    width = tf.shape(out["input_ids"])[1]
    target = tf.minimum((width + LENGTH_BUCKET - 1) // LENGTH_BUCKET * LENGTH_BUCKET, max(self.max_len, 1))
    target = tf.maximum(target, width)
    return {k: tf.pad(v, [[0, 0], [0, target - width]]) for k, v in out.items()}

  def _tokenize(self, text, text_pair=None):
    if self.kind == "ner":
      ids, starts = self._ner_ids(text)
      out = self._pack(ids, a_start=starts)
      if self.crf:   # the chain over the words' first pieces; predict splits a longer sentence into windows
        out["word_mask"] = out["word_start"]
        out["window_continues"] = tf.zeros_like(ids.row_lengths(), tf.int32)
        out["window_continued"] = tf.cast(ids.row_lengths() > self.max_len - 2, tf.int32)
      return out
    return self._pack(self._ids(text), None if text_pair is None else self._ids(text_pair))

  def _tokenize_choices(self, context, question, choices):
    """multiple_choice.pack_choice per (example, choice) in TF: [CLS] context [SEP] question choice [SEP]
    (segment 1 from the question on), [CLS] question choice [SEP] without a context; the choice is cut last,
    the question before it, and they take at most half the room while the context needs it. Ids [B, C, T],
    choice_mask [B, C] (1 where the choice is not ""; a padded choice's rows are zeros, as predict pads)."""
    bsz, num = tf.shape(choices, out_type=tf.int64)[0], tf.shape(choices, out_type=tf.int64)[1]
    rows = tf.repeat(tf.range(bsz), num)                                      # the example of each choice row
    ctx, q = tf.gather(self._ids(context), rows), tf.gather(self._ids(question), rows)
    ch = self._ids(tf.reshape(choices, [-1]))
    lc, lq, lch = ctx.row_lengths(), q.row_lengths(), ch.row_lengths()
    has_ctx = lc > 0
    room = self.max_len - tf.where(has_ctx, tf.constant(3, tf.int64), 2)
    b_room = room - tf.minimum(lc, room // 2)
    nc = tf.minimum(lch, b_room)
    nq = tf.minimum(lq, b_room - nc)
    na = tf.minimum(lc, room - nq - nc)
    cut = lambda x, n: tf.ragged.boolean_mask(x, tf.ragged.range(x.row_lengths()) < tf.expand_dims(n, 1))  # noqa
    a, q, ch = cut(ctx, na), cut(q, nq), cut(ch, nc)
    n = tf.shape(lc, out_type=tf.int64)[0]
    cls, sep = tf.fill([n, 1], self.cls_id), tf.fill([n, 1], self.sep_id)
    mid_sep = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(tf.cast(has_ctx, tf.int64))], self.sep_id),
                                               tf.cast(has_ctx, tf.int64))
    seg_b = tf.expand_dims(tf.cast(has_ctx, tf.int32), 1)                      # segment of question + choice
    ids = tf.concat([cls, a, mid_sep, q, ch, sep], axis=1)
    seg = tf.concat([tf.zeros_like(cls), tf.zeros_like(a), tf.zeros_like(mid_sep), tf.ones_like(q) * seg_b,
                     tf.ones_like(ch) * seg_b, tf.ones_like(sep) * seg_b], axis=1)
    out = self._bucket({"input_ids": ids.to_tensor(0), "segment_ids": seg.to_tensor(0),
                        "input_mask": tf.ones_like(ids).to_tensor(0)})
    real = tf.cast(tf.not_equal(choices, ""), tf.int32)                      # [B, C]
    shape = tf.stack([bsz, num, -1])
    out = {k: tf.reshape(v, shape) * real[:, :, None] for k, v in out.items()}   # padded choices: all zeros
    out["choice_mask"] = real
    return out

  def _serve(self, feats):
    out = dict(self._model(self.params, *(feats[k] for k in self.inputs)))
    if self.kind == "classification":
      out["label"] = tf.gather(self.labels, tf.argmax(out["probabilities"], -1))
    if self.kind == "multiple_choice":
      out["answer"] = tf.argmax(out["probabilities"], -1, output_type=tf.int32)
    if self.kind == "ner":
      best = out["tag_ids"] if self.crf else tf.argmax(out["tag_probabilities"], -1)
      out["tags"] = tf.where(tf.equal(feats["word_start"], 1), tf.gather(self.labels, best), "")
      out["word_start"] = feats["word_start"]
    out["input_mask"] = feats["input_mask"]
    return out


def _pair_lengths(la, lb, budget):
  """common.pair_lengths in TF: the longer text loses tokens until both are equal, then they alternate (B
  first)."""
  excess = tf.maximum(la + lb - budget, 0)
  gap = tf.abs(la - lb)
  first = tf.minimum(gap, excess)
  la2 = tf.where(la > lb, la - first, la)
  lb2 = tf.where(la > lb, lb, lb - first)
  rest = excess - first
  return la2 - rest // 2, lb2 - (rest + 1) // 2


def write_savedmodel(head, output: str, do_lower_case: bool) -> list:
  """Writes the SavedModel into `output` (the caller's temp folder); returns the signature names. The
  functions are traced once each, as signatures only (as module attributes tf.saved_model.save traced them
  again: 14 s of a tiny model's 20)."""
  m = ServingModule(head, do_lower_case)
  text = tf.TensorSpec([None], tf.string, name="text")
  pair = tf.TensorSpec([None], tf.string, name="text_pair")
  fns = {"serving_default": (lambda text: m._serve(m._tokenize(text)), [text]),
         "tokenize": (lambda text: m._tokenize(text), [text])}
  if head.kind == "multiple_choice":
    spec = [tf.TensorSpec([None], tf.string, name="context"), tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None, None], tf.string, name="choices")]
    fns = {"serving_default": (lambda context, question, choices: m._serve(m._tokenize_choices(
        context, question, choices)), spec), "tokenize": (m._tokenize_choices, spec)}
  if head.pairs:
    fns.update(pairs=(lambda text, text_pair: m._serve(m._tokenize(text, text_pair)), [text, pair]),
               tokenize_pairs=(lambda text, text_pair: m._tokenize(text, text_pair), [text, pair]))
  sigs = {k: tf.function(f, input_signature=spec, autograph=False).get_concrete_function()
          for k, (f, spec) in fns.items()}
  tf.saved_model.save(m, output, signatures=sigs)
  return sorted(sigs)
