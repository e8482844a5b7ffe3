"""Corpus-scale create_pretraining_data: shards cut at document boundaries, output independent of the worker
count (1 vs 2 processes, byte for byte), a manifest that lets a killed run resume and refuses other flags,
Beam's DirectRunner writing the local path's bytes, and the training reader resuming from the manifest's
counts without reading the skipped files."""

import json
import os
import re
import sys

import numpy as np
import pytest

import bert_jax.input_pipeline
from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.input_pipeline import create_pretraining_data as cpd
from bert_jax.input_pipeline import manifest
from bert_jax.input_pipeline import sharding
from bert_jax.input_pipeline import text_io
from pretrain_data import pretrain_data

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "run", "##ning", "play", "##ed", "is", "was", "hello",
         "world", "jax", "bert", "model", "train", "##ing", "data", "big", "small", "red", "blue"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + WORDS
CFG = cpd.Config(max_seq_length=24, max_predictions_per_seq=4, dupe_factor=2)
MANIFEST = "train.tfrecord.manifest.json"   # the manifest of the output prefix train.tfrecord


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """Two text files (~9 kB and ~2 kB) and a vocab; ~9 kB is cut into several shards at 2 kB per shard."""
  d = tmp_path_factory.mktemp("corpus")
  (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  rng = np.random.default_rng(0)
  plain = [w for w in WORDS if not w.startswith("##")]
  for name, num_docs in (("a.txt", 90), ("b.txt", 20)):
    docs = ["\n".join(" ".join(rng.choice(plain, int(rng.integers(3, 12)))) + " running ."
                      for _ in range(int(rng.integers(1, 5)))) for _ in range(num_docs)]
    (d / name).write_text("\n\n".join(docs) + "\n")
  return d


def _files(directory):
  return {f: (directory / f).read_bytes() for f in sorted(os.listdir(directory))}


def test_shards_partition_the_documents_exactly_at_boundaries(tmp_path):
  # Blank lines of every kind, CRLF, whitespace-only lines and a line that is not UTF-8.
  rng = np.random.default_rng(1)
  parts = []
  for i in range(300):
    lines = [f"doc {i} line {j} " + "x" * int(rng.integers(0, 40)) for j in range(int(rng.integers(1, 4)))]
    sep = ["\n\n", "\r\n\r\n", "\n \n", "\n\n\n", "\n\t\n"][i % 5]
    parts.append("\n".join(lines) + sep)
  raw = "".join(parts).encode() + b"caf\xe9 latin-1\nend\n"
  path = tmp_path / "big.txt"
  path.write_bytes(raw)
  whole_stats = text_io.ReadStats()
  allow = text_io.Utf8Rule(allow=True)   # one bad line in a small byte range is above 1% of its lines
  whole = text_io.read_documents([str(path)], whole_stats, allow)
  for shard_bytes in (1, 97, 1000, 4096, len(raw)):
    shards = sharding.plan_shards([str(path)], shard_bytes)
    assert [s.index for s in shards] == list(range(len(shards)))
    ranges = [p for s in shards for p in s.pieces]
    assert ranges[0][1] == 0 and ranges[-1][2] == len(raw)
    assert all(a[2] == b[1] for a, b in zip(ranges, ranges[1:]))            # contiguous, no overlap
    stats = text_io.ReadStats()
    docs = [d for s in shards for d in sharding.read_shard_documents(s, stats, utf8=allow)]
    assert docs == whole, shard_bytes
    assert sum(stats.bad_utf8_lines.values()) == 1 and stats.files == 1
    if shard_bytes == 1000:
      assert 5 < len(shards) < 30 and all(raw[b - 2:b] == b"\n\n" or raw[b - 3:b] == b"\n\r\n"
                                          for _, _, b in ranges[:-1])
  # Small files are grouped up to the shard size, in order.
  small = [tmp_path / f"s{i}.txt" for i in range(5)]
  for f in small:
    f.write_text("one doc .\n")
  shards = sharding.plan_shards([str(f) for f in small], 25)
  assert [[p[0] for p in s.pieces] for s in shards] == [[str(small[0]), str(small[1])],
                                                         [str(small[2]), str(small[3])], [str(small[4])]]


@pytest.fixture(scope="module")
def one_worker(corpus, tmp_path_factory):
  out = tmp_path_factory.mktemp("w1")
  summary = cpd.create_pretraining_data(f"{corpus}/a.txt,{corpus}/b.txt", [str(out / "train.tfrecord")],
                                        str(corpus / "vocab.txt"), CFG, progress=False, verbose=False,
                                        shard_bytes=2048, num_workers=1)
  return out, summary


@pytest.mark.slow   # two spawned worker processes import numpy and the tokenizer: ~2.5 s
def test_two_worker_processes_write_the_same_bytes_as_one(corpus, one_worker, tmp_path):
  out1, summary = one_worker
  assert summary.num_shards >= 5 and summary.instances > 100
  summary2 = cpd.create_pretraining_data(f"{corpus}/a.txt,{corpus}/b.txt", [str(tmp_path / "train.tfrecord")],
                                         str(corpus / "vocab.txt"), CFG, progress=False, verbose=False,
                                         shard_bytes=2048, num_workers=2)
  files1, files2 = _files(out1), _files(tmp_path)
  assert list(files1) == list(files2) and len(files1) == summary.num_shards + 1     # + the manifest
  assert files1 == files2
  assert summary2.pairs.instances == summary.pairs.instances and summary2.read.documents == 110
  data = json.loads(files1[MANIFEST])
  assert data["complete"] and data["records"] == summary.instances
  assert [e["records"][0] for e in data["shards"]] == [manifest.count_tfrecords(str(out1 / e["files"][0]))
                                                       for e in data["shards"]]
  assert data["vocab_sha256"] == manifest.vocab_sha256(str(corpus / "vocab.txt"))


def test_a_killed_run_resumes_without_redoing_finished_shards(corpus, one_worker, tmp_path, monkeypatch):
  out1, summary1 = one_worker
  built = []
  real = cpd.build_shard

  def crash_at_shard_3(shard, *args, **kwargs):
    if shard.index == 3:
      raise KeyboardInterrupt("killed")
    built.append(shard.index)
    return real(shard, *args, **kwargs)

  monkeypatch.setattr(cpd, "build_shard", crash_at_shard_3)
  args = (f"{corpus}/a.txt,{corpus}/b.txt", [str(tmp_path / "train.tfrecord")], str(corpus / "vocab.txt"), CFG)
  with pytest.raises(KeyboardInterrupt):
    cpd.create_pretraining_data(*args, progress=False, verbose=False, shard_bytes=2048)
  assert built == [0, 1, 2]
  data = json.loads((tmp_path / MANIFEST).read_text())
  assert not data["complete"] and [e["index"] for e in data["shards"]] == [0, 1, 2]
  assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]               # no half-written file left
  kept = {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path) if f.startswith("train-0000")}
  # A killed run that had renamed shard 3's file into place but not listed it yet: adopted, not redone.
  real(sharding.plan_shards([f"{corpus}/a.txt", f"{corpus}/b.txt"], 2048)[3],
       [str(tmp_path / f"train-00003-of-{summary1.num_shards:05d}.tfrecord")],
       cpd.make_tokenizer(str(corpus / "vocab.txt"), CFG), CFG)
  built.clear()
  monkeypatch.setattr(cpd, "build_shard", lambda shard, *a, **k: built.append(shard.index) or real(shard, *a, **k))
  summary = cpd.create_pretraining_data(*args, progress=False, verbose=False, shard_bytes=2048)
  assert built == list(range(4, summary1.num_shards))
  assert summary.resumed_shards == 4 and summary.instances == summary1.instances
  assert all(os.stat(tmp_path / f).st_mtime_ns == t for f, t in kept.items())
  files = _files(tmp_path)
  assert {f: b for f, b in files.items() if f != MANIFEST} == {
      f: b for f, b in _files(out1).items() if f != MANIFEST}
  assert json.loads(files[MANIFEST])["records"] == summary1.instances


