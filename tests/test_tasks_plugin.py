"""A task kind defined only here, registered with one line, is accepted by configs/finetune.py (task=NAME)
and fine-tunes end to end through loop.run: the config file, the loop, the model side, data loading and the
Predictor need no change for a new kind (tasks/base.py's contract)."""

import dataclasses
import json
import os
from typing import Optional

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.errors import UserError
from bert_jax.finetune import loop as finetune_loop
from bert_jax.finetune.predict import Predictor
from bert_jax.finetune.tasks import Task, common, registry
from bert_jax.models import BertConfig, axes
from bert_jax.models.bert import BertModel
from bert_jax.models.layers import dense

from test_finetune_tasks import MOD, make_config

# "long" sentences have more than 4 words; the kind learns a signed score for it.
SENTENCES = ["the cat sat", "the dog sat on the mat", "a cat", "john smith lives in new york",
             "hello world", "the team won the game in paris", "good dog", "the capital of france is paris"]


@dataclasses.dataclass
class LengthExample:
  guid: str
  text: str
  label: Optional[int] = None   # 1 long, 0 short; None unlabelled


class SignedScoreHead(nn.Module):
  """BertModel + one signed score per sentence: {"score": [B] float32} (no pooler: the raw [CLS] vector)."""
  config: BertConfig
  dropout_rate: Optional[float] = None

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    x = nn.Dropout(rate)(enc["sequence_output"][:, 0], deterministic=deterministic)
    return {"score": dense(self.config, 1, (axes.MLP, None), "classifier")(x)[:, 0].astype(jnp.float32)}


