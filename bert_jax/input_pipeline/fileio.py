"""File access for the input pipeline: local paths through Python, URL paths (gs://, ram://, ...) through
`tf.io.gfile`.

    from bert_jax.input_pipeline import fileio
    fileio.glob("gs://bucket/corpus/*.txt"); fileio.exists(path); fileio.isdir(path); fileio.makedirs(d)
    with fileio.open_file(path, "rb") as f: ...

A path is "remote" when it contains "://". TensorFlow is imported only for such paths, so local use (and
`tokenization`, which imports this module) works without TensorFlow.
"""

from __future__ import annotations

import glob as _glob
import os
from typing import IO, List


def is_remote(path: str) -> bool:
  """True for URL-style paths (gs://..., ram://..., s3://...) that need `tf.io.gfile`."""
  return "://" in str(path)


def _gfile():
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("paths with a URL scheme (gs://...) are read through tf.io.gfile: install "
                      "tensorflow") from e
  return tf.io.gfile


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
