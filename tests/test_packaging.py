"""`pip install .` gives a working bert_jax: the wheel holds every module and the configs, imports from outside
the source tree, and pyproject's dependencies cover what the library imports and agree with requirements.txt.

The wheel is built offline (`pip wheel --no-deps --no-build-isolation`, setuptools from this environment) from
a copy of the tree, so nothing is written into the checkout and parallel test workers cannot collide.
"""

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Imported by bert_jax but declared by what it depends on (etils comes with orbax-checkpoint, ml_dtypes with jax),
# or only by optional code paths that fall back without them (bench --compare_hf: torch, transformers;
# rjieba: a faster jieba when installed).
INDIRECT_OR_OPTIONAL = {"etils", "ml_dtypes", "torch", "transformers", "rjieba"}
# Extras that requirements.txt (the checkout's full environment) need not install.
VIEWER_ONLY_EXTRAS = {"tensorboard"}
# Extras that requirements-test.txt installs instead: apache-beam (create_pretraining_data --runner) pins
# protobuf<7, pyarrow<26 and pillow<13, so a user's checkout does not take it by default; the tests do (TensorFlow
# 2.21 accepts protobuf 6) and run its DirectRunner.
# sentence-transformers ([st]: the sentence-transformers export's parity check) pulls torch, which the tests
# install anyway.
TEST_ENV_EXTRAS = {"beam", "st"}


def build_wheel(out_dir):
  """Builds bert_jax's wheel from a copy of the source tree into out_dir; returns the wheel's path."""
  src = os.path.join(out_dir, "src")
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
  for name in ("bert_jax", "configs"):
    shutil.copytree(os.path.join(ROOT, name), os.path.join(src, name), ignore=ignore)
  for name in ("pyproject.toml", "setup.py", "README.md"):
    shutil.copy(os.path.join(ROOT, name), src)
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                  "-w", out_dir, src], check=True, capture_output=True)
  (wheel,) = [f for f in os.listdir(out_dir) if f.endswith(".whl")]
  return os.path.join(out_dir, wheel)


def _name(requirement):
  return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["project"]


def _requirements_txt(name="requirements.txt"):
  out = {}
  with open(os.path.join(ROOT, name), encoding="utf-8") as f:
    for line in f:
      line = line.split("#", 1)[0].strip()
      if line:
        out[_name(line)] = line.replace(" ", "")
  return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """The wheel installed with `pip install --no-deps --target`: (site dir, wheel path)."""
  tmp = tmp_path_factory.mktemp("wheel")
  wheel = build_wheel(str(tmp))
  site = str(tmp / "site")
  subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", site, wheel],
                 check=True, capture_output=True)
  return site, wheel


def test_wheel_holds_every_module_of_bert_jax_and_the_configs(installed):
  site, _ = installed
  for pkg, installed_as in (("bert_jax", "bert_jax"), ("configs", "bert_jax_configs")):
    for d, _, files in os.walk(os.path.join(ROOT, pkg)):
      for f in files:
        if f.endswith(".py"):
          rel = os.path.relpath(os.path.join(d, f), os.path.join(ROOT, pkg))
          assert os.path.exists(os.path.join(site, installed_as, rel)), f"{pkg}/{rel} is not in the wheel"


def test_installed_wheel_imports_from_outside_the_tree_and_its_configs_load(installed, tmp_path):
  site, _ = installed
  script = textwrap.dedent("""\
      import os, sys
      import bert_jax, bert_jax_configs
      from bert_jax_configs import finetune, pretrain
      from absl import flags
      from ml_collections import config_flags
      site = sys.argv[1]
      assert bert_jax.__file__.startswith(site), bert_jax.__file__
      assert pretrain.__file__.startswith(site), pretrain.__file__
      assert pretrain.get_config("size=tiny").model.size == "tiny"
      assert finetune.get_config("task=mrpc").task == "mrpc"
      # --config as a file path, the way train.py takes it from an installed package (docs/install.md).
      config_dir = bert_jax_configs.__path__[0]
      config_flags.DEFINE_config_file("config")
      flags.FLAGS(["prog", f"--config={config_dir}/pretrain.py:size=mini"])
      assert flags.FLAGS.config.model.size == "mini"
      print("ok", config_dir)
      """)
  env = dict(os.environ, PYTHONPATH=site)
  proc = subprocess.run([sys.executable, "-c", script, site], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.startswith("ok " + os.path.join(site, "bert_jax_configs"))


def test_pyproject_dependencies_match_requirements_txt():
  project, reqs = _pyproject(), _requirements_txt()
  declared = list(project["dependencies"])
  for extra, items in project["optional-dependencies"].items():
    if extra not in VIEWER_ONLY_EXTRAS | TEST_ENV_EXTRAS:
      declared += items
  for requirement in declared:
    assert _name(requirement) in reqs, f"{requirement} (pyproject.toml) is missing from requirements.txt"
    assert reqs[_name(requirement)] == requirement.replace(" ", ""), (requirement, reqs[_name(requirement)])
  unexplained = set(reqs) - {_name(r) for r in declared}
  assert not unexplained, f"in requirements.txt but neither a dependency nor an extra of bert_jax: {unexplained}"
  assert [_name(r) for r in project["optional-dependencies"]["tensorboard"]] == ["tensorboard"]
  test_reqs = _requirements_txt("requirements-test.txt")
  for extra in TEST_ENV_EXTRAS:
    for requirement in project["optional-dependencies"][extra]:
      assert test_reqs.get(_name(requirement)) == requirement.replace(" ", ""), (
          f"{requirement} (pyproject.toml's [{extra}]) must be in requirements-test.txt as written")


def test_every_third_party_import_of_bert_jax_is_declared():
  project = _pyproject()
  declared = {_name(r) for r in project["dependencies"]}
  for items in project["optional-dependencies"].values():
    declared |= {_name(r) for r in items}
  dists = importlib.metadata.packages_distributions()
  imported = set()
  for pkg in ("bert_jax", "configs"):
    for d, _, files in os.walk(os.path.join(ROOT, pkg)):
      for f in (f for f in files if f.endswith(".py")):
        with open(os.path.join(d, f), encoding="utf-8") as fh:
          tree = ast.parse(fh.read())
        for node in ast.walk(tree):
          if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
          elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
  # configs/ installs as bert_jax_configs (pyproject.toml), which the config files import when installed.
  third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in ("bert_jax", "configs", "bert_jax_configs")}
  assert {"jax", "flax", "tensorflow", "orbax"} <= third_party            # the scan sees the imports
  missing = {}
  for module in sorted(third_party - INDIRECT_OR_OPTIONAL):
    names = {_name(d) for d in dists.get(module, [module])}
    if not names & declared:
      missing[module] = names
  assert not missing, f"imported by bert_jax but not in pyproject.toml's dependencies or extras: {missing}"
