r"""`create_pretraining_data` as an Apache Beam pipeline: the same per-shard function on many machines.

    pip install '.[beam]'          # apache-beam; on Dataflow workers get bert_jax from the wheel (docs/data.md)
    python -m bert_jax.input_pipeline.create_pretraining_data --runner=DataflowRunner \
        --input_file='gs://BUCKET/corpus/*.txt' --output_file=gs://BUCKET/records/train.tfrecord \
        --vocab_file=gs://BUCKET/vocab.txt --max_seq_length=128 --dupe_factor=10 \
        --project=PROJECT --region=us-central1 --temp_location=gs://BUCKET/tmp \
        --extra_package=dist/bert_jax-0.1.0-py3-none-any.whl --max_num_workers=50

The launcher plans the shards and checks the manifest exactly as the local driver does
(`sharding.plan_run`: same shards, same names, a rerun with other flags refused, finished
shards skipped). Each shard is one element: `Create -> Reshuffle -> ParDo(build_shard)`, and `build_shard`
reads its byte ranges and writes its files through Beam's `FileSystems` (gs://, local, hdfs://), each file to
a temporary name renamed into place when whole. A last step writes the prefix's manifest. Beam retries a failed
shard; a killed job rerun with the same command skips the shards whose files are in place. The records are
the local path's, byte for byte (tests/test_pipeline_shards.py runs the DirectRunner).

No scheduler of our own: Beam's runner places the shards on workers (DataflowRunner, FlinkRunner, SparkRunner;
DirectRunner on this machine).
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from typing import Dict, List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from bert_jax.input_warnings import warn_input
from bert_jax import fileio
from bert_jax.input_pipeline import manifest
from bert_jax.input_pipeline import shard_builder
from bert_jax.input_pipeline import sharding
from bert_jax.input_pipeline import tfrecord_io


def _open(path: str, mode: str = "rb"):
  del mode  # binary reads only
  return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


class BeamRecordWriter:
  """`tfrecord_io.ShardedWriter` through Beam's FileSystems: round-robin over `output_files`, each written to
  a temporary name and renamed into place on a clean close (deleted otherwise)."""

  def __init__(self, output_files: Sequence[str]):
    self.output_files = list(output_files)
    self._tmp = [f"{f}.tmp-{uuid.uuid4().hex}" for f in self.output_files]
    self._files = [FileSystems.create(t, compression_type=CompressionTypes.UNCOMPRESSED) for t in self._tmp]
    self._pending: List[List[bytes]] = [[] for _ in self.output_files]
    self.counts = [0] * len(self.output_files)
    self._next = 0

  def write(self, records) -> None:
    n = len(self._files)
    for rec in records:
      k = self._next
      self._pending[k].append(rec)
      self.counts[k] += 1
      if len(self._pending[k]) >= 4096:
        self._flush(k)
      self._next = (k + 1) % n

  def _flush(self, k: int) -> None:
    if self._pending[k]:
      self._files[k].write(tfrecord_io.frame_records(self._pending[k]))
      self._pending[k] = []

  def close(self, ok: bool = True) -> None:
    for k, f in enumerate(self._files):
      if ok:
        self._flush(k)
      f.close()
    if not ok:
      FileSystems.delete(self._tmp)
      return
    existing = [f for f in self.output_files if FileSystems.exists(f)]
    if existing:                      # a retried shard: the earlier attempt's files go first
      FileSystems.delete(existing)
    FileSystems.rename(self._tmp, self.output_files)

  def __enter__(self):
    return self

  def __exit__(self, exc_type, *exc):
    self.close(ok=exc_type is None)


class BuildShard(beam.DoFn):
  """(shard pieces, index, output files) -> the shard's manifest entry, after writing its records."""

  def __init__(self, vocab_text: bytes, cfg: shard_builder.Config, directory: str):
    super().__init__()
    self._vocab_text, self._cfg, self._directory = vocab_text, cfg, directory
    self._tokenizer = None

  def setup(self):
    # The vocab travels inside the DoFn (a few hundred kB): workers never read it from the launcher's paths.
    fd, path = tempfile.mkstemp(suffix="-vocab.txt")
    with os.fdopen(fd, "wb") as f:
      f.write(self._vocab_text)
    self._tokenizer = shard_builder.make_tokenizer(path, self._cfg)

  def process(self, element):
    index, pieces, files = element
    shard = sharding.Shard(int(index), tuple((p, int(a), int(b)) for p, a, b in pieces))
    result = shard_builder.build_shard(shard, files, self._tokenizer, self._cfg, open_fn=_open,
                             open_writer=BeamRecordWriter)
    sizes = [FileSystems.match([f])[0].metadata_list[0].size_in_bytes for f in result.files]
    yield result.manifest_entry(shard, self._directory, sizes)


