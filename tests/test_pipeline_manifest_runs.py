"""Record sets side by side in one directory, each with the manifest of its output prefix
(`NAME.manifest.json`): Google's recipe of one invocation per input shard (`--input_file=part_a.txt
--output_file=records/a.tfrecord`, then b, ...) and BERT's two phases (`wiki_128.tfrecord` at
--max_seq_length=128, then `wiki_512.tfrecord` at 512). Each resumes on its own; other flags into the same
prefix are refused; a per-directory `manifest.json` of an earlier version still resumes."""

import os

import pytest

from bert_jax import cli
from bert_jax.input_pipeline import create_pretraining_data as cpd
from bert_jax.input_pipeline import manifest
from pretrain_data import pretrain_data

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "the", "cat", "dog", "sat", "ran", "on", "mat",
         "big", "red", "is"]


@pytest.fixture
def parts(tmp_path):
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  words = VOCAB[6:]
  for k, name in enumerate(("part_a.txt", "part_b.txt")):
    docs = ["\n".join(" ".join(words[(d * 7 + s * 3 + i + k) % len(words)] for i in range(4 + s)) + " ."
                      for s in range(3)) for d in range(12)]
    (tmp_path / name).write_text("\n\n".join(docs) + "\n")
  return tmp_path


def _run(parts, part, output, *extra):
  argv = [f"--input_file={parts}/{part}", f"--output_file={parts}/records/{output}",
          f"--vocab_file={parts}/vocab.txt", "--max_seq_length=16", "--max_predictions_per_seq=3",
          "--dupe_factor=2", "--num_workers=1", "--progress=false", *extra]
  cli.run_plain_main(cpd.main, argv)


def _exit_code(parts, *args):
  with pytest.raises(SystemExit) as e:
    _run(parts, *args)
  return e.value.code


def test_one_invocation_per_input_shard_into_one_directory(parts, capsys):
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0
  assert _exit_code(parts, "part_b.txt", "b.tfrecord") == 0        # was refused: "other input files"
  out = parts / "records"
  assert sorted(os.listdir(out)) == ["a.tfrecord", "a.tfrecord.manifest.json", "b.tfrecord",
                                     "b.tfrecord.manifest.json"]
  files = [str(out / "a.tfrecord"), str(out / "b.tfrecord")]
  assert manifest.record_counts(files) == [manifest.count_tfrecords(f) for f in files]
  assert all(n > 0 for n in manifest.record_counts(files))
  before = {f: os.stat(f).st_mtime_ns for f in files}
  capsys.readouterr()
  # The same commands again: both resume (nothing made), each from its own manifest.
  assert _exit_code(parts, "part_b.txt", "b.tfrecord") == 0
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0
  assert {f: os.stat(f).st_mtime_ns for f in files} == before
  assert capsys.readouterr().out.count("1 finished by an earlier run") == 2
  # Other flags into the same prefix are refused: one error line naming both values.
  assert _exit_code(parts, "part_b.txt", "b.tfrecord", "--masked_lm_prob=0.2") == 2
  err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and "--masked_lm_prob=0.15" in err[0] and "--masked_lm_prob=0.2" in err[0], err
  # Another input into an output file of an earlier run is refused, as before.
  assert _exit_code(parts, "part_b.txt", "a.tfrecord") == 2
  assert {f: os.stat(f).st_mtime_ns for f in files} == before


