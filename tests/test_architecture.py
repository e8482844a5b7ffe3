"""The layering of bert_jax, checked from every import statement (module level and inside functions):
imports go down only, nothing forms a cycle, and evaluation/ is a leaf."""

import ast
import os

import pytest

from bert_jax.models import objectives

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "bert_jax")

# What each subpackage may import from bert_jax (docs/architecture.md; the README's picture).
ALLOWED = {
    "models": set(),
    "evaluation": set(),
    "input_pipeline": {"models"},
    "pretrained": {"models", "input_pipeline"},
    "engine": {"models", "input_pipeline", "pretrained"},
    "pretrain": {"models", "input_pipeline", "pretrained", "engine"},
    "finetune": {"models", "input_pipeline", "pretrained", "engine", "evaluation"},
    "convert": {"models", "input_pipeline", "pretrained"},
    "bench": {"models", "engine", "pretrain"},
    "predict": {"finetune", "pretrained", "models", "input_pipeline", "engine"},
}
# Top-level modules every layer may import, lowest first; each imports from bert_jax only the ones before it, so
# they cannot close a cycle: the exception types, input warnings and --strict, once-only messages and the
# libraries' verbosity, TensorFlow's and tensorboardX's imports without Keras and PyTorch (and TensorFlow's
# start-up lines), the entry points' error output (used by `python -m bert_jax.convert` and
# create_pretraining_data too).
LEAVES = ("bert_jax.errors", "bert_jax.input_warnings", "bert_jax.logs", "bert_jax.lean_imports", "bert_jax.fileio",
          "bert_jax.cli")


def modules():
  """{dotted module name: path} of every .py file in bert_jax."""
  out = {}
  for d, _, files in os.walk(PKG):
    for f in files:
      if f.endswith(".py"):
        path = os.path.join(d, f)
        name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
  return out


def import_edges():
  """{module: {imported bert_jax module}} from every Import / ImportFrom node, relative imports resolved."""
  mods = modules()

  def resolve(name):
    while name and name not in mods:
      name = name.rpartition(".")[0]
    return name or None

  edges = {}
  for mod, path in mods.items():
    is_pkg = path.endswith("__init__.py")
    targets = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
          parts = parts[:len(parts) - (node.level - 1)]
          base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" for a in node.names] + [base]
      for n in names:
        if n.startswith("bert_jax"):
          r = resolve(n)
          if r and r != mod and r != "bert_jax" and not mod.startswith(r + "."):
            targets.add(r)
    edges[mod] = targets
  return edges


def subpackage(mod):
  parts = mod.split(".")
  return parts[1] if len(parts) > 1 else ""


def find_cycle(edges):
  """One cycle as a list of nodes, or None."""
  state, stack = {}, []

  def visit(v):
    state[v] = 1
    stack.append(v)
    for w in sorted(edges.get(v, ())):
      if state.get(w) == 1:
        return stack[stack.index(w):] + [w]
      if w not in state:
        found = visit(w)
        if found:
          return found
    stack.pop()
    state[v] = 2
    return None

  for v in sorted(edges):
    if v not in state:
      found = visit(v)
      if found:
        return found
  return None


def test_no_import_cycle_between_modules_or_subpackages():
  edges = import_edges()
  assert find_cycle(edges) is None, find_cycle(edges)
  sub = {}
  for m, ts in edges.items():
    for t in ts:
      if subpackage(m) != subpackage(t):
        sub.setdefault(subpackage(m), set()).add(subpackage(t))
  assert find_cycle(sub) is None, find_cycle(sub)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_go_down_the_layers(package):
  edges = import_edges()
  bad = sorted(f"{m} -> {t}" for m, ts in edges.items() if subpackage(m) == package for t in ts
               if subpackage(t) != package and subpackage(t) not in ALLOWED[package] and t not in LEAVES)
  assert not bad, f"{package} may import only {sorted(ALLOWED[package])}: {bad}"


def test_leaf_modules_import_only_the_leaves_before_them():
  edges = import_edges()
  assert edges["bert_jax.errors"] == set()
  assert {leaf: sorted(edges[leaf] - set(LEAVES[:i])) for i, leaf in enumerate(LEAVES)} == \
         {leaf: [] for leaf in LEAVES}


def test_the_checker_sees_imports_inside_functions(tmp_path, monkeypatch):
  """A function-level import that closes a cycle is found (the old code hid three cycles this way)."""
  pkg = tmp_path / "bert_jax"
  for sub in ("a", "b"):
    (pkg / sub).mkdir(parents=True)
    (pkg / sub / "__init__.py").write_text("")
  (pkg / "__init__.py").write_text("")
  (pkg / "a" / "x.py").write_text("from bert_jax.b import y\n")
  (pkg / "b" / "y.py").write_text("def f():\n  from bert_jax.a import x\n  return x\n")
  monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
  monkeypatch.setattr(__import__(__name__), "PKG", str(pkg))
  assert find_cycle(import_edges()) is not None


# The one import of bert_jax allowed inside a function: an optional extra that only one path needs.
LAZY_IMPORTS = {("bert_jax.input_pipeline.create_pretraining_data", "bert_jax.input_pipeline.beam_pipeline")}


def function_level_imports():
  """{(module, imported bert_jax module)} of every import of bert_jax that stands inside a function body."""
  mods, found = modules(), set()
  for mod, path in mods.items():
    tree = ast.parse(open(path, encoding="utf-8").read())
    for fn in ast.walk(tree):
      if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        continue
      for node in ast.walk(fn):
        if isinstance(node, ast.Import):
          found |= {(mod, a.name) for a in node.names if a.name.startswith("bert_jax")}
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("bert_jax")):
          found |= {(mod, f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module)
                    for a in node.names}
  return found


def test_bert_jax_is_imported_at_module_level_except_an_optional_extra():
  """An import inside a function to dodge a cycle hides a layering problem; only Beam, an optional extra, is lazy."""
  assert function_level_imports() == LAZY_IMPORTS


def test_the_engine_and_the_pretraining_application_spell_no_objective_name():
  """An objective is one module + one registry line: engine/ and pretrain/ loop over the run's objectives and
  never switch on a name ("mlm", "nsp", "sop", "lm", "electra" or any other registered one)."""
  names = set(objectives.OBJECTIVES)
  assert {"mlm", "nsp", "electra"} <= names                 # the registry is what the check reads
  found = []
  for mod, path in sorted(modules().items()):
    if subpackage(mod) not in ("engine", "pretrain"):
      continue
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
      if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip().lower() in names:
        found.append(f"{mod}:{node.lineno} {node.value!r}")
  assert not found, found
