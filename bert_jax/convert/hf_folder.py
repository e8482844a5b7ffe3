"""The files of a Hugging Face folder (weights, config.json, the tokenizer's files), written atomically; every
family's exporter (hf.py, hf_heads.py, hf_electra.py) writes through write_folder."""

from __future__ import annotations

import json
import os
from typing import Dict, Optional

import numpy as np
from safetensors.numpy import save_file

from bert_jax import fileio
from bert_jax.input_pipeline import tokenization
from bert_jax.pretrained import params_dir


def write_folder(output: str, arrays: Dict[str, np.ndarray], config_dict: dict, vocab_file: str,
                 do_lower_case: Optional[bool], model_max_length: int,
                 tokenizer_class: str = "BertTokenizer", sentencepiece_class: str = "AlbertTokenizer") -> None:
  """model.safetensors, config.json, vocab.txt and tokenizer_config.json of a Hugging Face folder; with a
  SentencePiece tokenizer.json beside the vocab (tokenization.sentencepiece_json: the English ALBERTs), that
  file too, and `sentencepiece_class` with SentencePiece's <unk>/<pad> as the tokenizer class."""
  # Every file through a temp name, fsync and rename (a crash leaves the old file or the new one, never half).
  os.makedirs(output, exist_ok=True)
  weights = os.path.join(output, "model.safetensors")
  with fileio.atomic_path(weights) as tmp:
    save_file(arrays, tmp, metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)     # safetensors creates the file 0600; make it like the other files
  fileio.write_bytes_atomic(os.path.join(output, "config.json"),
                                (json.dumps(config_dict, indent=2) + "\n").encode("utf-8"))
  bpe = tokenization.bpe_json(vocab_file)   # a tokenizer.json (an imported ModernBERT's): it tokenizes
  if not tokenization.is_tokenizer_json(vocab_file):
    with open(vocab_file, "rb") as f:
      fileio.write_bytes_atomic(os.path.join(output, "vocab.txt"), f.read())
  if do_lower_case is None:
    do_lower_case = False if bpe else params_dir.guess_do_lower_case(vocab_file)
  tc = {"tokenizer_class": tokenizer_class, "do_lower_case": bool(do_lower_case),
        "model_max_length": model_max_length}
  spm = tokenization.sentencepiece_json(vocab_file)
  tok_json = os.path.join(output, tokenization.TOKENIZER_JSON)
  if bpe:
    with open(bpe, "rb") as f:
      fileio.write_bytes_atomic(tok_json, f.read())
    specials = tokenization.load_vocab(vocab_file, required=()).specials
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
          **{f"{role.strip('[]').lower()}_token": token for role, token in specials.items()}}
  elif spm:
    with open(spm, "rb") as f:
      fileio.write_bytes_atomic(tok_json, f.read())
    tc.update(tokenizer_class=sentencepiece_class, unk_token="<unk>", pad_token="<pad>")
  elif os.path.exists(tok_json) and (tokenization.sentencepiece_json(os.path.join(output, "vocab.txt")) or
                                     tokenization.bpe_json(os.path.join(output, "vocab.txt"))):
    # an earlier English-ALBERT export into this folder: transformers would tokenize with its tokenizer.json
    os.remove(tok_json)
  fileio.write_bytes_atomic(os.path.join(output, "tokenizer_config.json"),
                                (json.dumps(tc, indent=2) + "\n").encode("utf-8"))
