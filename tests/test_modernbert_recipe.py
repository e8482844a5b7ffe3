"""preset=modernbert and its parts on the BERT encoder: batch-size warmup (rows weighted out on the host; the
step's gradient is the smaller batch's), phases that change model fields (ModernBERT's context extension raising
the rotary θ), the plan's one-line refusals, and (full tier) train.py with the preset on the modernbert family,
a few steps then a resume."""

import dataclasses
import importlib
import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.models import BertConfig
from bert_jax.models.pretraining import pretraining_model
from bert_jax.pretrain import batch_warmup
from bert_jax.pretrain.plan import resolve_pretrain
from configs import pretrain as pretrain_config
from test_reliability_workdir import tiny_config, write_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  return write_corpus(str(tmp_path_factory.mktemp("modern_recipe")))


def test_the_preset_is_modernberts_recipe():
  c = pretrain_config.get_config("size=base,preset=modernbert")
  assert c.model.encoder == "modernbert" and tuple(c.targets) == ("mlm",) and c.data.pack_sequences
  assert c.data.masked_lm_prob == 0.3 and c.data.max_seq_length == 1024
  o = c.optimizer
  assert (o.name, o.learning_rate, o.b1, o.b2, o.eps, o.weight_decay) == ("stable_adamw", 8e-4, 0.9, 0.98, 1e-6, 1e-5)
  assert (o.schedule, o.decay_shape) == ("wsd", "1-sqrt")
  assert c.batch_warmup_start == pytest.approx(768 / 4608) and c.batch_warmup_steps == 10_000
  assert c.data.phases == ((0.9, 1024, 307, {"global_rope_theta": 10000.0}), (0.1, 8192, 2458))
  c.num_train_steps = 4000                                 # the warmups follow the budget
  assert (c.warmup_steps, c.batch_warmup_steps) == (6, 100)


def test_batch_warmup_rows_grow_linearly_and_each_host_keeps_its_share():
  w = batch_warmup.BatchWarmup(steps=4, start=0.25)
  assert [w.rows(s, 16) for s in range(6)] == [4, 7, 10, 13, 16, 16]
  assert batch_warmup.BatchWarmup().rows(0, 16) == 16     # off

  class Source:
    def __init__(self):
      self.closed = False

    def __next__(self):
      return {"masked_lm_weights": np.ones((8, 3), np.float32), "input_ids": np.ones((8, 5), np.int32)}

    def state(self):
      return {"at": 1}

    def close(self):
      self.closed = True

  src = Source()
  # This host holds 8 of the 16 global rows: it keeps half of each step's count.
  it = batch_warmup.WarmupBatches(src, w, global_batch_size=16, start_step=1)
  kept = [int((next(it)["masked_lm_weights"].sum(axis=1) > 0).sum()) for _ in range(4)]
  assert kept == [4, 5, 6, 8]             # rows(1..4) = 7, 10, 13, 16 -> x 8/16, rounded
  assert it.state() == {"at": 1}
  it.close()
  assert src.closed


