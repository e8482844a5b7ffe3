"""create_pretraining_data's user mistakes: each is one `error:` line and exit 2, never a traceback (a glob
matching nothing, empty input, a vocab without [MASK], out-of-range flags, an output name that is a
directory), and no output file is written."""

import re

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.input_pipeline import create_pretraining_data as cpd
from pretrain_data import pretrain_data

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "ran", "."]


@pytest.fixture
def files(tmp_path):
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  (tmp_path / "no_mask.txt").write_text("\n".join(t for t in VOCAB if t != "[MASK]") + "\n")
  (tmp_path / "corpus.txt").write_text("the cat sat .\non the mat .\n\nthe dog ran .\nthe cat ran .\n")
  (tmp_path / "empty.txt").write_text("")
  (tmp_path / "blank.txt").write_text("\n\n\n")
  # A TFRecord's bytes: a length header (mostly zero bytes), a CRC, then an Example whose padded ids are zeros.
  record = b"\x1a\x00\x00\x00\x00\x00\x00\x00" + b"\x00" * 4 + b"\n\x18\n\x09input_ids\x12\x0b\x1a\x09" + b"\x00" * 64   # padding ids
  (tmp_path / "records.tfrecord").write_bytes(record)   # was read as text: lines that are not UTF-8 skipped
  (tmp_path / "records.bin").write_bytes(record * 4)
  (tmp_path / "utf16.txt").write_bytes("the cat sat .\n\nthe dog ran .\nthe cat ran .\n".encode("utf-16"))
  (tmp_path / "one_doc.txt").write_text("the cat sat .\non the mat .\nthe dog ran .\n")   # no blank line
  (tmp_path / "a_dir").mkdir()
  _gbk_corpus(tmp_path / "gbk.txt")
  return tmp_path


CASES = [
    ({"input_file": "nothing_*.txt"}, "--input_file: no file matches '.*nothing_\\*.txt'"),
    ({"input_file": "nothing_*.txt,corpus.txt"}, "no file matches '.*nothing_\\*.txt'"),
    ({"input_file": "empty.txt"}, "--input_file=.*every file is empty"),
    ({"input_file": "blank.txt"}, r"no instances from the input files .*\(empty or only blank lines: \['.*blank.txt'\]"),
    ({"vocab_file": "no_mask.txt"}, r"--vocab_file=.*lacks the special token\(s\) \['\[MASK\]'\]"),
    ({"vocab_file": "missing_vocab.txt"}, "--vocab_file=.*no such file"),
    ({"output_file": "a_dir"}, "--output_file=.*is a directory"),
    ({"output_file": "corpus.txt"}, "--output_file=.*corpus.txt' is also an input file"),
    ({"max_seq_length": "3"}, "--max_seq_length=3; expected >= 5"),
    ({"max_predictions_per_seq": "0"}, "--max_predictions_per_seq=0; expected >= 1"),
    ({"dupe_factor": "0"}, "--dupe_factor=0; expected >= 1"),
    ({"masked_lm_prob": "1.5"}, "--masked_lm_prob=1.5; expected 0 < p <= 1"),
    ({"masked_lm_prob": "0"}, "--masked_lm_prob=0.0; expected 0 < p <= 1"),
    ({"short_seq_prob": "-0.1"}, "--short_seq_prob=-0.1; expected 0 <= p <= 1"),
    ({"num_output_shards": "0"}, "--num_output_shards=0; expected >= 1"),
    ({"max_seq_length": "abc"}, "^error: argument --max_seq_length: invalid int value: 'abc'"),
    ({"masking_strategy": "spam"}, "^error: argument --masking_strategy: invalid choice: 'spam'"),
    ({"masking_strategy": "span", "span_geo_p": "0"}, "^error: --span_geo_p=0.0; expected 0 < p <= 1"),
    ({"masking_strategy": "span", "span_max_length": "0"}, "^error: --span_max_length=0; expected an integer"),
    ({"input_file": "one_doc.txt"}, "a blank line separates documents, or use --pair_mode=sop"),
    ({"input_file": "a_dir"}, r"--input_file: '.*a_dir' is a directory; expected files or a glob such as '.*a_dir/\*\.txt'"),
    ({"input_file": "records.tfrecord"}, "records.tfrecord is a TFRecord file; expected raw text"),
    ({"input_file": "records.bin"}, r"records.bin is binary \(a TFRecord file\?\), not UTF-8 text"),
    ({"input_file": "utf16.txt"}, "utf16.txt is UTF-16 text, not UTF-8 text"),
    ({"vocab_file": "a_dir"}, "--vocab_file=.*a_dir' is a directory; expected a vocab file \\(one token per line"),
    ({"max_seq_lenght": "64"}, r"unrecognized argument --max_seq_lenght \(did you mean --max_seq_length\?\)"),
]


