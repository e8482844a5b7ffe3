"""Fine-tuning pieces without a training run: the config, batching, losses, checkpoint merging, errors."""

import importlib.util
import os
import re
import subprocess
import sys

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.finetune import data as ft
from bert_jax.finetune import loop as finetune_loop
from bert_jax.finetune import model as fm
from bert_jax.errors import UserError
from bert_jax.finetune.tasks import TaskDataError
from bert_jax.models import BertConfig, BertForPreTraining, dummy_inputs, scan_params
from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.pretrained.load import merge_params
from bert_jax.engine import checkpoints, sharding
from bert_jax.engine import train_step as ts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_PATH = os.path.join(ROOT, "configs", "finetune.py")


def load_config_module():
  spec = importlib.util.spec_from_file_location("finetune_config", CONFIG_PATH)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def tiny_config(vocab_size):
  return BertConfig.from_size("tiny", hidden_size=64, num_attention_heads=2, intermediate_size=128,
                              vocab_size=vocab_size)


# ---- config ------------------------------------------------------------------------------------------------
def test_config_task_defaults_follow_the_paper():
  mod = load_config_module()
  glue = mod.get_config("task=mrpc")
  squad = mod.get_config("task=squad_v2,size=large")
  assert (glue.max_seq_length, glue.batch_size, glue.num_train_epochs) == (128, 32, 3.0)
  assert (squad.max_seq_length, squad.doc_stride, squad.max_query_length, squad.num_train_epochs) == (384, 128, 64,
                                                                                                        2.0)
  assert squad.version_2_with_negative and squad.model.size == "large" and squad.batch_size == 48
  assert glue.warmup_proportion == 0.1 and glue.weight_decay == 0.01 and glue.optimizer.name == "adamw"
  local = mod.get_config("task=ner,runlocal")
  assert local.model.size == "tiny" and local.batch_size < glue.batch_size and local.model.dtype == "float32"


def test_config_rejects_missing_or_unknown_task():
  mod = load_config_module()
  with pytest.raises(UserError, match="give the task"):
    mod.get_config("size=mini")
  with pytest.raises(UserError, match="unknown task 'glue'; expected one of cola, sst2, .*, ax, squad_v1"):
    mod.get_config("task=glue")
  with pytest.raises(UserError, match="unknown config argument 'epochs=3'; expected task=NAME, size="):
    mod.get_config("task=cola,epochs=3")


def test_every_config_field_has_a_comment():
  """The first assignment of every field in get_config carries a comment (on the line or just above)."""
  lines = open(CONFIG_PATH, encoding="utf-8").read().splitlines()
  start = next(i for i, l in enumerate(lines) if l.startswith("def get_config"))
  seen, uncommented = set(), []
  for i in range(start, len(lines)):
    m = re.match(r"\s+(config(?:\.\w+)+) = (.*)", lines[i])
    if not m or m.group(1) in seen:
      continue
    seen.add(m.group(1))
    if "ml_collections.ConfigDict()" in m.group(2):
      continue
    if "#" not in lines[i] and not lines[i - 1].strip().startswith("#"):
      uncommented.append(lines[i].strip())
  assert len(seen) > 50
  assert not uncommented, f"config fields without a comment: {uncommented}"


def test_default_learning_rate_scales_with_model_size():
  lrs = [fm.default_learning_rate(BertConfig.from_size(s, vocab_size=10))
         for s in ("tiny", "mini", "small", "medium", "base", "large")]
  assert lrs == sorted(lrs, reverse=True) and lrs[-1] == 2e-5 and lrs[1] >= 1e-4
  odd = BertConfig(vocab_size=10, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                   intermediate_size=1536)   # MiniLM-L6-H384
  assert fm.size_name(odd) == "medium"


# ---- batching and losses -------------------------------------------------------------------------------------
def test_batches_pad_the_last_batch_with_zero_weight_and_cover_every_row_once():
  n, b = 11, 4
  feats = {"input_ids": np.arange(n * 3, dtype=np.int32).reshape(n, 3), "label_ids": np.arange(n, dtype=np.int32)}
  batches = list(ft.iterate_batches(feats, ("input_ids", "label_ids"), b, rng=np.random.default_rng(0)))
  assert len(batches) == 3 and all(x["input_ids"].shape == (b, 3) for x in batches)
  seen = np.concatenate([x["label_ids"][x["example_weight"] > 0] for x in batches])
  assert sorted(seen.tolist()) == list(range(n))
  assert batches[-1]["example_weight"].tolist() == [1, 1, 1, 0]