class LengthSignTask(Task):
  """Is the sentence long? A logistic loss on a signed score, scored by its own metric (sign_agreement)."""
  name = "length_sign"
  kind = "length_sign"
  head = "signed_score"
  main_metric = "sign_agreement"
  test_splits = ()

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    path = os.path.join(data_dir, f"{split}.tsv")
    if not os.path.exists(path):
      raise FileNotFoundError(path)
    rows = [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8")]
    examples = [LengthExample(f"{path}:{i + 1}", text, int(label)) for i, (label, text) in enumerate(rows)]
    return common.finish(examples, path, split, common.SkipReport(source=path))

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    cls_id, sep_id = common.special_ids(tokenizer)
    rows = [common.pack_pair(tokenizer.encode(e.text), None, cls_id, sep_id, max_seq_length) for e in example_set]
    feats = common.model_inputs([r[0] for r in rows], [r[1] for r in rows], max_seq_length)
    feats["label_ids"] = np.array([-1 if e.label is None else e.label for e in example_set], np.int32)
    return feats

  def build_head(self, bert_cfg, dropout_rate=None):
    return SignedScoreHead(bert_cfg, dropout_rate)

  def loss_weights(self, batch):
    return batch["example_weight"].astype(jnp.float32) * (batch["label_ids"] >= 0)

  def loss_sums(self, outputs, batch):
    w = self.loss_weights(batch)
    sign = 2.0 * batch["label_ids"].astype(jnp.float32) - 1.0      # long +1, short -1
    margin = sign * outputs["score"]
    return {"task_loss_sum": jnp.sum(jnp.logaddexp(0.0, -margin) * w), "task_weight_sum": jnp.sum(w),
            "task_correct_sum": jnp.sum((margin > 0) * w)}

  def predict(self, example_set, features, outputs):
    return np.asarray(outputs["score"], np.float64)

  def evaluate(self, example_set, predictions, split=None):
    gold = np.array([e.label for e in example_set])
    return {"sign_agreement": float(np.mean((predictions > 0) == (gold == 1)))}

  def write_predictions(self, output_dir, split, example_set, predictions):
    path = os.path.join(output_dir, f"{self.name}_{split}_scores.tsv")
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(f"{e.text}\t{s:.4f}\n" for e, s in zip(example_set, predictions))
    return [path]

  def text_examples(self, texts, text_pairs=None):
    return [LengthExample(f"input:{i}", t) for i, t in enumerate(texts)]

  def readable_predictions(self, examples, features, outputs):
    return [{"long": bool(s > 0), "score": float(s)} for s in self.predict(examples, features, outputs)]


@pytest.fixture()
def length_data(tmp_path):
  d = tmp_path / "length"
  d.mkdir()
  for split in ("train", "dev"):
    (d / f"{split}.tsv").write_text("".join(f"{int(len(s.split()) > 4)}\t{s}\n" for s in SENTENCES), "utf-8")
  return str(d), testing.write_vocab(str(tmp_path / "vocab"))


def _config(data_dir, vocab):
  """configs/finetune.py:task=length_sign,runlocal (shrunk): the config file takes the name from the registry."""
  return make_config("length_sign", data_dir, vocab, num_train_epochs=2.0)


def test_a_registered_kind_is_accepted_by_the_config_file_and_an_unregistered_one_is_one_error(monkeypatch):
  with pytest.raises(UserError, match=r"^configs/finetune.py: unknown task 'length_sign'; expected one of cola, "
                                      r"sst2, .*, multiple_choice, embedding$"):
    MOD.get_config("task=length_sign")
  monkeypatch.setitem(registry.TASKS, "length_sign", LengthSignTask)
  assert MOD.get_config("task=length_sign").task == "length_sign"
  assert MOD.get_config("length_sign,runlocal").task == "length_sign"      # the name alone, as `mrpc`
  assert MOD.get_config("task=Length-Sign").task == "length_sign"          # spelt as "SST-2" is


@pytest.mark.slow         # a full fine-tuning run (~10 s); the fast tier keeps the registry's unit tests
def test_a_kind_registered_in_one_line_fine_tunes_and_scores_with_its_own_metric(length_data, tmp_path,
                                                                                 monkeypatch):
  monkeypatch.setitem(registry.TASKS, "length_sign", LengthSignTask)
  out = str(tmp_path / "run")
  results = finetune_loop.run(_config(*length_data), out)
  assert results["task"] == "length_sign" and results["main_metric"] == "sign_agreement"
  dev = results["dev"]
  assert 0.0 <= dev["sign_agreement"] <= 1.0 and np.isfinite(dev["loss"])   # eval loss: the kind's loss_sums
  assert results["best"]["value"] == pytest.approx(
      json.load(open(os.path.join(out, "eval_results.json")))["dev"]["sign_agreement"])
  records = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"), encoding="utf-8")]
  train = [r for r in records if r["kind"] == "train"]
  assert train and all(np.isfinite(r["loss"]) and 0.0 <= r["accuracy"] <= 1.0 for r in train)
  assert results["prediction_files"] == ["length_sign_dev_scores.tsv"]
  assert len(open(os.path.join(out, "length_sign_dev_scores.tsv"), encoding="utf-8").readlines()) == len(SENTENCES)
  info = json.load(open(os.path.join(out, "best_checkpoint", "finetune_info.json"), encoding="utf-8"))
  assert (info["task"], info["kind"], info["head"]) == ("length_sign", "length_sign", "signed_score")
  # The Predictor rebuilds the kind from finetune_info.json through the registry.
  got = Predictor.from_workdir(out).predict(["the cat sat", "john smith lives in new york"])
  assert [set(g) for g in got] == [{"long", "score"}] * 2 and all(g["long"] == (g["score"] > 0) for g in got)


def test_an_unregistered_kind_is_not_a_task(length_data, tmp_path):
  assert "length_sign" not in registry.task_names()
  config = make_config("classification", *length_data)
  config.task = "length_sign"            # --config.task=length_sign past the config file's own check
  with pytest.raises(UserError, match="config.task='length_sign' is not a task"):
    finetune_loop.run(config, str(tmp_path / "run"))