@pytest.mark.parametrize("change,message", CASES, ids=[next(iter(c)) + "=" + next(iter(c.values()))
                                                      for c, _ in CASES])
def test_a_user_mistake_is_one_error_line(files, change, message, capsys):
  flags = {"input_file": "corpus.txt", "output_file": "out/train.tfrecord", "vocab_file": "vocab.txt",
           "max_seq_length": "16", "max_predictions_per_seq": "3", "dupe_factor": "2"}
  flags.update(change)
  for key in ("input_file", "output_file", "vocab_file"):
    flags[key] = ",".join(str(files / p) for p in flags[key].split(","))
  argv = [f"--{k}={v}" for k, v in flags.items()] + ["--num_workers=1", "--progress=false"]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  assert e.value.code == 2, err
  assert "Traceback" not in err, err
  lines = [line for line in err.splitlines() if "error:" in line]
  # Flag mistakes too: "error: --flag=...", not argparse's usage block and "PROG: error: ..."
  assert len(lines) == 1 and lines[0].startswith("error: ") and "usage:" not in err, err
  assert re.search(message, lines[0]), lines[0]
  assert not list(files.glob("out/*.tfrecord"))
  assert (files / "corpus.txt").read_text().startswith("the cat sat .")


def test_a_file_of_only_blank_lines_is_not_called_empty(files, capsys):
  """Its warning said "empty file", of a file whose size is not 0."""
  argv = [f"--input_file={files}/blank.txt,{files}/empty.txt", f"--output_file={files}/out/train.tfrecord",
          f"--vocab_file={files}/vocab.txt", "--num_workers=1", "--progress=false"]
  with pytest.raises(SystemExit):
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  assert f"warning: {files}/blank.txt: only blank lines (no text), skipped" in err, err
  assert f"warning: {files}/empty.txt: empty file, skipped" in err, err


def test_records_of_another_length_are_a_user_error_for_train_py(files):
  """Records made with --max_seq_length=16 read with data.max_seq_length=32: train.py's one `error:` line
  (a UserError naming the file and both lengths), not a traceback; still a ValueError for library callers."""
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import pretrain_dataset  # pylint: disable=g-import-not-at-top
  argv = [f"--input_file={files}/corpus.txt", f"--output_file={files}/rec/train.tfrecord",
          f"--vocab_file={files}/vocab.txt", "--max_seq_length=16", "--max_predictions_per_seq=3",
          "--num_workers=1", "--progress=false"]
  assert cpd.main(argv) == 0
  with pytest.raises(UserError, match=r"train\.tfrecord.*'input_ids' has 16 values, expected 32") as e:
    pretrain_dataset.make_pretraining_dataset(pretrain_data([str(files / "rec" / "train.tfrecord")], 4,
                                                            str(files / "vocab.txt")), 32, 3,
                                              process_index=0, process_count=1)
  assert isinstance(e.value, ValueError)


def test_a_vocab_with_a_byte_order_mark_gives_the_same_records(files):
  """A vocab saved with a UTF-8 BOM was refused: "lacks the special token(s) ['[PAD]']" ("\\ufeff[PAD]")."""
  (files / "bom_vocab.txt").write_bytes(b"\xef\xbb\xbf" + (files / "vocab.txt").read_bytes())
  for vocab, out in (("vocab.txt", "plain"), ("bom_vocab.txt", "bom")):
    argv = [f"--input_file={files}/corpus.txt", f"--output_file={files}/{out}/train.tfrecord",
            f"--vocab_file={files}/{vocab}", "--max_seq_length=16", "--max_predictions_per_seq=3",
            "--num_workers=1", "--progress=false"]
    assert cpd.main(argv) == 0
  assert (files / "bom" / "train.tfrecord").read_bytes() == (files / "plain" / "train.tfrecord").read_bytes()


