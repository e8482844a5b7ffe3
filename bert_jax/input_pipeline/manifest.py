"""The manifest beside a set of pre-training records: what made them, and how many records each file holds.

    out/wiki_128.tfrecord.manifest.json     # --output_file=out/wiki_128.tfrecord: one manifest per output prefix
    {"format": "bert_jax.pretraining_records/1", "tool": "bert_jax.input_pipeline.create_pretraining_data",
     "tool_version": "0.1.0", "vocab_sha256": "...", "flags": {...every flag that changes a record...},
     "plan": {"shard_size": 4194304, "num_output_shards": null},
     "inputs": [["corpus/a.txt", 1048576, 1733300000.5, "9f2c..."], ...], "num_shards": 8, "complete": true, "records": 212345,
     "shards": [{"index": 0, "pieces": [["corpus/a.txt", 0, 4194901]],
                 "files": ["wiki_128-00000-of-00008.tfrecord"], "records": [26511], "bytes": [40215622],
                 "documents": 3120, "instances": 26511}, ...]}

Written by `create_pretraining_data` (atomically, after every finished shard) as `NAME.manifest.json`, NAME
the base name of the run's (first) --output_file, so record sets of several runs share a folder:
`wiki_128.tfrecord` and `wiki_512.tfrecord` (BERT's two phases) each have their own. Record sets of earlier
versions have one `manifest.json` per directory; it is still read (and resumed) for the output names it
lists. Read back by:
  - a rerun with the same --output_file: the shards listed (whose files are still there, at their sizes) are
    skipped, so a killed 4-hour job resumes; a run with other flags, inputs or vocab is refused, naming the
    first difference (`check_compatible`). An input is its path, size, mtime and a hash of its first and last
    64 KiB (`input_fingerprint`), so a file edited in place at the same size is noticed too (only
    a new mtime, with the same size and head/tail bytes, is a warning: a copied or touched corpus resumes).
    A run whose output names another prefix's manifest lists is refused (`check_other_prefixes`);
  - the training input pipeline (`record_counts`): the number of records per file, so a resume at step k
    skips whole files by their counts instead of reading through them.
Nothing in it depends on the number of workers or on timing, so 1 and 2 workers write the same bytes.

Concurrent runs into one local directory: the claim of a manifest (`sharding.plan_run`) and every `save`
hold an exclusive lock on the directory (`locked`: flock on the directory itself, no lock file), and `save`
merges the shards its file already lists (a concurrent run of the same command), so no run loses another's
entries. Object stores (URL paths) have no lock: give concurrent runs of one prefix there one process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from typing import Dict, Iterator, List, Optional, Sequence

try:
  import fcntl
except ImportError:   # not POSIX: no lock
  fcntl = None

from bert_jax import __version__
from bert_jax import input_warnings
from bert_jax.errors import UserError
from bert_jax import fileio

FILENAME = "manifest.json"
FORMAT = "bert_jax.pretraining_records/1"
TOOL = "bert_jax.input_pipeline.create_pretraining_data"


def path_for(output_dir: str, output_name: Optional[str] = None) -> str:
  """`output_dir/NAME.manifest.json` for `output_name` (a run's first --output_file, its base name): the
  manifest of that output prefix; without it `output_dir/manifest.json`, the per-directory manifest of
  record sets written by earlier versions."""
  if output_name:
    return fileio.join(output_dir, f"{fileio.basename(output_name)}.{FILENAME}")
  return fileio.join(output_dir, FILENAME)


def is_manifest(path: str) -> bool:
  """Whether `path` is a manifest this tool writes (manifest.json, NAME.manifest.json)."""
  name = fileio.basename(path)
  return name == FILENAME or name.endswith("." + FILENAME)


def is_other_run(old: Dict, new_manifest: Dict) -> bool:
  """Whether `old` (a manifest in the output directory) was written by a run with other output files than
  `new_manifest`'s, none shared: its --output_file names and the files its shards wrote are all different."""
  new_names = set(new_manifest["flags"].get("output_file", []))
  old_names = set(old.get("flags", {}).get("output_file", []))
  old_files = {f for entry in old.get("shards", []) for f in entry.get("files", [])}
  return bool(new_names) and not (new_names & old_names) and not (new_names & old_files)


def vocab_sha256(vocab_file: str) -> str:
  return hashlib.sha256(fileio.read_bytes(vocab_file)).hexdigest()


def new(flags: Dict, vocab_hash: str, inputs: Sequence[Sequence], num_shards: int) -> Dict:
  return {"format": FORMAT, "tool": TOOL, "tool_version": __version__, "vocab_sha256": vocab_hash,
          "flags": dict(sorted(flags.items())), "inputs": [list(x) for x in inputs], "num_shards": int(num_shards),
          "complete": False, "records": 0, "shards": []}


def load(path: str) -> Optional[Dict]:
  """The manifest at `path`, None when there is none; a UserError naming it when it does not parse."""
  if not fileio.exists(path):
    return None
  try:
    data = json.loads(fileio.read_text(path))
  except ValueError as e:
    raise UserError(f"{path}: not a JSON manifest ({e}); delete it (and the records beside it) to start "
                    "over") from e
  if not isinstance(data, dict) or data.get("format") != FORMAT:
    raise UserError(f"{path}: not a {FORMAT} manifest (format={data.get('format') if isinstance(data, dict) else None!r})")
  return data


_HELD = threading.local()   # directories this thread holds the lock of (`locked` is re-entrant per thread)


@contextlib.contextmanager
def locked(directory: str) -> Iterator[None]:
  """Holds an exclusive lock on the local `directory` (flock on the directory's own descriptor, so it leaves no
  file behind and a killed run's lock goes with its process) for a manifest's read-modify-write. Re-entrant
  within a thread; other threads and processes wait. URL paths and non-POSIX systems: no lock."""
  held = _HELD.__dict__.setdefault("dirs", {})
  key = os.path.abspath(directory or ".") if not fileio.is_remote(directory) else directory
  if fcntl is None or fileio.is_remote(directory) or held.get(key):
    held[key] = held.get(key, 0) + 1
    try:
      yield
    finally:
      held[key] -= 1
    return
  fd = os.open(key, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:   # a file system without flock (some network mounts): unlocked, as before
      pass
    held[key] = 1
    try:
      yield
    finally:
      held[key] = 0
  finally:
    os.close(fd)   # releases the lock


def _same_run(a: Dict, b: Dict) -> bool:
  return all(a.get(k) == b.get(k) for k in ("tool_version", "vocab_sha256", "flags", "inputs", "num_shards"))


def save(path: str, data: Dict, merge: bool = True) -> None:
  """Writes `data` to `path` atomically, under the directory's lock; with `merge`, the shards the file on disk
  lists that `data` lacks (a concurrent run of the same command finished them) are merged into `data` first
  (`sharding.plan_run` rewrites it with merge=False: it has just checked the listed shards' files)."""
  with locked(fileio.dirname(path)):
    old = None
    if merge:
      try:
        old = load(path)
      except UserError:
        old = None
    by_index = {}
    if old is not None and _same_run(old, data):
      by_index.update((int(e["index"]), e) for e in old.get("shards", []))
    by_index.update((int(e["index"]), e) for e in data["shards"])
    data["shards"] = [by_index[i] for i in sorted(by_index)]
    data["complete"] = bool(data.get("complete")) or len(data["shards"]) == data.get("num_shards")
    data["records"] = int(sum(sum(s["records"]) for s in data["shards"]))
    fileio.write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def check_other_prefixes(directory: str, path: str, new_manifest: Dict) -> None:
  """UserError when a manifest in `directory` other than `path` (this run's) lists an output name of this
  run: two prefixes' records would overwrite each other's files."""
  names = set(new_manifest["flags"].get("output_file", []))
  for other in _manifests_of(directory):
    if other == path or not fileio.exists(other):
      continue
    try:
      data = load(other)
    except UserError:
      continue
    if data is not None and not is_other_run(data, new_manifest):
      listed = set(data.get("flags", {}).get("output_file", [])) | {
          f for e in data.get("shards", []) for f in e.get("files", [])}
      raise UserError(f"--output_file={sorted(names & listed)[0]!r} is a file of the records {other} lists: "
                      "give this run another --output_file name")


def check_compatible(path: str, old: Dict, new_manifest: Dict, same_outputs: bool = True,
                     ignore: Sequence[str] = ()) -> None:
  """UserError naming the first field in which this run differs from the one that wrote `path`; with
  `same_outputs=False` only the tool version, the vocab and the flags that change a record are compared, not
  the input or output files. Flags in `ignore` (the plan's: sharding.plan_run compares the shards) are not
  compared."""
  for key in ("tool_version", "vocab_sha256"):
    if old.get(key) != new_manifest[key]:
      raise UserError(f"{path} was written with {key}={old.get(key)!r}, this run has {new_manifest[key]!r}: "
                      f"give this run another --output_file name, or delete {path} and its records to start over")
  old_flags, flags = old.get("flags", {}), new_manifest["flags"]
  for key in sorted(set(old_flags) | set(flags)):
    if key in ignore or (not same_outputs and key == "output_file"):
      continue
    if old_flags.get(key) != flags.get(key):
      raise UserError(f"{path} was written with --{key}={old_flags.get(key)!r}, this run has --{key}="
                      f"{flags.get(key)!r}: rerun with the same flags to resume, or give this run another "
                      f"--output_file name (each name keeps its own manifest)")
  if same_outputs:
    problem = inputs_difference(old.get("inputs", []), new_manifest["inputs"])
    if problem:
      raise UserError(f"{path} was made from other input files: {problem}; rerun with the inputs it was made "
                      f"from to resume, or give this run another --output_file name (or delete "
                      f"{path} and its records to start over)")


HEAD_TAIL_BYTES = 64 * 1024


def input_fingerprint(path: str, size: int) -> List:
  """[path, size, mtime, sha256 of the first and last 64 KiB] of an input file, as `inputs` lists it: a file
  edited in place keeping its size changes its mtime (and its hash unless the edit is in the middle)."""
  h = hashlib.sha256()
  with fileio.open_file(path, "rb") as f:
    h.update(f.read(HEAD_TAIL_BYTES))
    if size > 2 * HEAD_TAIL_BYTES:
      f.seek(size - HEAD_TAIL_BYTES)
    h.update(f.read(HEAD_TAIL_BYTES))
  return [path, int(size), fileio.mtime(path), h.hexdigest()[:16]]


def _when(t) -> str:
  import datetime  # pylint: disable=g-import-not-at-top
  if not isinstance(t, (int, float)):
    return repr(t)
  return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def inputs_difference(old_inputs: Sequence[Sequence], new_inputs: Sequence[Sequence]) -> Optional[str]:
  """None when the two `inputs` lists name the same files unchanged, else the first difference in words.
  Entries of an older manifest ([path, size]) are compared on the fields they have."""
  old_by = {x[0]: list(x) for x in old_inputs}
  new_by = {x[0]: list(x) for x in new_inputs}
  for p in sorted(set(old_by) | set(new_by)):
    a, b = old_by.get(p), new_by.get(p)
    if a is None:
      return f"{p} is an input now, not then"
    if b is None:
      return f"{p} was an input then, not now"
    if a[1] != b[1]:
      return f"{p} was {a[1]:,} bytes, now {b[1]:,}"
    if len(a) > 2 and len(b) > 2 and a[2] != b[2]:
      same = len(a) > 3 and len(b) > 3 and a[3] == b[3]
      if same:
        # Copied or touched (a new machine, `gsutil cp`, a restored backup): same size and head/tail bytes.
        # Refusing would strand a resume on an unchanged corpus; an edit in the middle that kept the size
        # exactly is the rarer case, so it is a warning that says how to rebuild.
        input_warnings.warn_input(
            f"{p}: mtime changed ({_when(a[2])} -> {_when(b[2])}) but its size and first and last 64 KiB "
            "did not; resuming with the shards already written (delete the output directory to rebuild "
            "them if the file's content changed)")
        continue
      return (f"{p} was modified since (mtime {_when(a[2])} -> {_when(b[2])}, same size, its content "
              "differs)")
    if len(a) > 3 and len(b) > 3 and a[3] != b[3]:
      return f"{p} changed since (same size and mtime, its first and last 64 KiB differ)"
  if [x[0] for x in old_inputs] != [x[0] for x in new_inputs]:
    return "the same files in another order"
  return None


def finished_shards(path: str, data: Dict) -> Dict[int, Dict]:
  """Shards of the manifest whose files are all present at their recorded sizes (a missing or resized file
  makes its shard run again)."""
  out = {}
  directory = fileio.dirname(path)
  for entry in data.get("shards", []):
    files = [fileio.join(directory, f) for f in entry["files"]]
    if all(file_size(f) == n for f, n in zip(files, entry["bytes"])):
      out[int(entry["index"])] = entry
  return out


def file_size(path: str) -> Optional[int]:
  """Bytes of `path`, None when it is not there."""
  try:
    return fileio.size(path)
  except Exception:  # noqa: BLE001 - OSError, or tf.errors.NotFoundError: the file is not there
    return None


def count_tfrecords(path: str) -> int:
  """Records in an uncompressed TFRecord file, from the 12-byte headers alone (seeks past each record)."""
  n = 0
  with fileio.open_file(path, "rb") as f:
    while True:
      header = f.read(12)
      if not header:
        return n
      if len(header) < 12:
        raise ValueError(f"{path}: truncated TFRecord header after {n} records")
      length = int.from_bytes(header[:8], "little")
      f.seek(length + 4, 1)
      n += 1


def _manifests_of(directory: str) -> List[str]:
  return [path_for(directory)] + sorted(fileio.glob(fileio.join(directory, f"*.{FILENAME}")))


def _loaded_manifests(directory: str):
  """(path, contents) of each readable manifest in `directory` (every prefix's, and an earlier version's
  manifest.json); one that cannot be read is skipped: its files are then counted by reading them."""
  for path in _manifests_of(directory):
    try:
      data = load(path)
    except UserError:
      data = None
    if data:
      yield path, data


def record_sets(files: Sequence[str]) -> Dict[str, Dict]:
  """{manifest path: its flags} of the manifests that list any of `files` (record files; those no manifest
  lists are left out): a glob over a folder holding two record sets (wiki_128, wiki_512) names both."""
  out: Dict[str, Dict] = {}
  by_dir: Dict[str, Dict[str, str]] = {}
  flags: Dict[str, Dict] = {}
  for f in files:
    d = fileio.dirname(f)
    if d not in by_dir:
      by_dir[d] = {}
      for path, data in _loaded_manifests(d):
        flags[path] = data.get("flags", {})
        for entry in data.get("shards", []):
          for name in entry["files"]:
            by_dir[d].setdefault(name, path)
    path = by_dir[d].get(fileio.basename(f))
    if path is not None:
      out[path] = flags[path]
  return out


def record_counts(files: Sequence[str]) -> Optional[List[int]]:
  """Records per file from the manifests beside `files` (each prefix's NAME.manifest.json, and the
  manifest.json of earlier versions), or None when any file is not listed in a complete manifest of its directory
  (then the reader counts by reading)."""
  by_dir: Dict[str, Dict[str, int]] = {}
  out = []
  for f in files:
    d = fileio.dirname(f)
    if d not in by_dir:
      by_dir[d] = {}
      for _, data in _loaded_manifests(d):
        if data.get("complete"):
          for entry in data["shards"]:
            for name, n in zip(entry["files"], entry["records"]):
              by_dir[d][name] = int(n)
    n = by_dir[d].get(fileio.basename(f))
    if n is None:
      return None
    out.append(n)
  return out