def task_loss(task, outputs, batch):
  """(mean loss, sums) of one batch through the fine-tuning LossFn the train step uses."""
  loss_fn = fm.task_loss(None, task)
  sums = task.loss_sums(outputs, batch)
  return sums["task_loss_sum"] / loss_fn.denominators(batch)["weight"], sums


def test_losses_ignore_padding_rows_and_subtokens():
  logits = jnp.array([[2.0, 0.0], [0.0, 3.0], [5.0, -5.0]])
  batch = {"label_ids": jnp.array([0, 0, 1]), "example_weight": jnp.array([1.0, 1.0, 0.0])}
  loss, sums = task_loss(ft.get_task("sst2"), {"logits": logits}, batch)
  logp = jax.nn.log_softmax(logits)
  np.testing.assert_allclose(loss, -(logp[0, 0] + logp[1, 0]) / 2, rtol=1e-6)
  assert float(sums["task_correct_sum"]) == 1.0 and float(sums["task_weight_sum"]) == 2.0
  # Regression is MSE; NaN (unlabelled) rows carry no loss.
  loss, _ = task_loss(ft.get_task("stsb"), {"logits": jnp.array([[1.0], [3.0], [7.0]])},
                         {"label_ids": jnp.array([2.0, 1.0, np.nan]), "example_weight": jnp.ones(3)})
  np.testing.assert_allclose(loss, (1.0 + 4.0) / 2, rtol=1e-6)
  # NER: -100 positions (sub-tokens, [CLS], padding) carry no loss.
  tok_logits = jnp.zeros((1, 4, 3)).at[0, 1, 2].set(4.0)
  loss, sums = task_loss(ft.get_task("ner", label_list=["O", "B-X", "I-X"]), {"logits": tok_logits},
                            {"label_ids": jnp.array([[-100, 2, -100, -100]]), "example_weight": jnp.ones(1)})
  np.testing.assert_allclose(loss, -jax.nn.log_softmax(tok_logits[0, 1])[2], rtol=1e-6)
  assert float(sums["task_weight_sum"]) == 1.0


# ---- initialisation from a checkpoint ---------------------------------------------------------------------
def _write_pretrained_dir(tmp_path, vocab_file, vocab_size):
  cfg = tiny_config(vocab_size)
  model = BertForPreTraining(cfg)
  params = jax.jit(lambda r: model.init(r, *dummy_inputs(cfg), deterministic=True)["params"])(
      jax.random.key(7))
  params = jax.tree.map(np.asarray, flax.linen.unbox(params))
  d = str(tmp_path / "pretrained")
  params_dir.save_params_dir(d, cfg, params, vocab_file, info={"do_lower_case": True, "source": "test"})
  return d, params


@pytest.mark.slow
def test_merge_loads_the_encoder_and_initialises_the_head(tmp_path):
  vocab = testing.write_vocab(str(tmp_path))
  n = params_dir.count_vocab_lines(vocab)
  d, pre = _write_pretrained_dir(tmp_path, vocab, n)
  init = load_pretrained(d)
  assert init.do_lower_case is True and init.config.vocab_size == n
  task = ft.get_task("sst2")
  model = fm.build_model(task, init.config)
  mesh = sharding.make_mesh((-1, 1, 1))
  config = load_config_module().get_config("task=sst2,runlocal")
  params, p_shard = ts.init_params(config, model, mesh)
  random_head = np.asarray(params["classifier"]["kernel"])
  merged, report = merge_params(params_dir.host_params(params), init.params, groups=("bert",))
  np.testing.assert_array_equal(np.asarray(merged["bert"]["embeddings"]["word_embeddings"]["embedding"]),
                                pre["bert"]["embeddings"]["word_embeddings"]["embedding"])
  np.testing.assert_array_equal(np.asarray(merged["bert"]["encoder"]["layer_1"]["attention"]["query"]["kernel"]),
                                pre["bert"]["encoder"]["layer_1"]["attention"]["query"]["kernel"])
  np.testing.assert_array_equal(np.asarray(merged["classifier"]["kernel"]), random_head)
  assert sorted(report["initialised"]) == ["classifier/bias", "classifier/kernel"]
  assert "bert/pooler/kernel" in report["loaded"] and any(u.startswith("mlm/") for u in report["unused"])