def test_records_of_another_length_stop_the_plan_before_training(files):
  """Records of length 16 under a (16, then 32) phase schedule stopped training when phase 1 began (after 90%
  of the steps with preset=bert_paper); the data plan now reads the first record (no TensorFlow) and refuses
  at once, as it does for one phase of another length."""
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import data_plan  # pylint: disable=g-import-not-at-top
  argv = [f"--input_file={files}/corpus.txt", f"--output_file={files}/rec/train.tfrecord",
          f"--vocab_file={files}/vocab.txt", "--max_seq_length=16", "--max_predictions_per_seq=3",
          "--num_workers=1", "--progress=false"]
  assert cpd.main(argv) == 0

  def plan(**data):
    config = pretrain_config.get_config("size=tiny,runlocal")
    config.data.input_files = f"{files}/rec/*"
    config.data.max_seq_length, config.data.max_predictions_per_seq = 16, 3
    for k, v in data.items():
      config.data[k] = v
    return data_plan.resolve_data_plan(config, str(files / "vocab.txt"), 1)

  assert [p.max_seq_length for p in plan().phases] == [16]
  with pytest.raises(UserError, match=r"train\.tfrecord holds records of max_seq_length=16, "
                                      r"max_predictions_per_seq=3; config\.data\.phases\[1\] length=32"):
    plan(phases=((0.5, 16, 3), (0.5, 32, 5)))
  with pytest.raises(UserError, match=r"config\.data\.max_seq_length=24 .*set --config\.data\.max_seq_length=16"):
    plan(max_seq_length=24)


def test_record_lengths_are_read_without_tensorflow_as_tensorflow_reads_them():
  tf = pytest.importorskip("tensorflow")
  from bert_jax.input_pipeline import tfrecord_io  # pylint: disable=g-import-not-at-top
  feature = tf.train.Feature
  ex = tf.train.Example(features=tf.train.Features(feature={
      "b": feature(bytes_list=tf.train.BytesList(value=[b"a", b"", b"xyz"])),
      "i": feature(int64_list=tf.train.Int64List(value=[0, 1, 300, 2 ** 40, -1])),
      "f": feature(float_list=tf.train.FloatList(value=[1.5] * 7)), "e": feature(int64_list=tf.train.Int64List())}))
  assert tfrecord_io.example_lengths(ex.SerializeToString()) == {"b": 3, "i": 5, "f": 7, "e": 0}
  ours = tfrecord_io.encode_examples({"input_ids": np.arange(6, dtype=np.int64).reshape(2, 3) * 200,
                                      "masked_lm_weights": np.ones((2, 2), np.float32)})[0]
  assert tfrecord_io.example_lengths(ours) == {"input_ids": 3, "masked_lm_weights": 2}
  with pytest.raises(ValueError):
    tfrecord_io.example_lengths(b"\xff\xff\xff")


def test_records_without_a_feature_of_googles_schema_stop_the_plan(tmp_path):
  """RoBERTa-style records without next_sentence_labels failed in the reader after the model's start-up
  (a traceback, then an abort at exit); the plan names the missing feature."""
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import data_plan, tfrecord_io  # pylint: disable=g-import-not-at-top
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  rows = {"input_ids": np.ones((2, 16), np.int64), "input_mask": np.ones((2, 16), np.int64),
          "segment_ids": np.zeros((2, 16), np.int64), "masked_lm_positions": np.ones((2, 3), np.int64),
          "masked_lm_ids": np.ones((2, 3), np.int64), "masked_lm_weights": np.ones((2, 3), np.float32)}
  (tmp_path / "r.tfrecord").write_bytes(tfrecord_io.frame_records(tfrecord_io.encode_examples(rows)))
  config = pretrain_config.get_config("size=tiny,runlocal")
  config.data.input_files = f"{tmp_path}/r.tfrecord"
  config.data.max_seq_length, config.data.max_predictions_per_seq = 16, 3
  with pytest.raises(UserError, match=r"r\.tfrecord: its records lack the feature\(s\) \['next_sentence_labels'\]"):
    data_plan.resolve_data_plan(config, str(tmp_path / "vocab.txt"), 1)