def test_a_rerun_with_other_flags_is_refused_with_one_error_line(corpus, one_worker, capsys):
  out1, _ = one_worker
  argv = [f"--input_file={corpus}/a.txt,{corpus}/b.txt", f"--output_file={out1}/train.tfrecord",
          f"--vocab_file={corpus}/vocab.txt", "--max_seq_length=24", "--max_predictions_per_seq=4",
          "--dupe_factor=3", "--shard_size=2K", "--num_workers=1", "--progress=false"]
  before = _files(out1)
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  assert e.value.code == 2
  err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and "--dupe_factor=2" in err[0] and "--dupe_factor=3" in err[0], err
  assert _files(out1) == before
  with pytest.raises(UserError, match="vocab_sha256"):
    other = out1.parent / "other_vocab.txt"
    other.write_text("\n".join(VOCAB + ["extra"]) + "\n")
    cpd.create_pretraining_data(f"{corpus}/a.txt,{corpus}/b.txt", [str(out1 / "train.tfrecord")], str(other),
                                CFG, progress=False, verbose=False, shard_bytes=2048)
  # The same command again: every shard is finished, nothing is made.
  again = cpd.create_pretraining_data(f"{corpus}/a.txt,{corpus}/b.txt", [str(out1 / "train.tfrecord")],
                                      str(corpus / "vocab.txt"), CFG, progress=False, verbose=False,
                                      shard_bytes=2048)
  assert again.resumed_shards == again.num_shards and _files(out1) == before


