"""Model-fit ranking (masked-LM loss on a sample of the user's text) and the zoo registry / resolver."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.convert import rank
from bert_jax.pretrained import zoo
from bert_jax.convert.__main__ import main as convert_main
from bert_jax.convert.mapping import expected_shapes, init_params
from bert_jax.input_pipeline.tokenization import FullTokenizer
from bert_jax.models import BertConfig, BertForPreTraining

SUBJECTS = ["the cat", "a dog", "the model", "bert", "jax", "the data"]
PREDICATES = ["sat on the mat", "is running", "was training", "played", "runs on data", "was unwanted"]


def _corpus(path, n_lines=300, seed=0):
  rng = np.random.default_rng(seed)
  lines = [f"{SUBJECTS[rng.integers(len(SUBJECTS))]} {PREDICATES[rng.integers(len(PREDICATES))]} "
           f"{'.!?'[rng.integers(3)]}" for _ in range(n_lines)]
  path.write_text("\n".join(lines) + "\n")
  return lines


def _config(vocab_size):
  return BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)


def _train_a_few_steps(config, params, tokenizer, lines, steps=150, seed=0):
  """MLM-only training on the corpus (15% of tokens -> [MASK]); enough to beat random init clearly."""
  vocab = tokenizer.vocab
  # Rows like rank's windows: start at a line, fill all 32 positions (so every position embedding trains).
  rows = []
  for i in range(len(lines) - 10):
    ids = tokenizer.encode(" ".join(lines[i:i + 10]))[:30]
    rows.append([vocab["[CLS]"]] + ids + [vocab["[SEP]"]])
  data = np.array(rows, np.int32)
  model = BertForPreTraining(config, targets=("mlm",))
  params = {"bert": params["bert"], "mlm": params["mlm"]}
  tx = optax.adam(3e-3)
  opt_state = tx.init(params)

  @jax.jit
  def step(params, opt_state, ids, positions, labels):
    def loss_fn(p):
      mask = (ids > 0).astype(jnp.int32)
      masked = jnp.put_along_axis(ids, positions, vocab["[MASK]"], axis=1, inplace=False)
      logits = model.apply({"params": p}, masked, mask, jnp.zeros_like(ids), positions)["mlm_logits"]
      return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  rng = np.random.default_rng(seed)
  losses = []
  for _ in range(steps):
    batch = data[rng.integers(len(data), size=16)]
    lengths = (batch > 0).sum(1)
    positions = np.stack([rng.choice(np.arange(1, n - 1), size=6, replace=False) for n in lengths]).astype(np.int32)
    labels = np.take_along_axis(batch, positions, axis=1)
    params, opt_state, loss = step(params, opt_state, batch, positions, labels)
    losses.append(float(loss))
  assert np.mean(losses[-10:]) < np.mean(losses[:5]) - 1.0, losses    # it did learn
  return jax.tree.map(np.asarray, params)


@pytest.fixture
def candidates(tmp_path, tiny_vocab):
  text = tmp_path / "task.txt"
  lines = _corpus(text)
  vocab_size = sum(1 for _ in open(tiny_vocab))
  config = _config(vocab_size)
  fresh = init_params(config, seed=0)
  trained = dict(fresh)
  trained.update(_train_a_few_steps(config, fresh, FullTokenizer(tiny_vocab), lines))
  params_dir.save_params_dir(str(tmp_path / "trained"), config, trained, tiny_vocab, info={"do_lower_case": True})
  params_dir.save_params_dir(str(tmp_path / "random"), config, fresh, tiny_vocab, info={"do_lower_case": True})
  # A third model with a different vocabulary ("running" is one piece there, "run ##ning" in the others).
  other_vocab = tmp_path / "other_vocab.txt"
  other_vocab.write_text(open(tiny_vocab).read() + "running\ntraining\nmat2\n")
  other_config = _config(vocab_size + 3)
  params_dir.save_params_dir(str(tmp_path / "other"), other_config, init_params(other_config, seed=5),
                             str(other_vocab), info={"do_lower_case": True})
  return str(text), [str(tmp_path / n) for n in ("random", "trained", "other")]


@pytest.mark.slow      # a run of several seconds; CI runs it, the fast tier keeps the unit tests
def test_rank_puts_the_model_trained_on_the_text_first_and_is_deterministic(candidates, tmp_path):
  text, dirs = candidates
  rows = rank.rank_checkpoints(dirs, text, num_sequences=24, max_seq_length=32, seed=3)
  by_name = {os.path.basename(r["checkpoint"]): r for r in rows}
  print(rank.format_table(rows))
  assert [os.path.basename(r["checkpoint"]) for r in rows][0] == "trained"
  assert by_name["trained"]["mlm_loss_per_word"] < by_name["random"]["mlm_loss_per_word"] - 1.0
  assert by_name["trained"]["mlm_accuracy"] > by_name["random"]["mlm_accuracy"]
  # Same words masked for every checkpoint; per-word counts agree even where the WordPieces differ.
  assert len({r["masked_words"] for r in rows}) == 1
  assert by_name["other"]["masked_tokens"] <= by_name["random"]["masked_tokens"]
  assert by_name["trained"]["masked_tokens"] == by_name["random"]["masked_tokens"]
  assert not rows[0]["same_vocabulary"]
  # Deterministic for a seed, also through the command line (table + JSON).
  out_json = tmp_path / "rank.json"
  assert convert_main(["rank", f"--checkpoints={','.join(dirs)}", f"--text={text}", "--num_sequences=24",
                       "--max_seq_length=32", "--seed=3", f"--output_json={out_json}"]) == 0
  again = json.load(open(out_json))
  assert [(r["checkpoint"], r["mlm_loss_per_word"]) for r in again] == \
      [(r["checkpoint"], r["mlm_loss_per_word"]) for r in rows]


def test_rank_windows_share_words_and_skip_unk_words(tiny_vocab, tmp_path):
  text = tmp_path / "t.txt"
  text.write_text("the cat sat on the zebra mat .\nhello world !\n")
  tok = FullTokenizer(tiny_vocab)
  windows = rank.sample_windows(rank.read_lines(str(text)), [tok, tok], num_sequences=2, max_seq_length=8,
                                masked_lm_prob=0.5, seed=0)
  for w in windows:
    assert w.pieces[0] == w.pieces[1]
    assert sum(len(p) for p in w.pieces[0]) <= 6                       # max_seq_length - [CLS] - [SEP]
    assert all("[UNK]" not in w.pieces[0][j] for j in w.masked)       # "zebra" is never a masked word
    assert w.masked


# ---- zoo -----------------------------------------------------------------------------------------------------
def test_zoo_registry_covers_the_public_families_with_correct_sizes():
  names = set(zoo.REGISTRY)
  for name in ("bert-base-uncased", "bert-large-cased", "bert-base-multilingual-cased", "bert-base-chinese",
               "bert-large-uncased-wwm", "hfl/chinese-bert-wwm", "hfl/chinese-bert-wwm-ext",
               "hfl/chinese-roberta-wwm-ext", "uer/chinese_roberta_L-12_H-768", "uer/chinese_roberta_L-2_H-128"):
    assert name in names, name
  small = [n for n in names if n.startswith("bert_uncased_L-")]
  assert len(small) == 24
  uer = [n for n in names if n.startswith("uer/chinese_roberta_L-")]
  assert len(uer) == 24
  # Parameter counts equal Hugging Face's BertForPreTraining counts (FACTS.md).
  assert zoo.REGISTRY["bert-base-uncased"].params == 110_106_428
  assert zoo.REGISTRY["bert-large-uncased"].params == 336_226_108
  tiny = zoo.REGISTRY["bert_uncased_L-2_H-128_A-2"]
  assert tiny.url.endswith("2020_02_20/uncased_L-2_H-128_A-2.zip") and tiny.heads == 2
  for entry in zoo.REGISTRY.values():
    assert entry.fmt in ("google_tf", "hf") and entry.url.startswith("https://")
    assert entry.hidden % entry.heads == 0


def test_zoo_params_formula_matches_the_model():
  entry = zoo.REGISTRY["bert_uncased_L-4_H-256_A-4"]
  cfg = BertConfig(vocab_size=entry.vocab_size, hidden_size=entry.hidden, num_hidden_layers=entry.layers,
                   num_attention_heads=entry.heads, intermediate_size=entry.intermediate)
  assert entry.params == sum(int(np.prod(s)) for s, _ in expected_shapes(cfg).values())


def test_zoo_resolve_finds_local_copies_and_explains_missing_ones(tmp_path, tiny_vocab, monkeypatch):
  monkeypatch.setenv("BERT_JAX_ZOO_DIR", str(tmp_path / "zoo"))
  with pytest.raises(zoo.ZooError) as e:
    zoo.resolve("hfl/chinese-roberta-wwm-ext")
  msg = str(e.value)
  assert "hf download hfl/chinese-roberta-wwm-ext" in msg and "import-hf" in msg
  assert str(tmp_path / "zoo" / "hfl--chinese-roberta-wwm-ext") in msg
  with pytest.raises(zoo.ZooError, match="import-tf"):
    zoo.resolve("bert-base-uncased")
  with pytest.raises(zoo.ZooError, match="did you mean"):
    zoo.resolve("bert-base-uncasd")
  # Once converted into the zoo dir, the name resolves (and an explicit directory always does).
  target = tmp_path / "zoo" / "hfl--chinese-roberta-wwm-ext"
  config = _config(sum(1 for _ in open(tiny_vocab)))
  params_dir.save_params_dir(str(target), config, init_params(config), tiny_vocab)
  assert zoo.resolve("hfl/chinese-roberta-wwm-ext") == str(target)
  assert zoo.resolve(str(target)) == str(target)
  other = tmp_path / "elsewhere" / "bert-base-uncased"
  params_dir.save_params_dir(str(other), config, init_params(config), tiny_vocab)
  assert zoo.resolve("bert-base-uncased", search_dirs=[str(tmp_path / "elsewhere")]) == str(other)


def test_zoo_command_lists_the_registry(capsys):
  assert convert_main(["zoo"]) == 0
  out = capsys.readouterr().out
  assert "bert-base-uncased" in out and "uer/chinese_roberta_L-12_H-768" in out and "110.1M" in out
  assert convert_main(["zoo", "--name=bert-base-chinese"]) == 0
  out = capsys.readouterr().out
  assert "chinese_L-12_H-768_A-12.zip" in out and "import-tf" in out


def test_zoo_name_and_rank_flag_mistakes_are_user_errors_before_any_work(tmp_path, tiny_vocab):
  """`zoo --name=<not a name>` printed the message without `error:`, and said nothing at all (exit 2) for a
  folder's name; rank's missing --text was reported only after loading every checkpoint (as a max_seq_length
  error when that also failed), and --batch_size=0 reached the scorer."""
  from bert_jax.errors import UserError
  with pytest.raises(UserError, match=r"--name='bert-base-chinesee' is not a zoo model name; did you mean"):
    convert_main(["zoo", "--name=bert-base-chinesee"])
  with pytest.raises(UserError, match=r"--name=.* is not a zoo model name"):
    convert_main(["zoo", f"--name={tmp_path}"])
  with pytest.raises(UserError, match=r"--text=.*nothere.txt: no such file"):
    convert_main(["rank", f"--checkpoints={tmp_path / 'nope'}", f"--text={tmp_path / 'nothere.txt'}"])
  (tmp_path / "t.txt").write_text("the cat sat\n")
  with pytest.raises(UserError, match=r"--batch_size=0; expected >= 1"):
    convert_main(["rank", f"--checkpoints={tmp_path / 'nope'}", f"--text={tmp_path / 't.txt'}", "--batch_size=0"])


# ---- the converted directory is an init_checkpoint for training and fine-tuning -------------------------------
def test_converted_dir_is_read_by_the_one_loader_with_its_casing(tmp_path, tiny_vocab):
  config = _config(sum(1 for _ in open(tiny_vocab)))
  params = init_params(config, seed=7)
  directory = str(tmp_path / "converted")
  params_dir.save_params_dir(directory, config, params, tiny_vocab, info={"do_lower_case": False})
  got = load_pretrained(directory)    # what train.py, finetune.py, export-hf and rank all call
  assert got.config.to_google_dict() == config.to_google_dict()
  assert open(got.vocab_file).read() == open(tiny_vocab).read()
  same = jax.tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))), params, dict(got.params))
  assert all(jax.tree.leaves(same))
  assert got.do_lower_case is False


def test_a_pretraining_workdir_is_not_mistaken_for_a_params_dir(tmp_path):
  workdir = tmp_path / "pretrain"
  (workdir / "checkpoints").mkdir(parents=True)
  (workdir / "model_config.json").write_text("{}")
  assert not params_dir.is_params_dir(str(workdir))
  (workdir / "params.msgpack").write_bytes(b"")
  assert params_dir.is_params_dir(str(workdir))