@pytest.mark.parametrize("args,message", [
    (["--input_files=nothing_*.txt"], "--input_files: no file matches"),
    (["--input_files=EMPTY"], "every file is empty"),
    (["--input_files=BLANK"], "no text in"),
    (["--vocab_size=3"], "--vocab_size=3; expected more than the 5 special tokens"),
    (["--output=DIR"], "--output=.* is a directory"),
    (["--output=UNDERFILE/v.txt"], "--output=.*corpus.txt/v.txt'"),   # its directory is a file: no traceback
    (["--min_frequency=-1"], "--min_frequency=-1; expected >= 0"),    # was an OverflowError traceback
    (["--input_files=UTF16"], "utf16.txt is UTF-16 text, not UTF-8 text"),   # was a vocab of mojibake
    (["--input_files=GBK"], r"gbk.txt: 18 of 30 lines .* `iconv -f GB18030 -t UTF-8 .*gbk.txt > .*gbk.utf8.txt`$"),
])
def test_build_vocab_user_mistakes_are_one_error_line(files, args, message, capsys):
  from bert_jax.input_pipeline import build_vocab  # pylint: disable=g-import-not-at-top
  flags = {"--input_files": str(files / "corpus.txt"), "--vocab_size": "50", "--output": str(files / "v.txt")}
  for a in args:
    key, value = a.split("=", 1)
    flags[key] = value.replace("EMPTY", str(files / "empty.txt")).replace("BLANK", str(files / "blank.txt")).replace(
        "UTF16", str(files / "utf16.txt")).replace("GBK", str(files / "gbk.txt")).replace(
        "DIR", str(files / "a_dir")).replace("UNDERFILE", str(files / "corpus.txt")).replace("nothing_", str(files / "nothing_"))
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(build_vocab.main, [f"{k}={v}" for k, v in flags.items()])
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if "error:" in line]
  assert e.value.code == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
  assert re.search(message, lines[0]), lines[0]


def _corrupt_records(files, dupe_factor=40):
  """Records whose file is cut mid-way and padded with junk, as a truncated copy: the first record (which the
  schema check reads) is intact, a later one is not."""
  argv = [f"--input_file={files}/corpus.txt", f"--output_file={files}/rec/train.tfrecord",
          f"--vocab_file={files}/vocab.txt", "--max_seq_length=16", "--max_predictions_per_seq=3",
          f"--dupe_factor={dupe_factor}", "--num_workers=1", "--progress=false"]
  assert cpd.main(argv) == 0
  path = files / "rec" / "train.tfrecord"
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2] + b"\x00junk" * 40)
  return path


def test_a_corrupt_tfrecord_is_a_user_error_naming_the_files(files):
  """tf.data's DataLossError ("corrupted record at N") while batching: one CorruptRecordsError (a UserError:
  train.py's one `error:` line and exit 2, which a supervisor does not retry), naming the input files."""
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import pretrain_dataset  # pylint: disable=g-import-not-at-top
  path = _corrupt_records(files)
  it = pretrain_dataset.make_pretraining_dataset(pretrain_data([str(path)], 4, str(files / "vocab.txt")), 16, 3,
                                                 process_index=0, process_count=1, is_training=False)
  with pytest.raises(UserError, match=r"config\.data\.input_files: a TFRecord file does not read \(corrupted "
                                      r"record at \d+\) while making batch \d+; files: .*train\.tfrecord"):
    for _ in range(10_000):
      next(it)


