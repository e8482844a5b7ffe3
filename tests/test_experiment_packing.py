"""experiments/packing.py checks its accuracy and pre-training flags before any work (a count per length that
does not match --lengths, a negative count or patience is one UserError naming the flag, and no work dir is
made), and its pre-training table reads an equal-token row that reuses the equal-step run from that run."""

import json

import pytest

from bert_jax.errors import UserError
from experiments import packing


@pytest.mark.parametrize("flags, named", [
    (["--lengths=128,512", "--train_examples=1,2,3"], "--train_examples: 3 counts for 2 --lengths"),
    (["--test_examples=-1"], "--test_examples='-1'"),
    (["--ft_patience=-1"], "--ft_patience=-1; expected >= 0"),
    (["--pretrain_steps=1"], "--pretrain_steps=1; expected >= 2"),
])
def test_a_bad_accuracy_or_pretrain_flag_is_a_user_error_before_any_work(tmp_path, flags, named):
  (tmp_path / "data" / "sentiment").mkdir(parents=True)
  with pytest.raises(UserError, match=named):
    packing.main([f"--data_dir={tmp_path / 'data'}", f"--workdir={tmp_path / 'w'}", *flags])
  assert not (tmp_path / "w").exists()


def _runs(dev, test, steps):
  return {"seconds": 1.0, "load_average_1m": 1.0,
          "runs": [{"seed": i, "dev": d, "test": t, "best_step": steps, "train_steps": steps, "train_seconds": 1.0}
                   for i, (d, t) in enumerate(zip(dev, test))]}


def test_the_pretrain_table_gives_each_row_its_own_run_and_medians(tmp_path):
  heldout = lambda acc: {"packed": {"mlm_loss": 5.0, "mlm_accuracy": acc}, "pairs": {"mlm_loss": 5.1,  # noqa: E731
                                                                                      "mlm_accuracy": acc + 0.01}}
  arm = lambda packing_, steps, acc: {"packing": packing_, "steps": steps, "seconds": 9.0,  # noqa: E731
                                      "seconds_per_step": 0.1, "load_average_1m": 3.0, "heldout": heldout(acc)}
  p = {"command": "python -m experiments.packing --stages=pretrain", "steps": 600, "seq": 64, "batch_size": 32,
       "plateau": {"packed": {"unigram": 0.05, "context_free": 0.15}},
       "heldout_sequences": {"packed": 512, "pairs": 512},
       "tokens": {"documents": {"tokens_per_row": 63.9, "non_pad_share": 0.998},
                  "stream": {"tokens_per_row": 64.0, "non_pad_share": 1.0},
                  "pairs": {"tokens_per_row": 48.0, "non_pad_share": 0.75}},
       "arms": {"documents_steps": arm("documents", 600, 0.12), "stream_steps": arm("stream", 600, 0.11),
                "pairs_steps": arm("pairs", 600, 0.10), "pairs_tokens": arm("pairs", 800, 0.13)},
       "rows": [{"packing": "documents", "equal": "steps", "run": "documents_steps"},
                {"packing": "documents", "equal": "tokens", "run": "documents_steps"},
                {"packing": "pairs", "equal": "tokens", "run": "pairs_tokens"}],
       "downstream": {"documents_steps": {"sentiment": _runs([0.7, 0.8, 0.9], [0.6, 0.75, 0.7], 40),
                                          "ner": _runs([0.2, 0.3, 0.1], [0.25, 0.2, 0.3], 50)},
                      "pairs_tokens": {"sentiment": _runs([0.5, 0.6, 0.7], [0.55, 0.65, 0.6], 41),
                                       "ner": _runs([0.1, 0.1, 0.1], [0.1, 0.2, 0.3], 51)}},
       "ft_epochs": 3.0, "ft_patience": 2, "ft_learning_rate": 1e-3, "ft_train_examples": 1000,
       "ft_dev_examples": 400, "machine": {"load_average_1m": "2.00"}}
  (tmp_path / "pretrain.json").write_text(json.dumps(p))
  (tmp_path / "data" / "sentiment").mkdir(parents=True)
  packing.main([f"--data_dir={tmp_path / 'data'}", f"--workdir={tmp_path}", "--stages=report"])
  rows = [line for line in (tmp_path / "packing.md").read_text().splitlines() if line.startswith("| ")][1:]
  assert len(rows) == 3
  # the equal-token documents row is the equal-step run (600 steps, 600 x 32 x 63.9 tokens), the pairs one its own
  assert rows[0].split(" | ")[2:5] == rows[1].split(" | ")[2:5] == ["600", "1.23 M", "0.1200"]
  assert rows[2].split(" | ")[2:5] == ["800", "1.23 M", "0.1300"]
  assert "| 0.8000 (0.7000-0.9000) | 0.7000 (0.6000-0.7500) | 0.2000 (0.1000-0.3000) | 0.2500 (0.2000-0.3000) | " \
         "40 / 50 |" in rows[0]
  assert "| 0.6000 (0.5500-0.6500) | 0.1000 (0.1000-0.1000) | 0.2000 (0.1000-0.3000) | 41 / 51 |" in rows[2]
