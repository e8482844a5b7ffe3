"""Fidelity to Google's BERT: stored masks train as stored, Google-exact data rules and learning rate, and
the batch inspector on raw text and on TFRecords."""

import collections
import json
import random

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from bert_jax import logs  # noqa: E402
from bert_jax.input_pipeline import create_pretraining_data as cpd  # noqa: E402
from bert_jax.input_pipeline import shard_builder  # noqa: E402
from bert_jax.input_pipeline import inspect as inspect_lib  # noqa: E402
from bert_jax.input_pipeline import instances as instances_lib  # noqa: E402
from bert_jax.input_pipeline import masking  # noqa: E402
from bert_jax.input_pipeline import pretrain_dataset  # noqa: E402
from bert_jax.input_pipeline import tokenization  # noqa: E402
from bert_jax.pretrain.plan import resolve_pretrain  # noqa: E402
from pretrain_data import pretrain_data  # noqa: E402

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{i}" for i in range(60)]
VOCAB = SPECIAL + WORDS + ["##s", "##ed"]
CLS, SEP, MASK_ID = 2, 3, 4


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("v") / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n")
  return str(path)


def _text_corpus(path, num_docs=80, seed=0):
  rng = np.random.default_rng(seed)
  docs = []
  for _ in range(num_docs):
    docs.append("\n".join(
        " ".join(WORDS[int(x)] + ("s" if rng.random() < 0.25 else "") for x in rng.integers(0, 60, int(n)))
        for n in rng.integers(2, 12, int(rng.integers(1, 6)))))
  path.write_text("\n\n".join(docs) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def records(tmp_path_factory, vocab_file):
  """Whole-word-masked records (with word_continuation) from a small corpus, T=32, P=5."""
  d = tmp_path_factory.mktemp("rec")
  corpus = _text_corpus(d / "corpus.txt")
  out = str(d / "train.tfrecord")
  cfg = cpd.Config(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2, do_whole_word_mask=True)
  cpd.create_pretraining_data(corpus, [out], vocab_file, cfg, progress=False, verbose=False)
  stored = [{k: v.numpy() for k, v in ex.items()} for ex in pretrain_dataset.read_google_tfrecord(out, 32, 5)]
  return out, corpus, stored


def _config(input_files, vocab_file, **data):
  from configs import pretrain as pretrain_config
  config = pretrain_config.get_config("size=tiny,runlocal")
  config.batch_size = 8
  config.data.input_files = input_files
  config.data.vocab_file = vocab_file
  config.data.max_seq_length = 32
  config.data.max_predictions_per_seq = 5
  for k, v in data.items():
    config.data[k] = v
  return config


# ---- masking mode -------------------------------------------------------------------------------------
def test_trained_batches_equal_the_stored_masks_by_default(records, vocab_file, caplog):
  """The batches the training loop feeds train_step (training/pretrain.open_data, default config) are
  the records' own input_ids / positions / ids / weights: static masking is the default for records."""
  from bert_jax.pretrain import loop as pretrain
  out, _, stored = records
  by_ids = {tuple(r["input_ids"]): r for r in stored}
  assert len(by_ids) > len(stored) * 0.9
  for shuffle_buffer in (0, 10_000):
    plan = resolve_pretrain(_config(out, vocab_file, shuffle_buffer=shuffle_buffer), None)
    logs.forget(pretrain_dataset.log.name)   # logged once per process: another test on these records may have
    with caplog.at_level("INFO"):     # said it first in this worker
      data = pretrain.open_data(plan, plan.phases[0])
    assert data.state()["masking"] == "static"
    rows = [{k: v[i] for k, v in b.items()} for b in (next(data) for _ in range(6)) for i in range(8)]
    if shuffle_buffer == 0:   # file order
      for got, want in zip(rows, stored):
        for k in inspect_lib.FIELDS:
          np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    for got in rows:
      want = by_ids[tuple(got["input_ids"])]
      for k in inspect_lib.FIELDS:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
  assert "masking: static" in caplog.text and "masked_lm_* features" in caplog.text


def test_dynamic_remasking_of_wwm_records_keeps_whole_words(records, vocab_file):
  """masking=dynamic re-masks (fresh positions) but by whole words from the stored word_continuation."""
  out, _, stored = records
  it = pretrain_dataset.make_pretraining_dataset(pretrain_data(out, 64, vocab_file, seed=1, masking="dynamic"), 32,
                                                 5, process_index=0, process_count=1)
  assert it.state()["masking"] == "dynamic"
  def key(ids, pos, lab, w):
    orig = masking.unmask(ids[None], pos[None], lab[None], w[None])[0]
    return tuple(orig), tuple(pos[w > 0])
  stored_keys = {key(r["input_ids"], r["masked_lm_positions"], r["masked_lm_ids"], r["masked_lm_weights"])
                 for r in stored}
  changed = split_words = 0
  for _ in range(3):
    b = next(it)
    orig = b["input_ids"].copy()
    for r in range(64):
      w = b["masked_lm_weights"][r] > 0
      orig[r, b["masked_lm_positions"][r][w]] = b["masked_lm_ids"][r][w]
      sel = np.zeros(32, bool)
      sel[b["masked_lm_positions"][r][w]] = True
      toks = [VOCAB[i] for i in orig[r]]
      for j in range(1, 32):
        # (a "##" piece right after [CLS]/[SEP] starts its segment: a word of its own)
        cont = toks[j].startswith("##") and toks[j - 1] not in ("[CLS]", "[SEP]")
        # A "##" piece is selected iff the token before it (same word) is.
        split_words += cont and sel[j] != sel[j - 1]
      changed += key(b["input_ids"][r], b["masked_lm_positions"][r], b["masked_lm_ids"][r],
                     b["masked_lm_weights"][r]) not in stored_keys
  assert split_words == 0
  assert changed > 100


def test_masking_mode_errors_name_the_field(tmp_path, vocab_file):
  from bert_jax.errors import UserError
  corpus = _text_corpus(tmp_path / "c.txt", 10)
  with pytest.raises(UserError, match="data.masking='static'"):
    pretrain_dataset.make_pretraining_dataset(pretrain_data(corpus, 4, vocab_file, masking="static"), 32, 5,
                                              process_index=0, process_count=1)
  with pytest.raises(UserError, match="data.masking='sometimes'"):
    pretrain_dataset.make_pretraining_dataset(pretrain_data(corpus, 4, vocab_file, masking="sometimes"), 32, 5,
                                              process_index=0, process_count=1)


# ---- Google's learning rate ----------------------------------------------------------------------------
def _google_learning_rate(step, init_lr, num_train_steps, num_warmup_steps):
  """google-research/bert optimization.create_optimizer, transcribed: tf.train.polynomial_decay(init_lr,
  global_step, num_train_steps, end_learning_rate=0.0, power=1.0, cycle=False), then the warmup override."""
  global_step = min(step, num_train_steps)
  learning_rate = (init_lr - 0.0) * (1 - global_step / num_train_steps) ** 1.0 + 0.0
  if num_warmup_steps:
    warmup_learning_rate = init_lr * (step / num_warmup_steps)
    is_warmup = 1.0 if step < num_warmup_steps else 0.0
    learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_learning_rate
  return learning_rate


@pytest.mark.parametrize("total,warmup", [(1000, 100), (37, 0)])
def test_google_schedule_is_googles_learning_rate_at_every_step(total, warmup):
  import ml_collections
  from bert_jax.engine import optimizers
  opt = ml_collections.ConfigDict(dict(name="adamw", learning_rate=2e-4, schedule="google", power=1.0,
                                       end_learning_rate=0.0, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-6,
                                       clip_norm=1.0, bias_correction=True))
  sched = optimizers.make_schedule(opt, total, warmup)
  got = np.asarray(sched(np.arange(total + 5)), np.float64)
  want = np.array([_google_learning_rate(s, 2e-4, total, warmup) for s in range(total + 5)])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-4 * 1e-6)   # float32, as Google's TF graph
  assert not optimizers.uses_bias_correction(opt)     # Google's AdamWeightDecayOptimizer has none
  opt.schedule = "linear"
  if warmup and warmup < total:   # our default decays over (total - warmup) steps: a different curve
    assert abs(float(optimizers.make_schedule(opt, total, warmup)(warmup + 5)) - want[warmup + 5]) > 1e-7


