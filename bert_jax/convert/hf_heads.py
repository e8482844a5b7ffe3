"""Fine-tuned task heads in and out of Hugging Face folders, for each family that has them (hf.py: Bert*,
hf_albert.py: Albert*, hf_modernbert.py: ModernBert*). transformers' four task classes onto ours:

  transformers class           finetune_info.json head    our params group    its transformers key
  ...ForSequenceClassification  sequence_classification    classifier          classifier.*
  ...ForTokenClassification     token_classification       classifier          classifier.*
  ...ForQuestionAnswering       question_answering         qa_outputs          qa_outputs.* (ModernBERT: classifier.*)
  ...ForMultipleChoice          multiple_choice            classifier          classifier.*

import-hf keeps such a head (keep_task_head) where a task kind here takes it (imported_task: problem_type and
id2label pick the task and its labels) and writes finetune_info.json beside the params (write_finetune_info), so
`predict classify` answers as transformers' model does and `finetune load_head=true` continues from it.
export-hf of a fine-tuned checkpoint (its finetune_info.json names the head: task_architecture) writes the class
back (write_task_model) with id2label, label2id and problem_type; what the class cannot compute (a CRF, a
sentence pooled other than the family's class pools it) is a ConversionError.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from bert_jax import fileio
from bert_jax.convert import mapping
from bert_jax.convert.hf_folder import write_folder
from bert_jax.convert.mapping import ConversionError
from bert_jax.models.config import BertConfig
from bert_jax.pretrained import params_dir

# an imported question-answering head is the squad_v1 task (an answer to every question, as transformers'
# question-answering pipeline by default), with its default windows and answer limits
_SQUAD_DEFAULTS = {"doc_stride": 128, "max_query_length": 64, "n_best_size": 20, "max_answer_length": 30,
                   "null_score_diff_threshold": 0.0, "version_2_with_negative": False}
# finetune_info.json's max_seq_length of an imported head (predict pads or packs rows to it), or the model's
# max_position_embeddings where smaller: ModernBERT's 8,192 positions would make every row of `predict
# classify` 8,192 tokens; 512 holds a paragraph
IMPORTED_MAX_SEQ_LENGTH = 512
PROBLEM_TYPES = {"classification": "single_label_classification", "regression": "regression",
                 "multilabel": "multi_label_classification"}
SENTENCE_HEADS = ("sequence_classification", "multiple_choice")   # the heads that read a pooled vector
_SCHEME_TAG = re.compile(r"^(O|[BIES]-.+)$")   # the NER task's tags (BIO / BIOES)


@dataclasses.dataclass(frozen=True)
class TaskClasses:
  """A family's task classes. `classes`: transformers class -> (finetune_info.json head, our params group, its
  transformers key); `encoder_arrays(params, config, groups, source)`: the encoder's tensors under the classes'
  keys (layout_arrays: by the family's name table), with the "pooler" group, what the sentence classes pool
  with, where `groups` names it; `pooler_heads`: the heads whose class holds the pooler (BERT's token and QA
  classes have none); `pooling`: how the sentence classes pool, and how to fine-tune for it (the refusal of
  another pooling); `body`: what an import keeps of a head it cannot (the report's note); `config_dict(config,
  architecture, vocab_file)`: config.json; `folder_options`: hf_folder.write_folder's tokenizer options."""

  classes: Dict[str, Tuple[str, str, str]]
  encoder_arrays: Callable[..., Dict[str, np.ndarray]]
  pooler_heads: Tuple[str, ...]
  pooling: str
  body: str
  config_dict: Callable[..., dict]
  folder_options: Dict[str, str] = dataclasses.field(default_factory=dict)


def class_names(family: str, qa_key: str = "qa_outputs") -> Dict[str, Tuple[str, str, str]]:
  """TaskClasses.classes of the classes transformers names {family}For*."""
  return {f"{family}ForSequenceClassification": ("sequence_classification", "classifier", "classifier"),
          f"{family}ForTokenClassification": ("token_classification", "classifier", "classifier"),
          f"{family}ForQuestionAnswering": ("question_answering", "qa_outputs", qa_key),
          f"{family}ForMultipleChoice": ("multiple_choice", "classifier", "classifier")}


def layout_arrays(layout: mapping.Layout) -> Callable[..., Dict[str, np.ndarray]]:
  """TaskClasses.encoder_arrays of a family with a name table (mapping.Layout)."""
  def arrays(params, config: BertConfig, groups: Tuple[str, ...], source: str) -> Dict[str, np.ndarray]:
    return mapping.export_arrays(params, "hf", config, groups=groups, layout=layout)
  return arrays


def task_architecture_of(config_dict: dict, classes: TaskClasses) -> Optional[str]:
  """The first of config.json's architectures that is one of the family's task classes, or None."""
  archs = config_dict.get("architectures")
  return next((a for a in (archs if isinstance(archs, list) else []) if a in classes.classes), None)


# ---- import --------------------------------------------------------------------------------------------------
def classifier_params(state: Dict[str, np.ndarray], prefix: str = "classifier") -> Dict[str, np.ndarray]:
  """A fine-tuned task head's {kernel [H, K], bias [K]} in our layout (transformers' [K, H] transposed)."""
  return {"kernel": np.ascontiguousarray(state[prefix + ".weight"].T), "bias": state[prefix + ".bias"]}


def id2label_list(d: dict, num_outputs: int, source: str) -> List[str]:
  """config.json's id2label as a list by id (transformers' LABEL_i where it has none)."""
  raw = d.get("id2label")
  if not raw:
    return [f"LABEL_{i}" for i in range(num_outputs)]
  try:
    by_id = {int(k): str(v) for k, v in raw.items()}
  except (AttributeError, TypeError, ValueError):
    raise ConversionError(f"{source}: id2label={raw!r}; expected an object {{id: label}}") from None
  if sorted(by_id) != list(range(num_outputs)):
    raise ConversionError(f"{source}: id2label has ids {sorted(by_id)[:8]} but the task head has {num_outputs} "
                          f"outputs; expected the ids 0..{num_outputs - 1}")
  labels = [by_id[i] for i in range(num_outputs)]
  if len(set(labels)) != len(labels):
    raise ConversionError(f"{source}: id2label gives two ids one label ({labels}); each id needs its own")
  return labels


def imported_task(d: dict, head: str, arch: str, num_outputs: int, config: BertConfig, source: str):
  """(the task fields of finetune_info.json for the fine-tuned `head` of `arch`, "") where a task kind here
  takes it, else (None, why not). Sequence classification: problem_type (or, unset, transformers' rule: 1
  output is regression) picks classification / regression / multilabel; token classification is the ner task,
  whose labels must be BIO or BIOES tags; question answering is squad_v1 (_SQUAD_DEFAULTS); multiple choice the
  multiple_choice task."""
  info = {"head": head, "label_list": None, "num_labels": num_outputs, "pooling": "cls", "architecture": arch,
          "max_seq_length": min(IMPORTED_MAX_SEQ_LENGTH, config.max_position_embeddings),
          "imported_from": os.path.abspath(os.path.dirname(source))}
  if head in ("question_answering", "multiple_choice"):
    want = 2 if head == "question_answering" else 1
    if num_outputs != want:
      return None, f"{num_outputs} outputs; {arch} has {want}"
    if head == "multiple_choice":
      return dict(info, task="multiple_choice", kind="classification"), ""
    return dict(info, task="squad_v1", kind="squad", **_SQUAD_DEFAULTS), ""
  labels = id2label_list(d, num_outputs, source)
  info["label_list"] = labels
  if head == "token_classification":
    bad = [t for t in labels if not _SCHEME_TAG.match(t)]
    if bad:
      return None, (f"its labels {bad[:4]} are not BIO/BIOES tags (O, B-X, I-X, E-X, S-X), which the ner task "
                    "reads")
    scheme = "BIOES" if any(t[:2] in ("E-", "S-") for t in labels) else "BIO"
    return dict(info, task="ner", kind="ner", ner_scheme=scheme, ner_mode="conlleval", crf=False), ""
  problem = d.get("problem_type") or ("regression" if num_outputs == 1 else "single_label_classification")
  kind = {v: k for k, v in PROBLEM_TYPES.items()}.get(problem)
  if kind is None:
    return None, f"problem_type={problem!r} is none of {sorted(PROBLEM_TYPES.values())}"
  if kind == "regression":
    if num_outputs != 1:
      return None, f"problem_type='regression' with {num_outputs} outputs; the regression task reads one score"
    return dict(info, task="classification", kind="regression", label_list=None, truncation="head",
                truncation_head_fraction=0.25), ""
  task = "multilabel" if kind == "multilabel" else "classification"
  extra = {"multilabel_threshold": 0.5, "multilabel_separator": "|"} if kind == "multilabel" else {}
  return dict(info, task=task, kind=kind, truncation="head", truncation_head_fraction=0.25, **extra), ""


def _head_params(state: Dict[str, np.ndarray], prefix: str, config: BertConfig, folder: str):
  """classifier_params, the shapes checked: weight [K, hidden_size], bias [K]."""
  w, b = state[prefix + ".weight"], state.get(prefix + ".bias")
  if w.ndim != 2 or w.shape[1] != config.hidden_size or b is None or b.shape != (w.shape[0],):
    raise ConversionError(f"{folder}: {prefix}.weight {tuple(w.shape)} / {prefix}.bias "
                          f"{None if b is None else tuple(b.shape)}; expected [labels, {config.hidden_size}] "
                          "and [labels]")
  return {k: np.asarray(v, np.float32) for k, v in classifier_params(state, prefix).items()}


@dataclasses.dataclass
class KeptHead:
  """What keep_task_head decided of a folder's task head: `params` (None: not kept) go to params[group]."""

  arch: str
  key: str
  group: str
  params: Optional[Dict[str, np.ndarray]] = None
  info: Optional[dict] = None


def keep_task_head(d: dict, state: Dict[str, np.ndarray], config: BertConfig, config_path: str,
                   classes: TaskClasses, patterns: list, report: mapping.ConversionReport) -> Optional[KeptHead]:
  """The task head of the class config.json's architectures names (None: no such class, or its keys are
  absent): kept where a task kind takes it (imported_task), else reported as not imported. Either way its keys
  join `patterns` (the encoder import passes over them); add_kept_head puts a kept one into the params."""
  folder = os.path.dirname(config_path)
  arch = task_architecture_of(d, classes)
  if arch is None:
    return None
  head, group, key = classes.classes[arch]
  if not any(k.startswith(key + ".") for k in state):
    return None
  out = KeptHead(arch, key, group)
  outputs = state[key + ".weight"].shape[0] if key + ".weight" in state else "?"
  if any(p.search(key + ".weight") for p in patterns):
    why = "--ignore drops it"
  elif outputs == "?":
    why = f"no {key}.weight"
  else:
    out.info, why = imported_task(d, head, arch, outputs, config, config_path)
  patterns.append(re.compile(rf"^{re.escape(key)}\."))
  if out.info is None:
    report.notes.append(f"{arch}'s task head ({key}.*, {outputs} outputs) not imported ({why}): {classes.body}")
    return out
  out.params = _head_params(state, key, config, folder)
  info = out.info
  labelled = ", labels from config.json's id2label" if info["label_list"] else ""
  report.notes.append(
      f"{arch}'s task head ({key}.*, {outputs} outputs) kept as params['{group}'] with finetune_info.json "
      f"(task={info['task']}, kind={info['kind']}{labelled}, max_seq_length={info['max_seq_length']}): predict "
      "classify uses it, and finetune continues from it with init_checkpoint=DIR load_head=true")
  return out


def add_kept_head(params: dict, kept: Optional[KeptHead], report: mapping.ConversionReport) -> None:
  """A kept head into `params` (params[group]), counted as loaded rather than ignored."""
  if kept is None or kept.params is None:
    return
  params[kept.group] = kept.params
  report.loaded += len(kept.params)
  report.ignored = [n for n in report.ignored if not n.startswith(kept.key + ".")]


def write_finetune_info(output: str, kept: Optional[KeptHead]) -> None:
  """finetune_info.json of a kept head beside the params dir `output` (its casing from convert_info.json)."""
  if kept is None or kept.info is None:
    return
  casing = params_dir.read_info(output).get("do_lower_case", False)
  fileio.write_json_atomic(os.path.join(output, params_dir.FINETUNE_INFO_NAME),
                           dict(kept.info, do_lower_case=bool(casing)))


# ---- export --------------------------------------------------------------------------------------------------
def task_architecture(ckpt, classes: TaskClasses) -> Optional[str]:
  """The transformers class of a fine-tuned checkpoint's task head (finetune_info.json's head, its params group
  present), or None."""
  head = (ckpt.finetune_info or {}).get("head")
  arch = next((a for a, (h, _, _) in classes.classes.items() if h == head), None)
  return arch if arch and isinstance(ckpt.params, dict) and classes.classes[arch][1] in ckpt.params else None


def check_exportable(info: dict, arch: str, classes: TaskClasses, where: str) -> None:
  """What `arch` cannot compute of a fine-tuned head is a ConversionError: a CRF (its Viterbi path is not a
  logit), a sentence or choice pooled other than by the class (pooling=cls: the family's pooler), a sequence
  classifier of a kind without a problem_type."""
  head = classes.classes[arch][0]
  if info.get("crf"):
    raise ConversionError(f"{where} says crf=true; {arch} has no CRF, so its tags would differ from this model's "
                          "Viterbi path: fine-tune without the CRF to export the tagger, or export the encoder "
                          "with --heads=none")
  if head in SENTENCE_HEADS and info.get("pooling", "cls") != "cls":
    raise ConversionError(f"{where} says pooling={info.get('pooling')!r}; {arch} reads the sentence "
                          f"{classes.pooling} to export it, or export the encoder with --heads=none")
  if head == "sequence_classification" and info.get("kind") not in PROBLEM_TYPES:
    raise ConversionError(f"{where} says kind={info.get('kind')!r}; {arch} serves {sorted(PROBLEM_TYPES)}")


def write_task_model(ckpt, output: str, source: str, classes: TaskClasses) -> mapping.ConversionReport:
  """A fine-tuned checkpoint (a finetune work dir, its best_checkpoint/, or an imported task head) -> the
  family's task class, with id2label, label2id and problem_type where the task has labels; transformers' logits
  equal ours (SQuAD v2's null answer is a decision on those logits, not a weight: the folder has none of it).
  What the class cannot compute is a ConversionError (check_exportable)."""
  input_dir = source or ckpt.directory
  info, config, params = ckpt.finetune_info, ckpt.config, ckpt.params
  arch = task_architecture(ckpt, classes)
  check_exportable(info, arch, classes, f"{input_dir}: finetune_info.json")
  head, group, key = classes.classes[arch]
  kernel, bias = np.asarray(params[group]["kernel"]), np.asarray(params[group]["bias"])
  k = kernel.shape[-1]
  labels = list((head in ("sequence_classification", "token_classification") and info.get("label_list"))
                or [f"LABEL_{i}" for i in range(k)])
  if kernel.shape != (config.hidden_size, k) or len(labels) != k:
    raise ConversionError(f"{input_dir}: {group}/kernel {kernel.shape} for {len(labels)} labels and hidden "
                          f"size {config.hidden_size}; expected [{config.hidden_size}, labels]")
  pooled = head in classes.pooler_heads
  groups = ("embeddings", "encoder") + (("pooler",) if pooled else ())
  arrays = classes.encoder_arrays(params, config, groups, input_dir)
  arrays[key + ".weight"] = np.ascontiguousarray(kernel.T.astype(np.float32))
  arrays[key + ".bias"] = bias.astype(np.float32)
  vocab_file = ckpt.require_vocab()
  config_json = classes.config_dict(config, arch, vocab_file)
  config_json.update(num_labels=k, id2label={str(i): l for i, l in enumerate(labels)},
                     label2id={l: i for i, l in enumerate(labels)})
  problem = PROBLEM_TYPES.get(info.get("kind")) if head == "sequence_classification" else None
  if problem:
    config_json["problem_type"] = problem
  write_folder(output, arrays, config_json, vocab_file, ckpt.do_lower_case, config.max_position_embeddings,
                  **classes.folder_options)
  report = mapping.ConversionReport(source=input_dir, fmt="hf")
  report.loaded = len(arrays)
  report.notes.append(f"--heads=auto: {arch} (the fine-tuned {info.get('task')} head, {k} outputs"
                      + (f", problem_type={problem}" if problem else "") + ")")
  extra = sorted(g for g in params if g not in ("bert", group))
  if extra:
    report.notes.append(f"not exported (no {arch} equivalent): params{extra}")
  if not pooled:
    report.notes.append(f"not exported: bert/pooler ({arch} has no pooler; it reads every token)")
  return report