def _write_manifest(entries: List[Dict], path: str, data: Dict) -> int:
  data = dict(data, shards=list(data["shards"]) + list(entries), complete=True)
  if not fileio.is_remote(path):      # a local directory: under its lock, as the local driver (manifest.py)
    manifest.save(path, data)
    return data["records"]
  data["shards"] = sorted(data["shards"], key=lambda s: s["index"])
  data["records"] = int(sum(sum(s["records"]) for s in data["shards"]))
  text = json.dumps(data, indent=1, sort_keys=True) + "\n"
  tmp = f"{path}.tmp-{uuid.uuid4().hex}"
  with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
    f.write(text.encode("utf-8"))
  if FileSystems.exists(path):
    FileSystems.delete([path])
  FileSystems.rename([tmp], [path])
  return data["records"]


def unknown_options(beam_args: Sequence[str]) -> List[str]:
  """The flags in `beam_args` that no Beam pipeline options class defines (Beam would log "Discarding
  unparseable args" and drop them: a mistyped flag of ours such as --max_seq_lenght would be lost)."""
  # pylint: disable=protected-access
  from apache_beam.options.pipeline_options import _BeamArgumentParser  # pylint: disable=g-import-not-at-top
  parser = _BeamArgumentParser(allow_abbrev=False)
  seen = {}
  for cls in PipelineOptions.__subclasses__():
    seen.setdefault(str(cls), cls)
  for cls in seen.values():
    cls._add_argparse_args(parser)
  _, unknown = parser.parse_known_args(list(beam_args))
  return [a for a in unknown if a.startswith("-")]


def run(input_files, output_files: Sequence[str], vocab_file: str, cfg: shard_builder.Config, *, runner: str = "DirectRunner",
        beam_args: Sequence[str] = (), shard_bytes: Optional[int] = None,
        num_output_shards: Optional[int] = None, wait: bool = True) -> Dict:
  """Plans the shards here, runs the pending ones on `runner` with Beam's `beam_args`, and returns the final
  manifest (read back after the job when `wait`)."""
  shard_builder.make_tokenizer(vocab_file, cfg)          # a vocab without the special tokens fails here, not on workers
  plan = sharding.plan_run(input_files, output_files, vocab_file, cfg, shard_bytes, num_output_shards)
  todo = [(s.index, s.to_json(), files) for s, files in plan.todo()]
  print(f"{plan.describe()}; {len(plan.finished)} finished by an earlier run; {len(todo)} for {runner}")
  vocab_text = fileio.read_bytes(vocab_file)
  options = PipelineOptions(list(beam_args), runner=runner)
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline
       | "Shards" >> beam.Create(todo)
       | "Spread" >> beam.Reshuffle()
       | "BuildShard" >> beam.ParDo(BuildShard(vocab_text, cfg, plan.directory))
       | "Collect" >> beam.combiners.ToList()
       | "Manifest" >> beam.Map(_write_manifest, plan.manifest_path, plan.manifest))
  result = pipeline.run()
  if not wait:
    return plan.manifest
  result.wait_until_finish()
  data = manifest.load(plan.manifest_path)
  skipped = [f"shard {s['index']} ({s['pieces'][0][0]}): {s['skipped']}" for s in data["shards"] if s.get("skipped")]
  if not data["records"]:               # as the local driver: no instances is the user's input, not a success
    raise shard_builder.NoInstancesError(f"no instances from the input files {plan.files} "
                           f"({'; '.join(skipped) or 'no tokens'})")
  for line in skipped:
    warn_input(f"skipped {line}")
  print(f"{plan.manifest_path}: {data['records']:,} records in {sum(len(s['files']) for s in data['shards'])} "
        "files" + (f"; {len(skipped)} shard(s) made no instances" if skipped else ""))
  return data
