"""A TF SavedModel that takes raw UTF-8 text: the tokenizer inside the graph (TF-Text, the same ids as
tokenization.FullTokenizer), the model as jax2tf's StableHLO call with a polymorphic batch and length.

    write_savedmodel(head, "export/sst2")     # then, in any Python with TensorFlow + tensorflow-text:
    m = tf.saved_model.load("export/sst2")
    m.signatures["serving_default"](text=tf.constant(["这本书很好"]))            # {"probabilities", "label"}
    m.signatures["pairs"](text=tf.constant(["q"]), text_pair=tf.constant(["c"]))  # pair tasks and SQuAD
    m.signatures["tokenize"](text=...)        # input_ids, input_mask, segment_ids: what the model saw
    m.signatures["serving_default"](text=tf.constant([long_sentence]))["word_tags"]   # NER: every word's tag
    m.signatures["serving_default"](context=tf.constant(["..."]), question=tf.constant(["..."]),
                                    choices=tf.constant([["A", "B", ""]]))   # multiple choice: "" pads

Signatures: serving_default (single texts), pairs (text, text_pair: sentence pairs, SQuAD's question and
context), tokenize / tokenize_pairs (the ids: one row per text; NER and SQuAD one per window, example_index [N]
naming its text). Outputs are heads.OUTPUTS plus, for the readers' sake, `label` (classification: the arg-max
label), `tags` (NER: the arg-max tag, or the CRF's Viterbi tag, at each word's first piece, "" elsewhere),
`answer` (multiple choice: the arg-max choice's index) and `input_mask`.
Multiple choice takes a context, a question and a [batch, num_choices] string tensor of choices per example
("" pads a question with fewer choices: choice_mask 0); each choice row is packed as multiple_choice.pack_choice
packs it.

Inputs longer than a window, as predict reads them (the windows run as extra rows of the same model call):
  NER        a sentence of more than max_seq_length - 2 pieces is split at word boundaries as NER's featurize
             splits it (words go greedily into a window until the next one does not fit; a word longer than
             a window is cut to it); the CRF gets word_mask from the words' first pieces and
             window_continues / window_continued from the split. `word_tags` [batch, words] is the tag of
             every word of the whole sentence (predict's tags), `words` [batch, words] the words ("" pads both
             to the batch's longest sentence).
  SQuAD      (pairs) the context is cut into the doc-stride windows of squad.convert_examples_to_features,
             each row padded to max_seq_length, and the answer picked as squad_postprocess picks it (n-best
             starts x ends per window, the start at its most-context window, the best start + end logit over
             the windows, de-duplicated by text): `answer` [batch] is predict's answer, the context's
             characters from the answer's first token to its last ("" for none;
             TFBertTokenizer.tokenize_with_offsets gives the characters FullTokenizer.tokenize_with_offsets
             gives), `probability` [batch] predict's, `nbest_text` / `nbest_probability` / `nbest_start_logit`
             / `nbest_end_logit` [batch, n_best_size (+ 1 for v2)] predict's n-best list ("" / 0 pad),
             `answer_token_start` / `answer_token_end` [batch] the answer's first / last token in the
             context's (the context's part of tokenize_pairs, window after window without the overlap; -1: no
             answer), `answer_start_logit` / `answer_end_logit` [batch] its logits and, SQuAD v2, `null_odds`
             [batch] predict's null odds.
  The per-token outputs (tag_probabilities, tag_ids, emissions, tags, word_start, start_logits, end_logits,
  input_mask) stay [batch, length]: each text's first window.

The length is padded to a multiple of 16 (one XLA compile per bucket, not one per length; SQuAD's pairs to
max_seq_length). Truncation is Google's (head; pairs: the longer text loses tokens first); a model fine-tuned
with tail / head_tail truncation is refused (the ONNX / StableHLO exports take ids).

TensorFlow and TF-Text are imported here, so this module is imported only by the savedmodel command.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF-Text ops the graph uses)
from jax.experimental import jax2tf

from bert_jax.export.heads import TOKEN_OUTPUTS
from bert_jax.input_pipeline.tf_tokenization import CJK, TFBertTokenizer

LENGTH_BUCKET = 16



class ServingModule(tf.Module):
  """Tokenizer + converted model; see the module docstring."""

  def __init__(self, head, do_lower_case: bool):
    super().__init__()
    self.kind, self.max_len = head.kind, int(head.max_seq_length)
    self.max_query = int(head.max_query_length)
    squad = head.task if head.kind == "squad" else None
    self.doc_stride = int(getattr(squad, "doc_stride", 128))
    self.n_best = int(getattr(squad, "n_best_size", 20))
    self.max_answer = int(getattr(squad, "max_answer_length", 30))
    self.v2 = bool(getattr(squad, "version_2_with_negative", False))
    self.null_threshold = float(getattr(squad, "null_score_diff_threshold", 0.0))
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

  def _ner_words(self, text):
    """Per word (whitespace split, every CJK character a word, as ner.split_words), its pieces; a word whose
    characters all drop out gets one [UNK], and a word longer than a window is cut to max_seq_length - 2
    pieces, as NER's featurize does. Returns the words [B, (words)] and their pieces [W, (pieces)]."""
    spaced = tf.strings.regex_replace(text, f"({CJK})", r" \1 ")
    words = tf.strings.split(tf.strings.regex_replace(spaced, r"[\t\n\r\p{Zs}\x{2028}\x{2029}]", " "))
    flat = tf.cast(self.tok.tokenize(words.flat_values), tf.int32)   # [W, (pieces)]
    width = tf.minimum(tf.maximum(flat.row_lengths(), 1), max(self.max_len - 2, 1))
    unk = self.tok.special_ids["[UNK]"]
    dense = tf.pad(flat.to_tensor(unk), [[0, 0], [0, 1]], constant_values=unk)   # empty rows -> [UNK]
    return words, tf.RaggedTensor.from_tensor(dense, lengths=width)

  def _ner_windows(self, text):
    """ner.convert_examples_to_features' windows in TF: each sentence's words go greedily into windows of at
    most max_seq_length - 2 pieces (a word that does not fit opens the next window), one window for a sentence
    without words. Returns the rows (as _pack packs them, plus example_index [N] and the CRF's window flags)
    and, for _serve, each word's window and the position of its first piece there."""
    words, pieces = self._ner_words(text)
    width = pieces.row_lengths()
    word_row = words.value_rowids()
    is_first = tf.equal(tf.range(tf.size(word_row, out_type=tf.int64)), tf.gather(words.row_starts(), word_row))
    budget = tf.constant(self.max_len - 2, tf.int64)
    zero = tf.constant(0, tf.int64)

    def step(state, x):   # (window of the previous word in its sentence, pieces in that window so far)
      local, cur = state
      w, first = x
      over = cur + w > budget
      local = tf.where(first, zero, tf.where(over, local + 1, local))
      return local, tf.where(first | over, w, cur + w)
    local, _ = tf.scan(step, (width, is_first), initializer=(zero, zero))
    bsz = words.nrows()
    nwin = tf.maximum(tf.math.unsorted_segment_max(local + 1, word_row, bsz), 1)   # [B]
    offset = tf.cumsum(nwin, exclusive=True)
    window = tf.gather(offset, word_row) + local                                   # [W] its row
    total = tf.reduce_sum(nwin)
    grouped = tf.RaggedTensor.from_value_rowids(pieces, window, nrows=total)      # [N, (words), (pieces)]
    first = pieces.with_values(tf.cast(tf.equal(tf.ragged.range(width).flat_values, 0), tf.int32))
    starts = tf.RaggedTensor.from_value_rowids(first, window, nrows=total)
    out = self._pack(grouped.merge_dims(1, 2), a_start=starts.merge_dims(1, 2))
    example = tf.repeat(tf.range(bsz), nwin)
    in_sentence = tf.range(total) - tf.gather(offset, example)
    out["example_index"] = tf.cast(example, tf.int32)
    if self.crf:   # the chain over the words' first pieces; a window inside a sentence lifts start / end
      out["word_mask"] = out["word_start"]
      out["window_continues"] = tf.cast(in_sentence > 0, tf.int32)
      out["window_continued"] = tf.cast(in_sentence < tf.gather(nwin, example) - 1, tf.int32)
    before = tf.cumsum(width, exclusive=True)                                     # pieces before each word
    position = 1 + before - tf.gather(before, tf.gather(grouped.row_starts(), window))   # 1: after [CLS]
    return out, {"words": words, "window": window, "position": position, "first_row": offset}

  def _squad_windows(self, question, context):
    """squad.convert_examples_to_features' doc-stride windows in TF: [CLS] question [SEP] window [SEP], the
    question cut to max_query_length, windows of max_seq_length - 3 - len(question) context tokens starting
    every min(that, doc_stride) tokens until one reaches the end, rows padded to max_seq_length (the n-best
    pick reads the padding's logits too, as predict's does). Returns the rows (plus example_index [N]) and,
    for _serve, each row's first context position, window start and whether the row gives each of its
    tokens its most context (squad._is_max_context)."""
    q = self._ids(question)
    lq = tf.minimum(q.row_lengths(), self.max_query)
    q = tf.ragged.boolean_mask(q, tf.ragged.range(q.row_lengths()) < tf.expand_dims(lq, 1))
    ids, byte_start, byte_end = self.tok.tokenize_with_offsets(context)      # the answer's text is cut by these
    ctx = tf.cast(ids, tf.int32)
    n = ctx.row_lengths()
    room = self.max_len - 3 - lq                                              # max_tokens_for_doc [B]
    step = tf.minimum(room, self.doc_stride)
    nwin = tf.where(n > room, 1 + (n - room + step - 1) // step, 1)          # [B]
    offset = tf.cumsum(nwin, exclusive=True)
    example = tf.repeat(tf.range(tf.size(n, out_type=tf.int64)), nwin)        # [N]
    k = tf.range(tf.reduce_sum(nwin)) - tf.gather(offset, example)           # the window's index in its example
    start = k * tf.gather(step, example)
    length = tf.minimum(tf.gather(n, example) - start, tf.gather(room, example))
    at = tf.ragged.range(length) + tf.expand_dims(start + tf.gather(ctx.row_starts(), example), 1)
    window = tf.RaggedTensor.from_row_splits(tf.gather(ctx.flat_values, at.flat_values), at.row_splits)
    out = self._pack(tf.gather(q, example), window)
    width = tf.shape(out["input_ids"])[1]
    out = {key: tf.pad(v, [[0, 0], [0, self.max_len - width]]) for key, v in out.items()}
    out["example_index"] = tf.cast(example, tf.int32)
    # Most context: a token's score in each window of its example that holds it is min(left, right context)
    # + 0.01 * the window's length; the first best window is its own.
    first_ctx = tf.gather(lq, example) + 2                                   # [N] the row's first context slot
    pos = tf.range(self.max_len, dtype=tf.int64)[None, :] - first_ctx[:, None] + start[:, None]   # [N, T]
    inside = (pos >= start[:, None]) & (pos < (start + length)[:, None])
    most = tf.reduce_max(nwin)
    other = tf.range(most)[None, :] * tf.gather(step, example)[:, None]      # [N, W] every window's start
    other_len = tf.minimum(tf.gather(n, example)[:, None] - other, tf.gather(room, example)[:, None])
    real = tf.range(most)[None, :] < tf.gather(nwin, example)[:, None]
    p3, s3, e3 = pos[:, :, None], other[:, None, :], (other + other_len - 1)[:, None, :]
    holds = real[:, None, :] & (p3 >= s3) & (p3 <= e3)
    score = (tf.cast(tf.minimum(p3 - s3, e3 - p3), tf.float64)
             + 0.01 * tf.cast(other_len, tf.float64)[:, None, :])
    score = tf.where(holds, score, -np.inf)
    best_score = tf.reduce_max(score, -1, keepdims=True)
    best = tf.reduce_min(tf.where(holds & (score == best_score), tf.range(most)[None, None, :], most), -1)
    return out, {"first_row": offset, "context": inside, "max_context": inside & (best == k[:, None]),
                 "first_ctx": first_ctx, "window_start": start, "text": context, "byte_start": byte_start,
                 "byte_end": byte_end}

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
    """(rows, what _serve needs besides them): rows are [N, T], one per text, or for NER and SQuAD one per
    window (example_index [N] says whose)."""
    if self.kind == "ner":
      return self._ner_windows(text)
    if self.kind == "squad" and text_pair is not None:
      return self._squad_windows(text, text_pair)
    return self._pack(self._ids(text), None if text_pair is None else self._ids(text_pair)), {}

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

  def _serve(self, feats, aux=None):
    out = dict(self._model(self.params, *(feats[k] for k in self.inputs)))
    if self.kind == "classification":
      out["label"] = tf.gather(self.labels, tf.argmax(out["probabilities"], -1))
    if self.kind == "multiple_choice":
      out["answer"] = tf.argmax(out["probabilities"], -1, output_type=tf.int32)
    if self.kind == "ner":
      best = out["tag_ids"] if self.crf else tf.argmax(out["tag_probabilities"], -1)
      tags = tf.gather(self.labels, best)                                        # [N, T] every window's rows
      words = aux["words"]
      word_tags = tf.gather_nd(tags, tf.stack([aux["window"], aux["position"]], 1))   # [W]
      out["word_tags"] = words.with_flat_values(word_tags).to_tensor("")
      out["words"] = words.to_tensor("")
      out["tags"] = tf.where(tf.equal(feats["word_start"], 1), tags, "")
      out["word_start"] = feats["word_start"]
    if self.kind == "squad" and aux:
      out.update(self._best_span(out["start_logits"], out["end_logits"], feats["example_index"], aux))
    out["input_mask"] = feats["input_mask"]
    if aux:   # per-token outputs: each text's first window, as before
      first = aux["first_row"]
      out.update({k: tf.gather(out[k], first) for k in TOKEN_OUTPUTS + ("input_mask", "tags", "word_start")
                  if k in out})
    return out

  def _best_span(self, start, end, example, aux):
    """squad_postprocess.postprocess_predictions in TF. Per window the n_best_size highest start and end
    logits are paired (both context tokens, the start at its most-context window, end >= start, at most
    max_answer_length tokens); the candidates of all windows (SQuAD v2: and the null, the least [CLS] start +
    end over the windows) are ranked by start + end logit (float64; ties keep predict's order: window, start
    rank, end rank, the null last), de-duplicated by text, and the first n_best_size (v2: the null appended
    when it is not among them) get softmax probabilities. Returns nbest_text, nbest_probability,
    nbest_start_logit, nbest_end_logit [B, K] (K = n_best_size, + 1 for v2; "" / 0 pad), probability [B]
    (the first's), answer [B] (the first non-null entry's text; v2: "" when null_odds exceeds
    null_score_diff_threshold), answer_token_start / answer_token_end [B] (its first / last token in the
    context's tokens, -1 for no answer), answer_start_logit / answer_end_logit [B] (that entry's, 0 without
    one) and, v2, null_odds [B] (the null score - the entry's score; 1e9 without one)."""
    num = min(self.n_best, self.max_len)
    ts, te = tf.math.top_k(start, num), tf.math.top_k(end, num)             # ties: the lower index first
    ctx, most = aux["context"], aux["max_context"]
    s, e = ts.indices[:, :, None], te.indices[:, None, :]
    ok = (tf.gather(ctx & most, ts.indices, batch_dims=1)[:, :, None] & tf.gather(ctx, te.indices, batch_dims=1)
          [:, None, :] & (e >= s) & (e - s + 1 <= self.max_answer))
    rows = tf.shape(start, out_type=tf.int64)[0]
    bsz = tf.shape(aux["first_row"], out_type=tf.int64)[0]
    example = tf.cast(example, tf.int64)
    # The candidates in predict's order: row-major over [window, start rank, end rank].
    at = tf.where(tf.reshape(ok, [-1]))[:, 0]
    row, s_rank, e_rank = at // (num * num), at % (num * num) // num, at % num
    sl = tf.gather_nd(ts.values, tf.stack([row, s_rank], 1))
    el = tf.gather_nd(te.values, tf.stack([row, e_rank], 1))
    to_context = tf.gather(aux["window_start"] - aux["first_ctx"], row)
    first = tf.cast(tf.gather_nd(ts.indices, tf.stack([row, s_rank], 1)), tf.int64) + to_context
    last = tf.cast(tf.gather_nd(te.indices, tf.stack([row, e_rank], 1)), tf.int64) + to_context
    ex = tf.gather(example, row)
    base = tf.gather(aux["byte_start"].row_starts(), ex)
    cut_from = tf.gather(aux["byte_start"].flat_values, base + first)
    cut_to = tf.gather(aux["byte_end"].flat_values, base + last)
    text = tf.strings.substr(tf.gather(aux["text"], ex), cut_from, cut_to - cut_from)   # whole UTF-8 characters
    is_null = tf.zeros_like(ex, tf.bool)
    if self.v2:   # the null: the window with the least [CLS] start + end (the first of equals)
      null = tf.cast(start[:, 0], tf.float64) + tf.cast(end[:, 0], tf.float64)
      score_null = tf.math.unsorted_segment_min(null, example, bsz)
      null_row = tf.math.unsorted_segment_min(tf.where(null == tf.gather(score_null, example), tf.range(rows),
                                                       rows), example, bsz)
      ex = tf.concat([ex, tf.range(bsz)], 0)
      sl, el = tf.concat([sl, tf.gather(start[:, 0], null_row)], 0), tf.concat([el, tf.gather(end[:, 0], null_row)], 0)
      first, last = tf.concat([first, tf.fill([bsz], tf.constant(-1, tf.int64))], 0), tf.concat(
          [last, tf.fill([bsz], tf.constant(-1, tf.int64))], 0)
      text = tf.concat([text, tf.fill([bsz], "")], 0)
      is_null = tf.concat([is_null, tf.ones([bsz], tf.bool)], 0)
    score = tf.cast(sl, tf.float64) + tf.cast(el, tf.float64)
    order = tf.argsort(score, direction="DESCENDING", stable=True)
    order = tf.gather(order, tf.argsort(tf.gather(ex, order), stable=True))   # by example, then by score
    ex, sl, el, first, last, text, is_null, score = (tf.gather(v, order) for v in (
        ex, sl, el, first, last, text, is_null, score))
    # De-duplicated by text within the example; the first n_best_size kept; v2's null after them if cut.
    _, same = tf.unique(tf.strings.join([tf.strings.as_string(ex), text], "\x00"), out_idx=tf.int64)
    where = tf.range(tf.size(ex, out_type=tf.int64))
    keep = tf.gather(tf.math.unsorted_segment_min(where, same, tf.size(same, out_type=tf.int64)), same) == where
    before = tf.cumsum(tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), ex, bsz), exclusive=True)
    rank = tf.cumsum(tf.cast(keep, tf.int64)) - 1 - tf.gather(before, ex)
    listed = keep & (rank < self.n_best)
    if self.v2:
      rank, listed = tf.where(listed, rank, self.n_best), listed | is_null
    width = self.n_best + int(self.v2)
    slot = tf.boolean_mask(tf.stack([ex, rank], 1), listed)
    put = lambda fill, v: tf.tensor_scatter_nd_update(tf.fill([bsz, width], fill), slot,  # noqa: E731
                                                      tf.boolean_mask(v, listed))
    n_text, n_sl, n_el = put("", text), put(0.0, sl), put(0.0, el)
    n_first, n_last = put(tf.constant(-1, tf.int64), first), put(tf.constant(-1, tf.int64), last)
    count = tf.math.unsorted_segment_sum(tf.cast(listed, tf.int64), ex, bsz)
    real = tf.range(width, dtype=tf.int64)[None, :] < tf.maximum(count, 1)[:, None]   # v1 with none: {"", 0, 0}
    logit = tf.where(real, tf.cast(n_sl, tf.float64) + tf.cast(n_el, tf.float64), -np.inf)
    exp = tf.exp(logit - tf.reduce_max(logit, 1, keepdims=True))
    prob = exp / tf.reduce_sum(exp, 1, keepdims=True)
    # The answer: the first entry with text.
    has = n_text != ""
    pick = tf.reduce_min(tf.where(has, tf.range(width, dtype=tf.int64)[None, :], width), 1)
    found = pick < width
    pick = tf.stack([tf.range(bsz), tf.minimum(pick, width - 1)], 1)
    a_sl, a_el = tf.where(found, tf.gather_nd(n_sl, pick), 0.0), tf.where(found, tf.gather_nd(n_el, pick), 0.0)
    answered = found
    out = {"nbest_text": n_text, "nbest_probability": tf.cast(prob, tf.float32), "nbest_start_logit": n_sl,
           "nbest_end_logit": n_el, "probability": tf.cast(prob[:, 0], tf.float32)}
    if self.v2:
      diff = tf.where(found, score_null - tf.cast(a_sl, tf.float64) - tf.cast(a_el, tf.float64), 1e9)
      out["null_odds"] = tf.cast(diff, tf.float32)
      answered = found & (diff <= self.null_threshold)
    out.update(answer=tf.where(answered, tf.gather_nd(n_text, pick), ""),
               answer_token_start=tf.cast(tf.where(answered, tf.gather_nd(n_first, pick), -1), tf.int32),
               answer_token_end=tf.cast(tf.where(answered, tf.gather_nd(n_last, pick), -1), tf.int32),
               answer_start_logit=a_sl, answer_end_logit=a_el)
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
  fns = {"serving_default": (lambda text: m._serve(*m._tokenize(text)), [text]),
         "tokenize": (lambda text: m._tokenize(text)[0], [text])}
  if head.kind == "multiple_choice":
    spec = [tf.TensorSpec([None], tf.string, name="context"), tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None, None], tf.string, name="choices")]
    fns = {"serving_default": (lambda context, question, choices: m._serve(m._tokenize_choices(
        context, question, choices)), spec), "tokenize": (m._tokenize_choices, spec)}
  if head.pairs:
    fns.update(pairs=(lambda text, text_pair: m._serve(*m._tokenize(text, text_pair)), [text, pair]),
               tokenize_pairs=(lambda text, text_pair: m._tokenize(text, text_pair)[0], [text, pair]))
  sigs = {k: tf.function(f, input_signature=spec, autograph=False).get_concrete_function()
          for k, (f, spec) in fns.items()}
  tf.saved_model.save(m, output, signatures=sigs)
  return sorted(sigs)
