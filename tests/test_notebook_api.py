"""notebooks/quickstart.ipynb against the current API, in the fast tier (the slow test in
tests/test_demo_notebook.py runs the notebook itself): every `from bert_jax... import` name exists, every call of
an imported bert_jax function or class binds to its signature (argument count and keywords), and every config
field the notebook sets exists in configs/pretrain.py / configs/finetune.py."""

import ast
import importlib
import inspect
import json
import os

import pytest

from configs import finetune as finetune_configs
from configs import pretrain as pretrain_configs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")
# the notebook's config variables and the config each is made from
CONFIGS = {"config": lambda: pretrain_configs.get_config("size=tiny,preset=budget"),
           "ft_config": lambda: finetune_configs.get_config("task=classification")}


def _code():
  with open(NOTEBOOK, encoding="utf-8") as f:
    nb = json.load(f)
  return ast.parse("\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"))


def _bert_jax_names(tree):
  """{local name: object} for every `from bert_jax... import name [as local]` (modules and attributes)."""
  names = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bert_jax":
      module = importlib.import_module(node.module)
      for alias in node.names:
        if hasattr(module, alias.name):
          obj = getattr(module, alias.name)
        else:
          obj = importlib.import_module(f"{node.module}.{alias.name}")   # a submodule
        names[alias.asname or alias.name] = obj
  return names


def _resolve(func, names):
  """The object a call's func expression names (`f`, `module.f`, `Class.method`), or None."""
  if isinstance(func, ast.Name):
    return names.get(func.id)
  if isinstance(func, ast.Attribute):
    base = _resolve(func.value, names)
    if base is not None:
      if not hasattr(base, func.attr):
        raise AssertionError(f"{ast.unparse(func)}: {base!r} has no attribute {func.attr!r}")
      return getattr(base, func.attr)
  return None


def test_the_notebook_imports_names_that_exist():
  names = _bert_jax_names(_code())
  assert {"import_hf", "load_pretrained", "BertModel", "pretrain", "Predictor"} <= set(names)


def test_every_bert_jax_call_in_the_notebook_binds_to_the_current_signature():
  tree = _code()
  names = _bert_jax_names(tree)
  checked = 0
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    obj = _resolve(node.func, names)
    if obj is None or inspect.ismodule(obj) or not callable(obj):
      continue
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
      continue
    try:
      sig = inspect.signature(obj)
    except (TypeError, ValueError):
      continue
    try:
      sig.bind(*[None] * len(node.args), **{k.arg: None for k in node.keywords})
    except TypeError as e:
      pytest.fail(f"notebook line {node.lineno}: {ast.unparse(node)[:120]}: {e}")
    checked += 1
  assert checked >= 8     # import_hf, load_pretrained, FullTokenizer, BertModel, train_and_evaluate, run, ...


def test_every_config_field_the_notebook_sets_exists():
  tree = _code()
  configs = {name: make() for name, make in CONFIGS.items()}
  seen = set()
  for node in ast.walk(tree):
    if not isinstance(node, ast.Assign):
      continue
    for target in node.targets:
      path = []
      while isinstance(target, ast.Attribute):
        path.insert(0, target.attr)
        target = target.value
      if isinstance(target, ast.Name) and target.id in configs and path:
        value = configs[target.id]
        for part in path:
          assert part in value, f"{target.id}.{'.'.join(path)}: no such config field"
          value = value[part]
        seen.add(target.id)
  assert seen == set(configs)
