"""The benchmark runs the real step (and HF's) on a tiny config and reports consistent figures."""

import json

from bert_jax.bench.__main__ import main, synthetic_batch
from bert_jax.models import BertConfig
from bert_jax.training import flops


def test_synthetic_batch_has_google_schema_and_valid_positions():
  cfg = BertConfig.from_size("tiny", vocab_size=50)
  b = synthetic_batch(cfg, 4, 32, 5)
  assert set(b) == {"input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                    "masked_lm_weights", "next_sentence_labels"}
  assert b["masked_lm_positions"].min() >= 1 and b["masked_lm_positions"].max() <= 30
  assert all(len(set(row)) == 5 for row in b["masked_lm_positions"].tolist())


def test_bench_reports_json_with_mfu_and_hf_ratio(capsys):
  import jax
  impl = jax.config.jax_default_prng_impl
  assert main(["--size=tiny", "--seq_len=16", "--batch_size=8", "--vocab_size=100", "--steps=2",
               "--warmup=1", "--dtype=float32", "--compare_hf", "--mesh=-1,1,1"]) == 0
  assert jax.config.jax_default_prng_impl == impl   # the bench must not leak its PRNG choice
  lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("BENCH_JSON ")]
  assert len(lines) == 1
  r = json.loads(lines[0][len("BENCH_JSON "):])
  cfg = BertConfig.from_size("tiny", vocab_size=100)
  expected_mfu = r["seq_per_sec"] * flops.flops_per_sequence(cfg, 16, 2) / (r["peak_flops"] * r["devices"])
  assert abs(r["mfu"] - expected_mfu) < 1e-9 and 0 < r["mfu"] < 1
  assert r["tokens_per_sec"] == r["seq_per_sec"] * 16
  assert r["hf_eager_seq_per_sec"] > 0
  assert abs(r["ratio_vs_hf_eager"] - r["seq_per_sec"] / r["hf_eager_seq_per_sec"]) < 1e-9