@pytest.mark.slow   # Beam's DirectRunner starts in ~5 s
def test_beam_direct_runner_writes_the_local_records(corpus, one_worker, tmp_path):
  from bert_jax.input_pipeline import beam_pipeline  # pylint: disable=g-import-not-at-top
  out1, _ = one_worker
  data = beam_pipeline.run(f"{corpus}/a.txt,{corpus}/b.txt", [str(tmp_path / "train.tfrecord")],
                           str(corpus / "vocab.txt"), CFG, runner="DirectRunner", shard_bytes=2048)
  assert data["complete"]
  assert _files(tmp_path) == _files(out1)


@pytest.mark.slow   # imports TensorFlow and reads ~150 batches: ~10 s on a loaded core
def test_a_late_resume_skips_whole_files_by_the_manifest_counts(tmp_path):
  """Records in 8+ files with a manifest: the stream resumed at a late step equals the uninterrupted one,
  and the files before the resumed window are never opened (they are overwritten with garbage first)."""
  tf = pytest.importorskip("tensorflow")
  from bert_jax.input_pipeline import pretrain_dataset  # pylint: disable=g-import-not-at-top
  del tf
  d = tmp_path / "corpus"
  d.mkdir()
  (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  rng = np.random.default_rng(3)
  plain = [w for w in WORDS if not w.startswith("##")]
  docs = ["\n".join(" ".join(rng.choice(plain, int(rng.integers(3, 12)))) + " ." for _ in range(3))
          for _ in range(200)]
  (d / "c.txt").write_text("\n\n".join(docs) + "\n")
  out = tmp_path / "records"
  summary = cpd.create_pretraining_data(str(d / "c.txt"), [str(out / "train.tfrecord")], str(d / "vocab.txt"),
                                        CFG, progress=False, verbose=False, shard_bytes=2000)
  files = sorted(str(out / f) for f in os.listdir(out) if f.endswith(".tfrecord"))
  assert len(files) == summary.num_shards >= 8 and not summary.skipped_shards
  assert manifest.record_counts(files) == [manifest.count_tfrecords(f) for f in files]
  data = pretrain_data(f"{out}/train-*.tfrecord", 32, str(d / "vocab.txt"), seed=5, masking="static",
                       shuffle_buffer=16)
  kwargs = dict(max_seq_length=24, max_predictions_per_seq=4, is_training=True, cycle_length=2, process_index=0,
                process_count=1)
  per_epoch = summary.instances // 32
  start = per_epoch + per_epoch // 2                 # the middle of the second epoch
  it = pretrain_dataset.make_pretraining_dataset(data, **kwargs)
  stream = [next(it) for _ in range(start + 3)]
  # The files of the second epoch's windows before the resume point: skipped by count, never read.
  rs = pretrain_dataset._RecordStream(files, True, 5, 0, 1, 16, 2)  # pylint: disable=protected-access
  counts = manifest.record_counts(files)
  order = rs.file_order(1).numpy().tolist()
  skip, windows = start * 32 - sum(counts), rs.window_counts(counts, 1)
  passed = 0
  while skip >= windows[passed]:
    skip -= windows[passed]
    passed += 1
  skipped = [files[i] for i in order[:2 * passed] if files[i] != files[0]]   # files[0]: the schema check
  assert len(skipped) >= 3
  for f in skipped:
    with open(f, "wb") as fh:
      fh.write(b"not a record")
  resumed = pretrain_dataset.make_pretraining_dataset(data, start_step=start, **kwargs)
  for want in stream[start:]:
    got = next(resumed)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_the_plan_warns_about_uneven_host_files_and_large_raw_text(tmp_path):
  from bert_jax.input_pipeline import data_plan  # pylint: disable=g-import-not-at-top
  records = []
  for i in range(5):
    records.append(str(tmp_path / f"r{i}.tfrecord"))
    (tmp_path / f"r{i}.tfrecord").write_bytes(b"x")
  assert data_plan.data_layout_warnings("f", records[:4], 2) == []
  assert data_plan.data_layout_warnings("f", records, 1) == []
  (uneven,) = data_plan.data_layout_warnings("f", records, 2)
  assert "5 record files for 2 hosts" in uneven and "1 host(s) get one file more" in uneven
  (fewer,) = data_plan.data_layout_warnings("f", records[:3], 4)
  assert "3 record file(s) for 4 hosts" in fewer and "at least 4 files" in fewer
  text = tmp_path / "c.txt"
  text.write_text("a b c .\n" * 100)                        # 800 bytes
  assert data_plan.data_layout_warnings("f", [str(text)], 1, raw_text_limit=800) == []
  (big,) = data_plan.data_layout_warnings("f", [str(text)], 1, raw_text_limit=799)
  assert "raw text per host" in big and "create_pretraining_data" in big
  assert data_plan.data_layout_warnings("f", [str(text)], 2, raw_text_limit=799) == []   # 400 bytes per host


def test_runner_without_apache_beam_is_one_error_line(corpus, tmp_path, capsys, monkeypatch):
  # The test environment installs the [beam] extra: hide it, as on a machine without it (a None entry in
  # sys.modules makes `import apache_beam` raise ImportError; beam_pipeline must be imported afresh).
  monkeypatch.setitem(sys.modules, "apache_beam", None)
  monkeypatch.delitem(sys.modules, "bert_jax.input_pipeline.beam_pipeline", raising=False)
  monkeypatch.delattr(bert_jax.input_pipeline, "beam_pipeline", raising=False)
  argv = [f"--input_file={corpus}/b.txt", f"--output_file={tmp_path}/t.tfrecord", f"--vocab_file={corpus}/vocab.txt",
          "--runner=DataflowRunner", "--project=p", "--progress=false"]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  assert e.value.code == 2
  err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and "pip install 'bert_jax[beam]'" in err[0]
  assert not os.listdir(tmp_path)


def test_beam_run_that_makes_no_instances_is_a_user_error(corpus, tmp_path, capsys):
  """--runner=DirectRunner on input that makes no pair (one document): one `error:` line and exit 2, as the
  local driver; it printed "0 records in 0 files" and exited 0."""
  pytest.importorskip("apache_beam")
  (tmp_path / "one.txt").write_text("the cat sat .\non the mat .\n")
  argv = [f"--input_file={tmp_path}/one.txt", f"--output_file={tmp_path}/rec/train.tfrecord",
          f"--vocab_file={corpus}/vocab.txt", "--max_seq_length=24", "--max_predictions_per_seq=4",
          "--runner=DirectRunner"]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("error:")]
  assert e.value.code == 2 and "Traceback" not in err, err
  assert len(lines) == 1 and "no instances from the input files" in lines[0] and "1 document(s)" in lines[0], err


