"""experiments/representation_rank.py: the effective rank it reports, and the command on a real params dir."""

import numpy as np
import pytest

from experiments import representation_rank as rr


def test_effective_rank_counts_the_directions_that_carry_the_states():
  rng = np.random.default_rng(0)
  direction = rng.normal(size=32)
  one = rng.normal(size=(500, 1)) * direction + 3.0          # one direction, plus an offset centring removes
  assert abs(rr.effective_rank(one) - 1.0) < 1e-3
  basis = np.linalg.qr(rng.normal(size=(32, 4)))[0].T        # 4 orthonormal directions, equal variance
  four = np.concatenate([s * basis for s in (-1.0, 1.0)] * 50)
  assert abs(rr.effective_rank(four) - 4.0) < 1e-6
  iso = rng.normal(size=(4000, 16))
  assert 15.5 < rr.effective_rank(iso) <= 16.0
  skewed = iso * np.array([30.0] + [1.0] * 15)               # one direction 30x the rest: close to 1, not 16
  assert rr.effective_rank(skewed) < 1.5
  assert rr.effective_rank(np.ones((10, 8))) == 0.0          # identical states: no direction at all


def _checkpoint(tmp_path, tiny_vocab):
  import jax
  import jax.numpy as jnp
  from flax import linen as nn
  from bert_jax.models import BertConfig
  from bert_jax.models.bert import BertModel
  from bert_jax.pretrained import save_params_dir
  with open(tiny_vocab, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  config = BertConfig.from_size("tiny", vocab_size=vocab_size, hidden_size=64, num_attention_heads=2,
                                intermediate_size=128, max_position_embeddings=32, layer_norm_type="pre")
  ids = jnp.ones((1, 8), jnp.int32)
  params = nn.unbox(BertModel(config).init(jax.random.PRNGKey(0), ids, ids)["params"])
  return save_params_dir(str(tmp_path / "ck"), config, {"bert": params}, tiny_vocab)


@pytest.mark.slow   # a subprocess over a checkpoint
def test_command_reports_every_layer_of_a_checkpoint(tmp_path, tiny_vocab, capsys):
  ck = _checkpoint(tmp_path, tiny_vocab)
  tsv = tmp_path / "dev.tsv"
  rows = ["the cat sat on the mat .", "a dog was running !", "hello world , jax bert model", "the data is un",
          "train ##ing the model"]
  tsv.write_text("label\ttext_a\n" + "".join(f"{i % 2}\t{r}\n" for i, r in enumerate(rows)), encoding="utf-8")
  assert rr.main([f"--checkpoints={ck}", f"--tsv={tsv}", "--examples=4", "--max_seq_length=12"]) == 0
  out = capsys.readouterr().out
  assert out.startswith(f"4 rows of {tsv} (text_a), 12 positions")
  row = [line for line in out.splitlines() if line.startswith(f"| {ck} |")]
  assert len(row) == 1 and "| pre |" in row[0] and row[0].endswith("(of 64) |")
  cells = row[0].split("| pre |")[1].split("(of")[0].split(";")
  assert [c.split()[0] for c in cells] == ["layer_0", "layer_1", "output"]
  ranks = [float(c.split("/")[1]) for c in cells]
  assert all(1.0 <= r <= 64.0 for r in ranks)                # a random encoder uses many directions
  assert ranks[-1] > 2.0


def test_command_names_the_file_and_column_it_cannot_read(tmp_path, tiny_vocab, capsys):
  tsv = tmp_path / "dev.tsv"
  tsv.write_text("label\tsentence\n1\tthe cat\n", encoding="utf-8")
  assert rr.main(["--checkpoints=unused", f"--tsv={tsv}"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and str(tsv) in err and "'text_a'" in err and "--column" in err
  assert rr.main(["--checkpoints=unused", f"--tsv={tmp_path / 'missing.tsv'}"]) == 2
  assert "no such file" in capsys.readouterr().err
