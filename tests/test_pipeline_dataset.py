"""The tf.data reader: Google-schema records, dynamic masking eagerly and in tf.data, resume, per-host shards."""

import dataclasses

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from bert_jax.input_pipeline import pretrain_dataset  # noqa: E402
from bert_jax.input_pipeline import tokenization  # noqa: E402
from pretrain_data import pretrain_data  # noqa: E402

T, P = 16, 3
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)] + ["##s", "##ed"]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("v") / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n")
  return str(path)


def _google_example(i):
  """One record exactly as google-research/bert's writer makes it (tf.train.Example, int64/float lists).
  input_ids[1] = 1000 + i identifies the record; B's first token is stored masked."""
  n = 6 + i % 8
  la = (n - 3) // 2
  lb = n - 3 - la
  a = [1000 + i] + [5 + (i * 7 + j) % 40 for j in range(la - 1)]
  b = [5 + (i * 3 + j) % 40 for j in range(lb)]
  original = [2] + a + [3] + b + [3] + [0] * (T - n)
  input_mask = [1] * n + [0] * (T - n)
  segment_ids = [0] * (la + 2) + [1] * (lb + 1) + [0] * (T - n)
  positions = [la + 2] + [0] * (P - 1)
  labels = [original[la + 2]] + [0] * (P - 1)
  weights = [1.0] + [0.0] * (P - 1)
  masked_ids = list(original)
  masked_ids[la + 2] = 4

  def ints(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=v))
  feats = {"input_ids": ints(masked_ids), "input_mask": ints(input_mask), "segment_ids": ints(segment_ids),
           "masked_lm_positions": ints(positions), "masked_lm_ids": ints(labels),
           "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights)),
           "next_sentence_labels": ints([i % 2])}
  ex = tf.train.Example(features=tf.train.Features(feature=feats))
  return ex, {"input_ids": masked_ids, "input_mask": input_mask, "segment_ids": segment_ids,
              "masked_lm_positions": positions, "masked_lm_ids": labels, "masked_lm_weights": weights,
              "next_sentence_labels": i % 2, "original": original}