def test_gzip_input_makes_the_records_of_its_text(corpus, tmp_path, capsys):
  """A gzip'd corpus (corpus.txt.gz) was parsed as its compressed bytes: 'lines that are not UTF-8' skipped
  and the few that decoded kept as text. Now it is read decompressed, whole (one shard however small
  --shard_size), making the plain file's records; a damaged one is one `error:` line naming it."""
  import gzip  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import build_vocab, checks  # pylint: disable=g-import-not-at-top
  text = (corpus / "a.txt").read_bytes()
  gz = tmp_path / "a.txt.gz"
  gz.write_bytes(gzip.compress(text))
  plain = cpd.create_pretraining_data(str(corpus / "a.txt"), [str(tmp_path / "p/t.tfrecord")],
                                      str(corpus / "vocab.txt"), CFG, progress=False, verbose=False)
  zipped = cpd.create_pretraining_data(str(gz), [str(tmp_path / "z/t.tfrecord")], str(corpus / "vocab.txt"),
                                       CFG, progress=False, verbose=False)
  assert zipped.read.bad_utf8_lines == {} and zipped.read.documents == plain.read.documents
  assert (tmp_path / "z/t.tfrecord").read_bytes() == (tmp_path / "p/t.tfrecord").read_bytes()
  assert len(sharding.plan_shards([str(gz)], shard_bytes=64)) == 1   # and a warning that it is held whole
  assert checks.is_raw_text([str(gz)]) and checks.count_documents_upto([str(gz)], 10**6) == plain.read.documents
  v_plain = build_vocab.build_vocab(str(corpus / "a.txt"), 60, str(tmp_path / "v1.txt"), backend="python",
                                    verbose=False)
  assert build_vocab.build_vocab(str(gz), 60, str(tmp_path / "v2.txt"), backend="python", verbose=False) == v_plain
  (tmp_path / "cut.txt.gz").write_bytes(gz.read_bytes()[:len(gz.read_bytes()) // 2])
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, [f"--input_file={tmp_path}/cut.txt.gz", f"--output_file={tmp_path}/c/t.tfrecord",
                                  f"--vocab_file={corpus}/vocab.txt", "--num_workers=1", "--progress=false"])
  err = capsys.readouterr().err
  assert e.value.code == 2 and "Traceback" not in err, err
  assert [l for l in err.splitlines() if l.startswith("error:")] == [
      f"error: {tmp_path}/cut.txt.gz: not a readable gzip file (Compressed file ended before the end-of-stream "
      "marker was reached); decompress it or fix the copy"], err


def test_the_default_shard_plan_comes_from_the_corpus_size_alone():
  """One 256 MB shard for a 90 MB corpus left a second worker idle (1.11x): now 64 shards while each keeps
  4 MiB, never above 256 MiB, and nothing of it depends on --num_workers."""
  mib = 2**20
  assert sharding.auto_shard_bytes(3 * mib) == 4 * mib                        # one shard
  assert sharding.auto_shard_bytes(90 * mib) == 4 * mib                       # 23 shards of 4 MiB
  assert sharding.auto_shard_bytes(2**30) == 16 * mib                         # 64 of 16 MiB
  assert sharding.auto_shard_bytes(16 * 2**30) == 256 * mib                   # 64 of 256 MiB
  assert sharding.auto_shard_bytes(100 * 2**30) == 256 * mib                  # the bound: 400 shards


def _cli(corpus, out, *extra):
  argv = [f"--input_file={corpus}/a.txt,{corpus}/b.txt", f"--output_file={out}/train.tfrecord",
          f"--vocab_file={corpus}/vocab.txt", "--max_seq_length=24", "--max_predictions_per_seq=4",
          "--dupe_factor=2", "--num_workers=1", "--progress=false", *extra]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  return e.value.code


def test_num_output_shards_is_the_number_of_files_written(corpus, tmp_path, capsys, monkeypatch):
  """--num_output_shards=4 wrote 32 files (`train-00009-of-00032`): 4 per shard. It is now the total."""
  monkeypatch.setattr(sharding, "MIN_SHARD_BYTES", 1024)      # this ~11 kB corpus plans like a 90 MB one
  assert _cli(corpus, tmp_path / "auto") == 0
  out = capsys.readouterr().out
  auto = sorted(f for f in os.listdir(tmp_path / "auto") if f.endswith(".tfrecord"))
  assert len(auto) >= 8 and auto[0] == f"train-00000-of-{len(auto):05d}.tfrecord", auto
  assert re.search(rf"shards: {len(auto)} planned \(<= 1K each, from 11\.\dKB of text\), {len(auto)} file\(s\); "
                   r"1 worker\(s\) ran", out), out
  for m in (4, 3, 40):
    assert _cli(corpus, tmp_path / f"m{m}", f"--num_output_shards={m}") == 0
    names = sorted(f for f in os.listdir(tmp_path / f"m{m}") if f.endswith(".tfrecord"))
    assert names == [f"train-{i:05d}-of-{m:05d}.tfrecord" for i in range(m)], names
    counts = manifest.record_counts([str(tmp_path / f"m{m}" / n) for n in names])
    assert all(n > 0 for n in counts) and sum(counts) > 100
  capsys.readouterr()
  # With --shard_size given, fewer files than its shards cannot be written: one error line says what to give.
  assert _cli(corpus, tmp_path / "bad", "--num_output_shards=2", "--shard_size=2K") == 2
  err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and re.search(r"--num_output_shards=2 is fewer than the \d+ shards of --shard_size=2K",
                                     err[0]), err


def test_gbk_text_past_the_head_check_stops_the_shard_that_reads_it(corpus, tmp_path, capsys, monkeypatch):
  """The plan checks each file's first MiB; a file whose second half is GBK passes that and is refused by the
  shard that reads it: one line naming the file and the byte range, exit 2, the finished shards listed."""
  monkeypatch.setattr(text_io, "_HEAD_BYTES", 4096)
  good = (corpus / "a.txt").read_bytes()
  gbk = "\n\n".join("今天天气很好。\n我们去公园散步。" for _ in range(40)).encode("gbk")
  (tmp_path / "mixed.txt").write_bytes(good + b"\n" + gbk + b"\n")
  argv = [f"--input_file={tmp_path}/mixed.txt", f"--output_file={tmp_path}/out/train.tfrecord",
          f"--vocab_file={corpus}/vocab.txt", "--max_seq_length=24", "--max_predictions_per_seq=4",
          "--dupe_factor=1", "--shard_size=2K", "--num_workers=1", "--progress=false"]
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(cpd.main, argv)
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("error:")]
  assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
  assert re.search(r"mixed\.txt: \d+ of \d+ lines of bytes [\d,]+-[\d,]+ \(\d+\.\d%.*iconv -f GB18030", lines[0])
  data = json.loads((tmp_path / "out" / MANIFEST).read_text())
  assert not data["complete"] and data["shards"]           # the shards before it are kept for a rerun