@pytest.mark.slow   # gradients of a modernbert step
def test_a_weighted_out_row_adds_nothing_to_the_mlm_gradient():
  """The premise of batch warmup: the loss of 8 rows with rows 4..7 weighted 0 has the gradient of rows 0..3."""
  cfg = BertConfig.from_size("tiny", vocab_size=40, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                             num_hidden_layers=1, max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
  model = pretraining_model(cfg, ("mlm",))
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 40, (8, 12)).astype(np.int32)
  batch = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
           "masked_lm_positions": rng.integers(1, 11, (8, 3)).astype(np.int32),
           "masked_lm_ids": rng.integers(5, 40, (8, 3)).astype(np.int32),
           "masked_lm_weights": np.ones((8, 3), np.float32)}
  init = jax.jit(lambda r: model.init({"params": r}, ids, batch["input_mask"], batch["segment_ids"],
                                     batch["masked_lm_positions"], deterministic=True)["params"])
  params = nn.unbox(init(jax.random.key(0)))

  def loss(p, b):
    out = model.apply({"params": p}, b["input_ids"], b["input_mask"], b["segment_ids"], b["masked_lm_positions"],
                      deterministic=True)
    logp = jax.nn.log_softmax(out["mlm_logits"].astype(jnp.float32))
    nll = -jnp.take_along_axis(logp, b["masked_lm_ids"][..., None], axis=-1)[..., 0]
    return jnp.sum(nll * b["masked_lm_weights"]) / (jnp.sum(b["masked_lm_weights"]) + 1e-5)

  w = batch_warmup.WarmupBatches(iter([batch]), batch_warmup.BatchWarmup(steps=2, start=0.5), 8, 0)
  warmed = next(w)
  assert warmed["masked_lm_weights"][4:].sum() == 0 and warmed["masked_lm_weights"][:4].all()
  small = {k: v[:4] for k, v in batch.items()}
  grad = jax.jit(jax.grad(loss))
  g_warm, g_small = grad(params, warmed), grad(params, small)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-7),
               g_warm, g_small)
  g_full = grad(params, batch)
  assert not np.allclose(np.asarray(g_full["mlm"]["output_bias"]), np.asarray(g_small["mlm"]["output_bias"]))


def test_the_plan_resolves_phase_model_changes_and_batch_warmup(files, tmp_path):
  c = tiny_config(*files, steps=8, **{"batch_warmup_steps": 4, "batch_warmup_start": 0.5, "targets": ("mlm",),
                                      "data.phases": ((0.5, 16, 3, {"attention_probs_dropout_prob": 0.0}),
                                                      (0.5, 32, 5))})
  plan = resolve_pretrain(c, str(tmp_path / "w"), num_devices=1, process_count=1)
  assert plan.phases[0].model == (("attention_probs_dropout_prob", 0.0),) and plan.phases[1].model == ()
  assert plan.batch_warmup == batch_warmup.BatchWarmup(4, 0.5)
  text = plan.describe()
  assert "model.attention_probs_dropout_prob=0.0" in text and "4 -> 8 sequences over 4 steps" in text
  assert json.loads(json.dumps(plan.to_dict()))["batch_warmup"] == {"steps": 4, "start": 0.5}


@pytest.mark.parametrize("changes, message", [
    ({"batch_warmup_steps": 4, "targets": ("mlm", "nsp")}, "batch_warmup_steps=4 with targets ['nsp']"),
    ({"batch_warmup_steps": 4, "batch_warmup_start": 0.0}, "config.batch_warmup_start=0.0"),
    ({"data.phases": ((1.0, 32, 5, {"rope_theta": 1.0}),)}, "changes model.rope_theta, which is not a model"),
    ({"data.phases": ((1.0, 32, 5, {"intermediate_size": 256}),)}, "which changes the parameters' shapes"),
    ({"data.phases": ((1.0, 32, 5, ["x"]),)}, "a dict of model fields"),
])
def test_bad_batch_warmup_or_phase_changes_are_one_error_line(files, tmp_path, changes, message):
  c = tiny_config(*files, steps=8, **{"targets": ("mlm",), **changes})
  with pytest.raises(UserError) as e:
    resolve_pretrain(c, str(tmp_path / "w"), num_devices=1, process_count=1)
  assert "\n" not in str(e.value) and message in str(e.value)


def _has_modernbert():
  return importlib.util.find_spec("bert_jax.models.encoders.modernbert") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _has_modernbert(), reason="the modernbert encoder family is not in this checkout")
