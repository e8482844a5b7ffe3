"""The demo's and experiments' PNG plots are written atomically: a run killed (or failing) while a plot is being
written leaves the previous plot whole, never half a PNG."""

import matplotlib.figure
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
