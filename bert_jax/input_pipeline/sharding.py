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
Beam's launcher) and costs nothing on a 16 GB file. The shard size is planned from the corpus alone
(`auto_shard_bytes`: 64 shards of 4 MiB to 256 MiB) unless --shard_size gives it; `plan_corpus` makes the
shards fewer when --num_output_shards asks for fewer files. `plan_run` adds the output names and what an
earlier run of the same output prefix finished (its manifest).

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

DEFAULT_SHARD_BYTES = 256 << 20   # the most per shard: ~64M tokens of English, ~1.5 GB peak per worker at length 128
MIN_SHARD_BYTES = 4 << 20         # the least per shard when planned from the corpus: ~10k documents to pair
TARGET_SHARDS = 64                # shards a corpus is cut into when it allows: work for every core of a large VM
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
                         open_fn=fileio.open_file, utf8: text_io.Utf8Rule = text_io.Utf8Rule()
                         ) -> List[List[str]]:
  """The documents of a shard (text_io's rules: lines that are not UTF-8 refused above 1% of a piece, or
  skipped and counted under `utf8.allow`; empty files counted). `open_fn(path, mode)` opens a file
  (fileio.open_file here; Beam's FileSystems on Beam workers)."""
  stats = stats if stats is not None else text_io.ReadStats()
  documents: List[List[str]] = []
  for path, start, end in shard.pieces:
    raw = read_range(path, start, end, open_fn)
    documents.extend(text_io.parse_documents(raw, path, stats, whole_file=start == 0, utf8=utf8,
                                             where=f" of bytes {start:,}-{end:,}"))
  stats.documents = len(documents)
  return documents


