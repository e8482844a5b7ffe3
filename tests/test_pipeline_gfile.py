"""URL paths (gs://...) through tf.io.gfile, with TF's in-memory `ram://` filesystem standing in for GCS;
plus jieba whole-word masking in the raw-text reader."""

import subprocess
import sys
import uuid

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from bert_jax.input_pipeline import create_pretraining_data as cpd  # noqa: E402
from bert_jax import fileio  # noqa: E402
from bert_jax.input_pipeline import pretrain_dataset  # noqa: E402
from bert_jax.input_pipeline import sharding  # noqa: E402
from bert_jax.input_pipeline import tokenization  # noqa: E402
from pretrain_data import pretrain_data  # noqa: E402

T, P = 16, 4
WORDS = [f"w{i}" for i in range(30)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["中", "国"]


def _corpus(n_docs, seed):
  rng = np.random.default_rng(seed)
  docs = []
  for _ in range(n_docs):
    docs.append("\n".join(" ".join(rng.choice(WORDS, size=rng.integers(3, 7))) for _ in range(4)))
  return "\n\n".join(docs) + "\n"


@pytest.fixture
def ram_root():
  root = f"ram://bert_jax_test_{uuid.uuid4().hex}"
  tf.io.gfile.makedirs(root + "/corpus")
  with tf.io.gfile.GFile(root + "/vocab.txt", "w") as f:
    f.write("\n".join(VOCAB) + "\n")
  for i in range(2):
    with tf.io.gfile.GFile(f"{root}/corpus/part-{i}.txt", "w") as f:
      f.write(_corpus(6, i))
  with tf.io.gfile.GFile(root + "/corpus/ignored.csv", "w") as f:
    f.write("not matched by the glob\n")
  yield root
  tf.io.gfile.rmtree(root)


def test_fileio_routes_url_paths_through_gfile(ram_root, tmp_path):
  assert fileio.glob(ram_root + "/corpus/*.txt") == [f"{ram_root}/corpus/part-{i}.txt" for i in range(2)]
  assert fileio.exists(ram_root + "/vocab.txt") and not fileio.exists(ram_root + "/nope.txt")
  assert fileio.isfile(ram_root + "/vocab.txt") and not fileio.isfile(ram_root + "/corpus")
  with fileio.open_file(ram_root + "/vocab.txt", "rb") as f:
    assert f.read().decode().split("\n")[0] == "[PAD]"
  # Local paths stay local.
  (tmp_path / "a.txt").write_text("x")
  assert fileio.glob(str(tmp_path / "*.txt")) == [str(tmp_path / "a.txt")]
  assert not fileio.is_remote(str(tmp_path)) and fileio.is_remote("gs://b/x")


def test_tokenizer_loads_ram_vocab(ram_root):
  tok = tokenization.FullTokenizer(ram_root + "/vocab.txt")
  assert tok.vocab_size == len(VOCAB)
  assert tok.tokenize("w3 W7 中国") == ["w3", "w7", "中", "国"]
  with pytest.raises(FileNotFoundError, match="nope.txt"):
    tokenization.load_vocab(ram_root + "/nope.txt")


def test_tokenization_imports_without_tensorflow():
  code = ("import sys; sys.modules['tensorflow'] = None\n"
          "from bert_jax import fileio; from bert_jax.input_pipeline import tokenization\n"
          "assert fileio.glob('/nonexistent/*') == []\n"
          "try:\n  fileio.exists('gs://b/x')\nexcept ImportError as e:\n  assert 'tensorflow' in str(e)\n"
          "else:\n  raise SystemExit('expected ImportError')\n")
  subprocess.run([sys.executable, "-c", code], check=True)


def test_text_reader_globs_and_reads_ram(ram_root):
  it = pretrain_dataset.make_pretraining_dataset(
      pretrain_data(ram_root + "/corpus/*.txt", 4, ram_root + "/vocab.txt", seed=1), max_seq_length=T,
      max_predictions_per_seq=P, input_format="text", process_index=0, process_count=1)
  assert it.config["input_format"] == "text"
  batch = next(it)
  assert batch["input_ids"].shape == (4, T)
  assert (batch["input_ids"][:, 0] == VOCAB.index("[CLS]")).all()
  assert batch["masked_lm_weights"].sum() > 0
  assert set(np.unique(batch["masked_lm_ids"][batch["masked_lm_weights"] > 0])) <= set(range(5, 35))
  # Resume state on a URL path.
  it.save_state(ram_root + "/state/it.json")
  assert pretrain_dataset.load_state(ram_root + "/state/it.json")["step"] == 1


def test_create_pretraining_data_writes_ram_records(ram_root):
  cfg = cpd.Config(max_seq_length=T, max_predictions_per_seq=P, dupe_factor=2, random_seed=3)
  outputs = sharding.output_file_list(ram_root + "/out/train.tfrecord", 2)
  summary = cpd.create_pretraining_data(ram_root + "/corpus/*.txt", outputs, ram_root + "/vocab.txt", cfg,
                                        progress=False, verbose=False)
  assert all(tf.io.gfile.exists(f) for f in outputs) and sum(summary.counts) > 8
  it = pretrain_dataset.make_pretraining_dataset(
      pretrain_data(ram_root + "/out/train-*.tfrecord", 4, masking="static"), max_seq_length=T,
      max_predictions_per_seq=P, is_training=False, process_index=0, process_count=1, drop_remainder=False)
  batches = list(it)
  assert sum(len(b["next_sentence_labels"]) for b in batches) == sum(summary.counts)
  assert batches[0]["input_ids"].shape[1] == T


def test_text_reader_chinese_whole_word_mask(tmp_path):
  """jieba keeps "中国" one word: with chinese_whole_word_mask its two characters are masked together."""
  pytest.importorskip("jieba")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  text = "\n\n".join("\n".join(["中国" * 4] * 4) for _ in range(8)) + "\n"
  (tmp_path / "zh.txt").write_text(text, encoding="utf-8")
  zhong, guo = VOCAB.index("中"), VOCAB.index("国")

  def split_words(wwm):
    # jieba's words turn token masking into whole words (the plan's resolve_masking_strategy)
    data = pretrain_data(str(tmp_path / "zh.txt"), 8, str(vocab), seed=5, chinese_whole_word_mask=wwm,
                         masking_strategy="whole_word" if wwm else "token")
    it = pretrain_dataset.make_pretraining_dataset(data, max_seq_length=T, max_predictions_per_seq=P,
                                                   input_format="text", process_index=0, process_count=1)
    split = masked = 0
    for _ in range(3):
      b = next(it)
      for ids, pos, lab, w in zip(b["input_ids"], b["masked_lm_positions"], b["masked_lm_ids"],
                                   b["masked_lm_weights"]):
        chosen = {int(p): int(l) for p, l, x in zip(pos, lab, w) if x > 0}
        original = ids.copy()
        original[list(chosen)] = list(chosen.values())
        masked += len(chosen)
        for p, l in chosen.items():
          partner, want = (p + 1, guo) if l == zhong else (p - 1, zhong)
          # Truncation may cut a word at a segment edge; count only words whose partner is there.
          split += original[partner] == want and partner not in chosen
    return split, masked

  split, masked = split_words(True)
  assert masked > 0 and split == 0
  split, masked = split_words(False)
  assert split > 0  # without word boundaries single characters get masked


def test_pretraining_workdir_copies_a_remote_vocab_and_counts_it(tmp_path):
  """A gs://-style vocab (ram:// stands in) is copied into the self-describing work dir and counted."""
  import tensorflow as tf

  from bert_jax.models import BertConfig
  from bert_jax.pretrained import params_dir
  from bert_jax.engine import checkpoints

  remote = "ram://gfile_workdir_test/vocab.txt"
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
  with tf.io.gfile.GFile(remote, "w") as f:
    f.write("\n".join(tokens) + "\n")
  assert params_dir.count_vocab_lines(remote) == len(tokens)
  checkpoints.write_workdir_files(str(tmp_path), {"x": 1}, BertConfig.from_size("tiny", vocab_size=8),
                                  vocab_file=remote)
  assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").split() == tokens


@pytest.mark.parametrize("flag", ["input_file", "output_file", "vocab_file"])
def test_a_url_path_that_gfile_cannot_reach_is_one_error_line(ram_root, tmp_path, flag, capsys):
  """A gs:// path on a machine without GCS access fails inside tf.io.gfile (FailedPreconditionError,
  PermissionDenied, ...): one `error:` line naming the flag, exit 2, not TensorFlow's traceback. A scheme
  no file system serves (UnimplementedError, an OpError as GCS's are) stands in for GCS offline."""
  from bert_jax import cli  # pylint: disable=g-import-not-at-top
  flags = {"input_file": ram_root + "/corpus/*.txt", "output_file": str(tmp_path / "out/train.tfrecord"),
           "vocab_file": ram_root + "/vocab.txt"}
  flags[flag] = "nosuchfs://bucket/" + {"input_file": "corpus/*.txt", "output_file": "rec/train.tfrecord",
                                        "vocab_file": "vocab.txt"}[flag]
  argv = [f"--{k}={v}" for k, v in flags.items()] + ["--num_workers=1", "--progress=false",
                                                      f"--max_seq_length={T}", f"--max_predictions_per_seq={P}"]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  assert e.value.code == 2 and "Traceback" not in err, err
  lines = [line for line in err.splitlines() if line.startswith("error:")]
  assert len(lines) == 1 and lines[0].startswith(f"error: --{flag}='nosuchfs://bucket/"), err


def test_build_vocab_url_path_that_gfile_cannot_reach_is_one_error_line(tmp_path, capsys):
  from bert_jax import cli  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import build_vocab  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(build_vocab.main, ["--input_files=nosuchfs://bucket/*.txt", "--vocab_size=50",
                                          f"--output={tmp_path / 'v.txt'}"])
  err = capsys.readouterr().err
  assert e.value.code == 2 and "Traceback" not in err, err
  assert [l for l in err.splitlines() if l.startswith("error:")][0].startswith(
      "error: --input_files='nosuchfs://bucket/*.txt':"), err