@pytest.mark.slow   # train.py in a subprocess
def test_train_py_exits_2_with_one_line_on_a_corrupt_tfrecord_at_start_up(files):
  """The first batch fails while the other start-up thread compiles the step: train.py prints one error line
  and exits 2 (it aborted with 134 when the interpreter exited during that compile, a code launchers retry)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  path = _corrupt_records(files, dupe_factor=4)
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 8 + 200] + b"\x00junk" * 40)     # cut inside the first batch
  out = subprocess.run([sys.executable, "train.py", "--config=configs/pretrain.py:tiny",
                        f"--config.data.input_files={path}", f"--config.data.vocab_file={files / 'vocab.txt'}",
                        "--config.data.max_seq_length=16", "--config.data.max_predictions_per_seq=3",
                        "--config.num_train_steps=2", "--config.batch_size=8", f"--workdir={files / 'wd'}"],
                       capture_output=True, text=True, timeout=600, cwd=str(__import__("pathlib").Path(
                           __file__).resolve().parents[1]))
  errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 2, out.stderr[-3000:]
  assert len(errors) == 1 and "does not read (corrupted record at" in errors[0], out.stderr[-3000:]
  assert "Traceback" not in out.stderr


def test_chinese_wwm_without_jieba_is_one_error_line(files, capsys, monkeypatch):
  """--chinese_wwm where neither jieba nor rjieba is installed: an ImportError traceback (exit 1) from the
  first shard, after the manifest was written; now one `error:` line naming the flag before any work, and
  the same for training's config.data.chinese_whole_word_mask on raw text."""
  import sys  # pylint: disable=g-import-not-at-top
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import data_plan  # pylint: disable=g-import-not-at-top
  from configs import pretrain  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(sys.modules, "jieba", None)
  monkeypatch.setitem(sys.modules, "rjieba", None)
  argv = [f"--input_file={files}/corpus.txt", f"--output_file={files}/out/train.tfrecord",
          f"--vocab_file={files}/vocab.txt", "--chinese_wwm", "--num_workers=1", "--progress=false"]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("error:")]
  assert e.value.code == 2 and "Traceback" not in err and len(lines) == 1, err
  assert lines[0].startswith("error: --chinese_wwm segments Chinese words with jieba") and "pip install jieba" in lines[0]
  assert not (files / "out").exists() or not list((files / "out").iterdir())
  config = pretrain.get_config("size=tiny,runlocal")
  config.data.input_files, config.data.chinese_whole_word_mask = str(files / "corpus.txt"), True
  with pytest.raises(UserError, match="config.data.chinese_whole_word_mask=true segments Chinese words with jieba"):
    data_plan.resolve_data_plan(config, str(files / "vocab.txt"), 1)


@pytest.mark.parametrize("output,message", [("a_dir", "is a directory"), ("corpus.txt/b.jsonl", "corpus.txt/b.jsonl'")])
def test_inspect_output_that_cannot_be_written_is_one_error_line_before_reading(files, output, message, capsys):
  """inspect --output=DIR (or under a file) read every batch, then died with an IsADirectoryError /
  FileNotFoundError traceback (exit 1), leaving a temp file; now one `error:` line before any reading."""
  from bert_jax.input_pipeline import inspect as inspect_lib  # pylint: disable=g-import-not-at-top
  rc = inspect_lib.main(["--config=configs/pretrain.py:size=tiny,runlocal",
                         f"--config.data.input_files={files}/corpus.txt", f"--config.data.vocab_file={files}/vocab.txt",
                         f"--output={files}/{output}"])
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("error:")]
  assert rc == 2 and "Traceback" not in err and len(lines) == 1 and "--output=" in lines[0], err
  assert message in lines[0], lines[0]
  assert sorted(p.name for p in files.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("extra,message", [
    (["--max_seq_lenght=64"], r"unrecognized argument --max_seq_lenght \(did you mean --max_seq_length\?\)"),
    (["--no_such_option=1"], "unrecognized arguments: --no_such_option=1"),
])
def test_beam_runner_refuses_flags_that_beam_would_drop(files, extra, message, capsys):
  """With --runner, flags that are not ours go to Beam, which logged "Discarding unparseable args" and ran:
  a mistyped flag of ours silently made records with the default. Now one `error:` line, nothing written."""
  pytest.importorskip("apache_beam")
  argv = [f"--input_file={files}/corpus.txt", f"--output_file={files}/out/t.tfrecord",
          f"--vocab_file={files}/vocab.txt", "--runner=DirectRunner", *extra]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("error:")]
  assert e.value.code == 2 and len(lines) == 1 and re.search(message, lines[0]), err
  assert not (files / "out").exists()


@pytest.mark.parametrize("name", ["utf16.txt", "records_renamed.txt"])
def test_training_on_a_txt_that_is_not_text_is_a_plan_error(files, name):
  """Raw-text training read a UTF-16 .txt as one undecodable document ("1 document(s), need 2") and a renamed
  TFRecord as text (it trained on the decodable fragments)."""
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import data_plan  # pylint: disable=g-import-not-at-top
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top
  (files / "records_renamed.txt").write_bytes((files / "records.bin").read_bytes())
  config = pretrain_config.get_config("size=tiny,runlocal")
  config.data.input_files = str(files / name)
  with pytest.raises(UserError, match=rf"config\.data\.input_files=.*{name} is (UTF-16 text|binary)"):
    data_plan.resolve_data_plan(config, str(files / "vocab.txt"), 1)