def test_google_optimizer_updates_match_googles_adamw():
  """Two AdamWeightDecay steps (clip 1.0, no bias correction, no decay on LayerNorm/bias) by hand."""
  import jax.numpy as jnp
  import ml_collections
  from bert_jax.engine import optimizers
  opt = ml_collections.ConfigDict(dict(name="adamw", learning_rate=1e-2, schedule="google", power=1.0,
                                       end_learning_rate=0.0, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-6,
                                       clip_norm=1.0, bias_correction=True))
  tx, _ = optimizers.make_optimizer(opt, num_train_steps=10, warmup_steps=2)
  rng = np.random.default_rng(0)
  params = {"dense": {"kernel": rng.normal(size=(3, 2)), "bias": rng.normal(size=2)},
            "LayerNorm": {"scale": rng.normal(size=2)}}
  import jax
  state = tx.init(jax_tree(params, jnp))
  update = jax.jit(tx.update)
  p = {k: {n: v.copy() for n, v in d.items()} for k, d in params.items()}
  m = {k: {n: np.zeros_like(v) for n, v in d.items()} for k, d in params.items()}
  v2 = {k: {n: np.zeros_like(v) for n, v in d.items()} for k, d in params.items()}
  cur = jax_tree(params, jnp)
  for step in range(2):
    grads = {k: {n: rng.normal(size=v.shape) * 3 for n, v in d.items()} for k, d in params.items()}
    norm = np.sqrt(sum(float((g ** 2).sum()) for d in grads.values() for g in d.values()))
    lr = _google_learning_rate(step, 1e-2, 10, 2)
    for k, d in grads.items():
      for n, g in d.items():
        g = g * (1.0 / max(norm, 1.0))
        m[k][n] = 0.9 * m[k][n] + 0.1 * g
        v2[k][n] = 0.999 * v2[k][n] + 0.001 * g * g
        u = m[k][n] / (np.sqrt(v2[k][n]) + 1e-6)
        if k == "dense" and n == "kernel":
          u = u + 0.01 * p[k][n]
        p[k][n] = p[k][n] - lr * u
    updates, state = update(jax_tree(grads, jnp), state, cur)
    cur = {k: {n: cur[k][n] + updates[k][n] for n in d} for k, d in cur.items()}
  for k, d in p.items():
    for n, want in d.items():
      np.testing.assert_allclose(np.asarray(cur[k][n]), want, rtol=1e-5, atol=1e-7, err_msg=f"{k}/{n}")


