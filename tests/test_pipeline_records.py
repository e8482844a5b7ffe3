"""create_pretraining_data CLI: Google's schema (parsed with tf.train.Example), shards, bad input reporting."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from bert_jax.input_pipeline import create_pretraining_data as cpd  # noqa: E402
from bert_jax.input_pipeline import tfrecord_io  # noqa: E402

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "run", "##ning", "play", "##ed", "is", "was", "hello",
         "world", "jax", "bert", "model", "train", "##ing", "data", "big", "small", "red", "blue"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + WORDS


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  return str(path)


def _sentence(rng):
  plain = [w for w in WORDS if not w.startswith("##")]
  words = list(rng.choice(plain, int(rng.integers(3, 15))))
  return " ".join(words) + " running played training ."


def _write_corpus(path, num_docs, rng, sentences=(2, 8)):
  docs = []
  for _ in range(num_docs):
    docs.append("\n".join(_sentence(rng) for _ in range(int(rng.integers(*sentences)))))
  path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  return str(path)


def _read_examples(files):
  out = []
  for f in files:
    for raw in tf.data.TFRecordDataset([f]):
      out.append(tf.train.Example.FromString(raw.numpy()))
  return out


def test_cli_writes_googles_exact_schema_in_shards(tmp_path, vocab_file, capsys):
  rng = np.random.default_rng(0)
  corpus = _write_corpus(tmp_path / "corpus.txt", 60, rng)
  out = tmp_path / "out" / "train.tfrecord"
  assert cpd.main([f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab_file}",
                   "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=2",
                   "--num_output_shards=3", "--do_whole_word_mask", "--progress=false"]) == 0
  printed = capsys.readouterr().out
  assert "instances written" in printed
  files = [str(tmp_path / "out" / f"train-{i:05d}-of-00003.tfrecord") for i in range(3)]
  examples = _read_examples(files)
  assert len(examples) > 50
  counts = [sum(1 for _ in tf.data.TFRecordDataset([f])) for f in files]
  assert max(counts) - min(counts) <= 1                 # round-robin, as Google's writer
  ints = {"input_ids": 32, "input_mask": 32, "segment_ids": 32, "masked_lm_positions": 5,
          "masked_lm_ids": 5, "next_sentence_labels": 1}
  inv = {i: t for i, t in enumerate(VOCAB)}
  for ex in examples:
    feats = ex.features.feature
    # --do_whole_word_mask also stores word_continuation (1 on "##" pieces; Google's reader ignores it).
    assert set(feats) == set(ints) | {"masked_lm_weights", "word_continuation"}
    cont = np.array(feats["word_continuation"].int64_list.value)
    orig = np.array(feats["input_ids"].int64_list.value)
    pos = np.array(feats["masked_lm_positions"].int64_list.value)
    w = np.array(feats["masked_lm_weights"].float_list.value) > 0
    orig[pos[w]] = np.array(feats["masked_lm_ids"].int64_list.value)[w]
    # (a segment's first token starts a word even when it is a "##" piece cut off by truncation)
    want = [int(VOCAB[i].startswith("##") and j > 0 and VOCAB[orig[j - 1]] not in ("[CLS]", "[SEP]"))
            for j, i in enumerate(orig)]
    np.testing.assert_array_equal(cont, want)
    for name, n in ints.items():
      assert feats[name].WhichOneof("kind") == "int64_list" and len(feats[name].int64_list.value) == n
    assert feats["masked_lm_weights"].WhichOneof("kind") == "float_list"
    ids = np.array(feats["input_ids"].int64_list.value)
    mask = np.array(feats["input_mask"].int64_list.value)
    seg = np.array(feats["segment_ids"].int64_list.value)
    pos = np.array(feats["masked_lm_positions"].int64_list.value)
    lab = np.array(feats["masked_lm_ids"].int64_list.value)
    w = np.array(feats["masked_lm_weights"].float_list.value)
    n = int(mask.sum())
    assert np.all(mask[:n] == 1) and np.all(ids[n:] == 0) and ids[0] == 2 and ids[n - 1] == 3
    seps = np.flatnonzero(ids[:n] == 3)
    assert len(seps) == 2 and np.all(seg[:seps[0] + 1] == 0) and np.all(seg[seps[0] + 1:n] == 1)
    k = int(w.sum())
    assert set(w.tolist()) <= {0.0, 1.0} and np.all(w[:k] == 1) and k >= 1
    assert np.all(pos[k:] == 0) and np.all(lab[k:] == 0) and np.all(np.diff(pos[:k]) > 0)
    assert not set(lab[:k].tolist()) & {0, 1, 2, 3, 4}
    # Whole-word masking: "running" = run ##ning is masked as a unit.
    masked = set(pos[:k].tolist())
    orig = ids.copy()
    orig[pos[:k]] = lab[:k]
    for p in range(2, n):
      if inv[int(orig[p])].startswith("##") and orig[p - 1] not in (2, 3):
        assert (p in masked) == (p - 1 in masked), (p, [inv[int(i)] for i in orig[:n]], masked)
    assert feats["next_sentence_labels"].int64_list.value[0] in (0, 1)


def test_encoder_matches_tf_train_example_and_parse_example():
  rng = np.random.default_rng(1)
  n = 64
  arrays = {"input_ids": rng.integers(0, 3_000_000, (n, 16)), "input_mask": rng.integers(0, 2, (n, 16)),
            "segment_ids": rng.integers(0, 2, (n, 16)), "masked_lm_positions": rng.integers(0, 16, (n, 4)),
            "masked_lm_ids": rng.integers(0, 30_000, (n, 4)),
            "masked_lm_weights": rng.random((n, 4)).astype(np.float32),
            "next_sentence_labels": rng.integers(0, 2, (n, 1))}
  records = tfrecord_io.encode_examples(arrays)
  for i in range(n):
    feature = {}
    for k, v in arrays.items():
      if k == "masked_lm_weights":
        feature[k] = tf.train.Feature(float_list=tf.train.FloatList(value=v[i].tolist()))
      else:
        feature[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=v[i].tolist()))
    ref = tf.train.Example(features=tf.train.Features(feature=feature))
    assert tf.train.Example.FromString(records[i]) == ref
  parsed = tf.io.parse_example(tf.constant(records), tfrecord_io.parse_spec(16, 4))
  for k, v in arrays.items():
    np.testing.assert_array_equal(parsed[k].numpy(), v)


def test_bad_inputs_are_counted_or_named(tmp_path, vocab_file, capsys):
  rng = np.random.default_rng(2)
  good = _write_corpus(tmp_path / "good.txt", 20, rng)
  (tmp_path / "empty.txt").write_text("")
  (tmp_path / "latin1.txt").write_bytes("the cat sat .\ncaf\xe9 on the mat .\n\nhello world .\n"
                                        .encode("latin-1"))
  (tmp_path / "single.txt").write_text("the cat sat on the mat .\n\nhello world .\n\n" +
                                       " ".join(["the dog"] * 80) + "\n")
  out = tmp_path / "out.tfrecord"
  summary = cpd.create_pretraining_data(f"{good},{tmp_path}/empty.txt,{tmp_path}/latin1.txt,"
                                        f"{tmp_path}/single.txt", [str(out)], vocab_file,
                                        cpd.Config(max_seq_length=32, max_predictions_per_seq=5,
                                                   dupe_factor=1, allow_invalid_utf8=True), progress=False)
  text = "\n".join(summary.lines())
  assert summary.read.empty_files == [f"{tmp_path}/empty.txt"]
  assert summary.read.bad_utf8_lines[f"{tmp_path}/latin1.txt"] == 1
  assert "latin1.txt: 1" in text and "empty.txt" in text
  assert summary.corpus.single_sentence_documents >= 3
  assert summary.corpus.long_sentences == 1                 # 160 tokens > 29
  assert summary.instances == sum(1 for _ in tf.data.TFRecordDataset([str(out)])) > 0
  assert "instances written" in capsys.readouterr().out
  # Vocab without [MASK]: an error naming the vocab file.
  bad_vocab = tmp_path / "no_mask_vocab.txt"
  bad_vocab.write_text("\n".join(t for t in VOCAB if t != "[MASK]") + "\n")
  with pytest.raises(ValueError, match=r"no_mask_vocab\.txt.*\[MASK\]"):
    cpd.create_pretraining_data(good, [str(out)], str(bad_vocab), progress=False, verbose=False)
  # Only empty files: an error naming them.
  with pytest.raises(ValueError, match="empty.txt"):
    cpd.create_pretraining_data(f"{tmp_path}/empty.txt", [str(out)], vocab_file, progress=False,
                                verbose=False)
  with pytest.raises(FileNotFoundError, match="missing_"):
    cpd.create_pretraining_data(f"{tmp_path}/missing_*.txt", [str(out)], vocab_file, progress=False)


def test_sop_and_jieba_flags_run_end_to_end(tmp_path):
  pytest.importorskip("jieba")
  zh_chars = sorted(set("我爱北京天安门上太阳升伟大领袖毛主席指引我们向前进中华人民共和国成立了"))
  vocab = tmp_path / "zh_vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。"] + zh_chars) + "\n")
  docs = ["我爱北京天安门。\n天安门上太阳升。\n中华人民共和国成立了。", "伟大领袖毛主席。\n指引我们向前进。"] * 10
  corpus = tmp_path / "zh.txt"
  corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  out = tmp_path / "zh.tfrecord"
  summary = cpd.create_pretraining_data(str(corpus), [str(out)], str(vocab),
                                        cpd.Config(max_seq_length=24, max_predictions_per_seq=4,
                                                   dupe_factor=3, pair_mode="sop", chinese_wwm=True),
                                        progress=False, verbose=False)
  assert summary.instances > 0
  ex = _read_examples([str(out)])[0]
  assert len(ex.features.feature[tfrecord_io.CONTINUATION_FEATURE].int64_list.value) == 24
  assert summary.corpus.unk_tokens == 0