# ---- a run: its shards, their output files, and what an earlier run into the same prefix finished ------------
def auto_shard_bytes(total_bytes: int) -> int:
  """The shard size planned from the corpus alone (never from the number of workers, so the records are the
  same bytes for any): TARGET_SHARDS shards while each keeps at least MIN_SHARD_BYTES, never more than
  DEFAULT_SHARD_BYTES. 90 MB -> 4 MiB (24 shards); 1 GB -> 16 MiB (64); 16 GB -> 256 MiB (64); 3 MB -> 1."""
  return int(min(DEFAULT_SHARD_BYTES, max(MIN_SHARD_BYTES, -(-int(total_bytes) // TARGET_SHARDS))))


def plan_corpus(files: Sequence[str], sizes: Sequence[int], shard_bytes: Optional[int] = None,
                num_files: Optional[int] = None) -> Tuple[List[Shard], int]:
  """(shards, the shard size they were cut at). `shard_bytes` None: `auto_shard_bytes` of the corpus.
  `num_files` (--num_output_shards, or the number of comma-separated --output_file names): the files written
  in total; each shard writes at least one, so when the corpus plan has more shards than that, the shards
  grow until they fit, up to DEFAULT_SHARD_BYTES (UserError beyond it, or when --shard_size was given)."""
  total = int(sum(sizes))
  size = int(shard_bytes) if shard_bytes is not None else auto_shard_bytes(total)
  shards = plan_shards(files, size, sizes)
  if num_files is None or len(shards) <= num_files:
    return shards, size
  if shard_bytes is not None:
    raise UserError(f"--num_output_shards={num_files} is fewer than the {len(shards)} shards of --shard_size="
                    f"{_mb(size)} (each shard writes its own files): give --num_output_shards={len(shards)} or "
                    "more, a larger --shard_size, or leave --shard_size out")
  size = max(size, -(-total // num_files))
  while len(shards) > num_files:      # grouping whole files may need a little more than total / num_files
    shards = plan_shards(files, size, sizes)
    if len(shards) > num_files:
      size += max(size // 16, 1)
  if size > DEFAULT_SHARD_BYTES:
    need = len(plan_shards(files, DEFAULT_SHARD_BYTES, sizes))
    raise UserError(f"--num_output_shards={num_files} would make shards of {_mb(size)}, above the "
                    f"{_mb(DEFAULT_SHARD_BYTES)} a worker holds in memory: give --num_output_shards={need} or "
                    f"more, or --shard_size={-(-size // 2**20)}M to allow larger shards")
  return shards, size


def _mb(n: int) -> str:
  """A size as --shard_size takes it: 4M, 1.5M, 2K, 100."""
  for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
    if n >= scale:
      return f"{n / scale:,.{0 if n % scale == 0 else 1}f}{unit}"
  return str(n)


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


def shard_output_files(output_files: Sequence[str], num_shards: int, num_files: Optional[int] = None
                       ) -> List[List[str]]:
  """The output files of each shard. The files of the run: the comma-separated names given, else one name
  `root.ext` as `root-{i:05d}-of-{M:05d}.ext` for M = `num_files` (--num_output_shards) or, when it is None,
  one file per shard (a one-shard run without it keeps the name as given). They are shared out over the
  shards in order, as evenly as they go (equal when the shards divide M); a shard's records go round-robin
  over its files, Google's rule. So a glob `root-*` finds them all, in order."""
  output_files = list(output_files)
  if len(output_files) > 1:
    names = output_files
  elif num_files is None:
    names = output_files if num_shards == 1 else output_file_list(output_files[0], num_shards)
  else:
    names = output_file_list(output_files[0], num_files)
  if num_shards > len(names):
    raise UserError(f"--output_file lists {len(names)} files, but the input makes {num_shards} shards: give "
                    "one name (shard s of N is written to NAME-s-of-N) or at least as many names")
  per, extra = divmod(len(names), num_shards)
  out, k = [], 0
  for s in range(num_shards):
    n = per + (s < extra)
    out.append(names[k:k + n])
    k += n
  return out


def relative(path: str, directory: str) -> str:
  """How a manifest names a file: its base name when it is in `directory`, else its path."""
  return fileio.basename(path) if fileio.dirname(path) == directory else path


def file_bytes(path: str) -> int:
  """Bytes of an output file, -1 when it is not there."""
  n = manifest.file_size(path)
  return -1 if n is None else n


@dataclasses.dataclass
class RunPlan:
  """The shards of a run, their output files, and what an earlier run into the same prefix finished."""
  files: List[str]
  shards: List[Shard]
  outputs: List[List[str]]             # per shard
  directory: str
  manifest_path: str
  manifest: Dict                       # this run's manifest, holding the finished shards' entries
  finished: Dict[int, Dict]            # shard index -> its manifest entry
  shard_bytes: int = DEFAULT_SHARD_BYTES   # the size the shards were cut at (planned from the corpus or given)

  def todo(self):
    return [(s, self.outputs[s.index]) for s in self.shards if s.index not in self.finished]

  def describe(self) -> str:
    """"24 planned (<= 4M each, from 90.0MB of text), 24 file(s)": the shard plan in words (the summary)."""
    total = sum(s.num_bytes for s in self.shards)
    files = sum(len(o) for o in self.outputs)
    return (f"{len(self.shards)} planned (<= {_mb(self.shard_bytes)} each, from {_mb(total)}B of text), "
            f"{files} file(s)")


# Flags that shape the plan, not a record: compared through the plan's shards (`_check_same_plan`), so a
# record set made before the shard size was planned from the corpus (flags shard_size=256M, files_per_shard)
# still resumes when its shards are this run's.
_PLAN_FLAGS = ("shard_size", "files_per_shard", "num_output_shards")


def _check_same_plan(path: str, old: Dict, shards: Sequence[Shard], outputs, directory: str) -> None:
  """UserError when the run that wrote `path` planned other shards or file names than this one."""
  old_plan = {**{k: v for k, v in old.get("flags", {}).items() if k in _PLAN_FLAGS}, **old.get("plan", {})}
  how = " ".join(f"--{k}={_mb(v) if k == 'shard_size' else v}" for k, v in sorted(old_plan.items())
                 if k != "files_per_shard" and v is not None)
  problem = None
  if int(old.get("num_shards", len(shards))) != len(shards):
    problem = f"{old.get('num_shards')} shards, this run plans {len(shards)}"
  else:
    for entry in old.get("shards", []):
      i = int(entry["index"])
      if (entry.get("pieces") != shards[i].to_json()
          or list(entry["files"]) != [relative(f, directory) for f in outputs[i]]):
        problem = f"shard {i} as {entry.get('pieces')} into {entry['files']}, this run plans it otherwise"
        break
  if problem:
    raise UserError(f"{path} was planned with {problem}: rerun with that run's {how or 'flags'} to resume it, "
                    "or write to another --output_file prefix")


def plan_run(input_files, output_files: Sequence[str], vocab_file: str, cfg,
             shard_bytes: Optional[int] = None, num_files: Optional[int] = None) -> RunPlan:
  """Shards the input (`plan_corpus`), names the outputs and reads the manifest of the output prefix (the
  first --output_file: `NAME.manifest.json` beside it, or the `manifest.json` of its directory when a run of
  an earlier version wrote these names there). A run with other flags, inputs or vocab into the same prefix
  is refused (UserError), and so is one whose file names another prefix's manifest lists; the shards it lists
  whose files are intact are finished, and so are shards whose files all exist (renamed into place whole)
  but that a killed run did not list yet. Writes this run's manifest (complete=false) before any shard
  starts. Used by the local driver and Beam's launcher alike."""
  files = text_io.expand_globs(input_files)
  sizes = [fileio.size(f) for f in files]
  if not any(sizes):
    raise ValueError(f"no text in the input files {files} (empty files: {files})")
  rule = text_io.Utf8Rule(allow=bool(getattr(cfg, "allow_invalid_utf8", False)))
  with concurrent.futures.ThreadPoolExecutor(16) as pool:   # a GBK corpus stops here, before any worker starts
    list(pool.map(lambda path: text_io.check_utf8_head(path, rule), files[:text_io.SNIFFED_FILES]))
  if len(output_files) > 1:
    num_files = len(output_files)
  shards, size = plan_corpus(files, sizes, shard_bytes, num_files)
  outputs = shard_output_files(output_files, len(shards), num_files)
  directory = fileio.dirname(outputs[0][0])
  fileio.makedirs(directory)
  path = manifest.path_for(directory, output_files[0])
  flags = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
           if f.name not in ("tokenizer_backend", "allow_invalid_utf8")}
  flags.update(output_file=[relative(f, directory) for f in output_files])
  with concurrent.futures.ThreadPoolExecutor(16) as pool:   # object stores: one round trip each, overlapped
    fingerprints = list(pool.map(manifest.input_fingerprint, files, sizes))
  data = manifest.new(flags, manifest.vocab_sha256(vocab_file), fingerprints, len(shards))
  data["plan"] = {"shard_size": int(size), "num_output_shards": num_files}
  with manifest.locked(directory):   # a concurrent run into this directory claims its manifest after us
    old = manifest.load(path)
    if old is None:                  # records of an earlier version: one manifest.json per directory
      legacy = manifest.load(manifest.path_for(directory))
      if legacy is not None and not manifest.is_other_run(legacy, data):
        path, old = manifest.path_for(directory), legacy
    manifest.check_other_prefixes(directory, path, data)
    finished: Dict[int, Dict] = {}
    if old is not None:
      manifest.check_compatible(path, old, data, ignore=_PLAN_FLAGS)
      _check_same_plan(path, old, shards, outputs, directory)
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
  return RunPlan(files, shards, outputs, directory, path, data, finished, size)
