"""File access for every package (a leaf of the floor: models/ and evaluation/ use it too): local paths through
Python, URL paths (gs://, ram://, ...) through `tf.io.gfile`, and the one atomic writer of bert_jax.

    from bert_jax import fileio
    fileio.glob("gs://bucket/corpus/*.txt"); fileio.exists(path); fileio.isdir(path); fileio.makedirs(d)
    with fileio.open_file(path, "rb") as f: ...

A path is "remote" when it contains "://". TensorFlow is imported only for such paths, so local use (and
`tokenization`, which imports this module) works without TensorFlow.

This is also the one path layer of a work directory (pre-training and fine-tuning): every file a run depends
on (configs, model_config.json, the vocab copy, params dirs, metrics, plots, the lock, scorer outputs, exported
Hugging Face folders, TFRecord shards) goes through `atomic_path` / `write_bytes_atomic` / `write_text_atomic` /
`write_json_atomic` (temp file, fsync, rename: a reader sees the old file or the new one, never half of one)
and `rename` / `remove` / `rmtree` / `listdir` / `join` / `abspath`, so a `gs://bucket/run` work dir takes
the same code path as a local one. Orbax checkpoints go through Orbax's own
`etils.epath` (which handles gs:// itself); on object stores a rename is a copy + delete, and an object
appears whole or not at all, which is what the temp + rename gives locally.

    fileio.write_text_atomic(fileio.join(workdir, "config.json"), text)
    fileio.rename(src, dst, overwrite=True); fileio.rmtree(d); fileio.listdir(d); fileio.mtime(path)
"""

from __future__ import annotations

import contextlib
import glob as _glob
import json
import os
import shutil
import time
from typing import IO, Iterator, List, Optional

from bert_jax import lean_imports
from bert_jax.errors import UserError


def is_remote(path: str) -> bool:
  """True for URL-style paths (gs://..., ram://..., s3://...) that need `tf.io.gfile`."""
  return "://" in str(path)


def _gfile():
  try:
    tf = lean_imports.tensorflow()  # lazy: TensorFlow only for gs:// paths
  except ImportError as e:
    raise ImportError("paths with a URL scheme (gs://...) are read through tf.io.gfile: install "
                      "tensorflow") from e
  return tf.io.gfile


def is_storage_error(e: BaseException) -> bool:
  """An error of the file system itself: an OSError (local) or one of TensorFlow's `tf.errors.OpError`s that
  `tf.io.gfile` raises for URL paths (unreachable host, no permission, no bucket, ...)."""
  return isinstance(e, OSError) or any(
      c.__module__.startswith("tensorflow") and c.__name__ == "OpError" for c in type(e).__mro__)


@contextlib.contextmanager
def storage_errors_as_user_errors(what: str) -> Iterator[None]:
  """Turns a file-system error inside the block into a UserError "{what}: {reason}" (one `error:` line from
  the entry points), e.g. a gs:// path on a machine that cannot reach GCS; other exceptions pass."""
  try:
    yield
  except UserError:
    raise
  except Exception as e:  # noqa: BLE001 - only storage errors are converted, the rest re-raised
    if not is_storage_error(e):
      raise
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    raise UserError(f"{what}: {' '.join(lines) or type(e).__name__}") from e


def glob(pattern: str) -> List[str]:
  """Sorted paths matching `pattern` (files and directories; `~` expanded for local paths)."""
  if is_remote(pattern):
    return sorted(_gfile().glob(pattern))
  return sorted(_glob.glob(os.path.expanduser(pattern)))


def exists(path: str) -> bool:
  return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
  return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
  """True for an existing path that is not a directory."""
  if is_remote(path):
    gf = _gfile()
    return gf.exists(path) and not gf.isdir(path)
  return os.path.isfile(path)


def makedirs(path: str) -> None:
  """Creates `path` and its parents if missing (no-op for "")."""
  if not path:
    return
  if is_remote(path):
    _gfile().makedirs(path)
  else:
    os.makedirs(path, exist_ok=True)


def dirname(path: str) -> str:
  """Parent directory; for local paths of the absolute path (so "x.txt" -> the cwd)."""
  if is_remote(path):
    return path.rstrip("/").rsplit("/", 1)[0]
  return os.path.dirname(os.path.abspath(path))


def open_file(path: str, mode: str = "r", encoding: str = "utf-8") -> IO:
  """`open(path, mode)` for local paths, `tf.io.gfile.GFile(path, mode)` for URL paths.

  Text modes use UTF-8 locally; GFile's text modes are UTF-8 as well.
  """
  if is_remote(path):
    return _gfile().GFile(path, mode)
  if "b" in mode:
    return open(path, mode)  # pylint: disable=unspecified-encoding
  return open(path, mode, encoding=encoding)


# ---- the work-directory path layer -------------------------------------------------------------------------
def join(*parts: str) -> str:
  """os.path.join that keeps URL schemes intact ("gs://b" + "x" -> "gs://b/x")."""
  if parts and is_remote(parts[0]):
    return "/".join([parts[0].rstrip("/")] + [p.strip("/") for p in parts[1:] if p])
  return os.path.join(*parts)


