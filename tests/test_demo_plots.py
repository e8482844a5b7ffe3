"""The demo's and experiments' PNG plots are written atomically: a run killed (or failing) while a plot is being
written leaves the previous plot whole, never half a PNG."""

import json

import matplotlib.figure
from matplotlib.backends.backend_agg import FigureCanvasAgg
import pytest

from experiments import plots


def test_a_plot_that_fails_while_writing_leaves_the_previous_file_whole(tmp_path, monkeypatch):
  path = tmp_path / "plots" / "scores.png"
  bars = [{"label": "a", "sentiment": 0.8, "ner": 0.5, "color": "C0"}]
  assert plots.score_bars(bars, str(path)) == str(path)
  before = path.read_bytes()
  assert before.startswith(b"\x89PNG")

  def torn_savefig(self, fname, **kwargs):     # half a file, then the process "dies"
    if hasattr(fname, "write"):
      fname.write(b"\x89PNG half")
    else:
      with open(fname, "wb") as f:
        f.write(b"\x89PNG half")
    raise OSError("killed while writing")

  monkeypatch.setattr(matplotlib.figure.Figure, "savefig", torn_savefig)
  with pytest.raises(OSError):
    plots.score_bars(bars, str(path))
  assert path.read_bytes() == before
  assert sorted(p.name for p in path.parent.iterdir()) == ["scores.png"]     # no temp file left behind


def _captured(monkeypatch):
  """The figures plots._save lays out and writes (kept open for the test to look at)."""
  figures = []
  real_save = plots._save

  def keep(plt, fig, path):
    figures.append(fig)
    return real_save(plt, fig, path)

  monkeypatch.setattr(plots, "_save", keep)
  return figures


def _write_metrics(path, rows):
  path.mkdir(parents=True, exist_ok=True)
  (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_pretraining_plot_draws_no_panel_for_a_target_the_run_does_not_train(tmp_path, monkeypatch):
  """The demo's preset=budget trains MLM alone; pretraining.png had an empty next-sentence panel (x from -0.04
  to 0.04)."""
  figures = _captured(monkeypatch)
  _write_metrics(tmp_path / "mlm", [{"step": s, "mlm_loss": 8.0 - s / 10, "mlm_accuracy": s / 100} for s in (5, 10)])
  _write_metrics(tmp_path / "nsp", [{"step": 5, "mlm_loss": 7.0, "mlm_accuracy": 0.1, "nsp_accuracy": 0.6}])
  plots.pretraining_curves({"budget": str(tmp_path / "mlm")}, str(tmp_path / "a.png"))
  plots.pretraining_curves({"bert": str(tmp_path / "nsp")}, str(tmp_path / "b.png"))
  titles = [[ax.get_title() for ax in fig.axes] for fig in figures]
  assert titles == [["masked-LM loss", "masked-LM accuracy"],
                    ["masked-LM loss", "masked-LM accuracy", "next-sentence accuracy"]]


def test_score_bars_draw_the_majority_class_and_the_baselines_as_labelled_lines(tmp_path, monkeypatch):
  figures = _captured(monkeypatch)
  bars = [{"label": "BERT", "sentiment": 0.577, "ner": 0.05}]
  plots.score_bars(bars, str(tmp_path / "s.png"), references={
      "sentiment": [("majority class", 0.577), ("TF-IDF + LR", 0.807)], "ner": [("CRF (crfsuite)", 0.586)]})
  sentiment, ner = figures[0].axes
  assert [t.get_text() for t in sentiment.get_legend().get_texts()] == ["majority class: 57.7", "TF-IDF + LR: 80.7"]
  assert [t.get_text() for t in ner.get_legend().get_texts()] == ["CRF (crfsuite): 58.6"]
  assert sentiment.get_ylim()[0] < 0.577      # the reference lines are inside the panel


def test_the_sweep_spread_title_fits_inside_its_figure(tmp_path):
  """sweep_spread.png's one-line title was cut off at both sides on the 5-inch figure of a one-point sweep."""
  from bert_jax.finetune import sweep
  run = {"seed": 0, "dev": 0.8, "test": 0.7}
  results = {"task": "classification", "main_metric": "accuracy", "seeds": [0, 1, 2], "selected": 0,
             "points": [{"label": "optimizer.learning_rate=0.0003", "runs": [dict(run, seed=s) for s in range(3)]}]}
  figures = []
  sweep.plot_spread(results, str(tmp_path / "sweep_spread.png"), figure_out=figures)
  fig = figures[0]
  canvas = FigureCanvasAgg(fig)      # the figure was closed after saving: draw it again as it was saved
  canvas.draw()
  box = fig.axes[0].title.get_window_extent(canvas.get_renderer())
  assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (box, fig.bbox)
  assert "selected point shaded" in fig.axes[0].get_title()
