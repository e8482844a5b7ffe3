"""python -m bert_jax.predict packs by default: features, fill-mask and classify give the padded path's outputs
(--packing=false), in the same order, to float32 rounding."""

import json
import os

import flax
import jax
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax import fileio
from bert_jax.finetune import model as fm
from bert_jax.finetune.tasks import get_task
from bert_jax.pretrained import params_dir
from bert_jax.predict import __main__ as cli

from test_finetune_units import _write_pretrained_dir

TEXTS = ["北京", "上海很好", "我住在北京。这本书很好，我很喜欢看这本书", "", "不", "电影很好看", "这是中国的首都",
         "我不喜欢这本书。", "城市"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("pp")
  vocab = testing.write_vocab(str(tmp))
  d, _ = _write_pretrained_dir(tmp, vocab, params_dir.count_vocab_lines(vocab))
  (tmp / "t.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
  return tmp, d, vocab


@pytest.mark.parametrize("pooling", ["mean", "last"])   # every pooling: test_packing_equality
def test_features_packed_equal_padded_in_input_order(pretrained, pooling):
  tmp, d, _ = pretrained
  out = {}
  for packing in ("true", "false"):
    path = tmp / f"f_{pooling}_{packing}.npy"
    assert cli.main(["features", f"--model={d}", f"--input={tmp / 't.txt'}", f"--output={path}",
                     f"--pooling={pooling}", "--batch_size=2", f"--packing={packing}"]) == 0
    out[packing] = np.load(path)
  assert out["true"].shape == (len(TEXTS), out["false"].shape[1])
  np.testing.assert_allclose(out["true"], out["false"], atol=1e-5)
  assert np.abs(out["true"][0] - out["true"][1]).max() > 1e-3     # rows are the texts' own, not one repeated


def test_fill_mask_packed_equals_padded(pretrained):
  tmp, d, _ = pretrained
  texts = ["我住在北[MASK]。", "[MASK]和[MASK]", "这本书很[MASK]", "[MASK]"]
  rows = {}
  for packing in ("true", "false"):
    out = tmp / f"fm_{packing}.jsonl"
    assert cli.main(["fill-mask", f"--model={d}", *[f"--text={t}" for t in texts], "--top_k=4",
                     f"--output={out}", f"--packing={packing}", "--batch_size=2"]) == 0
    rows[packing] = [json.loads(l) for l in open(out, encoding="utf-8")]
  assert [r["text"] for r in rows["true"]] == texts
  for a, b in zip(rows["true"], rows["false"]):
    assert [m["position"] for m in a["masks"]] == [m["position"] for m in b["masks"]]
    for ma, mb in zip(a["masks"], b["masks"]):
      np.testing.assert_allclose([c["score"] for c in ma["candidates"]], [c["score"] for c in mb["candidates"]],
                                 atol=1e-5)


@pytest.mark.slow   # a fine-tuning run; features and fill-mask packing stay fast
def test_classify_packed_equals_padded(pretrained):
  tmp, d, vocab = pretrained
  cfg = params_dir.read_model_config(d)
  task = get_task("classification", label_list=["neg", "pos", "mid"])
  model = fm.build_model(task, cfg)
  params = jax.jit(lambda r: model.init(r, np.zeros((1, 8), np.int32), np.ones((1, 8), np.int32))["params"])(
      jax.random.key(0))
  work = tmp / "ft"
  best = str(work / "best_checkpoint")
  params_dir.save_params_dir(best, cfg, jax.tree.map(np.asarray, flax.linen.unbox(params)), vocab)
  fileio.write_json_atomic(os.path.join(best, params_dir.FINETUNE_INFO_NAME),
                           {"task": "classification", "kind": "classification", "label_list": ["neg", "pos", "mid"],
                            "max_seq_length": 16, "do_lower_case": True, "pooling": "mean"})
  rows = {}
  for packing in ("true", "false"):
    out = tmp / f"c_{packing}.jsonl"
    assert cli.main(["classify", f"--model={work}", f"--input={tmp / 't.txt'}", f"--output={out}",
                     "--batch_size=2", f"--packing={packing}"]) == 0
    rows[packing] = [json.loads(l) for l in open(out, encoding="utf-8")]
  assert len(rows["true"]) == len(TEXTS)
  for a, b in zip(rows["true"], rows["false"]):
    assert a["label"] == b["label"]
    np.testing.assert_allclose(list(a["probabilities"].values()), list(b["probabilities"].values()), atol=1e-5)


def test_packing_flag_takes_only_true_or_false(pretrained, capsys):
  tmp, d, _ = pretrained
  assert cli.main(["features", f"--model={d}", f"--input={tmp / 't.txt'}", "--output=x.npy", "--packing=maybe"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error:") and "--packing" in err and "expected true or false" in err