def abspath(path: str) -> str:
  """Absolute local path (`~` expanded); URL paths unchanged (os.path.abspath would turn gs://b into
  ./gs:/b)."""
  if is_remote(path):
    return path.rstrip("/")
  return os.path.abspath(os.path.expanduser(path))


def basename(path: str) -> str:
  return path.rstrip("/").rsplit("/", 1)[-1] if is_remote(path) else os.path.basename(path)


def listdir(path: str) -> List[str]:
  """Entry names in `path` (no trailing slashes), [] when it does not exist."""
  if not exists(path):
    return []
  if is_remote(path):
    return sorted(n.rstrip("/") for n in _gfile().listdir(path))
  return sorted(os.listdir(path))


def temp_name(path: str) -> str:
  """A fresh name beside `path` for writing it before `commit` (process id + nanoseconds: two writers of one
  file never share a temp file)."""
  return f"{path}.tmp-{os.getpid()}-{time.time_ns()}"


def commit(tmp: str, path: str) -> None:
  """Moves the finished local file `tmp` onto `path`: fsync its data, rename, fsync the directory, so a reader
  (or a crash at any moment) sees the old file or the new one, never half of one."""
  with open(tmp, "rb") as f:
    os.fsync(f.fileno())
  os.replace(tmp, path)
  _fsync_dir(os.path.dirname(os.path.abspath(path)))


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
  """The one atomic writer of bert_jax. Yields a temp path beside the local `path` for any writer (open(),
  safetensors, json.dump) to fill; when the block ends without an exception the file is committed onto `path`,
  and the temp file is removed either way.

      with fileio.atomic_path(out) as tmp:
        safetensors.numpy.save_file(arrays, tmp)
  """
  tmp = temp_name(path)
  try:
    yield tmp
    commit(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def write_bytes_atomic(path: str, data: bytes) -> None:
  """`data` to `path` through `atomic_path` (temp file, fsync, rename). URL paths: GFile write +
  rename(overwrite=True): an object store shows an object whole or not at all."""
  if is_remote(path):
    tmp, gf = temp_name(path), _gfile()
    with gf.GFile(tmp, "wb") as f:
      f.write(data)
    gf.rename(tmp, path, overwrite=True)
    return
  with atomic_path(path) as tmp:
    with open(tmp, "wb") as f:
      f.write(data)


def write_text_atomic(path: str, text: str) -> str:
  """`text` as UTF-8 through write_bytes_atomic; returns `path`."""
  write_bytes_atomic(path, text.encode("utf-8"))
  return path


def write_json_atomic(path: str, obj) -> None:
  """`obj` as indented, key-sorted JSON (non-ASCII kept, unknown types as str) through write_bytes_atomic."""
  write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n")


def _fsync_dir(directory: str) -> None:
  """Makes a rename in `directory` durable (POSIX); a no-op where directories cannot be opened."""
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def read_bytes(path: str) -> bytes:
  with open_file(path, "rb") as f:
    return f.read()


def read_text(path: str) -> str:
  return read_bytes(path).decode("utf-8")


def rename(src: str, dst: str, overwrite: bool = False) -> None:
  """Renames a file or directory (local: os.rename / os.replace; URL paths: tf.io.gfile.rename)."""
  if is_remote(src):
    _gfile().rename(src, dst, overwrite=overwrite)
  elif overwrite:
    os.replace(src, dst)
  else:
    if os.path.exists(dst):
      raise FileExistsError(dst)
    os.rename(src, dst)


def _remote_entry_exists(path: str) -> bool:
  """Whether `path` itself is an entry of its parent (object stores, and ram://, answer exists("d/params")
  with True when only "d/params.msgpack" exists: a prefix match)."""
  return basename(path) in listdir(dirname(path))


def remove(path: str) -> None:
  """Deletes a file (no error when it is already gone)."""
  if is_remote(path):
    if _remote_entry_exists(path):
      _gfile().remove(path)
  elif os.path.lexists(path):
    os.remove(path)


def rmtree(path: str) -> None:
  """Deletes a directory tree (no error when it is already gone)."""
  if is_remote(path):
    if _remote_entry_exists(path):
      _gfile().rmtree(path)
  elif os.path.exists(path):
    shutil.rmtree(path)


def copy(src: str, dst: str) -> None:
  """Copies a file atomically (the destination appears whole)."""
  write_bytes_atomic(dst, read_bytes(src))


def size(path: str) -> int:
  """Bytes of `path` (OSError, or TensorFlow's NotFoundError for a remote path, when it is not there)."""
  return int(_gfile().stat(path).length) if is_remote(path) else os.path.getsize(path)


def mtime(path: str) -> Optional[float]:
  """Modification time in seconds since the epoch, None when the path does not exist."""
  try:
    if is_remote(path):
      return _gfile().stat(path).mtime_nsec / 1e9
    return os.path.getmtime(path)
  except Exception:  # noqa: BLE001 - OSError, or tf.errors.NotFoundError (not an OSError)
    return None