def test_vocab_size_mismatch_is_a_clear_error(tmp_path):
  vocab = testing.write_vocab(str(tmp_path))
  d, _ = _write_pretrained_dir(tmp_path, vocab, params_dir.count_vocab_lines(vocab))
  other = testing.write_vocab(str(tmp_path / "other"), extra=["extra1", "extra2"])
  mod = load_config_module()
  config = mod.get_config("task=sst2,runlocal")
  config.init_checkpoint, config.vocab_file = d, other
  config.data_dir = testing.write_glue(str(tmp_path / "glue"), tasks=["sst2"])
  with pytest.raises(ValueError, match=r"vocab size mismatch.*has \d+ tokens.*vocab_size=\d+"):
    finetune_loop.run(config, str(tmp_path / "out"))


def test_a_bad_label_names_file_and_line(tmp_path):
  vocab = testing.write_vocab(str(tmp_path))
  root = testing.write_glue(str(tmp_path / "glue"), tasks=["sst2"])
  path = os.path.join(root, "SST-2", "train.tsv")
  lines = open(path, encoding="utf-8").read().split("\n")
  lines[4] = "the dog sat .\tpositive"
  open(path, "w", encoding="utf-8").write("\n".join(lines))
  mod = load_config_module()
  config = mod.get_config("task=sst2,runlocal")
  config.vocab_file, config.data_dir = vocab, root
  with pytest.raises(TaskDataError, match=re.escape(path) + r":5: label not in label set.*'positive'"):
    finetune_loop.run(config, str(tmp_path / "out"))


def test_tfds_name_must_fit_the_task(tmp_path):
  mod = load_config_module()
  config = mod.get_config("task=mrpc,runlocal")
  config.tfds_name = "glue/cola"
  task = ft.get_task("mrpc")
  with pytest.raises(ValueError, match="does not fit task 'mrpc'.*glue/mrpc"):
    ft.check_tfds_name(task, config)


def test_init_from_a_pretraining_workdir_reads_its_latest_checkpoint(tmp_path):
  vocab = testing.write_vocab(str(tmp_path))
  n = params_dir.count_vocab_lines(vocab)
  _, pre = _write_pretrained_dir(tmp_path, vocab, n)
  workdir = str(tmp_path / "pretrain_run")
  cfg = tiny_config(n).replace(scan_layers=True)
  checkpoints.write_workdir_files(workdir, {"data": {"do_lower_case": False}}, cfg, vocab)
  ckpt = checkpoints.Checkpointer(os.path.join(workdir, checkpoints.CHECKPOINT_SUBDIR), async_save=False)
  # Pre-training with scan_layers=True saves stacked layers; fine-tuning gets the per-layer layout back.
  ckpt.save(5, {"params": scan_params(pre), "step": np.int32(5)})
  ckpt.close()
  init = load_pretrained(workdir)
  assert init.do_lower_case is False and init.config.vocab_size == n
  np.testing.assert_array_equal(init.params["bert"]["embeddings"]["word_embeddings"]["embedding"],
                                pre["bert"]["embeddings"]["word_embeddings"]["embedding"])
  np.testing.assert_array_equal(init.params["bert"]["encoder"]["layer_1"]["attention"]["value"]["kernel"],
                                pre["bert"]["encoder"]["layer_1"]["attention"]["value"]["kernel"])


def test_old_learning_rate_and_weight_decay_flags_set_the_optimizer_subtree():
  """--config.learning_rate / --config.weight_decay (the pre-0.2 fields) still work on the command line and
  land in config.optimizer, the subtree fine-tuning shares with pre-training."""
  script = ("from absl import app, flags\nfrom ml_collections import config_flags\n"
            "config_flags.DEFINE_config_file('config')\n"
            "def main(_):\n  o = flags.FLAGS.config.optimizer\n  print('RESULT', o.learning_rate, o.weight_decay)\n"
            "app.run(main)\n")
  out = subprocess.run([sys.executable, "-c", script, "--config=configs/finetune.py:task=mrpc",
                        "--config.learning_rate=5e-05", "--config.weight_decay=0.0"], cwd=ROOT, check=True,
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
  assert "RESULT 5e-05 0.0" in out