def test_records_of_two_lengths_share_a_folder_and_each_resumes(parts, capsys):
  """BERT's two phases into one folder: `--output_file=out/wiki_128.tfrecord --max_seq_length=128`, then
  `out/wiki_512.tfrecord` at 512, was refused ("out/manifest.json was written with --max_seq_length=128").
  Each prefix now keeps its manifest, resumes alone (a killed 512 run redoes only its missing shards), and a
  glob over each prefix, or over the folder, finds its files with their counts."""
  from bert_jax.input_pipeline import text_io  # pylint: disable=g-import-not-at-top
  for n in range(6):   # 6 files of ~1 kB: 3 shards at --shard_size=2K
    (parts / f"wiki_{n}.txt").write_text((parts / "part_a.txt").read_text())

  def run(length, *extra):
    with pytest.raises(SystemExit) as e:
      cli.run_plain_main(cpd.main, [f"--input_file={parts}/wiki_*.txt",
                                    f"--output_file={parts}/out/wiki_{length}.tfrecord",
                                    f"--vocab_file={parts}/vocab.txt", f"--max_seq_length={length}",
                                    f"--max_predictions_per_seq={length // 8}", "--dupe_factor=2",
                                    "--shard_size=2K", "--num_workers=1", "--progress=false", *extra])
    return e.value.code

  assert run(16) == 0 and run(32) == 0
  out = parts / "out"
  names = sorted(os.listdir(out))
  assert names == sorted([f"wiki_{n}-0000{k}-of-00003.tfrecord" for n in (16, 32) for k in range(3)]
                         + ["wiki_16.tfrecord.manifest.json", "wiki_32.tfrecord.manifest.json"]), names
  for length in (16, 32):
    files = text_io.expand_globs(f"{out}/wiki_{length}-*")
    assert len(files) == 3 and manifest.record_counts(files) == [manifest.count_tfrecords(f) for f in files]
  everything = text_io.expand_globs(f"{out}/*")       # the folder: both sets' records, never a manifest
  assert len(everything) == 6 and manifest.record_counts(everything) is not None
  # Training on the folder's glob names the two sets and a glob for each; each set's glob plans.
  from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import data_plan  # pylint: disable=g-import-not-at-top
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top

  def plan(glob):
    config = pretrain_config.get_config("size=tiny,runlocal")
    config.data.input_files, config.data.max_seq_length, config.data.max_predictions_per_seq = glob, 16, 2
    return data_plan.resolve_data_plan(config, str(parts / "vocab.txt"), 1)

  with pytest.raises(UserError, match=rf"matches records of 2 record sets with different lengths: .*"
                                      rf"max_seq_length=16, max_predictions_per_seq=2: {out}/wiki_16\*\).*"
                                      rf"max_seq_length=32, .*{out}/wiki_32\*\)"):
    plan(f"{out}/*")
  assert plan(f"{out}/wiki_16*").phases[0].max_seq_length == 16
  # A killed 32 run (one file gone, as if never renamed into place) resumes alone; the 16 set is untouched.
  kept = {n: os.stat(out / n).st_mtime_ns for n in names}
  os.remove(out / "wiki_32-00001-of-00003.tfrecord")
  capsys.readouterr()
  assert run(32) == 0
  assert "2 finished by an earlier run" in capsys.readouterr().out
  assert all(os.stat(out / n).st_mtime_ns == t for n, t in kept.items()
             if n.startswith("wiki_16") or n in ("wiki_32-00000-of-00003.tfrecord", "wiki_32-00002-of-00003.tfrecord"))
  assert run(16) == 0 and "3 finished by an earlier run" in capsys.readouterr().out
  assert run(16, "--dupe_factor=3") == 2                # other flags into the same prefix: still refused
  assert "--dupe_factor=2" in capsys.readouterr().err


def test_a_wildcard_over_the_records_directory_skips_the_manifests(parts):
  """`--config.data.input_files='records/*'` read manifest.json as a TFRecord (DataLossError traceback)."""
  from bert_jax.input_pipeline import pretrain_dataset  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import text_io  # pylint: disable=g-import-not-at-top
  for part, output in (("part_a.txt", "a.tfrecord"), ("part_b.txt", "b.tfrecord")):
    with pytest.raises(SystemExit):
      _run(parts, part, output)
  out = parts / "records"
  assert text_io.expand_globs(f"{out}/*") == [str(out / "a.tfrecord"), str(out / "b.tfrecord")]
  with pytest.raises(FileNotFoundError, match="manifest.json"):
    text_io.expand_globs(f"{out}/*.json")
  it = pretrain_dataset.make_pretraining_dataset(pretrain_data(f"{out}/*", 4, str(parts / "vocab.txt")), 16, 3,
                                                 process_index=0, process_count=1, is_training=False)
  assert next(iter(it))["input_ids"].shape == (4, 16)


def test_concurrent_runs_into_one_directory_keep_their_manifests(parts, monkeypatch):
  """Two runs started together (one per input shard) both read 'no manifest.json' and both claimed it: the
  last writer won and the other run's entries were lost. The claim now holds the directory's lock."""
  import threading  # pylint: disable=g-import-not-at-top
  barrier = threading.Barrier(2)
  waiting = {"a", "b"}
  load = manifest.load

  def slow_load(path):    # both runs meet here before reading, unless the lock lets only one in
    name = threading.current_thread().name
    if name in waiting:
      waiting.discard(name)
      try:
        barrier.wait(timeout=1.0)
      except threading.BrokenBarrierError:
        pass
    return load(path)

  monkeypatch.setattr(manifest, "load", slow_load)
  errors = []

  def run(part, output):
    try:
      _run(parts, part, output)
    except SystemExit as e:
      if e.code:
        errors.append(e.code)

  threads = [threading.Thread(target=run, args=(f"part_{n}.txt", f"{n}.tfrecord"), name=n) for n in "ab"]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  out = parts / "records"
  names = sorted(os.listdir(out))
  assert len([n for n in names if manifest.is_manifest(n)]) == 2, names
  files = [str(out / "a.tfrecord"), str(out / "b.tfrecord")]
  assert manifest.record_counts(files) == [manifest.count_tfrecords(f) for f in files]