def jax_tree(tree, jnp):
  return {k: {n: jnp.asarray(v, jnp.float32) for n, v in d.items()} for k, d in tree.items()}


# ---- Google-exact data ----------------------------------------------------------------------------------
MaskedLmInstance = collections.namedtuple("MaskedLmInstance", ["index", "label"])


def _google_instances(all_documents, max_seq_length, short_seq_prob, masked_lm_prob, max_predictions_per_seq,
                      vocab_words, rng, dupe_factor):
  """google-research/bert create_pretraining_data.py's create_instances_from_document, truncate_seq_pair
  and create_masked_lm_predictions (token-level), transcribed onto token lists; the reference for the
  Google-exact statistics. Returns (tokens, segment_ids, is_random_next, masked positions, labels)."""
  out = []
  for _ in range(dupe_factor):
    for document_index in range(len(all_documents)):
      document = all_documents[document_index]
      max_num_tokens = max_seq_length - 3
      target_seq_length = max_num_tokens
      if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
      current_chunk, current_length, i = [], 0, 0
      while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
          if current_chunk:
            a_end = 1
            if len(current_chunk) >= 2:
              a_end = rng.randint(1, len(current_chunk) - 1)
            tokens_a = [t for j in range(a_end) for t in current_chunk[j]]
            tokens_b = []
            if len(current_chunk) == 1 or rng.random() < 0.5:
              is_random_next = True
              target_b_length = target_seq_length - len(tokens_a)
              for _ in range(10):
                random_document_index = rng.randint(0, len(all_documents) - 1)
                if random_document_index != document_index:
                  break
              random_document = all_documents[random_document_index]
              random_start = rng.randint(0, len(random_document) - 1)
              for j in range(random_start, len(random_document)):
                tokens_b.extend(random_document[j])
                if len(tokens_b) >= target_b_length:
                  break
              i -= len(current_chunk) - a_end
            else:
              is_random_next = False
              for j in range(a_end, len(current_chunk)):
                tokens_b.extend(current_chunk[j])
            while len(tokens_a) + len(tokens_b) > max_num_tokens:
              trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
              if rng.random() < 0.5:
                del trunc[0]
              else:
                trunc.pop()
            tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
            segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            cand = [k for k, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
            rng.shuffle(cand)
            output = list(tokens)
            num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
            lms = []
            for index in cand:
              if len(lms) >= num_to_predict:
                break
              if rng.random() < 0.8:
                masked = "[MASK]"
              elif rng.random() < 0.5:
                masked = tokens[index]
              else:
                masked = vocab_words[rng.randint(0, len(vocab_words) - 1)]
              output[index] = masked
              lms.append(MaskedLmInstance(index, tokens[index]))
            lms.sort(key=lambda x: x.index)
            out.append((output, segment_ids, is_random_next, [x.index for x in lms], [x.label for x in lms]))
          current_chunk, current_length = [], 0
        i += 1
  return out


def _fixture_documents(seed=0):
  """Token-id documents with one-sentence documents, one-token sentences and sentences longer than
  max_num_tokens, where our defaults and Google's rules differ most."""
  rng = np.random.default_rng(seed)
  docs = []
  for _ in range(300):
    n_sent = 1 if rng.random() < 0.3 else int(rng.integers(2, 8))
    doc = []
    for _ in range(n_sent):
      n = int(rng.choice([1, int(rng.integers(2, 25)), int(rng.integers(70, 120))], p=[0.05, 0.85, 0.10]))
      doc.append([int(x) for x in rng.integers(5, len(VOCAB), n)])
    docs.append(doc)
  return docs


def _stats(rows, max_seq_length):
  """NSP random share, selection rate (over non-[CLS]/[SEP] tokens), [MASK]/random/kept shares, lengths."""
  n_rand = sel = cand = n_mask = n_keep = n_random = 0
  lengths = []
  for ids, length, label, positions, labels in rows:
    n_rand += label
    cand += length - 3
    sel += len(positions)
    for p, lab in zip(positions, labels):
      n_mask += ids[p] == MASK_ID
      n_keep += ids[p] == lab
      n_random += ids[p] != MASK_ID and ids[p] != lab
    lengths.append(length)
  lengths = np.array(lengths)
  n = len(rows)
  return {"random_next": n_rand / n, "selection": sel / cand, "mask": n_mask / sel, "kept": n_keep / sel,
          "random": n_random / sel, "mean_length": lengths.mean(), "full": np.mean(lengths == max_seq_length),
          "short": np.mean(lengths < max_seq_length // 2), "n": n}


def _ours(docs, google_exact, seed, t=64, p=8, dupe=4):
  vocab = {tok: i for i, tok in enumerate(VOCAB)}
  corpus = instances_lib.build_corpus(docs, t - 3, long_sentence_policy="keep" if google_exact else "split")
  rng = random.Random(seed)
  order = list(range(corpus.num_documents))
  rng.shuffle(order)
  pairs = instances_lib.create_pairs(corpus, t, 0.1, "nsp", dupe, rng, document_order=order,
                                     google_exact=google_exact)
  rows = instances_lib.assemble(corpus, pairs, t, CLS, SEP, 0)
  masker = masking.Masker(masking.MaskingConfig.from_vocab(vocab, masked_lm_prob=0.15, max_predictions_per_seq=p,
                                                           google_exact=google_exact))
  m = masker(rows["input_ids"], rows["input_mask"], np.random.default_rng(seed))
  out = []
  for r in range(len(pairs)):
    w = m["masked_lm_weights"][r] > 0
    out.append((m["input_ids"][r], int(rows["lengths"][r]), int(rows["next_sentence_labels"][r]),
                m["masked_lm_positions"][r][w], m["masked_lm_ids"][r][w]))
  return out, m, rows


def test_google_exact_statistics_match_googles_algorithm():
  t, p = 64, 8
  docs = _fixture_documents()
  rng = random.Random(7)
  shuffled = list(docs)
  rng.shuffle(shuffled)
  ref = _google_instances([[[VOCAB[i] for i in s] for s in d] for d in shuffled], t, 0.1, 0.15, p, VOCAB, rng, 4)
  vocab = {tok: i for i, tok in enumerate(VOCAB)}
  ref_rows = [([vocab[x] for x in toks], len(toks), int(rnd), pos, [vocab[x] for x in labs])
              for toks, _, rnd, pos, labs in ref]
  want = _stats(ref_rows, t)
  got_rows, m, rows = _ours(docs, True, seed=3, t=t, p=p)
  got = _stats(got_rows, t)
  default = _stats(_ours(docs, False, seed=3, t=t, p=p)[0], t)
  n = min(got["n"], want["n"])
  assert n > 1500
  se = lambda q: 4 * np.sqrt(q * (1 - q) / n)  # noqa: E731  (4 standard errors)
  for key in ("random_next", "full", "short"):
    assert abs(got[key] - want[key]) < se(want[key]) + 0.01, (key, got[key], want[key])
  assert abs(got["selection"] - want["selection"]) < 0.004, (got["selection"], want["selection"])
  for key in ("mask", "kept", "random"):
    assert abs(got[key] - want[key]) < 0.03, (key, got[key], want[key])
  assert abs(got["mean_length"] - want["mean_length"]) < 1.5
  assert abs(got["n"] - want["n"]) < 0.05 * want["n"]
  # The defaults deviate measurably on this fixture (so the comparison above can fail).
  assert want["random_next"] - default["random_next"] > 0.1
  # Google's count: min(P, max(1, round(len(tokens) * 0.15))) per row, exactly.
  k = np.minimum(p, np.maximum(1, np.rint(rows["lengths"] * 0.15))).astype(int)
  k = np.minimum(k, rows["lengths"] - 3)
  np.testing.assert_array_equal(m["masked_lm_weights"].sum(axis=1).astype(int), k)


def test_google_exact_cli_and_control_characters(tmp_path, vocab_file, capsys):
  """--google_exact: Google's mask count in every record, one-sentence chunks given a random next, and
  Google's control-character set (a private-use character stays in its word: [UNK])."""
  corpus = tmp_path / "c.txt"
  lines = _text_corpus(tmp_path / "base.txt", 60, seed=1)
  corpus.write_text(open(lines).read() + "\nw1 w2\ue000 w3\n\nw4 w5\n")
  google_tok = tokenization.FullTokenizer(vocab_file, control_chars="google")
  assert google_tok.tokenize("w1 w2\ue000 w3") == ["w1", "[UNK]", "w3"]
  assert tokenization.FullTokenizer(vocab_file).tokenize("w1 w2\ue000 w3") == ["w1", "w2", "w3"]
  out = tmp_path / "g.tfrecord"
  assert cpd.main([f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab_file}",
                   "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=3", "--google_exact",
                   "--progress=false"]) == 0
  printed = capsys.readouterr().out
  assert "one-sentence chunks given a random next (Google)" in printed
  stored = [{k: v.numpy() for k, v in ex.items()} for ex in pretrain_dataset.read_google_tfrecord(str(out), 32, 5)]
  n_real = np.array([r["input_mask"].sum() for r in stored])
  k = np.minimum(5, np.maximum(1, np.rint(n_real * 0.15)))
  np.testing.assert_array_equal([r["masked_lm_weights"].sum() for r in stored], k)
  unk_rows = [r for r in stored if 1 in np.where(r["masked_lm_weights"] > 0, r["masked_lm_ids"], -1)
              or 1 in r["input_ids"]]
  assert unk_rows   # the private-use word became [UNK], as with Google's tokenizer


# ---- inspect ----------------------------------------------------------------------------------------------
def test_inspect_tfrecords_in_file_order_writes_the_stored_examples(records, vocab_file, tmp_path, capsys):
  out, _, stored = records
  jsonl = tmp_path / "batches.jsonl"
  rc = inspect_lib.main(["--config=configs/pretrain.py:size=tiny,runlocal", f"--config.data.input_files={out}",
                         f"--config.data.vocab_file={vocab_file}", "--config.data.shuffle_buffer=0",
                         "--config.batch_size=8", "--config.data.max_seq_length=32",
                         "--config.data.max_predictions_per_seq=5", "--num_batches=3", f"--output={jsonl}"])
  assert rc == 0
  printed = capsys.readouterr().out
  assert "selection" in printed and "whole-word adjacency" in printed and "NSP label" in printed
  got = [json.loads(line) for line in jsonl.read_text().splitlines()]
  assert len(got) == 24
  for g, want in zip(got, stored):
    for k in inspect_lib.FIELDS:
      assert all(isinstance(x, int) for x in g[k]), k
      np.testing.assert_array_equal(np.asarray(g[k]), np.asarray(want[k]).reshape(-1), err_msg=k)
  # Whole-word-masked records: most predictions sit next to another one (token masking: ~0.3).
  total = inspect_lib.shares(sum_counts(stored, vocab_file))
  assert total["whole_word_adjacency"] > 0.4


def sum_counts(stored, vocab_file):
  batch = {k: np.stack([np.asarray(r[k]) for r in stored]) for k in inspect_lib.FIELDS}
  return inspect_lib.batch_statistics(batch, inspect_lib.Vocab(vocab_file))


def test_inspect_raw_text_marks_predictions_and_counts_them(tmp_path, vocab_file):
  corpus = _text_corpus(tmp_path / "c.txt", 60, seed=2)
  config = _config(corpus, vocab_file, shuffle_buffer=0)
  config.batch_size = 32
  import io
  buf = io.StringIO()
  result = inspect_lib.inspect_batches(inspect_lib.resolve(config), num_batches=4, show=3, output=str(tmp_path / "o.jsonl"),
                                       out=buf)
  text = buf.getvalue()
  assert "{M:" in text and "  A: [CLS]" in text and "  B: " in text
  assert 0.12 < result["selection_rate"] < 0.18
  assert 0.7 < result["mask_share"] < 0.9 and result["random_share"] + result["kept_share"] > 0.1
  assert 0.3 < result["nsp_random_share"] < 0.7
  rows = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
  assert len(rows) == 128
  for r in rows:   # each marked [MASK] is really in input_ids, labels are the original tokens
    for pos, lab, w in zip(r["masked_lm_positions"], r["masked_lm_ids"], r["masked_lm_weights"]):
      if w:
        assert r["input_ids"][pos] in (MASK_ID, lab) or r["input_ids"][pos] >= 5
  # The inspector reads what training reads.
  from bert_jax.pretrain import loop as pretrain
  plan = resolve_pretrain(config, None)
  train_batch = next(pretrain.open_data(plan, plan.phases[0]))
  first = rows[:32]
  np.testing.assert_array_equal(train_batch["input_ids"], [r["input_ids"] for r in first])
  np.testing.assert_array_equal(train_batch["masked_lm_positions"], [r["masked_lm_positions"] for r in first])


# ---- Chinese whole-word masking, vectorised ------------------------------------------------------------
def test_vectorised_chinese_wwm_equals_the_per_line_offsets_path(tmp_path):
  """The fast path (joined text, cached piece offsets, one jieba pass per distinct line) gives the same ids
  and word-continuation flags as the per-line offsets path, on mixed Chinese / English / odd whitespace."""
  pytest.importorskip("jieba")
  chars = list("中国人民北京大学新华社记者今天报道经济发展") + ["，", "。", "１９９８", "年"]
  vocab = SPECIAL + sorted(set("".join(chars)) | {"，", "。"}) + ["1998", "hello", "world", "##s", ",", "!"]
  path = tmp_path / "vocab_zh.txt"
  path.write_text("\n".join(dict.fromkeys(vocab)) + "\n")
  tok = tokenization.FullTokenizer(str(path))
  rng = np.random.default_rng(0)
  lines = ["".join(rng.choice(chars, int(rng.integers(1, 30)))) for _ in range(120)]
  lines += ["Hello, worlds! 北京大学 1998年", "ab\x0bcd 中国人民", "", "  中国  ", "Ｈｅｌｌｏ中国", "Café 中国"]
  lines += lines[:50]   # repeated lines are segmented once
  bt = tokenization.fast_batch_tokenizer(tok)
  cut = shard_builder.jieba_segmenter()[1]
  table = masking.continuation_table(tok.vocab)
  ids_v, cont_v = shard_builder._chinese_wwm_vectorised(bt, lines, cut, table)
  ids_o, spans = bt.encode_batch_with_offsets(lines)
  cont_o = shard_builder._jieba_continuation(lines, spans, cut)
  assert len(ids_v) == len(lines)
  for line, a, b, c, d in zip(lines, ids_v, ids_o, cont_v, cont_o):
    np.testing.assert_array_equal(a, b, err_msg=line)
    np.testing.assert_array_equal(c, d | table[np.asarray(b, np.int64)], err_msg=line)
  assert sum(int(c.sum()) for c in cont_v) > 100      # jieba joined many characters into words


def test_tfrecord_framing_without_tensorflow_is_byte_identical(tmp_path):
  """create_pretraining_data writes local shards without importing TensorFlow: the framing (lengths,
  masked CRC-32C) must be byte-for-byte tf.io.TFRecordWriter's."""
  from bert_jax.input_pipeline import tfrecord_io
  rng = np.random.default_rng(0)
  recs = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 700, 300)]
  recs.append(b"")
  ref = tmp_path / "ref.tfrecord"
  with tf.io.TFRecordWriter(str(ref)) as w:
    for r in recs:
      w.write(r)
  assert tfrecord_io.frame_records(recs) == ref.read_bytes()
  out = tmp_path / "ours.tfrecord"
  with tfrecord_io.ShardedWriter([str(out)]) as w:
    w.write(recs)
  assert out.read_bytes() == ref.read_bytes()
  assert [r.numpy() for r in tf.data.TFRecordDataset([str(out)])] == recs
  # Both checksum paths: google-crc32c's C code (a requirement) and the numpy fallback.
  assert tfrecord_io._C_CRC32C is not None, "google-crc32c (requirements.txt) is not installed"
  np.testing.assert_array_equal(tfrecord_io.masked_crc32c_batch(recs, use_c=False),
                                tfrecord_io.masked_crc32c_batch(recs, use_c=True))