# ---- text in another encoding: refused above 1% of lines, naming the encoding and the fix -----------------
ZH = ["今天天气很好。", "我们去公园散步。", "他在北京大学学习中文。", "这本书非常有意思。"]
ZH_TRADITIONAL = ["今天天氣很好。", "我們去公園散步。", "他在臺灣大學學習中文。", "這本書非常有意思。"]


def _gbk_corpus(path, english_docs=2, encoding="gbk"):
  """Documents of Chinese lines (in `encoding`) and `english_docs` documents of English (ASCII) lines."""
  zh = ZH_TRADITIONAL if encoding == "big5" else ZH
  docs = [[zh[(d + i) % len(zh)] for i in range(3)] for d in range(6)]
  docs += [["the cat sat .", "on the mat ."] for _ in range(english_docs)]
  path.write_bytes("\n\n".join("\n".join(d) for d in docs).encode(encoding) + b"\n")
  return path


@pytest.mark.parametrize("encoding,iconv", [("gbk", "GB18030"), ("big5", "BIG5"), ("latin-1", "LATIN1")])
def test_a_corpus_in_another_encoding_is_one_error_line_with_the_iconv_fix(files, encoding, iconv, capsys):
  """A GBK corpus made records from its English lines, exit 0, with one warning and no fix."""
  if encoding == "latin-1":
    (files / "other.txt").write_bytes("caf\xe9 cr\xe8me .\nthe cat sat .\n\nna\xefve .\nthe dog ran .\n"
                                      .encode("latin-1"))
  else:
    _gbk_corpus(files / "other.txt", encoding=encoding)
  argv = [f"--input_file={files}/other.txt", f"--output_file={files}/out/train.tfrecord",
          f"--vocab_file={files}/vocab.txt", "--max_seq_length=16", "--max_predictions_per_seq=3",
          "--num_workers=1", "--progress=false"]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if "error:" in line]
  assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
  assert re.search(r"other\.txt: \d+ of \d+ lines \(\d+\.\d%, first: line \d+\) are not UTF-8; they decode as ",
                   lines[0]), lines[0]
  assert f"`iconv -f {iconv} -t UTF-8 {files}/other.txt > {files}/other.utf8.txt`" in lines[0], lines[0]
  assert "or pass --allow_invalid_utf8 to read on" in lines[0]
  assert not list(files.glob("out/*.tfrecord"))


def test_allow_invalid_utf8_reads_on_and_a_corpus_left_with_one_document_is_one_error_line(files, capsys):
  base = [f"--output_file={files}/out/train.tfrecord", f"--vocab_file={files}/vocab.txt", "--max_seq_length=16",
          "--max_predictions_per_seq=3", "--num_workers=1", "--progress=false", "--allow_invalid_utf8"]
  _gbk_corpus(files / "gbk2.txt", english_docs=2)
  assert cpd.main([f"--input_file={files}/gbk2.txt", *base]) == 0     # the English documents, counted skips
  out = capsys.readouterr()
  assert "skipped lines that are not UTF-8: 18" in out.out, out
  from bert_jax import input_warnings  # pylint: disable=g-import-not-at-top
  assert any("gbk2.txt: skipped 18 of 30 lines that are not UTF-8" in m for m in input_warnings.input_warnings())
  _gbk_corpus(files / "gbk1.txt", english_docs=1)                   # one document left: no pairs
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, [f"--input_file={files}/gbk1.txt", *base[:1], f"--output_file={files}/o1/t.tfrecord",
                                  *base[1:]])
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if "error:" in line]
  assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
  assert "1 document(s) with tokens" in lines[0], lines[0]


