"""experiments/long_context.py --tokens_per_step: each T at N / T rows (8,192 tokens: 16 x 512 ... 1 x 8,192),
a length that does not divide N is one error line, and the rows render as their own table with a rows column
(the batch-1 table unchanged)."""

import pytest

from bert_jax.errors import UserError
from experiments import long_context


def _row(t, path, rows, cpu):
  return {"size": "tiny", "T": t, "path": path, "rows": rows, "step_s": 1.0, "step_us_per_token": 100.0,
          "step_cpu_us_per_token": 90.0, "layer_s": 0.1, "layer_us_per_token": 20.0, "layer_cpu_us_per_token": cpu,
          "xla_temp_mb": 64.0, "peak_rss_mb": 700.0, "peak_rss_kb_per_token": 87.5}


def test_tokens_per_step_gives_each_length_whole_rows_and_names_one_that_does_not_divide():
  assert long_context.batch_rows(long_context.LENGTHS, 8192) == {512: 16, 1024: 8, 2048: 4, 4096: 2, 8192: 1}
  assert long_context.batch_rows((512, 8192), 0) == {512: 1, 8192: 1}
  with pytest.raises(UserError, match=r"^--tokens_per_step=8192: expected a multiple of every --lengths value "
                                      r"\(not of \[3000\]\)"):
    long_context.batch_rows((1024, 3000), 8192)
  with pytest.raises(UserError, match=r"^--tokens_per_step=4096.*\[8192\]"):
    long_context.batch_rows((1024, 8192), 4096)


def test_equal_token_rows_are_their_own_table_with_the_rows_per_step():
  rows = [_row(1024, "blocked", 8, 30.0), _row(1024, "dense", 8, 50.0), _row(8192, "blocked", 1, 36.0)]
  text = long_context.table({"tokens_per_step": 8192, "rows": rows})
  lines = text.splitlines()
  assert lines[0].startswith("At 8,192 tokens a step")
  assert "| size | T | rows |" in lines[2]
  assert lines[4].startswith("| tiny | 1,024 | 8 | ")
  assert lines[5].startswith("| tiny | 8,192 | 1 | ") and "36 (1.20x) / -" in lines[5]
  batch_1 = long_context.table([{k: v for k, v in r.items() if k != "rows"} for r in rows])
  assert "| rows |" not in batch_1 and batch_1.splitlines()[2].startswith("| tiny | 1,024 | 0.1 / 0.1 |")
