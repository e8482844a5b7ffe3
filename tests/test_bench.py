"""The benchmark runs the real step for each attention path (and HF's) on a tiny config and reports
consistent figures; the memory table's search finds the largest batch with few probes."""

import json
import os
import re
import subprocess
import sys
import types

import jax
import pytest

from bert_jax.bench import __main__ as bench
from bert_jax.errors import UserError
from bert_jax.bench.__main__ import largest_batch, main, memory_table, synthetic_batch
from bert_jax.models import BertConfig
from bert_jax.pretrain import flops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _json_lines(out):
  return [json.loads(l[len("BENCH_JSON "):]) for l in out.splitlines() if l.startswith("BENCH_JSON ")]


def test_synthetic_batch_has_google_schema_and_valid_positions():
  cfg = BertConfig.from_size("tiny", vocab_size=50)
  b = synthetic_batch(cfg, 4, 32, 5)
  assert set(b) == {"input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                    "masked_lm_weights", "next_sentence_labels"}
  assert b["masked_lm_positions"].min() >= 1 and b["masked_lm_positions"].max() <= 30
  assert all(len(set(row)) == 5 for row in b["masked_lm_positions"].tolist())


# The slowest test of the fast tier (45 s on 2 loaded cores): a real compile on the 8-device mesh plus PyTorch's
# HF model timed eagerly; the loop's structure is checked without compiling just below.
@pytest.mark.slow
def test_bench_reports_json_with_mfu_and_hf_ratio_and_skips_paths_this_platform_lacks(capsys):
  impl = jax.config.jax_default_prng_impl
  assert main(["--size=tiny", "--seq_len=16", "--batch_size=8", "--vocab_size=100", "--steps=2",
               "--warmup=1", "--dtype=float32", "--compare_hf", "--mesh=-1,1,1",
               "--attention_impl=einsum,cudnn_dropout"]) == 0
  assert jax.config.jax_default_prng_impl == impl   # the bench must not leak its PRNG choice
  out = capsys.readouterr().out
  rows = _json_lines(out)
  # cudnn_dropout has no GPU here: reported as skipped, not timed under a wrong name
  assert "skipped cudnn_dropout: falls back to einsum" in out
  assert len(rows) == 1 and (rows[0]["attention_path"], rows[0]["attention_dropout"]) == ("einsum", 0.1)
  r = rows[0]
  cfg = BertConfig.from_size("tiny", vocab_size=100)
  expected_mfu = r["seq_per_sec"] * flops.flops_per_sequence(cfg, 16, 2) / (r["peak_flops"] * r["devices"])
  assert abs(r["mfu"] - expected_mfu) < 1e-9 and 0 < r["mfu"] < 1
  assert r["tokens_per_sec"] == r["seq_per_sec"] * 16 and r["peak_memory_gib"] > 0
  assert r["hf_eager_seq_per_sec"] > 0
  assert abs(r["ratio_vs_hf_eager"] - r["seq_per_sec"] / r["hf_eager_seq_per_sec"]) < 1e-9


def test_one_row_per_path_hf_timed_once_and_a_failing_path_reported(monkeypatch, capsys):
  # the loop's structure without compiling: run_config and the HF timing are stand-ins
  hf_calls = []

  def fake_run_config(args, size, b, peak, impl, seq_len):
    if impl == "einsum":
      raise RuntimeError("INTERNAL: cuDNN rejected the graph")
    return {"size": size, "seq_len": seq_len, "batch_size": b, "dtype": "float32", "attention_path": impl,
            "attention_dropout": 0.0, "step_time_s": 1.0, "seq_per_sec": float(b), "tokens_per_sec": b * seq_len,
            "mfu": 0.1}

  def fake_hf_rows(args, size, b, seq_len, peak):
    hf_calls.append((size, b, seq_len))
    return {"hf_eager_seq_per_sec": 4.0}

  monkeypatch.setattr(bench, "run_config", fake_run_config)
  monkeypatch.setattr(bench, "hf_rows", fake_hf_rows)
  monkeypatch.setattr(bench, "measure_matmul_peak", lambda dtype: 1e9)
  assert main(["--size=tiny", "--seq_len=16,32", "--batch_size=8", "--attention_impl=einsum,xla",
               "--compare_hf"]) == 1
  out = capsys.readouterr().out
  rows = _json_lines(out)
  assert hf_calls == [("tiny", 8, 16), ("tiny", 8, 32)]           # once per configuration, not per path
  assert "failed einsum: RuntimeError: INTERNAL: cuDNN rejected the graph" in out
  assert [r.get("attention_path", "error") for r in rows] == ["error", "xla"] * 2
  assert all(r["ratio_vs_hf_eager"] == 2.0 for r in rows if "seq_per_sec" in r)


def test_hf_comparison_skips_with_a_message_without_transformers(monkeypatch, capsys):
  monkeypatch.setattr(bench.hf_baseline, "available", lambda: False)
  args = types.SimpleNamespace(compare_hf=True)
  assert bench.hf_rows(args, "tiny", 8, 16, 1e9) == {}
  assert "torch/transformers not importable" in capsys.readouterr().out


@pytest.mark.parametrize("limit_fit,start,limit,want", [
    (100, 8, 4096, 96), (4096, 8, 4096, 4096), (7, 8, 4096, 0), (8, 8, 4096, 8), (1000, 8, 300, 296),
])
def test_largest_batch_doubles_then_bisects_to_the_multiple(limit_fit, start, limit, want):
  best, probes = largest_batch(lambda b: b <= limit_fit, start, limit, multiple=8)
  assert best == want
  assert all(ok == (b <= limit_fit) for b, ok in probes)
  assert len(probes) <= 2 * (limit // start).bit_length() + 1   # logarithmic, not a scan


def test_memory_table_rows_per_size_length_and_path(capsys):
  args = types.SimpleNamespace(size="base,large", seq_len="128,512", attention_impl="einsum,xla,cudnn_dropout",
                               batch_start=8, batch_limit=1024, batch_multiple=8, probe="analysis",
                               vocab_size=100, dtype="float32", scan_layers=False, remat_policy="none")
  # a fake probe: memory grows with batch x length x (2 if large) x (1.5 if the einsum path)
  budget = 64 * 512
  fits = lambda size, seq_len, impl: (lambda b: b * seq_len * (2 if size == "large" else 1)
                                      * (1.5 if impl == "einsum" else 1) <= budget)
  rows = memory_table(args, fits_factory=fits)
  got = {(r["size"], r["seq_len"], r["attention_impl"]): r["largest_batch"] for r in rows}
  assert got[("base", 128, "xla")] == 256 and got[("large", 512, "xla")] == 32
  assert got[("large", 512, "einsum")] == 16 and got[("base", 128, "einsum")] == 168
  out = capsys.readouterr().out
  assert len(_json_lines(out)) == 8 and out.count("skipped cudnn_dropout") == 4   # no GPU: not probed


def test_is_out_of_memory_recognises_xla_and_torch_messages():
  assert bench.is_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
  assert bench.is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
  assert not bench.is_out_of_memory(ValueError("shapes do not match"))


@pytest.mark.parametrize("flag, named", [
    ("--size=huge", "--size='huge': unknown size 'huge'"),
    ("--seq_len=abc", "--seq_len='abc'"), ("--seq_len=1", "--seq_len='1'"), ("--seq_len=1024", "512 positions"),
    ("--batch_size=x", "--batch_size='x'"), ("--batch_size=0", "--batch_size='0'"),
    ("--steps=0", "--steps=0"), ("--num_predictions=40", "--num_predictions=40"),
    ("--mesh=1,2", "--mesh='1,2'"), ("--mesh=3,1,1", "--mesh='3,1,1'"),
    ("--remat_policy=bogus", "--remat_policy='bogus'"), ("--prng_impl=bogus", "--prng_impl"),
    ("--attention_impl=foo", "--attention_impl='foo'"), ("--attention_impl=,", "--attention_impl=','"),
    ("--dtype=fp8", "--dtype"),
    ("--batch_size=12", "12 is not a multiple of the 8 data shards"),    # tests: 8 CPU devices
])
def test_a_bad_flag_value_is_a_user_error_naming_it_before_any_compile(flag, named, monkeypatch):
  # each of these used to end in a traceback, or in a "failed" row per path (exit 1) after the matmul peak
  monkeypatch.setattr(bench, "measure_matmul_peak", lambda dtype: pytest.fail("checked after the work began"))
  with pytest.raises(UserError, match=re.escape(named)):
    main(["--size=tiny", "--seq_len=16", "--batch_size=8", "--vocab_size=100", flag])


def test_bench_entry_point_prints_one_error_line_and_exits_2():
  proc = subprocess.run([sys.executable, "-m", "bert_jax.bench", "--size=huge"], capture_output=True, text=True,
                        cwd=ROOT, timeout=300)
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip().splitlines() == [
      "error: --size='huge': unknown size 'huge'; expected a comma-separated list of "
      "('tiny', 'mini', 'small', 'medium', 'base', 'large')"], proc.stderr
