"""notebooks/quickstart.ipynb runs end to end on CPU with its tiny settings (BERT_JAX_NOTEBOOK_TINY=1).

The kernel inherits this process's XLA_FLAGS (tests/conftest.py: 8 simulated CPU devices), so the notebook's
mesh spans 8 devices, the way it spans a TPU's cores on Colab.
"""

import os

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


def test_notebook_has_a_tiny_parameter_cell_and_colab_metadata():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
  assert len(params) == 1 and "TINY" in params[0].source
  assert nb.metadata["kernelspec"]["name"] == "python3"
  assert all(c.get("outputs", []) == [] for c in nb.cells if c.cell_type == "code"), "commit it without outputs"


@pytest.mark.slow
def test_quickstart_notebook_executes_with_tiny_settings(tmp_path, monkeypatch):
  monkeypatch.setenv("BERT_JAX_NOTEBOOK_TINY", "1")
  monkeypatch.setenv("BERT_JAX_NOTEBOOK_WORKDIR", str(tmp_path / "quickstart"))
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                   resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
  client.execute()
  text = "\n".join(_outputs(c) for c in nb.cells if c.cell_type == "code")
  assert "TINY=True" in text
  assert "mesh:" in text and "global batch:" in text
  assert "MiniLM: 6 layers, hidden 384" in text
  assert "cos('A man is playing a guitar.'" in text
  assert "这本书很[MASK]看" in text and "->" in text          # masked-word predictions printed
  assert "test accuracy" in text
  assert "P(positive)=" in text
  # The fine-tuning run wrote its results, and accuracy is a fraction.
  results = tmp_path / "quickstart" / "finetune_sentiment" / "eval_results.json"
  assert results.exists()
  import json
  acc = json.loads(results.read_text())["test"]["accuracy"]
  assert 0.0 <= acc <= 1.0