def _write_google_files(directory, num_files, per_file):
  files, expected, i = [], {}, 0
  for f in range(num_files):
    path = str(directory / f"google-{f:02d}.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
      for _ in range(per_file):
        ex, exp = _google_example(i)
        w.write(ex.SerializeToString())
        expected[1000 + i] = exp
        i += 1
    files.append(path)
  return files, expected


@pytest.fixture(scope="module")
def google_files(tmp_path_factory):
  return _write_google_files(tmp_path_factory.mktemp("g"), num_files=4, per_file=50)


def _ids_of(batches):
  return [int(x) for b in batches for x in b["input_ids"][:, 1]]


def test_google_schema_records_are_read_exactly(google_files):
  files, expected = google_files
  it = pretrain_dataset.make_pretraining_dataset(pretrain_data(files, 8, masking="static"), T, P, is_training=False,
                                                 process_index=0, process_count=1)
  batches = list(it)
  assert len(batches) == 200 // 8
  for b in batches:
    assert b["input_ids"].dtype == np.int32 and b["masked_lm_weights"].dtype == np.float32
    assert b["next_sentence_labels"].shape == (8,) and b["masked_lm_positions"].shape == (8, P)
    for r in range(8):
      exp = expected[int(b["input_ids"][r, 1])]
      for k, v in exp.items():
        if k != "original":
          np.testing.assert_array_equal(b[k][r], v, err_msg=k)
  parsed = list(pretrain_dataset.read_google_tfrecord(files[0], T, P).take(1))[0]
  np.testing.assert_array_equal(parsed["input_ids"].numpy(), expected[1000]["input_ids"])
  assert parsed["next_sentence_labels"].shape == ()


def test_wrong_sequence_length_is_an_error_naming_the_file(google_files, vocab_file):
  files, _ = google_files
  with pytest.raises(ValueError, match=r"google-00\.tfrecord.*input_ids.*16 values, expected 128"):
    pretrain_dataset.make_pretraining_dataset(pretrain_data(files, 8, vocab_file), 128, 20, process_index=0,
                                              process_count=1)


def test_dynamic_masking_undoes_stored_masks_and_remasks_each_epoch(google_files, vocab_file):
  files, expected = google_files
  it = pretrain_dataset.make_pretraining_dataset(pretrain_data(files, 10, vocab_file, seed=3, masking="dynamic",
                                                               shuffle_buffer=1),
                                                 T, P, is_training=True, process_index=0, process_count=1)
  seen = {}
  for _ in range(40):   # 2 epochs of 200 records
    b = next(it)
    for r in range(10):
      w = b["masked_lm_weights"][r] > 0
      orig = b["input_ids"][r].copy()
      orig[b["masked_lm_positions"][r][w]] = b["masked_lm_ids"][r][w]
      exp = expected[int(orig[1])]
      np.testing.assert_array_equal(orig, exp["original"])   # labels restore the unmasked sequence
      assert not np.isin(b["masked_lm_ids"][r][w], [0, 1, 2, 3, 4]).any()
      seen.setdefault(int(orig[1]), []).append(tuple(b["masked_lm_positions"][r]))
  assert len(seen) == 200
  assert sum(len(set(v)) > 1 for v in seen.values()) > 100   # a fresh mask in the second epoch


def test_masking_op_is_the_same_eagerly_and_inside_tf_data(google_files, vocab_file):
  files, _ = google_files
  vocab = tokenization.load_vocab(vocab_file)
  mask_fn = pretrain_dataset._make_mask_fn(vocab, T, P, 0.15, "token", seed=5, stored_continuation=False)
  batch = next(iter(pretrain_dataset.read_google_tfrecord(files, T, P).batch(16)))
  eager = mask_fn(tf.constant(7, tf.int64), batch)
  ds = tf.data.Dataset.from_tensors((tf.constant(7, tf.int64), batch)).map(mask_fn)
  in_graph = next(iter(ds))
  for k in eager:
    np.testing.assert_array_equal(eager[k].numpy(), in_graph[k].numpy(), err_msg=k)
  other = mask_fn(tf.constant(8, tf.int64), batch)
  assert not np.array_equal(other["masked_lm_positions"].numpy(), eager["masked_lm_positions"].numpy())


@pytest.mark.parametrize("start_step", [7, 23])   # inside the first epoch, and after one (20 batches)
def test_resume_gives_the_same_next_batches(google_files, vocab_file, start_step, tmp_path):
  files, _ = google_files
  data = pretrain_data(files, 10, vocab_file, seed=11, shuffle_buffer=64)
  kwargs = dict(max_seq_length=T, max_predictions_per_seq=P, is_training=True, process_index=0, process_count=1)
  it = pretrain_dataset.make_pretraining_dataset(data, **kwargs)
  for _ in range(start_step):
    next(it)
  it.save_state(str(tmp_path / "state.json"))
  expected = [next(it) for _ in range(3)]
  state = pretrain_dataset.load_state(str(tmp_path / "state.json"))
  assert state["step"] == start_step
  resumed = pretrain_dataset.make_pretraining_dataset(data, start_step=state["step"], **kwargs)
  for exp in expected:
    got = next(resumed)
    for k in exp:
      np.testing.assert_array_equal(got[k], exp[k], err_msg=k)
  # Same seed -> same stream; another seed -> another order.
  again = pretrain_dataset.make_pretraining_dataset(data, **kwargs)
  first = next(pretrain_dataset.make_pretraining_dataset(dataclasses.replace(data, seed=12), **kwargs))
  assert np.array_equal(next(again)["input_ids"], next(pretrain_dataset.make_pretraining_dataset(
      data, **kwargs))["input_ids"])
  assert not np.array_equal(first["input_ids"], next(pretrain_dataset.make_pretraining_dataset(
      data, **kwargs))["input_ids"])


@pytest.mark.parametrize("num_files", [4, 1])   # split by file, and by record when files < hosts
def test_per_host_shards_are_disjoint_and_cover_the_data(google_files, tmp_path, num_files, vocab_file):
  files, _ = google_files
  if num_files == 1:
    files, _ = _write_google_files(tmp_path, 1, 200)
  per_host = []
  for host in range(2):
    it = pretrain_dataset.make_pretraining_dataset(pretrain_data(files, 5, vocab_file, seed=1, masking="static"),
                                                   T, P, is_training=True, num_epochs=1, process_index=host,
                                                   process_count=2)
    per_host.append(_ids_of(it))
  a, b = set(per_host[0]), set(per_host[1])
  assert len(a) == len(per_host[0]) and len(b) == len(per_host[1])
  assert not a & b
  assert len(a | b) == 200 and len(a) == len(b) == 100


def test_raw_text_online_pairs_and_masks(tmp_path, vocab_file):
  rng = np.random.default_rng(0)
  docs = []
  for d in range(60):
    docs.append("\n".join(" ".join(f"w{int(x)}" for x in rng.integers(0, 40, int(rng.integers(2, 9))))
                          + " w1s" for _ in range(int(rng.integers(2, 6)))))
  path = tmp_path / "corpus.txt"
  path.write_text("\n\n".join(docs) + "\n")
  data = pretrain_data(str(path), 16, vocab_file, seed=2, masking_strategy="whole_word")
  kwargs = dict(max_seq_length=T, max_predictions_per_seq=P, process_index=0, process_count=1)
  it = pretrain_dataset.make_pretraining_dataset(data, **kwargs)
  batches = [next(it) for _ in range(30)]
  labels = np.concatenate([b["next_sentence_labels"] for b in batches])
  assert 0.3 < labels.mean() < 0.7
  for b in batches:
    assert np.all(b["input_ids"][:, 0] == 2)
    assert np.all((b["input_ids"] == 3).sum(axis=1) == 2)
    assert np.all(b["masked_lm_weights"].sum(axis=1) >= 1)
  resumed = pretrain_dataset.make_pretraining_dataset(data, start_step=25, **kwargs)
  got = next(resumed)
  for k in batches[25]:
    np.testing.assert_array_equal(got[k], batches[25][k], err_msg=k)


@pytest.mark.slow
def test_a_script_that_reads_one_batch_of_raw_text_exits(tmp_path):
  """`next(make_pretraining_dataset(raw text))` as a script's last line: the process printed the batch and then
  hung for ever at exit (a partly read tf.data pipeline with numpy_function torn down by the interpreter).
  The iterators still open are closed at exit now."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from data import sample_corpora  # pylint: disable=g-import-not-at-top
  corpus = sample_corpora.write_google_format(sample_corpora.english_documents(), str(tmp_path / "c.txt"))
  from bert_jax.input_pipeline import build_vocab  # pylint: disable=g-import-not-at-top
  build_vocab.build_vocab(corpus, 3000, str(tmp_path / "v.txt"), verbose=False)
  script = ("from bert_jax.input_pipeline import pretrain_dataset as pd\n"
            "from bert_jax.input_pipeline.data_plan import resolve_data_plan\n"
            "from configs import pretrain\n"
            f"c = pretrain.get_config(); c.batch_size = 8; c.data.input_files = {corpus!r}\n"
            f"plan = resolve_data_plan(c, {str(tmp_path / 'v.txt')!r}, process_count=1)\n"
            "it = pd.make_pretraining_dataset(plan.data, 128, 20, is_training=False, process_index=0, "
            "process_count=1)\n"
            "print(next(it)['input_ids'].shape, flush=True)\n")
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  assert out.returncode == 0 and "(8, 128)" in out.stdout, out.stderr[-2000:]