def test_concurrent_saves_of_one_run_merge_their_shards(tmp_path):
  """The same command run twice at once: each save merges the shards the file lists that it lacks."""
  path = str(tmp_path / manifest.FILENAME)
  base = manifest.new({"output_file": ["t.tfrecord"]}, "h", [["in.txt", 10]], 2)
  entry = lambda i: {"index": i, "files": [f"t-{i}"], "records": [i + 1], "bytes": [1]}  # noqa: E731
  a, b = dict(base, shards=[entry(0)]), dict(base, shards=[entry(1)])
  manifest.save(path, a)
  manifest.save(path, b)                     # was: shard 0 lost
  data = manifest.load(path)
  assert [e["index"] for e in data["shards"]] == [0, 1] and data["records"] == 3 and data["complete"]
  manifest.save(path, dict(base, flags={"output_file": ["u.tfrecord"]}, shards=[entry(1)]))   # another run
  assert [e["index"] for e in manifest.load(path)["shards"]] == [1]


def test_an_input_edited_in_place_at_the_same_size_is_noticed_on_resume(parts, capsys):
  """Resume compared inputs by path and size only: a file edited in place keeping its size resumed with the
  old shards. Now its mtime and a hash of its head and tail are compared too, and the error says which."""
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0        # unchanged: resumes
  capsys.readouterr()
  src = parts / "part_a.txt"
  text = src.read_text()
  st = os.stat(src)
  src.write_text(text.replace("cat", "dog", 1))                     # same size
  assert os.stat(src).st_size == st.st_size
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 2
  err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and "part_a.txt was modified since" in err[0], err
  assert "content differs" in err[0]
  # Same size, same mtime (restored), other head bytes: the hash notices.
  os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 2
  assert "first and last 64 KiB differ" in capsys.readouterr().err
  src.write_text(text)                                              # the original content back
  os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0
  # Copied or touched: a new mtime over the same bytes resumes, with a warning naming the file.
  capsys.readouterr()
  os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0
  err = capsys.readouterr().err
  assert "part_a.txt: mtime changed" in err and "resuming with the shards already written" in err, err


def test_a_manifest_of_the_older_format_still_resumes(parts, capsys):
  """Manifests written before inputs carried an mtime and hash ([path, size]), one per directory
  (`manifest.json`), with the plan's flags of then (shard_size=256M, files_per_shard=1), still resume."""
  import json  # pylint: disable=g-import-not-at-top
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0
  new_path = parts / "records" / "a.tfrecord.manifest.json"
  data = json.loads(new_path.read_text())
  data["inputs"] = [x[:2] for x in data["inputs"]]
  data["flags"].update(shard_size=256 << 20, files_per_shard=1)
  del data["plan"]
  (parts / "records" / manifest.FILENAME).write_text(json.dumps(data))
  new_path.unlink()
  before = os.stat(parts / "records" / "a.tfrecord").st_mtime_ns
  assert _exit_code(parts, "part_a.txt", "a.tfrecord") == 0
  assert os.stat(parts / "records" / "a.tfrecord").st_mtime_ns == before
  assert not new_path.exists()                          # resumed in place, from the old manifest
  assert manifest.record_counts([str(parts / "records" / "a.tfrecord")]) == [data["records"]]
  # Planned otherwise then (here: 2 shards): refused, naming the flags of that plan.
  data["num_shards"] = 2
  (parts / "records" / manifest.FILENAME).write_text(json.dumps(data))
  with pytest.raises(SystemExit) as e:
    _run(parts, "part_a.txt", "a.tfrecord")
  err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
  assert e.value.code == 2 and len(err) == 1, err
  assert "manifest.json was planned with 2 shards, this run plans 1: rerun with that run's --shard_size=256M" in err[0]
  # A second prefix beside it keeps its own manifest; the old one is not its business.
  assert _exit_code(parts, "part_b.txt", "b.tfrecord", "--masked_lm_prob=0.2") == 0
  assert (parts / "records" / "b.tfrecord.manifest.json").exists()
