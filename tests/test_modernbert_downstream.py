"""Downstream on a modernbert encoder: a tiny transformers ModernBERT (random weights) imported with
`convert import-hf`, then fine-tuned for classification, NER and SQuAD v2 from it, and `predict fill-mask`,
`features` and `classify` on it. One slow end-to-end test; the parts it stands on are unit-tested in
test_modernbert.py and test_convert_modernbert.py."""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import task_fixtures as testing  # noqa: E402
from bert_jax.convert.__main__ import main as convert_main  # noqa: E402
from bert_jax.finetune import loop as finetune_loop  # noqa: E402
from bert_jax.pretrained import params_dir  # noqa: E402
from bert_jax.predict.__main__ import main as predict_main  # noqa: E402

from test_finetune_tasks import make_config  # noqa: E402


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  d = tmp_path_factory.mktemp("modernbert")
  vocab = testing.write_vocab(str(d / "vocab"))
  n = params_dir.count_vocab_lines(vocab)
  cfg = transformers.ModernBertConfig(vocab_size=n, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                      num_attention_heads=2, max_position_embeddings=64, local_attention=8,
                                      pad_token_id=0)
  torch.manual_seed(0)
  transformers.ModernBertForMaskedLM(cfg).save_pretrained(d / "hf")
  with open(vocab, encoding="utf-8") as src, open(d / "hf" / "vocab.txt", "w", encoding="utf-8") as dst:
    dst.write(src.read())
  out = str(d / "converted")
  assert convert_main(["import-hf", "--input", str(d / "hf"), "--output", out, "--do_lower_case", "true"]) == 0
  return {"dir": out, "vocab": vocab, "root": d}


@pytest.mark.slow   # three fine-tuning runs and three predict commands on the tiny model (~40 s)
def test_fine_tuning_and_predict_run_on_an_imported_modernbert(converted, tmp_path, capsys):
  ckpt, vocab = converted["dir"], converted["vocab"]
  glue = testing.write_glue(str(tmp_path / "glue"))
  runs = {}
  for task, data, extra in (("sst2", glue, {}), ("ner", testing.write_conll(str(tmp_path / "ner")), {}),
                            ("squad_v2", testing.write_squad(str(tmp_path / "squad"), version_2_with_negative=True),
                             dict(max_seq_length=24, doc_stride=8, max_query_length=10))):
    c = make_config(task, data, "", init_checkpoint=ckpt, max_train_steps=2, **extra)
    out = str(tmp_path / task)
    runs[task] = finetune_loop.run(c, out)
    saved = json.load(open(os.path.join(out, "best_checkpoint", "model_config.json")))
    assert saved["encoder"] == "modernbert"
  assert "accuracy" in runs["sst2"]["dev"] and "f1" in runs["ner"]["dev"] and "HasAns_f1" in runs["squad_v2"]["dev"]

  assert predict_main(["fill-mask", "--model", ckpt, "--text", "the [MASK] sat", "--top_k", "3"]) == 0
  texts = tmp_path / "texts.txt"
  texts.write_text("the cat sat\nthe dog ran\n", encoding="utf-8")
  feats = str(tmp_path / "f.npy")
  assert predict_main(["features", "--model", ckpt, "--input", str(texts), "--output", feats,
                       "--pooling", "mean"]) == 0
  assert np.load(feats).shape == (2, 32) and np.all(np.isfinite(np.load(feats)))
  preds = str(tmp_path / "p.jsonl")
  assert predict_main(["classify", "--model", str(tmp_path / "sst2"), "--input", str(texts),
                       "--output", preds]) == 0
  assert len(open(preds, encoding="utf-8").read().splitlines()) == 2
