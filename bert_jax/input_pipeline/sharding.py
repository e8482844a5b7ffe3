"""Shards of a pre-training corpus: the unit of work of `create_pretraining_data` (local workers or Beam).

    shards = sharding.plan_shards(["corpus/a.txt", "corpus/wiki.txt"], shard_bytes=256 << 20)
    shards[3].pieces          # ((path, start, end), ...): byte ranges, each cut at a document boundary
    docs = sharding.read_shard_documents(shards[3], stats)   # == those documents of text_io.read_documents
    random.Random(sharding.shard_seed(12345, shard.index, dupe_round, sharding.PAIRS))

A file larger than `shard_bytes` (but a gzip'd one, which is one shard: its memory is its text's) is cut into byte ranges of about `shard_bytes`, each moved forward to the
next empty line ("\\n\\n" or "\\n\\r\\n"): a blank line ends a document in Google's format, so the documents of
the ranges, in order, are exactly the documents of the whole file (tested). Files smaller than `shard_bytes`
are grouped, in sorted order, into shards of at most `shard_bytes`. The plan needs only the file sizes and
one short forward read at each cut, so it is the same on every machine that plans it (the local driver,
Beam's launcher) and costs nothing on a 16 GB file. `plan_run` adds the output names and what an earlier run
into the same directory finished (manifest.json).

A shard's seeds come from (random_seed, shard index, dupe round, purpose), never from a worker or the order
the shards ran in, so the output is the same for 1, 2 or 96 workers and on Beam.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.input_pipeline import manifest
from bert_jax.input_pipeline import text_io

DEFAULT_SHARD_BYTES = 256 << 20   # ~64M tokens of English: ~1.5 GB peak per worker at max_seq_length=128
_CUT_READ = 1 << 16               # bytes read per step while looking for the empty line after a cut

# Purposes of a shard's random streams (the last number of `shard_seed`).
PAIRS, SHUFFLE, MASKS = 0x70616972, 0x73687566, 0x6D61736B


@dataclasses.dataclass(frozen=True)
class Shard:
  """One unit of work: `pieces` are (path, start byte, end byte) ranges, read in this order."""
  index: int
  pieces: Tuple[Tuple[str, int, int], ...]

  @property
  def num_bytes(self) -> int:
    return sum(end - start for _, start, end in self.pieces)

  def to_json(self) -> list:
    return [list(p) for p in self.pieces]


def shard_seed(random_seed: int, shard_index: int, dupe_round: int, purpose: int) -> int:
  """A 63-bit seed from (random_seed, shard, dupe round, purpose); stable across runs and platforms."""
  words = [int(random_seed) & 0xFFFFFFFF, int(random_seed) >> 32 & 0xFFFFFFFF, int(shard_index), int(dupe_round),
           int(purpose)]
  return int(np.random.SeedSequence(words).generate_state(2, np.uint64)[0] >> np.uint64(1))


def next_cut(f, size: int, position: int) -> int:
  """The first document boundary at or after `position`: the offset just past an empty line ("\\n\\n" or
  "\\n\\r\\n" ends there), or `size` when there is none. `f` is the file, open in binary mode."""
  if position <= 0:
    return 0
  if position >= size:
    return size
  # A match "\n\n" ending at c >= position starts at c - 2 >= position - 2 ("\n\r\n": c - 3).
  start = max(position - 3, 0)
  while start < size:
    f.seek(start)
    buf = f.read(_CUT_READ + 3)
    best = None
    for pattern in (b"\n\n", b"\n\r\n"):
      k = buf.find(pattern)
      while k >= 0 and start + k + len(pattern) < position:
        k = buf.find(pattern, k + 1)
      if k >= 0:
        c = start + k + len(pattern)
        best = c if best is None else min(best, c)
    if best is not None:
      return best
    if len(buf) < _CUT_READ + 3:
      return size
    start += _CUT_READ        # the 3-byte overlap keeps a pattern split across reads
  return size


def plan_shards(files: Sequence[str], shard_bytes: int = DEFAULT_SHARD_BYTES,
                sizes: Optional[Sequence[int]] = None) -> List[Shard]:
  """Shards of `files` (already expanded and sorted): big files cut into ~shard_bytes ranges at document
  boundaries, small files grouped up to shard_bytes. Empty files still get a piece (their reader counts
  them as empty)."""
  if shard_bytes < 1:
    raise ValueError(f"shard_bytes must be >= 1, got {shard_bytes}")
  sizes = [fileio.size(f) for f in files] if sizes is None else list(sizes)
  shards: List[Shard] = []
  group: List[Tuple[str, int, int]] = []
  group_bytes = 0

  def close_group():
    nonlocal group, group_bytes
    if group:
      shards.append(Shard(len(shards), tuple(group)))
      group, group_bytes = [], 0

  for path, size in zip(files, sizes):
    if size <= shard_bytes:
      if group_bytes + size > shard_bytes:
        close_group()
      group.append((path, 0, size))
      group_bytes += size
      continue
    close_group()
    with fileio.open_file(path, "rb") as f:
      if text_io.is_gzip(f.read(2)):      # compressed: no byte range but the whole file is text
        logging.getLogger("bert_jax").warning(
            "%s: a gzip'd file of %.1f MB (compressed) is one shard, larger than --shard_size=%d bytes: its whole "
            "text is held in memory; decompress it so that --shard_size can cut it", path, size / 2**20,
            shard_bytes)
        shards.append(Shard(len(shards), ((path, 0, size),)))
        continue
      cuts = [0]
      for k in range(1, -(-size // shard_bytes)):
        c = next_cut(f, size, max(k * shard_bytes, cuts[-1]))
        if c >= size:
          break
        if c > cuts[-1]:
          cuts.append(c)
      if len(cuts) > 1 and size - cuts[-1] < shard_bytes // 4:
        cuts.pop()            # a short tail joins the shard before it (its documents need company)
      cuts.append(size)
    for a, b in zip(cuts[:-1], cuts[1:]):
      shards.append(Shard(len(shards), ((path, a, b),)))
  close_group()
  return shards


def read_range(path: str, start: int, end: int, open_fn=fileio.open_file) -> bytes:
  with open_fn(path, "rb") as f:
    if start:
      f.seek(start)
    return f.read(end - start)


def read_shard_documents(shard: Shard, stats: Optional[text_io.ReadStats] = None,
                         open_fn=fileio.open_file) -> List[List[str]]:
  """The documents of a shard (text_io's rules: bad UTF-8 lines skipped and counted, empty files counted).
  `open_fn(path, mode)` opens a file (fileio.open_file here; Beam's FileSystems on Beam workers)."""
  stats = stats if stats is not None else text_io.ReadStats()
  documents: List[List[str]] = []
  for path, start, end in shard.pieces:
    raw = read_range(path, start, end, open_fn)
    documents.extend(text_io.parse_documents(raw, path, stats, whole_file=start == 0))
  stats.documents = len(documents)
  return documents


# ---- a run: its shards, their output files, and what an earlier run into the same directory finished ----------
def output_file_list(output_file: str, num_output_shards: int = 1) -> List[str]:
  """Comma-separated output files, or one name expanded to `name-00000-of-0000N.ext` shards."""
  files = [f.strip() for f in output_file.split(",") if f.strip()]
  if not files:
    raise ValueError("--output_file is empty")
  if num_output_shards > 1:
    if len(files) != 1:
      raise ValueError("give either several comma-separated --output_file names or --num_output_shards, "
                       "not both")
    root, ext = os.path.splitext(files[0])
    files = [f"{root}-{i:05d}-of-{num_output_shards:05d}{ext}" for i in range(num_output_shards)]
  return files


def shard_output_files(output_files: Sequence[str], num_shards: int, files_per_shard: int = 1
                       ) -> List[List[str]]:
  """The output files of each input shard. One shard: `output_files` as given (Google's round-robin over
  them). Several: one name `root.ext` becomes `root-{s * M + k:05d}-of-{N * M:05d}.ext` for shard s of N and
  its file k of M = files_per_shard, so a glob `root-*` finds them all in order."""
  output_files = list(output_files)
  if num_shards == 1:
    if len(output_files) == 1 and files_per_shard > 1:
      return [output_file_list(output_files[0], files_per_shard)]
    return [output_files]
  if len(output_files) != 1:
    raise UserError(f"--output_file lists {len(output_files)} files, but the input makes {num_shards} shards "
                    f"(--shard_size): give one name; shard s of N is written to NAME-s-of-N")
  root, ext = os.path.splitext(output_files[0])
  total = num_shards * files_per_shard
  return [[f"{root}-{s * files_per_shard + k:05d}-of-{total:05d}{ext}" for k in range(files_per_shard)]
          for s in range(num_shards)]


def relative(path: str, directory: str) -> str:
  """How manifest.json names a file: its base name when it is in `directory`, else its path."""
  return fileio.basename(path) if fileio.dirname(path) == directory else path


def file_bytes(path: str) -> int:
  """Bytes of an output file, -1 when it is not there."""
  n = manifest.file_size(path)
  return -1 if n is None else n


@dataclasses.dataclass
class RunPlan:
  """The shards of a run, their output files, and what an earlier run into the same directory finished."""
  files: List[str]
  shards: List[Shard]
  outputs: List[List[str]]             # per shard
  directory: str
  manifest_path: str
  manifest: Dict                       # this run's manifest, holding the finished shards' entries
  finished: Dict[int, Dict]            # shard index -> its manifest entry

  def todo(self):
    return [(s, self.outputs[s.index]) for s in self.shards if s.index not in self.finished]


def plan_run(input_files, output_files: Sequence[str], vocab_file: str, cfg,
             shard_bytes: int = DEFAULT_SHARD_BYTES, files_per_shard: int = 1) -> RunPlan:
  """Shards the input, names the outputs and reads the manifest in the output directory: a run with other
  flags, inputs or vocab is refused (UserError); the shards it lists whose files are intact are finished, and
  so are shards whose files all exist (renamed into place whole) but that a killed run did not list yet.
  Writes this run's manifest (complete=false) before any shard starts. Used by the local driver and Beam's
  launcher alike."""
  files = text_io.expand_globs(input_files)
  sizes = [fileio.size(f) for f in files]
  if not any(sizes):
    raise ValueError(f"no text in the input files {files} (empty files: {files})")
  shards = plan_shards(files, shard_bytes, sizes)
  outputs = shard_output_files(output_files, len(shards), files_per_shard)
  directory = fileio.dirname(outputs[0][0])
  fileio.makedirs(directory)
  path = manifest.path_for(directory)
  flags = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "tokenizer_backend"}
  flags.update(shard_size=int(shard_bytes), files_per_shard=int(files_per_shard),
               output_file=[relative(f, directory) for f in output_files])
  with concurrent.futures.ThreadPoolExecutor(16) as pool:   # object stores: one round trip each, overlapped
    fingerprints = list(pool.map(manifest.input_fingerprint, files, sizes))
  data = manifest.new(flags, manifest.vocab_sha256(vocab_file), fingerprints, len(shards))
  with manifest.locked(directory):   # a concurrent run into this directory claims its manifest after us
    old = manifest.load(path)
    if old is not None and manifest.is_other_run(old, data):
      # Google's one invocation per input shard into one directory: same flags and vocab, own manifest.
      manifest.check_compatible(path, old, data, same_outputs=False)
      path = manifest.path_for(directory, output_files[0])
      old = manifest.load(path)
    finished: Dict[int, Dict] = {}
    if old is not None:
      manifest.check_compatible(path, old, data)
      finished = manifest.finished_shards(path, old)
      for shard in shards:                  # written whole by a run killed before it updated the manifest
        names = outputs[shard.index]
        if shard.index not in finished and all(file_bytes(f) >= 0 for f in names):
          finished[shard.index] = {"index": shard.index, "pieces": shard.to_json(),
                                   "files": [relative(f, directory) for f in names],
                                   "records": [manifest.count_tfrecords(f) for f in names],
                                   "bytes": [file_bytes(f) for f in names], "documents": None,
                                   "instances": None, "skipped": ""}
      data["shards"] = list(finished.values())
    manifest.save(path, data, merge=False)
  return RunPlan(files, shards, outputs, directory, path, data, finished)
