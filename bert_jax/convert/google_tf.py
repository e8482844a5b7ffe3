"""Import Google's original TF1 BERT checkpoints (bert_model.ckpt + bert_config.json + vocab.txt), and
google-research/albert's (model.ckpt-* + albert_config.json; bert/encoder/transformer/group_G/inner_group_0/...,
mapped by bert_jax.convert.hf_albert's table, with one group shared by all layers or one group per layer).

TensorFlow is imported inside `read_tf_checkpoint` only, so the rest of bert_jax.convert works without it.

    python -m bert_jax.convert import-tf --checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
        --output=DIR            # bert_config.json and vocab.txt are taken from the checkpoint's folder
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
from typing import Dict, Optional

import numpy as np

from bert_jax import lean_imports
from bert_jax.convert import hf, hf_albert, mapping
from bert_jax.convert import spm_model as spm_model_lib
from bert_jax.pretrained import params_dir
from bert_jax.models.config import BertConfig

# Variables that are not model weights: Adam slots of Google's AdamWeightDecayOptimizer, the step counter,
# and the loss-scaling / LAMB bookkeeping of NVIDIA's and TF2-era variants of the same checkpoints.
_IGNORABLE = re.compile(r"(/adam_[mv]$|/lamb_[mv]$|/Momentum$|^global_step$|^good_steps$|^bad_steps$|"
                        r"^loss_scale$|^current_loss_scale$|^_CHECKPOINTABLE_OBJECT_GRAPH$)")


def is_ignorable(name: str) -> bool:
  return bool(_IGNORABLE.search(name))


def _checkpoint_prefix(path: str) -> str:
  """A checkpoint prefix from a prefix or a folder (Google's zips: folder/bert_model.ckpt.{index,data-*})."""
  if os.path.isdir(path):
    indexes = sorted(f[:-len(".index")] for f in os.listdir(path) if f.endswith(".index"))
    if "bert_model.ckpt" in indexes:
      return os.path.join(path, "bert_model.ckpt")
    if len(indexes) == 1:
      return os.path.join(path, indexes[0])
    raise FileNotFoundError(f"{path}: {'no' if not indexes else 'several'} TF checkpoints "
                            f"({indexes}); pass the checkpoint prefix, e.g. {path}/bert_model.ckpt")
  # The prefix, or one of its files (bert_model.ckpt.index, .meta, .data-00000-of-00001), as users pass them.
  path = re.sub(r"\.(index|meta|data-\d+-of-\d+)$", "", path)
  if not os.path.exists(path + ".index"):
    raise FileNotFoundError(f"TF checkpoint not found: {path} (expected {path}.index and {path}.data-*)")
  return path


def read_tf_checkpoint(path: str) -> Dict[str, np.ndarray]:
  """{variable name: array} of a TF checkpoint (prefix, e.g. .../bert_model.ckpt, or its folder)."""
  tf = lean_imports.tensorflow()  # lazy: the only TensorFlow use in bert_jax.convert

  prefix = _checkpoint_prefix(path)
  with unreadable_as_conversion_error(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@contextlib.contextmanager
def unreadable_as_conversion_error(prefix: str):
  """TensorFlow's errors on a torn or foreign checkpoint (OpError 'file is too short to be an sstable',
  IndexError 'Read less bytes than requested', ...) as one ConversionError naming the checkpoint."""
  try:
    yield
  except mapping.ConversionError:
    raise
  except Exception as e:   # noqa: BLE001 - TensorFlow raises several unrelated types here
    first = (str(e).strip().splitlines() or [""])[0][:200]
    raise mapping.ConversionError(
        f"{prefix}: not a readable TF checkpoint ({type(e).__name__}: {first}); its .index and .data-* files "
        "must be complete and from the same save (re-download or re-extract them)") from e


def _first_existing(folder: str, names) -> str:
  """folder/name of the first of `names` there, else of the first (the error names that one)."""
  return next((os.path.join(folder, n) for n in names if os.path.exists(os.path.join(folder, n))),
              os.path.join(folder, names[0]))


def _albert_config(config_file: str, report: mapping.ConversionReport):
  """google-research/albert's albert_config.json (no model_type; num_hidden_groups, inner_group_num) as the
  model's config and the layout that reads it, as its Hugging Face twin reads: its modeling.py's gelu is the
  tanh approximation (transformers' gelu_new, what the Hugging Face ALBERT configs say)."""
  d = dict(hf.read_config_json(config_file))
  d.setdefault("model_type", "albert")
  if "embedding_size" not in d:
    raise mapping.ConversionError(f"{config_file}: no embedding_size; a google-research/albert checkpoint needs "
                                  "its albert_config.json (pass --config=PATH)")
  if d.get("hidden_act", "gelu") == "gelu":
    d["hidden_act"] = "gelu_new"
  config = hf_albert.hf_config_to_albert(d, config_file)
  return config, hf_albert.albert_layout(d, report)


def import_tf_checkpoint(checkpoint: str, output: Optional[str] = None, config_file: Optional[str] = None,
                         vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
                         seed: int = 0, variables: Optional[Dict[str, np.ndarray]] = None):
  """Converts a Google TF1 BERT (or google-research/albert) checkpoint; writes `output` (a params directory,
  bert_jax.pretrained.params_dir) when given.

  Returns (config, params, report). `config_file` and `vocab_file` default to bert_config.json (or ALBERT's
  albert_config.json) and vocab.txt (or vocab_chinese.txt) next to the checkpoint; without either, the folder's
  SentencePiece model (the English ALBERTs' 30k-clean.model; also a `vocab_file` ending in .model, or a .vocab
  with its .model beside it) becomes vocab.txt + tokenizer.json (bert_jax.convert.spm_model), reported. `variables` may pass an
  already-read {name: array} dict (tests).
  """
  if variables is None:
    checkpoint = _checkpoint_prefix(checkpoint)
  folder = os.path.dirname(os.path.abspath(checkpoint)) if not os.path.isdir(checkpoint) else checkpoint
  # google-research/albert's zips hold albert_config.json (and, the Chinese ones, vocab_chinese.txt).
  config_file = config_file or _first_existing(folder, ("bert_config.json", "albert_config.json"))
  spm_model = None
  if vocab_file is None:
    vocab_file = _first_existing(folder, ("vocab.txt", "vocab_chinese.txt"))
    if not os.path.exists(vocab_file):
      # The English ALBERTs' zips hold 30k-clean.model (SentencePiece) + 30k-clean.vocab, no vocab.txt.
      spm_model = spm_model_lib.find_model(folder)
  elif vocab_file.endswith(".model"):
    spm_model = vocab_file
  elif vocab_file.endswith(".vocab") and os.path.isfile(vocab_file[:-len(".vocab")] + ".model"):
    spm_model = vocab_file[:-len(".vocab")] + ".model"   # "piece<TAB>score" lines: the model beside it segments
  for what, p, flag in (("model config", config_file, "--config"), ("vocab", spm_model or vocab_file, "--vocab")):
    if not os.path.exists(p):
      raise FileNotFoundError(f"{what} not found: {p} (Google's zips hold it next to bert_model.ckpt; pass "
                              f"{flag}=PATH)")
  report = mapping.ConversionReport(source=checkpoint, fmt="google")
  if spm_model is None:
    return _import_tf(checkpoint, folder, config_file, vocab_file, do_lower_case, seed, variables, output, report)
  # vocab.txt + tokenizer.json of the SentencePiece model, in a temporary folder that save_imported copies
  # from (copy_vocab carries a tokenizer.json beside the vocab with it).
  tmp = tempfile.mkdtemp(prefix="spm_vocab_")
  try:
    lower = True if do_lower_case is None else bool(do_lower_case)   # the English ALBERTs are uncased
    vocab_file, n = spm_model_lib.write_vocab_and_tokenizer(spm_model, tmp, lower)
    report.notes.append(f"tokenizer: SentencePiece model {spm_model} ({n} pieces) written as vocab.txt + "
                        f"tokenizer.json (do_lower_case={lower})")
    return _import_tf(checkpoint, folder, config_file, vocab_file, lower, seed, variables, output, report)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _import_tf(checkpoint, folder, config_file, vocab_file, do_lower_case, seed, variables, output, report):
  if variables is None:
    variables = read_tf_checkpoint(checkpoint)
  if any(n.startswith("module/") for n in variables):   # ALBERT's TF-Hub modules keep their variables there
    variables = {n[len("module/"):] if n.startswith("module/") else n: v for n, v in variables.items()}
    report.notes.append("variables under module/ (a TF-Hub export) read without that prefix")
  albert = any("/transformer/group_" in n for n in variables)
  if albert:
    config, layout = _albert_config(config_file, report)
    report.notes.append("google-research/albert checkpoint (bert/encoder/transformer/group_*): its 'gelu' is "
                        f"the tanh approximation, hidden_act={config.hidden_act!r}")
  else:
    config, layout = BertConfig.from_google_json(config_file), mapping.BERT
    config = config.replace(hidden_act=mapping.check_hidden_act(config.hidden_act, config_file))
  mapping.check_vocab_size(vocab_file, params_dir.count_vocab_lines(vocab_file), config, config_file, report)
  params = mapping.assign_params(variables, "google", config, report, ignorable=is_ignorable, seed=seed,
                                 layout=layout)
  do_lower_case = mapping.resolve_casing(do_lower_case, report, functools.partial(
      params_dir.guess_do_lower_case_why, vocab_file, hint=os.path.basename(folder)))
  if output:
    mapping.save_imported(output, config, params, vocab_file, checkpoint, "google_tf", do_lower_case, report)
  return config, params, report
