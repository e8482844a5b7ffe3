"""The task registry: registry name -> task kind (a tasks.base.Task subclass), aliases included. A new kind is
one module holding its Task subclass plus one line in TASKS.

    task = get_task("mrpc")                       # cola sst2 mrpc stsb qqp mnli qnli rte wnli ax
    task = get_task("squad_v2", doc_stride=128)   # squad_v1 squad_v2 (language="zh" for CMRC2018 scoring)
    task = get_task("ner", label_list=None)       # CoNLL files or TFDS conll2003 (use_tfds=True)
    task = get_task("classification", text_a="text_a", label="label")   # generic TSV/CSV/JSONL
    task = get_task("multilabel", separator="|")  # TSV/CSV labels joined by "|", or JSONL label lists
    task = get_task("c3"); get_task("multiple_choice")   # C3 JSON / generic JSONL multiple choice
    task = get_task("ner", crf=True)              # tagging with a CRF head (constraints from the scheme)
    task_class("sst-2")                           # GlueTask: from_config / from_info build it from a run's
                                                  # config or a checkpoint's finetune_info.json
    task_names()                                  # the registry names, aliases left out (config.task values)

What a task object does (read, featurize, head, loss, predict, evaluate, write) is tasks/base.py's contract.
"""

from __future__ import annotations

from typing import Dict, Tuple, Type, Union

from bert_jax.finetune.tasks.base import Task
from bert_jax.finetune.tasks.c3 import C3Task
from bert_jax.finetune.tasks.classification import ClassificationTask
from bert_jax.finetune.tasks.embedding import EmbeddingTask
from bert_jax.finetune.tasks.glue import GlueTask
from bert_jax.finetune.tasks.multilabel import MultilabelTask
from bert_jax.finetune.tasks.multiple_choice import MultipleChoiceTask
from bert_jax.finetune.tasks.ner import NerTask
from bert_jax.finetune.tasks.squad import SquadTask

# A Task subclass is built by `cls.create(name, **kwargs)`, so one kind can serve several names (GLUE's ten);
# a string value is an alias naming the entry it stands for.
TASKS: Dict[str, Union[Type[Task], str]] = {
    "cola": GlueTask, "sst2": GlueTask, "mrpc": GlueTask, "stsb": GlueTask, "qqp": GlueTask, "mnli": GlueTask,
    "qnli": GlueTask, "rte": GlueTask, "wnli": GlueTask, "ax": GlueTask,
    "squad_v1": SquadTask, "squad_v2": SquadTask,
    "ner": NerTask,
    "classification": ClassificationTask,
    "multilabel": MultilabelTask,
    "c3": C3Task,
    "multiple_choice": MultipleChoiceTask,
    "embedding": EmbeddingTask,
    # Aliases (names are matched lower-case with "-" read as "_").
    "sst_2": "sst2", "sts_b": "stsb", "diagnostic": "ax", "squad": "squad_v1", "squad1": "squad_v1",
    "squad2": "squad_v2", "squad_v1.1": "squad_v1", "squad_v2.0": "squad_v2", "conll2003": "ner",
}


def task_names() -> Tuple[str, ...]:
  """The registry names without the aliases, in registry order (what config.task takes)."""
  return tuple(k for k, v in TASKS.items() if not isinstance(v, str))


def canonical_name(name: str) -> str:
  """The registry name `name` stands for (aliases and spellings like "SST-2" resolved; unknown names as is)."""
  key = name.lower().replace("-", "_")
  entry = TASKS.get(key)
  return entry if isinstance(entry, str) else key


def task_class(name: str) -> Type[Task]:
  """The task kind registered under `name` (or an alias of it); KeyError naming the known tasks."""
  entry = TASKS.get(canonical_name(name))
  if entry is None or isinstance(entry, str):
    raise KeyError(f"unknown task {name!r}; known: {', '.join(task_names())}")
  return entry


def get_task(name: str, **kwargs) -> Task:
  """A fresh task object by name (see task_names()); kwargs go to the task's constructor:
  GLUE: on_error. squad_v1/v2: doc_stride, max_query_length, n_best_size, max_answer_length,
  null_score_diff_threshold, language, on_error. ner: label_list, mode, scheme, crf, on_error.
  classification: label_list, text_a, text_b, label, header, file_format, is_regression, on_error.
  multilabel: label_list, text_a, text_b, label, header, file_format, separator, threshold, on_error.
  c3 / multiple_choice: on_error."""
  key = canonical_name(name)
  return task_class(name).create(key, **kwargs)
