"""experiments/modern_encoder.py, the equal-compute study: the modern recipe's schedule fitted to the budget, the
token heads of the head ablation (reading the encoder output, not the prediction head), and the report's
ablation, curve and CPU-time lines."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.finetune.tasks import registry
from bert_jax.models import BertConfig, BertModel, heads
from experiments import modern_encoder as me


def _tiny_modern():
  return BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                    encoder="modernbert", local_attention=8, max_position_embeddings=128, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)


def test_the_modern_recipe_warms_up_and_decays_over_the_budget_not_over_two_trillion_tokens():
  modern = me.make_config("modernbert", "tiny", 2000, "c.txt", "v.txt")
  assert modern.warmup_steps == 100                       # 5% of 2,000, as preset=budget's
  assert modern.optimizer.decay_fraction == 0.2           # the preset's 0.025 was ~50B of ~2T tokens
  assert modern.optimizer.schedule == "wsd" and modern.optimizer.name == "stable_adamw"
  bert = me.make_config("bert", "tiny", 2000, "c.txt", "v.txt")
  assert bert.warmup_steps == 100 and bert.optimizer.decay_fraction == 0.1   # untouched: its preset's own
  assert bert.checkpoint_every_steps == 500 and bert.keep_checkpoints == me.CURVE_POINTS + 1


@pytest.mark.slow   # ~5 s on a quiet CPU: six small compiles
def test_encoder_output_token_heads_read_sequence_output_where_the_default_reads_the_prediction_head(monkeypatch):
  for kind, cls in me.ABLATION_TASKS.items():   # the script registers them only where it fine-tunes them
    monkeypatch.setitem(registry.TASKS, kind, cls)
  cfg = _tiny_modern()
  ids = jnp.asarray(np.random.RandomState(0).randint(5, 64, (2, 12)), jnp.int32)
  mask = jnp.ones_like(ids)
  task = registry.get_task("ner_encoder_output", label_list=["O", "B-PER", "I-PER"])
  head = task.build_head(cfg, dropout_rate=0.0)
  params = nn.meta.unbox(head.init(jax.random.key(0), ids, mask)["params"])
  logits = head.apply({"params": params}, ids, mask)["logits"]
  enc = BertModel(cfg).apply({"params": params["bert"]}, ids, mask)
  k, b = params["classifier"]["kernel"], params["classifier"]["bias"]
  np.testing.assert_allclose(logits, enc["sequence_output"] @ k + b, rtol=1e-5, atol=1e-5)
  default = heads.BertForTokenClassification(cfg, 3, dropout_rate=0.0).apply({"params": params}, ids, mask)["logits"]
  np.testing.assert_allclose(default, enc["token_output"] @ k + b, rtol=1e-5, atol=1e-5)
  assert np.abs(np.asarray(default - logits)).max() > 1e-3   # the two heads read different features
  qa = registry.get_task("squad_v1_encoder_output").build_head(cfg)
  qp = nn.meta.unbox(qa.init(jax.random.key(1), ids, mask)["params"])
  out = qa.apply({"params": qp}, ids, mask)
  seq = BertModel(cfg).apply({"params": qp["bert"]}, ids, mask)["sequence_output"]
  ref = seq @ qp["qa_outputs"]["kernel"] + qp["qa_outputs"]["bias"]
  np.testing.assert_allclose(out["start_logits"], ref[..., 0], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out["end_logits"], ref[..., 1], rtol=1e-5, atol=1e-5)


def test_the_report_shows_the_head_ablation_the_curve_and_cpu_times(tmp_path):
  rows = {f"tiny/{a}": {"arm": a, "size": "tiny", "run": f"tiny_{a}", "steps": 100, "flops": 1e12,
                        "flops_per_step": 1e10} for a in ("bert", "modernbert")}
  down = {"tiny_modernbert/ner": {"test": 0.40, "spread": 0.04, "train_steps": [96, 96], "best_steps": [32, 64],
                                 "planned_steps": 192}, "tiny_modernbert/qa": {"test": 30.0, "spread": 2.0},
          "tiny_modernbert_encoder_output/ner": {"test": 0.50, "spread": 0.02},
          "tiny_modernbert_encoder_output/qa": {"test": 33.0, "spread": 4.0}}
  pre = {"tiny_modernbert": {"heldout": {"mlm_accuracy": 0.1}, "curve": {"25": 0.05, "100": 0.1}}}
  times = {"tiny/bert": {"128": 0.5}, "cpu": {"tiny/bert": {"128": 0.9}}, "load_average": {"tiny/bert": {"128": 7.5}}}
  out = tmp_path / "m.md"
  me.write_markdown({"scale": "study", "settings": me.settings("study"), "rows": rows, "downstream": down,
                     "pretrain": pre, "step_times": times}, str(out))
  text = out.read_text(encoding="utf-8")
  label = me.ARMS["modernbert"][0]
  assert f"| tiny | {label} | prediction head (default) | 40.0 ± 2.0 | 30.0 ± 1.0 |" in text
  assert f"| tiny | {label} | encoder output | 50.0 ± 1.0 | 33.0 ± 2.0 |" in text
  assert f"- tiny, {label}: 25: 0.0500, 100: 0.1000" in text
  assert "| tiny_modernbert/ner | 32, 64 | 96 | 192 | early stopping |" in text
  assert "| tiny | BERT, preset=budget | 0.500 / 0.900 |" in text and "load average 7.5-7.5" in text


def test_merge_joins_another_processes_runs_and_a_missing_file_is_one_error(tmp_path):
  other = tmp_path / "other.json"
  other.write_text('{"pretrain": {"tiny_arch": {"dir": "d"}}, "rows": {"tiny/arch": {"run": "tiny_arch"}}, '
                   '"downstream": {"tiny_arch/ner": {"test": 0.5}}, "step_times": {"tiny/arch": {"128": 1.0}}}',
                   encoding="utf-8")
  data = {"pretrain": {"tiny_bert": {"dir": "b"}}, "downstream": {"tiny_bert/ner": {"test": 0.4}}}
  me.merge_results(data, str(other))
  assert set(data["pretrain"]) == {"tiny_bert", "tiny_arch"} and data["rows"] == {"tiny/arch": {"run": "tiny_arch"}}
  assert set(data["downstream"]) == {"tiny_bert/ner", "tiny_arch/ner"} and data["step_times"]["tiny/arch"]
  with pytest.raises(UserError, match="--merge=.*no such results file"):
    me.merge_results(data, str(tmp_path / "missing.json"))
  with pytest.raises(UserError, match="--tasks='ner,pos'"):
    me.main([f"--workdir={tmp_path / 'w'}", "--tasks=ner,pos"])
