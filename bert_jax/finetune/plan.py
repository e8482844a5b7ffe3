"""A fine-tuning config resolved once into what the run will do: `resolve_finetune(config, workdir)`.

    plan = resolve_finetune(config, workdir)     # UserError for the first mistake, before weights or data are read
    print(plan.describe())                       # the short table finetune.py logs at start-up
    loop.run_plan(plan)                          # the loop only runs it

The fine-tuning counterpart of `bert_jax.pretrain.plan`, made of the same checks (`input_pipeline/checks.py`,
`engine/validation.py`). Each rule is written once, here, and raises `bert_jax.errors.UserError` naming
the field and what was expected:

  - the task is known (with "did you mean"); choice fields and ranges of every field that exists;
  - a data source: `data_dir` is an existing directory with a training file (train.*, in it or a task
    subfolder as GLUE's) when training, or `tfds_name` is set;
  - `init_checkpoint` names an existing checkpoint directory or a converted zoo model; do_train=False or
    load_head=True need one;
  - the vocab (`vocab_file`, else the checkpoint's) exists, holds [PAD] [UNK] [CLS] [SEP] [MASK] and has as
    many lines as the checkpoint's embedding rows; do_lower_case (auto: the checkpoint's, else the vocab's
    casing);
  - the model: the checkpoint's architecture (else the size table with `config.model`'s fields) with this
    run's runtime fields, by `train_step.model_config` as in pre-training; `max_seq_length` fits its position
    embeddings and the task's inputs (Task.check_max_seq_length: SQuAD's question and context);
  - `batch_size` a multiple of the data shards x `grad_accum_steps` (and of the process count); the learning
    rate (-1: by model size);
  - the task object with its options and label list (read from the training data where the task infers it);
  - the stability options: `layerwise_lr_decay` in (0, 1], `reinit_top_layers` at most the encoder's depth,
    `evals_per_epoch` (which, when set, decides the evaluation interval: `schedule`);
  - the multi-run settings (`config.multirun`, finetune/multirun.py decides per group whether they apply).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import os
from typing import Any, Dict, Optional, Tuple

import jax

from bert_jax.errors import UserError
from bert_jax.logs import log_once
from bert_jax.finetune import data as ft
from bert_jax.finetune import model as fm
from bert_jax.finetune.tasks import Task, task_class, task_names
from bert_jax.finetune.tasks.common import bool_or_none
from bert_jax.input_pipeline import checks
from bert_jax.models.config import SIZES, BertConfig
from bert_jax.pretrained import Pretrained, describe_pretrained, params_dir
from bert_jax.pretrained.load import check_vocab_matches
from bert_jax.engine import sharding
from bert_jax.engine import validation as v
from bert_jax.engine.checkpoints import config_to_dict
from bert_jax.engine.optimizers import OptimizerSettings, optimizer_settings
from bert_jax.engine.train_step import build_model_config

log = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True)
class FinetuneData:
  """Where the task's splits come from (finetune.data.load_split reads these fields)."""
  data_dir: str
  tfds_name: str
  tfds_data_dir: str
  max_seq_length: int
  eval_splits: Tuple[str, ...]       # "" in the config: the task's
  test_splits: Tuple[str, ...]
  max_examples_per_row: int = 0      # config.packing: pack feature rows best-fit, at most this many per row (0: off)


