"""SQuAD v1.1 / v2.0 (and CMRC2018-style Chinese) reading and doc-stride feature creation.

    es = read_squad(path, version_2_with_negative=False, is_training=True, on_error="skip")
    es = read_squad_split(data_dir, "train", version_2_with_negative)   # train-v1.1.json / dev-v2.0.json ...
    es = read_squad_tfds("train", version_2_with_negative, data_dir=None)  # TFDS squad/v1.1 | squad/v2.0
    feats = convert_examples_to_features(es, tokenizer, max_seq_length=384, doc_stride=128,
                                         max_query_length=64, is_training=True)

Features, one row per doc-stride window ([CLS] question [SEP] context window [SEP]):
  input_ids, input_mask, segment_ids  int32 [N, T]
  start_positions, end_positions      int32 [N]  answer token positions; 0 ([CLS]) when the question is
                                                 unanswerable or the answer is not inside this window
  is_impossible                       int32 [N]  1 when start_positions == 0 for either reason
  example_index                       int32 [N]  row of the ExampleSet
  with_offsets=True (the default for evaluation) adds, for bert_jax.evaluation.squad_postprocess:
  token_char_spans                    int32 [N, T, 2]  [start, end) of each context token in context_text,
                                                       -1 for [CLS]/question/[SEP]/padding
  token_is_max_context                bool  [N, T]     this window gives the token its most context

Answer positions come from character offsets, not Google's whitespace words: every WordPiece token knows the
exact characters it covers (`FullTokenizer.tokenize_with_offsets`), the answer's first token is the first one
ending after `answer_start` and its last token the last one starting before `answer_start + len(text)`.
This handles accents, Chinese (one token per character, CMRC2018) and answers inside a word. The
`answer_start` check is Google's: the context at answer_start must read the answer text (whitespace runs
compared as single spaces); a mismatch is an error naming file and question id, or with on_error="skip"
a counted skip (Google's run_squad skips and logs them). Only training reads check answers; evaluation keeps
all questions and scores against every gold answer text; v1.1 evaluation questions without any answer (scored
0 whatever is predicted) are counted in an input warning (`input_warnings.warn_input`; an error under
--strict).

SquadTask is the task kind: a start / end logit per token (heads.BertForQuestionAnswering), the mean of the
two cross-entropies as the loss, Google's n-best post-processing and the official scripts' metrics.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError
from bert_jax.evaluation import squad as squad_eval
from bert_jax.evaluation import squad_postprocess
from bert_jax.fileio import write_text_atomic
from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.base import Task
from bert_jax.input_warnings import warn_input
from bert_jax.models import heads, losses


@dataclasses.dataclass
class SquadExample:
  qas_id: str
  question_text: str
  context_text: str
  answer_text: Optional[str] = None   # training answer (the first), None when impossible / not training
  start_char: Optional[int] = None    # its [start_char, end_char) in context_text (checked)
  end_char: Optional[int] = None
  is_impossible: bool = False
  answers: List[str] = dataclasses.field(default_factory=list)  # all gold texts, [] when unanswerable
  title: str = ""


def split_file_names(split: str, version_2_with_negative: bool) -> List[str]:
  v = "v2.0" if version_2_with_negative else "v1.1"
  stem = {"train": "train", "dev": "dev", "validation": "dev", "test": "test"}.get(split, split)
  # CMRC2018's release names its files cmrc2018_train.json / cmrc2018_dev.json (SQuAD format, Chinese)
  return [f"{stem}-{v}.json", f"{stem}.json", f"cmrc2018_{stem}.json"]


def read_squad_split(data_dir: str, split: str, version_2_with_negative: bool = False,
                     on_error: Optional[str] = None) -> common.ExampleSet:
  """Reads <data_dir>/{train,dev}-v1.1.json (or -v2.0); falls back to <split>.json and CMRC2018's own
  cmrc2018_<split>.json."""
  path = common.find_file(data_dir, split_file_names(split, version_2_with_negative), f"SQuAD {split}")
  return read_squad(path, version_2_with_negative, is_training=(split == "train"), split=split,
                    on_error=on_error)


def _line_finder(raw: str):
  cache: Dict[str, Optional[int]] = {}

  def line_of(qid: str) -> Optional[int]:
    if qid not in cache:
      pos = raw.find(json.dumps(qid, ensure_ascii=False))
      if pos < 0:
        pos = raw.find(json.dumps(qid))
      cache[qid] = raw.count("\n", 0, pos) + 1 if pos >= 0 else None
    return cache[qid]

  return line_of


def locate_answer(context: str, text: str, answer_start: int) -> Optional[tuple]:
  """[start, end) of `text` at `answer_start` in `context`, or None when the context does not read the
  answer there. Whitespace runs compare as one space (Google's check); surrounding spaces of the answer
  text are ignored."""
  if not isinstance(answer_start, int) or answer_start < 0 or answer_start > len(context) or not text.strip():
    return None
  lead = len(text) - len(text.lstrip())
  core = text.strip()
  s = answer_start + lead
  if context[s:s + len(core)] == core:
    return s, s + len(core)
  # Whitespace-insensitive: walk the context from s, matching the answer's words in order.
  words = core.split()
  pos = s
  for k, w in enumerate(words):
    if k > 0:
      if pos >= len(context) or not context[pos].isspace():
        return None
      while pos < len(context) and context[pos].isspace():
        pos += 1
    if context[pos:pos + len(w)] != w:
      return None
    pos += len(w)
  return s, pos


def read_squad(path: str, version_2_with_negative: bool = False, is_training: bool = True,
               split: str = "train", on_error: Optional[str] = None) -> common.ExampleSet:
  """Parses an official-format SQuAD JSON file (data -> paragraphs -> qas).

  on_error: "raise" or "skip" for bad questions (answer not at answer_start, a training question without an
  answer in v1 mode, missing fields); default "skip" for training (as Google's run_squad), "raise" otherwise.
  """
  if on_error is None:
    on_error = "skip" if is_training else "raise"
  raw = common.read_utf8(path)
  if not raw.strip():
    raise common.TaskDataError(path, None, "the file is empty; expected SQuAD JSON {\"data\": [...]}")
  try:
    data = json.loads(raw)
  except json.JSONDecodeError as e:
    raise common.TaskDataError(path, e.lineno, f"invalid JSON: {e.msg} (column {e.colno})") from None
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise common.TaskDataError(path, 1, "expected a JSON object with a 'data' list (SQuAD format)")
  line_of = _line_finder(raw)
  report = common.SkipReport(source=path)
  bad = common.ErrorPolicy(on_error, report)
  examples: List[SquadExample] = []
  seen_ids = set()
  for a_i, article in enumerate(data["data"]):
    title = article.get("title", "")
    for p_i, para in enumerate(article.get("paragraphs", [])):
      if "context" not in para or "qas" not in para:
        bad(path, None, "missing field", f"article {a_i} paragraph {p_i} lacks 'context' or 'qas'")
        continue
      context = para["context"]
      for qa in para["qas"]:
        ex = _parse_qa(qa, context, title, version_2_with_negative, is_training, path, line_of, bad,
                       f"article {a_i} paragraph {p_i}")
        if ex is not None and ex.qas_id in seen_ids:
          # predictions.json, the gold answers and the scores are keyed by id: a second question with the same
          # id silently took the first one's place
          bad(path, line_of(ex.qas_id), "duplicate question id",
              f"id {ex.qas_id} (article {a_i} paragraph {p_i}) is already a question's id; ids must be unique")
          continue
        if ex is not None:
          seen_ids.add(ex.qas_id)
          examples.append(ex)
  _warn_unanswered(examples, path, version_2_with_negative)
  return common.finish(examples, path, split, report)


def _warn_unanswered(examples: Sequence[SquadExample], source: str, version_2_with_negative: bool) -> None:
  """v1.1 evaluation: questions without a gold answer score 0 whatever is predicted; say how many."""
  if version_2_with_negative:
    return
  ids = [e.qas_id for e in examples if not e.answers]
  if ids:
    warn_input(f"{source}: {len(ids)} of {len(examples)} questions have no answer (e.g. id "
                      f"{', '.join(ids[:3])}); SQuAD v1.1 scores them 0 whatever is predicted (task=squad_v2 "
                      "treats them as unanswerable)")


def _parse_qa(qa, context, title, v2, is_training, path, line_of, bad, where) -> Optional[SquadExample]:
  qid = str(qa.get("id", ""))
  # The line is looked up only for a report: a search of the raw text per question made reading quadratic
  # (the 37k-question People's Daily QA train file: minutes).
  if not qid or "question" not in qa:
    bad(path, line_of(qid) if qid else None, "missing field", f"a question in {where} lacks 'id' or 'question'")
    return None
  answers = qa.get("answers", []) or []
  is_impossible = bool(qa.get("is_impossible", False)) if v2 else False
  if v2 and "is_impossible" not in qa and not answers:
    is_impossible = True
  ex = SquadExample(qas_id=qid, question_text=qa["question"], context_text=context,
                    is_impossible=is_impossible, title=title,
                    answers=[] if is_impossible else [a.get("text", "") for a in answers])
  if not is_training:
    return ex
  if is_impossible:
    return ex
  if not answers:
    bad(path, line_of(qid), "no answer", f"question id {qid} has no answer (a v1.1 training question needs one"
        f"{'' if v2 else '; use version_2_with_negative for unanswerable questions'})")
    return None
  first = answers[0]
  text, start = first.get("text"), first.get("answer_start")
  span = locate_answer(context, text, start) if isinstance(text, str) else None
  if span is None:
    shown = context[start:start + len(text)] if isinstance(start, int) and isinstance(text, str) else None
    bad(path, line_of(qid), "answer mismatch", f"question id {qid}: answer {text!r} is not at answer_start={start!r}"
        f" (context there reads {shown!r})", hint="--config.on_error=skip counts and skips such training "
        "questions, as Google's run_squad does")
    return None
  ex.answer_text = text
  ex.start_char, ex.end_char = span
  return ex


def read_squad_tfds(split: str, version_2_with_negative: bool = False, data_dir: Optional[str] = None,
                    download: bool = False, on_error: Optional[str] = None) -> common.ExampleSet:
  """Reads TFDS squad/v1.1 or squad/v2.0 (`split`: train or dev/validation)."""
  name = "squad/v2.0" if version_2_with_negative else "squad/v1.1"
  tsplit = {"dev": "validation", "eval": "validation"}.get(split, split)
  is_training = tsplit == "train"
  if on_error is None:
    on_error = "skip" if is_training else "raise"
  source = f"tfds:{name}:{tsplit}"
  ds, _ = common.load_tfds(name, tsplit, data_dir, download)
  report = common.SkipReport(source=source)
  bad = common.ErrorPolicy(on_error, report)
  examples: List[SquadExample] = []
  for n, ex in enumerate(ds):
    qa = {"id": common.as_text(ex["id"], source), "question": common.as_text(ex["question"], source),
          "answers": [{"text": common.as_text(t, source), "answer_start": int(s)}
                      for t, s in zip(ex["answers"]["text"], ex["answers"]["answer_start"])]}
    if version_2_with_negative:
      qa["is_impossible"] = bool(ex["is_impossible"])
    title = common.as_text(ex.get("title", b""), source)
    parsed = _parse_qa(qa, common.as_text(ex["context"], source), title, version_2_with_negative, is_training,
                       source, lambda _qid, n=n: n, bad, f"example {n}")
    if parsed is not None:
      examples.append(parsed)
  _warn_unanswered(examples, source, version_2_with_negative)
  return common.finish(examples, source, "train" if is_training else "dev", report)


# --------------------------------------------------------------------------------------------------------
# Features.
# --------------------------------------------------------------------------------------------------------
def _doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int):
  """Google's sliding windows: (start, length) pairs covering all tokens."""
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans or [(0, 0)]


def _is_max_context(spans, cur_index: int, position: int) -> bool:
  """Google's _check_is_max_context: score = min(left, right context) + 0.01 * window length."""
  best_score, best_index = None, None
  for i, (start, length) in enumerate(spans):
    end = start + length - 1
    if position < start or position > end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_index = score, i
  return cur_index == best_index


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer, max_seq_length: int = 384,
                                 doc_stride: int = 128, max_query_length: int = 64,
                                 is_training: bool = False,
                                 with_offsets: Optional[bool] = None) -> Dict[str, np.ndarray]:
  """Doc-stride windows as numpy arrays (see the module docstring)."""
  if with_offsets is None:
    with_offsets = not is_training
  cls_id, sep_id = common.special_ids(tokenizer)
  if doc_stride <= 0:
    raise ValueError(f"doc_stride must be positive, got {doc_stride}")
  rows = {k: [] for k in ("ids", "seg", "start", "end", "imp", "ex", "spans", "maxctx")}
  for ex_i, ex in enumerate(examples):
    q_ids = tokenizer.encode(ex.question_text)[:max_query_length]
    max_tokens_for_doc = max_seq_length - len(q_ids) - 3
    if max_tokens_for_doc <= 0:
      raise ValueError(f"max_seq_length={max_seq_length} leaves no room for the context after a "
                       f"{len(q_ids)}-token question (max_query_length={max_query_length})")
    doc_tokens, doc_spans = tokenizer.tokenize_with_offsets(ex.context_text)
    doc_ids = tokenizer.convert_tokens_to_ids(doc_tokens)
    tok_start = tok_end = None
    if is_training and not ex.is_impossible:
      if ex.start_char is None:
        raise ValueError(f"question {ex.qas_id}: training features need answer offsets (read with "
                         "is_training=True)")
      inside = [k for k, (s, e) in enumerate(doc_spans) if e > ex.start_char and s < ex.end_char]
      if inside:
        tok_start, tok_end = inside[0], inside[-1]
    windows = _doc_spans(len(doc_ids), max_tokens_for_doc, doc_stride)
    offset = len(q_ids) + 2
    for w_i, (w_start, w_len) in enumerate(windows):
      ids = [cls_id] + q_ids + [sep_id] + doc_ids[w_start:w_start + w_len] + [sep_id]
      seg = [0] * offset + [1] * (w_len + 1)
      start_pos = end_pos = 0
      if tok_start is not None and w_start <= tok_start and tok_end <= w_start + w_len - 1:
        start_pos, end_pos = tok_start - w_start + offset, tok_end - w_start + offset
      rows["ids"].append(ids)
      rows["seg"].append(seg)
      rows["start"].append(start_pos)
      rows["end"].append(end_pos)
      rows["imp"].append(int(start_pos == 0))
      rows["ex"].append(ex_i)
      if with_offsets:
        spans = np.full((max_seq_length, 2), -1, dtype=np.int32)
        maxctx = np.zeros((max_seq_length,), dtype=bool)
        for k in range(w_len):
          spans[offset + k] = doc_spans[w_start + k]
          maxctx[offset + k] = _is_max_context(windows, w_i, w_start + k)
        rows["spans"].append(spans)
        rows["maxctx"].append(maxctx)
  out = common.model_inputs(rows["ids"], rows["seg"], max_seq_length)
  out["start_positions"] = np.asarray(rows["start"], dtype=np.int32)
  out["end_positions"] = np.asarray(rows["end"], dtype=np.int32)
  out["is_impossible"] = np.asarray(rows["imp"], dtype=np.int32)
  out["example_index"] = np.asarray(rows["ex"], dtype=np.int32)
  if with_offsets:
    n = len(rows["ids"])
    out["token_char_spans"] = (np.stack(rows["spans"]) if n else np.zeros((0, max_seq_length, 2), np.int32))
    out["token_is_max_context"] = (np.stack(rows["maxctx"]) if n else np.zeros((0, max_seq_length), bool))
  return out


def gold_answers(example_set) -> Dict[str, List[str]]:
  """{qid: [gold texts]} for bert_jax.evaluation.squad.evaluate (empty list = unanswerable)."""
  return {e.qas_id: list(e.answers) for e in example_set}


def write_json(path: str, obj) -> str:
  d = os.path.dirname(path)
  if d:
    os.makedirs(d, exist_ok=True)
  return write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2))


