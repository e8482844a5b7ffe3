"""bert_jax.lean_imports: TensorFlow without its eager Keras import, tensorboardX without PyTorch, and both
packages still importable afterwards."""

import importlib
import importlib.util
import os
import subprocess
import sys

import pytest

from bert_jax import lean_imports

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import importlib.util, sys
from bert_jax import lean_imports
tf = lean_imports.tensorflow()
assert "keras" not in sys.modules and not [m for m in sys.modules if m.startswith("sklearn")], "keras loaded"
assert tf.data.Dataset.range(3).map(lambda x: x * 2).reduce(tf.constant(0, tf.int64), lambda a, b: a + b).numpy() == 6
tbx = lean_imports.tensorboardx()
assert "torch" not in sys.modules, "torch loaded"
assert not [f for f in sys.meta_path if type(f).__module__ == "bert_jax.lean_imports"], sys.meta_path
has_torch = importlib.util.find_spec("torch") is not None  # still there for whoever wants it, when installed
assert has_torch == (sys.argv[1] == "1"), has_torch
print("dense", tf.keras.layers.Dense.__name__)             # Keras imports normally once asked for
print("keras" in sys.modules)
'''


@pytest.mark.slow     # a fresh interpreter importing TensorFlow, tensorboardX and Keras: ~9 s
def test_tensorflow_without_keras_then_keras_on_demand_and_tensorboardx_without_torch():
  pytest.importorskip("tensorflow")
  pytest.importorskip("tensorboardX")
  has_torch = "1" if importlib.util.find_spec("torch") is not None else "0"
  out = subprocess.run([sys.executable, "-c", CHILD, has_torch], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, BERT_JAX_LEAN_IMPORTS="1"))
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.split() == ["dense", "Dense", "True"], out.stdout


def test_hidden_refuses_only_the_named_package_and_only_inside(tmp_path, monkeypatch):
  (tmp_path / "leanpkg_a").mkdir()
  (tmp_path / "leanpkg_a" / "__init__.py").write_text("VALUE = 1\n")
  (tmp_path / "leanpkg_b.py").write_text("try:\n  import leanpkg_a\n  HAS_A = True\nexcept ImportError:\n"
                                         "  HAS_A = False\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setenv("BERT_JAX_LEAN_IMPORTS", "1")
  for name in ("leanpkg_a", "leanpkg_b"):
    monkeypatch.delitem(sys.modules, name, raising=False)
  with lean_imports.hidden("leanpkg_a"):
    assert importlib.util.find_spec("leanpkg_a") is not None        # found, as TensorFlow needs ...
    b = importlib.import_module("leanpkg_b")                         # ... but not run
    assert b.HAS_A is False and "leanpkg_a" not in sys.modules
  import leanpkg_a  # noqa: F401  after the block: imports normally
  assert sys.modules["leanpkg_a"].VALUE == 1
  with lean_imports.hidden("leanpkg_a"):                             # already imported: untouched
    assert importlib.import_module("leanpkg_a").VALUE == 1


def test_switched_off_by_the_environment(monkeypatch, tmp_path):
  (tmp_path / "leanpkg_c.py").write_text("VALUE = 3\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, "leanpkg_c", raising=False)
  monkeypatch.setenv("BERT_JAX_LEAN_IMPORTS", "0")
  with lean_imports.hidden("leanpkg_c"):
    import leanpkg_c  # noqa: F401
  assert sys.modules["leanpkg_c"].VALUE == 3