def test_train_py_with_the_modernbert_preset_runs_its_phases_and_resumes(files, tmp_path):
  """tiny,runlocal,preset=modernbert: StableAdamW, wsd, 30% masking, batch warmup, a 16-token phase with θ
  10,000 then 32 tokens at the global θ 160,000; 4 steps, then a resume to 6."""
  from bert_jax.pretrain import loop as pretrain
  corpus, vocab = files
  workdir = str(tmp_path / "run")
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1", PYTHONPATH=REPO)
  phases = ((0.5, 16, 4, {"global_rope_theta": 10000.0}), (0.5, 32, 8))
  fields = dict(batch_size=8, warmup_steps=1, batch_warmup_steps=2, checkpoint_every_steps=2, log_every_steps=2,
                progress_bar=False)
  # The first 4 steps in this process (train.py's own call), the resume through train.py's command line.
  c = pretrain_config.get_config("tiny,runlocal,preset=modernbert")
  c.data.input_files, c.data.vocab_file, c.data.phases, c.num_train_steps = corpus, vocab, phases, 4
  c.update(fields)
  pretrain.train_and_evaluate(c, workdir)
  plan = json.load(open(os.path.join(workdir, "plan.json"), encoding="utf-8"))
  assert plan["model"]["encoder"] == "modernbert" and plan["optimizer"]["name"] == "stable_adamw"
  assert plan["phases"][0]["model"] == [["global_rope_theta", 10000.0]]
  assert json.load(open(os.path.join(workdir, "model_config.json")))["global_rope_theta"] == 160000.0
  argv = [sys.executable, os.path.join(REPO, "train.py"), "--config=configs/pretrain.py:tiny,runlocal,preset=modernbert",
          f"--workdir={workdir}", f"--config.data.input_files={corpus}", f"--config.data.vocab_file={vocab}",
          "--config.num_train_steps=6", f"--config.data.phases={phases!r}",
          *(f"--config.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in fields.items())]
  second = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert second.returncode == 0, second.stderr[-3000:]
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8")]
  steps = [r["step"] for r in rows if "mlm_loss" in r]
  assert steps[-1] == 6 and 4 in steps and all(np.isfinite(r["mlm_loss"]) for r in rows if "mlm_loss" in r)


@pytest.mark.slow
@pytest.mark.skipif(not _has_modernbert(), reason="the modernbert encoder family is not in this checkout")
def test_continued_pretraining_from_an_imported_modernbert_uses_its_tokenizer_json(files, tmp_path):
  """import-hf of a (random) ModernBertForMaskedLM whose folder ships a byte-level BPE tokenizer.json and more
  embedding rows than token ids, then preset=modernbert with init_checkpoint and no vocab_file: the run
  tokenizes with the checkpoint's tokenizer.json; a WordPiece vocab_file with it is one error line."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from bert_jax.convert import hf_modernbert
  from bert_jax.input_pipeline import build_vocab, tokenization
  from bert_jax.pretrain import loop as pretrain
  del torch
  corpus, wordpiece = files
  folder, params = tmp_path / "hf", tmp_path / "params"
  tok_json = str(tmp_path / "tokenizer.json")
  build_vocab.build_vocab(corpus, 300, tok_json, do_lower_case=False, verbose=False, model="bpe")
  hf_cfg = transformers.ModernBertConfig(vocab_size=320, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                         num_attention_heads=2, max_position_embeddings=128, local_attention=16,
                                         pad_token_id=0, cls_token_id=2, sep_token_id=3)
  transformers.ModernBertForMaskedLM(hf_cfg).save_pretrained(str(folder))
  (folder / "tokenizer.json").write_bytes(open(tok_json, "rb").read())
  hf_modernbert.import_hf_modernbert(str(folder), str(params))
  # export-hf of the import: the tokenizer.json goes with it (no vocab.txt made of its bytes) and transformers'
  # AutoTokenizer reads the same ids and specials from the exported folder
  from bert_jax.pretrained.load import load_pretrained
  exported = tmp_path / "exported"
  hf_modernbert.write_modernbert(load_pretrained(str(params)), str(exported))
  assert not (exported / "vocab.txt").exists()
  auto = transformers.AutoTokenizer.from_pretrained(str(exported))
  text = "the cat sat on the mat ."
  bpe = tokenization.load_tokenizer(tok_json)
  assert auto(text)["input_ids"] == [2] + bpe.encode(text) + [3] and auto.mask_token_id == 4
  assert json.load(open(exported / "config.json"))["cls_token_id"] == 2

  def config(**changes):
    c = pretrain_config.get_config("tiny,runlocal,preset=modernbert")
    c.init_checkpoint, c.data.input_files, c.data.vocab_file = str(params), corpus, ""
    c.data.phases, c.data.max_seq_length, c.data.max_predictions_per_seq = (), 32, 8
    c.batch_size, c.num_train_steps, c.warmup_steps, c.batch_warmup_steps = 8, 2, 0, 0
    c.checkpoint_every_steps, c.log_every_steps, c.progress_bar = 2, 1, False
    for k, v in changes.items():
      setattr(c.data, k, v)
    return c

  with pytest.raises(UserError) as e:
    pretrain.train_and_evaluate(config(vocab_file=wordpiece), str(tmp_path / "wrong"))
  assert "\n" not in str(e.value) and "was trained with a BPE tokenizer.json" in str(e.value)
  workdir = str(tmp_path / "run")
  pretrain.train_and_evaluate(config(), workdir)
  plan = json.load(open(os.path.join(workdir, "plan.json"), encoding="utf-8"))
  assert plan["vocab_file"] == str(params / "tokenizer.json") and plan["model"]["vocab_size"] == 320
  assert os.path.exists(os.path.join(workdir, "tokenizer.json"))
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8")]
  assert [r["step"] for r in rows if "mlm_loss" in r][-1] == 2
  # predict fill-mask on the run: the tokenizer.json finds [MASK] in the text (taking the space before it) and
  # the candidates carry its own token names
  from bert_jax.predict import FillMask
  fill = FillMask(workdir, batch_size=1, max_seq_length=32)
  tok = tokenization.load_tokenizer(tok_json)
  text = "the cat sat on the [MASK] ."
  assert fill.encode(text) == [2] + tok.encode("the cat sat on the") + [4] + tok.encode(" .") + [3]
  (out,) = fill.predict([text], top_k=3)
  # (a random head may also rank the 20 embedding rows past the tokenizer's 300 ids: shown as [UNK])
  cands = [c for c in out["masks"][0]["candidates"] if c["id"] < 300]
  assert [c["token"] for c in cands] == tok.convert_ids_to_tokens([c["id"] for c in cands])


def test_modern_encoder_experiment_checks_its_flags_first_and_reports_every_arm(tmp_path):
  from experiments import modern_encoder
  with pytest.raises(UserError, match="--stages='bogus'"):
    modern_encoder.main([f"--workdir={tmp_path / 'w'}", "--stages=bogus"])
  assert not (tmp_path / "w").exists()
  rows = {f"tiny/{a}": {"arm": a, "size": "tiny", "run": f"tiny_{a}", "steps": s, "flops": 1e12, "flops_per_step": 1e9}
          for a, s in (("bert", 100), ("arch", 80), ("modernbert", 80))}
  down = {"tiny_bert/sentiment": {"test": 0.80, "spread": 0.02}, "tiny_modernbert/sentiment": {"test": 0.75,
                                                                                                 "spread": 0.01},
          "tiny_bert/qa": {"test": 35.0, "spread": 2.0}}       # the SQuAD scorer's percent
  pre = {"tiny_bert": {"heldout": {"mlm_accuracy": 0.12}, "seconds_per_step": 0.1},
         "tiny_modernbert": {"heldout": {"mlm_accuracy": 0.10}, "seconds_per_step": 0.2}}
  out = tmp_path / "m.md"
  modern_encoder.write_markdown({"scale": "reduced", "settings": modern_encoder.settings("reduced"), "rows": rows,
                                 "downstream": down, "pretrain": pre,
                                 "step_times": {"tiny/bert": {"128": 0.5, "2048": 2.0}}}, str(out))
  text = out.read_text(encoding="utf-8")
  assert "| tiny | BERT, preset=budget | 100 | 1,000 | 0.100 | 0.1200 | 80.0 ± 1.0 | – | 35.0 ± 1.0 |" in text
  assert "held-out MLM -2.0 points; sentiment -5.0 (beyond the spread 2.0)" in text
  assert "| tiny | BERT, preset=budget | 0.500 | 2.000 |" in text