class SquadTask(Task):
  """SQuAD v1.1 (`squad_v1`) or v2.0 with unanswerable questions (`squad_v2`); language="zh" scores like
  CMRC2018."""
  kind = "squad"
  head = "question_answering"
  metrics_in_percent = True
  label_keys = ("start_positions", "end_positions")
  test_splits = ()
  # Evaluation windows carry no answer positions (only training reads locate the answers): no eval loss.
  eval_loss = False

  def __init__(self, version_2_with_negative: bool, doc_stride: int = 128, max_query_length: int = 64,
               n_best_size: int = 20, max_answer_length: int = 30, null_score_diff_threshold: float = 0.0,
               language: str = "auto", on_error: Optional[str] = None):
    super().__init__(on_error)
    self.version_2_with_negative = version_2_with_negative
    self.name = "squad_v2" if version_2_with_negative else "squad_v1"
    self.tfds_name = "squad/v2.0" if version_2_with_negative else "squad/v1.1"
    self.main_metric = "f1"
    self.doc_stride, self.max_query_length = doc_stride, max_query_length
    self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
    self.null_score_diff_threshold = null_score_diff_threshold
    self.language = language

  @classmethod
  def create(cls, name, **kwargs):
    return cls(version_2_with_negative=name == "squad_v2", **kwargs)

  @classmethod
  def from_config(cls, name, config, label_list=None):
    # The version follows config.version_2_with_negative (set from the config's task name).
    task = cls.create("squad_v2" if config.version_2_with_negative else "squad_v1", on_error=config.on_error,
                      doc_stride=int(config.doc_stride), max_query_length=int(config.max_query_length),
                      n_best_size=int(config.n_best_size), max_answer_length=int(config.max_answer_length),
                      null_score_diff_threshold=float(config.null_score_diff_threshold),
                      language=config.squad_language)
    if label_list is not None:
      task.use_label_list(label_list)
    return task

  @classmethod
  def from_info(cls, name, info):
    return cls.create(name, doc_stride=int(info.get("doc_stride", 128)),
                      max_query_length=int(info.get("max_query_length", 64)),
                      n_best_size=int(info.get("n_best_size", 20)),
                      max_answer_length=int(info.get("max_answer_length", 30)),
                      null_score_diff_threshold=float(info.get("null_score_diff_threshold", 0.0)))

  def check_max_seq_length(self, max_seq_length: int) -> None:
    if self.max_query_length + 3 >= max_seq_length:
      raise UserError(f"config.max_seq_length={max_seq_length} leaves no room for the context after "
                      f"config.max_query_length={self.max_query_length} question tokens + 3 specials")

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    on_error = on_error or self.on_error
    if use_tfds:
      return read_squad_tfds(split, self.version_2_with_negative, tfds_data_dir or data_dir, download, on_error)
    if data_dir is None:
      raise ValueError("data_dir is required to read SQuAD files")
    return read_squad_split(data_dir, split, self.version_2_with_negative, on_error)

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    return convert_examples_to_features(example_set, tokenizer, max_seq_length, self.doc_stride,
                                        self.max_query_length, is_training=is_training)

  def build_head(self, bert_cfg, dropout_rate=None):
    return heads.BertForQuestionAnswering(bert_cfg)

  def loss_sums(self, outputs, batch):
    # Google's run_squad: mean of the start and end cross-entropies over the window's positions.
    w = self.loss_weights(batch)
    nll = 0.5 * (losses.cross_entropy(outputs["start_logits"], batch["start_positions"])
                 + losses.cross_entropy(outputs["end_logits"], batch["end_positions"]))
    return {"task_loss_sum": jnp.sum(nll * w), "task_weight_sum": jnp.sum(w)}

  def predict(self, example_set, features, outputs):
    return squad_postprocess.postprocess_predictions(
        example_set, features, outputs["start_logits"], outputs["end_logits"], n_best_size=self.n_best_size,
        max_answer_length=self.max_answer_length, version_2_with_negative=self.version_2_with_negative,
        null_score_diff_threshold=self.null_score_diff_threshold)

  def evaluate(self, example_set, predictions, split=None):
    gold = gold_answers(example_set)
    if self.version_2_with_negative:
      return squad_eval.evaluate_v2(gold, predictions.predictions, predictions.null_odds,
                                    na_prob_thresh=self.null_score_diff_threshold, language=self.language)
    return squad_eval.evaluate_v1(gold, predictions.predictions, language=self.language)

  def write_predictions(self, output_dir, split, example_set, predictions):
    prefix = "" if split in ("dev", "validation") else f"{split}_"
    return list(squad_postprocess.write_prediction_files(output_dir, predictions, prefix).values())

  def text_examples(self, texts, text_pairs=None):
    """texts are the questions, text_pairs their contexts."""
    if text_pairs is None:
      raise common.PredictInputError("SQuAD prediction needs text_pairs=contexts (one per question); from the "
                                     "command line: --pairs, with question<TAB>context lines")
    return [SquadExample(qas_id=str(i), question_text=q, context_text=c)
            for i, (q, c) in enumerate(zip(texts, text_pairs))]

  def readable_predictions(self, examples, features, outputs):
    res = self.predict(examples, features, outputs)
    out = []
    for ex in examples:
      nbest = res.nbest.get(ex.qas_id, [])
      d = {"answer": res.predictions[ex.qas_id], "probability": float(nbest[0]["probability"]) if nbest else 0.0,
           "nbest": nbest}
      if ex.qas_id in res.null_odds:
        d["null_odds"] = float(res.null_odds[ex.qas_id])
      out.append(d)
    return out
