"""A pre-training objective defined only here, registered with one line, pre-trains end to end through the public
API (pretrain.loop.train_and_evaluate): its metrics reach metrics.jsonl and the loss curves, its head is
checkpointed and restored by a resumed run, and the work dir loads in bert_jax.predict. Without the line the
config is refused with one line naming the registered objectives. The twin of tests/test_tasks_plugin.py:
the loop, the step, the plan and the FLOPs need no change for a new objective (models/objectives/base.py)."""

import json
import logging
import os

import jax.numpy as jnp
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.errors import UserError
from bert_jax.models import axes, losses
from bert_jax.models.layers import dense
from bert_jax.models.objectives import OBJECTIVES, Objective, objective_names
from bert_jax.predict import FeatureExtractor, FillMask
from bert_jax.pretrain import flops
from bert_jax.pretrain import loop as pretrain
from bert_jax.pretrained.load import load_workdir_params

from test_reliability_cli import pretrain_config

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "was", "hello", "world", "jax", "bert", "model"]


class SegmentTagging(Objective):
  """Which segment each real token is in (A: 0, B: 1), read from its own sequence_output: a per-token 2-way
  classifier, so the encoder must carry the segment through every layer. Loss: the mean cross-entropy over the
  real tokens of the whole batch."""
  name = "segment_tagging"
  title = "segment tagging"
  curves = (("segment_tagging_loss", "segment_tagging_accuracy", "segment tagging"),)
  param_groups = ("segment_tagging",)

  def heads(self, config, encoded, table, masked_lm_positions):
    logits = dense(config, 2, (axes.EMBED, None), self.name)(encoded["sequence_output"])
    return {"segment_tagging_logits": logits.astype(jnp.float32)}      # [B, T, 2]

  def denominator(self, batch):
    return jnp.sum(batch["input_mask"].astype(jnp.float32)) + 1e-5

  def sums(self, outputs, batch):
    logits, labels = outputs["segment_tagging_logits"], batch["segment_ids"].astype(jnp.int32)
    w = batch["input_mask"].astype(jnp.float32)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return {"segment_tagging_loss_sum": jnp.sum(losses.cross_entropy(logits, labels) * w),
            "segment_tagging_correct_sum": jnp.sum(correct * w), "segment_tagging_weight_sum": jnp.sum(w)}

  def flops(self, config, seq_len, num_predictions):
    return 6.0 * seq_len * config.hidden_size * 2


def _config(tmp_path, steps: int):
  corpus = testing.write_word_documents(tmp_path / "corpus.txt", WORDS, 30)
  (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS) + "\n",
                                      encoding="utf-8")
  return pretrain_config(tmp_path, **{
      "targets": ("mlm", SegmentTagging.name), "data.input_files": corpus, "num_train_steps": steps,
      "checkpoint_every_steps": 2, "log_every_steps": 1, "progress_bar": False, "batch_size": 8,
      "data.max_seq_length": 32, "data.max_predictions_per_seq": 5})


@pytest.mark.slow         # two short pre-training runs (~30 s); the fast tier keeps the refusal below
def test_an_objective_registered_in_one_line_pretrains_resumes_and_loads_in_predict(tmp_path, monkeypatch, caplog):
  monkeypatch.setitem(OBJECTIVES, SegmentTagging.name, SegmentTagging)
  workdir = str(tmp_path / "work")
  first = pretrain.train_and_evaluate(_config(tmp_path, 2), workdir)
  assert first["step"] == 2 and np.isfinite(first["segment_tagging_loss"])
  with caplog.at_level(logging.INFO, logger="bert_jax.pretrain.loop"):
    second = pretrain.train_and_evaluate(_config(tmp_path, 4), workdir)     # the same work dir: a resume
  assert "resumed from" in caplog.text and "at step 2" in caplog.text
  assert second["step"] == 4
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8")]
  assert [r["step"] for r in rows] == [1, 2, 3, 4]
  for r in rows:     # its sums normalised by the generic rule, beside MLM's; the loss is the sum of both
    assert np.isfinite(r["segment_tagging_loss"]) and 0.0 <= r["segment_tagging_accuracy"] <= 1.0
    assert r["loss"] > r["segment_tagging_loss"] and np.isfinite(r["mlm_loss"])
  # its curves: loss_curve.png has a row for MLM and one for segment tagging (2 x 4 in at 100 dpi)
  from PIL import Image
  assert Image.open(os.path.join(workdir, "plots", "loss_curve.png")).size == (1100, 800)
  plan = json.load(open(os.path.join(workdir, "plan.json"), encoding="utf-8"))
  assert plan["targets"] == ["mlm", SegmentTagging.name]
  saved = load_workdir_params(workdir)             # its head is checkpointed under its own group
  hidden = plan["model"]["hidden_size"]
  assert np.asarray(saved[SegmentTagging.name]["kernel"]).shape == (hidden, 2)
  # its FLOPs count in the MFU: the encoder + MLM's head + its own
  cfg = pretrain.resolve_pretrain(_config(tmp_path, 4), workdir).model
  assert (flops.flops_per_sequence(cfg, 32, 5, ("mlm", SegmentTagging.name))
          == flops.flops_per_sequence(cfg, 32, 5, ("mlm",)) + 6.0 * 32 * hidden * 2)
  # the work dir loads in predict: fill-mask reads the MLM head, features the encoder
  got = FillMask(workdir, max_seq_length=16).predict(["the cat [MASK] on the mat ."], top_k=3)
  assert len(got) == 1 and len(got[0]["masks"]) == 1 and len(got[0]["masks"][0]["candidates"]) == 3
  feats = FeatureExtractor(workdir, pooling="mean").encode(["the cat sat on the mat ."])
  assert feats.shape == (1, hidden) and np.all(np.isfinite(feats))


def test_without_its_registration_line_the_config_is_refused_naming_the_registered_objectives(tmp_path):
  assert SegmentTagging.name not in OBJECTIVES
  workdir = tmp_path / "work"
  with pytest.raises(UserError) as refused:
    pretrain.train_and_evaluate(_config(tmp_path, 2), str(workdir))
  message = str(refused.value)
  assert "\n" not in message                            # one `error:` line at the entry points
  assert message.startswith("config.targets=('mlm', 'segment_tagging'): unknown pre-training targets "
                            "['segment_tagging']")
  assert str(objective_names()) in message and {"mlm", "nsp", "sop", "lm", "electra"} <= set(objective_names())
  assert not workdir.exists()                          # refused before anything was written