def test_training_on_a_gbk_corpus_stops_in_the_plan_with_the_fix_or_counts_what_the_reader_keeps(files):
  """Raw-text training: the plan counted documents by blank lines, the reader then dropped the GBK lines and
  found one document, and the NSP rule failed inside tf.data (an InvalidArgumentError traceback, exit 1)."""
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import data_plan  # pylint: disable=g-import-not-at-top
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top

  def plan(name, **data):
    config = pretrain_config.get_config("size=tiny,runlocal")
    config.data.input_files = str(files / name)
    for k, v in data.items():
      config.data[k] = v
    return data_plan.resolve_data_plan(config, str(files / "vocab.txt"), 1)

  _gbk_corpus(files / "gbk1.txt", english_docs=1)
  _gbk_corpus(files / "gbk2.txt", english_docs=2)
  with pytest.raises(UserError, match=r"gbk1\.txt: 18 of 27 lines .*decode as GB18030 \(GBK\): convert the file "
                                      r"with `iconv -f GB18030 -t UTF-8 .*gbk1\.txt > .*gbk1\.utf8\.txt`, or pass "
                                      r"--config\.data\.allow_invalid_utf8=true to read on"):
    plan("gbk1.txt")
  with pytest.raises(UserError, match=r"gbk1\.txt'?: 1 document\(s\) once 18 lines that are not UTF-8 are skipped, "
                                      r"need at least 2"):
    plan("gbk1.txt", allow_invalid_utf8=True)                 # counted as the reader keeps it
  assert plan("gbk2.txt", allow_invalid_utf8=True).data.allow_invalid_utf8


def test_the_encoding_guess_tells_gbk_big5_and_latin1_apart():
  from bert_jax.input_pipeline import text_io  # pylint: disable=g-import-not-at-top
  text = ["今天天气很好，我们去公园散步。", "這本書非常有意思，他在臺灣大學學習。"]
  assert text_io.guess_encoding([text[0].encode("gbk")]) == "GB18030"
  assert text_io.guess_encoding([text[1].encode("big5")]) == "Big5"
  assert text_io.guess_encoding(["café crème brûlée".encode("latin-1")]) == "Latin-1"
  # Under 1% of lines is a counted skip, as before; over it the error.
  raw = b"\n".join([b"line ."] * 200 + ["caf\xe9".encode("latin-1")])
  stats = text_io.ReadStats()
  assert len(text_io.decode_lines(raw, "x.txt", stats)) == 200 and stats.bad_utf8_lines["x.txt"] == 1
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match=r"x\.txt: 2 of 101 lines"):
    text_io.decode_lines(b"\n".join([b"line ."] * 99 + [b"caf\xe9"] * 2), "x.txt")


@pytest.mark.slow   # train.py in a subprocess, twice: ~15 s
def test_train_py_on_a_gbk_corpus_exits_2_with_one_line_never_a_tf_data_traceback(files):
  """Held-out news saved as GBK trained with exit 0 on its English lines, or (one English document left) failed
  the NSP rule inside tf.data: an InvalidArgumentError traceback, exit 1, which launchers retry."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  _gbk_corpus(files / "news_gbk.txt", english_docs=1)
  for extra, message in (((), "--config.data.allow_invalid_utf8=true to read on"),
                         (("--config.data.allow_invalid_utf8=true",),
                          "1 document(s) once 18 lines that are not UTF-8 are skipped")):
    out = subprocess.run([sys.executable, "train.py", "--config=configs/pretrain.py:size=tiny,runlocal",
                          f"--config.data.input_files={files / 'news_gbk.txt'}",
                          f"--config.data.vocab_file={files / 'vocab.txt'}", f"--workdir={files / 'wd'}", *extra],
                         capture_output=True, text=True, timeout=600,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1 and message in errors[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "InvalidArgumentError" not in out.stderr
    if not extra:
      assert "`iconv -f GB18030 -t UTF-8 " in errors[0], errors


def test_beam_runner_refuses_a_gbk_corpus_before_the_pipeline_starts(files, capsys):
  """Beam's launcher plans the shards as the local driver does, the encoding check with them: the same line,
  before any worker starts (a shard's UserError inside a Beam worker would reach the user as Beam's traceback)."""
  pytest.importorskip("apache_beam")
  _gbk_corpus(files / "gbk.txt")
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, [f"--input_file={files}/gbk.txt", f"--output_file={files}/out/t.tfrecord",
                                  f"--vocab_file={files}/vocab.txt", "--runner=DirectRunner"])
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("error:")]
  assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
  assert "`iconv -f GB18030 -t UTF-8 " in lines[0] and "--allow_invalid_utf8" in lines[0], lines[0]
  assert not list(files.glob("out/*.tfrecord"))