@dataclasses.dataclass(frozen=True)
class FinetunePlan:
  """What a fine-tuning run does (see the module docstring)."""
  workdir: str
  task: Task
  vocab_file: str
  do_lower_case: bool
  model: BertConfig
  classifier_dropout: float
  init_checkpoint: Optional[str]     # directory of the encoder (and, with load_head, the head) weights
  load_head: bool
  data: FinetuneData
  batch_size: int
  eval_batch_size: int               # rounded up to a multiple of the data shards
  mesh_shape: Tuple[int, ...]
  mesh_axes: Tuple[str, ...]
  logical_axis_rules: Tuple
  batch_shards: int
  optimizer: OptimizerSettings       # learning_rate resolved (-1: by model size)
  num_train_epochs: float
  max_train_steps: int               # -1: the epochs decide
  warmup_proportion: float
  seed: int
  grad_accum_steps: int
  nan_policy: str
  max_consecutive_nonfinite: int
  do_train: bool
  do_eval: bool
  do_predict: bool
  eval_every_steps: int              # 0: at the end of every epoch
  log_every_steps: int
  early_stopping_patience: int
  evals_per_epoch: int               # > 0: evaluate this many times per epoch (overrides eval_every_steps)
  layerwise_lr_decay: float          # 1.0: off
  reinit_top_layers: int             # 0: off; k: the pooler and the top k encoder layers start from random init
  multirun: Dict[str, Any]           # {enabled, max_replicas, memory_limit_gb} (finetune/multirun.py)
  save_best_checkpoint: bool
  compilation_cache_dir: str
  finetune_info: Dict[str, Any]      # best_checkpoint/finetune_info.json: what Predictor needs to rebuild the head
  config: Dict[str, Any]             # the run config as asked (config.json)

  def schedule(self, train_rows: int) -> Dict[str, int]:
    """{steps_per_epoch, total_steps, warmup_steps, eval_every_steps} for `train_rows` training features;
    eval_every_steps 0 means the end of every epoch."""
    steps_per_epoch = ft.num_batches(train_rows, self.batch_size) if train_rows else 0
    total = int(math.ceil(self.num_train_epochs * steps_per_epoch))
    if self.max_train_steps > 0:
      total = min(total, self.max_train_steps)
    every = self.eval_every_steps
    if self.evals_per_epoch > 0 and steps_per_epoch:
      every = max(1, steps_per_epoch // self.evals_per_epoch)
    return {"steps_per_epoch": steps_per_epoch, "total_steps": total,
            "warmup_steps": int(self.warmup_proportion * total), "eval_every_steps": every}

  def to_dict(self) -> dict:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("config", "task")}
    out.update(task=self.task.name, label_list=self.task.label_list, num_labels=self.task.num_labels,
               model=self.model.to_dict(), size=fm.size_name(self.model), data=dataclasses.asdict(self.data),
               optimizer=dataclasses.asdict(self.optimizer),
               # pooling / crf / truncation...: runs that differ in them cannot share one vmapped program
               task_options=dict(self.task.head_options(), **self.task.input_options()))
    return json.loads(json.dumps(out, default=list))

  def describe(self) -> str:
    """The plan as a short table (logged at start-up)."""
    m, o, t = self.model, self.optimizer, self.task
    labels = t.label_list if t.label_list is None or len(t.label_list) <= 8 else t.label_list[:8] + ["..."]
    rows = [
        ("task", f"{t.name} ({type(t).__name__}, main metric {t.main_metric}); labels {labels}"),
        ("data", (f"TFDS {self.data.tfds_name}" if self.data.tfds_name else self.data.data_dir)
         + f"; max_seq_length {self.data.max_seq_length}"
         + (f", truncation {t.truncation}" + (f" ({t.truncation_head_fraction:g} from the start)"
                                              if t.truncation == "head_tail" else "")
            if t.truncation != "head" else "")),
        ("start", (f"init_checkpoint {self.init_checkpoint}" + (" (with its head)" if self.load_head else ""))
         if self.init_checkpoint else f"random init (seed {self.seed})"),
        ("model", f"{fm.size_name(m)}: L{m.num_hidden_layers}/H{m.hidden_size}/A{m.num_attention_heads}, vocab "
                  f"{m.vocab_size}, {m.dtype}"),
        ("vocab", f"{self.vocab_file} ({'lower-cased' if self.do_lower_case else 'cased'})"),
        ("batch", f"{self.batch_size} (eval {self.eval_batch_size}) over {self.batch_shards} data shard(s); mesh "
                  + " x ".join(f"{a}={s}" for a, s in zip(self.mesh_axes, self.mesh_shape))),
        ("optimizer", f"{o.name} lr {o.learning_rate:g} ({o.schedule}), warmup {self.warmup_proportion:g} of "
                      f"{self.num_train_epochs:g} epochs" + (f" (at most {self.max_train_steps} steps)"
                                                             if self.max_train_steps > 0 else "")),
        ("stability", f"layerwise_lr_decay {self.layerwise_lr_decay:g}, reinit_top_layers "
                      f"{self.reinit_top_layers}, bias_correction {o.bias_correction}, evals_per_epoch "
                      f"{self.evals_per_epoch}, early_stopping_patience {self.early_stopping_patience}"),
        ("packing", f"on: at most {self.data.max_examples_per_row} examples per row (block-diagonal attention)"
                    if self.data.max_examples_per_row else "off: one example per row"),
        ("do", ", ".join(k for k, on in (("train", self.do_train), ("eval", self.do_eval),
                                          ("predict", self.do_predict)) if on)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {val}" for k, val in rows)


# ---- resolution --------------------------------------------------------------------------------------------
def _check_task_name(config) -> None:
  task, known = str(config.task), task_names()
  if task not in known:
    close = difflib.get_close_matches(task, known, n=2)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UserError(f"config.task={task!r} is not a task; expected one of {', '.join(known)}{hint}")


def _check_fields(config) -> None:
  """Choices and ranges (fields another change removed are skipped)."""
  checks.check_choice(config, "on_error", ("raise", "skip"))
  checks.check_choice(config, "ner_scheme", ("BIO", "BIOES"))
  checks.check_choice(config, "ner_mode", ("conlleval", "strict"))
  checks.check_choice(config, "squad_language", ("auto", "en", "zh"))
  for path in ("do_lower_case", "classification.header"):
    if checks.has(config, path):
      try:
        bool_or_none(checks.get_field(config, path), "config." + path)
      except ValueError as e:
        raise UserError(str(e)) from e
  checks.check_choice(config, "classification.file_format", ("", "tsv", "csv", "jsonl"))
  checks.check_choice(config, "nan_policy", ("stop", "skip"))
  checks.check_choice(config, "model.size", tuple(SIZES))
  for path in ("batch_size", "eval_batch_size", "grad_accum_steps", "log_every_steps", "doc_stride",
               "max_query_length", "n_best_size", "max_answer_length", "max_consecutive_nonfinite",
               "model.max_position_embeddings"):
    checks.check_range(config, path, lo=1, integer=True)
  for path in ("eval_every_steps", "early_stopping_patience", "evals_per_epoch", "reinit_top_layers"):
    checks.check_range(config, path, lo=0, integer=True)
  if int(config.early_stopping_patience) > 0 and not config.do_eval:
    raise UserError(f"config.early_stopping_patience={config.early_stopping_patience} stops on evaluations during "
                    "training, which config.do_eval=False turns off; set do_eval=true or early_stopping_patience=0")
  checks.check_range(config, "max_seq_length", lo=3, integer=True)    # [CLS] a [SEP]
  checks.check_range(config, "layerwise_lr_decay", lo=0, lo_open=True, hi=1)
  checks.check_range(config, "multirun.max_replicas", lo=1, integer=True)
  checks.check_range(config, "multirun.memory_limit_gb", lo=0, lo_open=True, allow=(-1.0, -1))
  checks.check_range(config, "max_train_steps", lo=1, allow=(-1,), integer=True)
  checks.check_range(config, "warmup_proportion", lo=0, hi=1)
  checks.check_range(config, "multilabel_threshold", lo=0, hi=1)
  checks.check_range(config, "model.hidden_dropout_prob", lo=0, hi=1, hi_open=True)
  checks.check_range(config, "model.attention_probs_dropout_prob", lo=0, hi=1, hi_open=True)
  checks.check_range(config, "model.classifier_dropout", lo=0, hi=1, hi_open=True, allow=(-1.0, -1))
  for path in ("model.hidden_size", "model.num_hidden_layers", "model.num_attention_heads",
               "model.intermediate_size"):
    checks.check_range(config, path, lo=1, allow=(-1,), integer=True)
  v.check_optimizer_fields(config, auto_learning_rate=True)
  if config.do_train:
    checks.check_range(config, "num_train_epochs", lo=0, lo_open=True)


# Task-specific config fields and their configs/finetune.py defaults, with the task kinds that read them
# (tests/test_finetune_input_errors.py checks the defaults against the config file).
TASK_FIELDS = {
    "classification": ({"classification.text_a": "text_a", "classification.text_b": "",
                        "classification.label": "label", "classification.header": "auto",
                        "classification.file_format": "", "classification.delimiter": "",
                        "classification.is_regression": False}, ("ClassificationTask", "MultilabelTask")),
    "multilabel": ({"multilabel_separator": "|", "multilabel_threshold": 0.5}, ("MultilabelTask",)),
    "ner": ({"ner_scheme": "BIO", "ner_mode": "conlleval"}, ("NerTask",)),
    "squad": ({"doc_stride": 128, "max_query_length": 64, "n_best_size": 20, "max_answer_length": 30,
               "null_score_diff_threshold": 0.0, "squad_language": "auto"}, ("SquadTask",)),
}
_BUILT_IN = ("GlueTask", "ClassificationTask", "MultilabelTask", "NerTask", "SquadTask", "MultipleChoiceTask")


def ignored_fields(config) -> list:
  """The task-specific fields set away from their defaults that `config.task` does not read (e.g.
  classification.text_b on a GLUE task, doc_stride on NER): such a setting changed nothing, in silence. []
  for a task class outside the built-in kinds (a plugin may read any field)."""
  cls = task_class(str(config.task))
  kinds = {k.__name__ for k in cls.__mro__}
  if not kinds & set(_BUILT_IN):
    return []
  out = []
  for fields, readers in TASK_FIELDS.values():
    if kinds & set(readers):
      continue
    for path, default in fields.items():
      if checks.has(config, path) and checks.get_field(config, path) != default:
        out.append(f"{path}={checks.get_field(config, path)!r}")
  return out


def _train_file_exists(data_dir: str) -> bool:
  """A file named train* in data_dir or one level below (GLUE's <data_dir>/<Task>/train.tsv); C3's own
  d-train.json / m-train.json, CoNLL-2003's eng.train and CMRC2018's cmrc2018_train.json count too."""
  def is_train(name: str) -> bool:
    # CoNLL-2003's own release names its training file eng.train (deu.train), CMRC2018's cmrc2018_train.json
    name = name.lower()
    return name.startswith(("train", "d-train", "m-train", "cmrc2018_train")) or name.endswith(".train")

  for d in [data_dir] + [os.path.join(data_dir, n) for n in sorted(os.listdir(data_dir))]:
    if os.path.isdir(d) and any(is_train(n) and os.path.isfile(os.path.join(d, n)) for n in os.listdir(d)):
      return True
  return False


def _resolve_data(config) -> FinetuneData:
  tfds = str(config.get("tfds_name", "") or "").strip()
  data_dir = str(config.data_dir or "")
  if not tfds:
    if not data_dir:
      raise UserError("config.data_dir is empty: pass --config.data_dir=DIR (the task's train/dev/test files) "
                      "or --config.tfds_name=NAME")
    if not os.path.isdir(data_dir):
      raise UserError(f"config.data_dir={data_dir!r}: no such directory")
    if config.do_train and not _train_file_exists(data_dir):
      raise UserError(f"config.data_dir={data_dir!r} has no training file (train.tsv, train.txt, "
                      f"train-v1.1.json, ... in it or in a task subfolder) for task {config.task!r}; see "
                      "docs/finetuning.md ('Tasks') for each task's layout, or pass --config.do_train=false")
  return FinetuneData(data_dir=data_dir, tfds_name=tfds, tfds_data_dir=str(config.tfds_data_dir or ""),
                      max_seq_length=int(config.max_seq_length),
                      eval_splits=tuple(ft.split_list(config.eval_splits)),
                      test_splits=tuple(ft.split_list(config.test_splits)))


def _resolve_checkpoint(config) -> Optional[Pretrained]:
  if config.init_checkpoint:
    directory = v.checkpoint_dir(config.init_checkpoint)
    try:
      return describe_pretrained(directory)
    except (FileNotFoundError, ValueError, TypeError) as e:   # an unreadable model_config.json
      raise UserError(f"config.init_checkpoint={config.init_checkpoint!r}: no readable model config in "
                      f"{directory} ({e})") from e
  if not config.do_train or config.get("load_head", False):
    raise UserError("config.do_train=false (or config.load_head=true) evaluates a fine-tuned model: pass "
                    "--config.init_checkpoint=DIR")
  return None


def _resolve_vocab(config, init: Optional[Pretrained]) -> Tuple[str, bool]:
  """(vocab file, do_lower_case): config.vocab_file, else the checkpoint's; casing from the config, else the
  checkpoint's, else the vocab's."""
  vocab_file, field = config.vocab_file, "config.vocab_file"
  if not vocab_file and init is not None:
    vocab_file = init.vocab_file or ""
    field = f"config.init_checkpoint={config.init_checkpoint!r}'s vocab.txt"
    if not vocab_file:
      raise UserError(f"config.init_checkpoint={config.init_checkpoint!r} ({init.directory}) has no vocab.txt: "
                      "pass --config.vocab_file=VOCAB (the vocab it was trained with)")
  if not vocab_file:
    raise UserError("no vocab: pass --config.vocab_file=vocab.txt (random init) or --config.init_checkpoint "
                    "(which carries vocab.txt)")
  checks.check_vocab(vocab_file, field)
  if init is not None:
    check_vocab_matches(init.config.vocab_size, init.directory, vocab_file)   # ids must mean the same
  lower = bool_or_none(config.do_lower_case, "do_lower_case")
  if lower is None:
    lower = init.do_lower_case if init is not None and init.do_lower_case is not None else \
        params_dir.guess_do_lower_case(vocab_file, hint=init.directory if init is not None else "")
  return vocab_file, bool(lower)


def _check_length(config, model: BertConfig, init: Optional[Pretrained]) -> None:
  length, max_positions = int(config.max_seq_length), model.max_position_embeddings
  source = (f"the checkpoint's max_position_embeddings ({init.directory})" if init is not None
            else "config.model.max_position_embeddings")
  if length > max_positions:
    raise UserError(f"config.max_seq_length={length} exceeds {source}={max_positions}: the position "
                    "embeddings have no row for the later tokens")


def resolve_packing(config, task: Optional[Task], model: BertConfig, field: str = "config.packing") -> int:
  """The cap of examples per row when packing is on (0: off); UserError for a cap below 1, a task, encoder
  family or attention path that cannot keep the examples of a row apart. `task` None: no task rule (predict)."""
  if not bool(config.get("packing", False)):
    return 0
  cap = config.get("max_examples_per_row", 8)
  if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
    raise UserError(f"config.max_examples_per_row={cap!r}; expected an integer >= 1 (examples in one packed row)")
  why = task.packing_refusal() if task is not None else ""
  if why:
    raise UserError(f"{field}=true is not supported here: {why}; set packing=false")
  v.packed_model(model, int(cap), f"{field}=true")
  return int(cap)


def _finetune_info(config, task: Task, do_lower_case: bool) -> Dict[str, Any]:
  info = {"task": task.name, "kind": task.kind, "head": task.head, "label_list": task.label_list,
          "num_labels": task.num_labels, "max_seq_length": int(config.max_seq_length),
          "do_lower_case": do_lower_case, "doc_stride": int(config.doc_stride),
          "max_query_length": int(config.max_query_length), "n_best_size": int(config.n_best_size),
          "max_answer_length": int(config.max_answer_length),
          "null_score_diff_threshold": float(config.null_score_diff_threshold),
          "version_2_with_negative": bool(getattr(task, "version_2_with_negative", False)),
          "ner_scheme": config.ner_scheme, "ner_mode": config.ner_mode,
          "classification": config_to_dict(config.classification)}
  info.update(task.head_options())   # pooling / crf / multilabel threshold: Predictor rebuilds the head
  info.update(task.input_options())  # truncation: Predictor featurizes new texts as training did
  return info


def resolve_finetune(config, workdir: str, *, num_devices: Optional[int] = None,
                     process_count: Optional[int] = None) -> FinetunePlan:
  """The plan of a configs/finetune.py config; UserError for the first mistake (module docstring)."""
  num_devices = jax.device_count() if num_devices is None else int(num_devices)
  process_count = jax.process_count() if process_count is None else int(process_count)
  _check_task_name(config)
  _check_fields(config)
  data = _resolve_data(config)
  init = _resolve_checkpoint(config)
  vocab_file, do_lower_case = _resolve_vocab(config, init)
  model = build_model_config(config.model, params_dir.count_vocab_lines(vocab_file),
                             init.config if init is not None else None)
  _check_length(config, model, init)
  unused = ignored_fields(config)
  if unused:
    message = (f"config.task={config.task} does not read {', '.join(f'config.{u}' for u in unused)} (they apply "
               "to other tasks); the run goes on without them")
    log_once(log, message, logging.WARNING)     # a sweep resolves one plan per run: said once
  reinit = int(config.get("reinit_top_layers", 0))
  if reinit > model.num_hidden_layers:
    raise UserError(f"config.reinit_top_layers={reinit} exceeds the encoder's {model.num_hidden_layers} layers")
  if reinit and init is None:
    log.warning("config.reinit_top_layers=%d has no effect without config.init_checkpoint: every layer already "
                "starts from random init (runs that differ only in it give the same scores)", reinit)
  rules = sharding.normalize_rules(config.logical_axis_rules)
  mesh_shape, shards = v.check_batch_divisible(int(config.batch_size), int(config.grad_accum_steps),
                                               config.mesh.shape, config.mesh.axes, rules, num_devices,
                                               process_count)
  learning_rate = float(config.optimizer.learning_rate)
  optimizer = optimizer_settings(config.optimizer, 1, 0,    # the step counts follow the data (plan.schedule)
                                 learning_rate=learning_rate if learning_rate > 0 else fm.default_learning_rate(model))
  load_head = bool(config.get("load_head", False)) or not config.do_train
  head_labels = init.finetune_info.get("label_list") if init is not None and load_head else None
  try:
    task = ft.make_task(config, label_list=head_labels)
  except ValueError as e:   # a config that contradicts the task (labels, TFDS name, delimiter)
    raise UserError(f"config.task={config.task!r}: {e}") from e
  task.check_max_seq_length(int(config.max_seq_length))    # e.g. SQuAD: room for the question and the context
  cap = resolve_packing(config, task, model)
  data = dataclasses.replace(data, max_examples_per_row=cap)
  model = model.replace(max_examples_per_row=cap)     # 0 also undoes a loaded config's (never saved: to_dict)
  log.debug("task %s: %s", task.name, task)   # the plan table names it; --verbose
  eval_batch = int(config.eval_batch_size)
  return FinetunePlan(
      workdir=os.path.abspath(workdir), task=task, vocab_file=vocab_file, do_lower_case=do_lower_case,
      model=model, classifier_dropout=float(config.model.classifier_dropout),
      init_checkpoint=init.directory if init is not None else None, load_head=load_head, data=data,
      batch_size=int(config.batch_size), eval_batch_size=-(-eval_batch // shards) * shards, mesh_shape=mesh_shape,
      mesh_axes=tuple(config.mesh.axes), logical_axis_rules=rules, batch_shards=shards, optimizer=optimizer,
      num_train_epochs=float(config.num_train_epochs), max_train_steps=int(config.max_train_steps),
      warmup_proportion=float(config.warmup_proportion), seed=int(config.seed),
      grad_accum_steps=int(config.grad_accum_steps), nan_policy=str(config.nan_policy),
      max_consecutive_nonfinite=int(config.max_consecutive_nonfinite), do_train=bool(config.do_train),
      do_eval=bool(config.do_eval), do_predict=bool(config.do_predict),
      eval_every_steps=int(config.eval_every_steps), log_every_steps=max(1, int(config.log_every_steps)),
      early_stopping_patience=int(config.early_stopping_patience),
      evals_per_epoch=int(config.get("evals_per_epoch", 0)),
      layerwise_lr_decay=float(config.get("layerwise_lr_decay", 1.0)), reinit_top_layers=reinit,
      multirun=config_to_dict(config.multirun) if "multirun" in config else {"enabled": False},
      save_best_checkpoint=bool(config.save_best_checkpoint),
      compilation_cache_dir=str(config.get("compilation_cache_dir", "auto")),
      finetune_info=_finetune_info(config, task, do_lower_case), config=config_to_dict(config))
