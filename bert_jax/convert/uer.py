"""UER-py BERT checkpoints in: `python -m bert_jax.convert import-uer --input=model.bin --config=config.json`.

UER-py (the model zoo behind many Chinese checkpoints) saves a PyTorch state dict with its own names. This
module renames them to Hugging Face's BERT keys, following UER's own `scripts/convert_bert_from_uer_to_
huggingface.py`, then converts exactly as `import-hf` does (every shape asserted, unmapped names an error):

  UER (new names; older releases in brackets)                 Hugging Face
  embedding.word.embedding.weight [embedding.word_embedding.weight]          bert.embeddings.word_embeddings.weight
  embedding.pos.embedding.weight [embedding.position_embedding.weight]       bert.embeddings.position_embeddings.weight
  embedding.seg.embedding.weight [embedding.segment_embedding.weight]        bert.embeddings.token_type_embeddings
                                   (UER's segment ids are 1-based, 0 = padding: its row 0 is dropped)
  embedding.layer_norm.gamma / .beta                          bert.embeddings.LayerNorm.weight / .bias
  encoder.transformer.{i}.self_attn.linear_layers.{0,1,2}.*   ...layer.{i}.attention.self.{query,key,value}.*
  encoder.transformer.{i}.self_attn.final_linear.*            ...layer.{i}.attention.output.dense.*
  encoder.transformer.{i}.layer_norm_1.gamma / .beta          ...layer.{i}.attention.output.LayerNorm.*
  encoder.transformer.{i}.feed_forward.linear_1.* / linear_2.*  ...layer.{i}.intermediate.dense.* / output.dense.*
  encoder.transformer.{i}.layer_norm_2.gamma / .beta          ...layer.{i}.output.LayerNorm.*
  target.sp.linear_1.* [target.nsp_linear_1.*]                bert.pooler.dense.*
  target.sp.linear_2.* [target.nsp_linear_2.*]                cls.seq_relationship.*
  target.mlm.linear_1.* [target.mlm_linear_1.*]               cls.predictions.transform.dense.*
  target.mlm.layer_norm.* [target.layer_norm.*]               cls.predictions.transform.LayerNorm.*
  target.mlm.linear_2.weight / .bias [target.mlm_linear_2.*]  (tied to the word embeddings) / cls.predictions.bias

The architecture comes from UER's config.json (`hidden_size`, `layers_num`, `heads_num`, `feedforward_size`,
`hidden_act`, `dropout`) and the tensors (vocab, position and segment table sizes). UER models that are not
BERT (pre-LN, gated FFN as in T5, relative positions, ALBERT's factorised/shared embeddings, causal masks as
in GPT-2, other encoders) are refused with the config field that says so.

Numerics: like UER's converter to Hugging Face, the result uses standard LayerNorm (eps 1e-12). UER's own
LayerNorm divides by the unbiased std + 1e-6, a relative difference of about 1/(2H) (0.07% at H=768) in the
normalised activations; a fine-tuned model adapts to it, as it does after UER's own conversion.

The .bin is read with `torch.load(weights_only=True)` (tensors only, no pickled code); `.safetensors` needs
no torch.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Dict, Optional

import numpy as np

from bert_jax.convert import hf, mapping
from bert_jax.models.config import BertConfig
from bert_jax.models.encoders import transformer
from bert_jax.pretrained import params_dir


def _layer_rules():
  """UER's names of a transformer layer's modules -> Hugging Face's, from the transformer family's own table
  (models/encoders/transformer.py: CHECKPOINT_NAMES); UER's LayerNorm holds gamma / beta."""
  rules = []
  for p in transformer.CHECKPOINT_NAMES:
    uer, hf_name = r"encoder\.transformer\.(\d+)\." + re.escape(p.uer), r"bert.encoder.layer.\1." + p.hf
    if p.kind == "layer_norm":
      rules += [(uer + r"\.gamma", hf_name + ".weight"), (uer + r"\.beta", hf_name + ".bias")]
    else:
      rules.append((uer + r"\.(weight|bias)", hf_name + r".\2"))
  return rules


# (regex over UER names -> Hugging Face name template). Alternatives cover UER's old and new naming.
_RULES = [
    (r"embedding\.(?:word\.embedding|word_embedding)\.weight", "bert.embeddings.word_embeddings.weight"),
    (r"embedding\.(?:pos\.embedding|position\.embedding|position_embedding)\.weight",
     "bert.embeddings.position_embeddings.weight"),
    (r"embedding\.(?:seg\.embedding|segment\.embedding|segment_embedding)\.weight",
     "bert.embeddings.token_type_embeddings.weight"),
    (r"embedding\.layer_norm\.gamma", "bert.embeddings.LayerNorm.weight"),
    (r"embedding\.layer_norm\.beta", "bert.embeddings.LayerNorm.bias"),
    *_layer_rules(),
    (r"target\.(?:sp\.linear_1|nsp_linear_1)\.(weight|bias)", r"bert.pooler.dense.\1"),
    (r"target\.(?:sp\.linear_2|nsp_linear_2)\.(weight|bias)", r"cls.seq_relationship.\1"),
    (r"target\.(?:mlm\.linear_1|mlm_linear_1)\.(weight|bias)", r"cls.predictions.transform.dense.\1"),
    (r"target\.(?:mlm\.layer_norm|layer_norm)\.gamma", "cls.predictions.transform.LayerNorm.weight"),
    (r"target\.(?:mlm\.layer_norm|layer_norm)\.beta", "cls.predictions.transform.LayerNorm.bias"),
    (r"target\.(?:mlm\.linear_2|mlm_linear_2)\.weight", "cls.predictions.decoder.weight"),
    (r"target\.(?:mlm\.linear_2|mlm_linear_2)\.bias", "cls.predictions.bias"),
]
_COMPILED = [(re.compile(p + r"$"), t) for p, t in _RULES]
_SEGMENT = "bert.embeddings.token_type_embeddings.weight"

# UER config values that make a model something other than BERT: field -> the BERT value(s).
_BERT_FIELDS = {
    "encoder": ("transformer",),
    "mask": ("fully_visible",),
    "layernorm_positioning": ("post",),
    "layernorm": ("normal",),
    "feed_forward": ("dense",),
    "relative_position_embedding": (False,),
    "remove_embedding_layernorm": (False,),
    "remove_transformer_bias": (False,),
    "factorized_embedding_parameterization": (False,),
    "parameter_sharing": (False,),
}
_ACTS = {"gelu": "gelu", "gelu_fast": "gelu_new", "relu": "relu", "silu": "silu"}


def uer_to_hf_names(state: Dict[str, np.ndarray], source: str) -> Dict[str, np.ndarray]:
  """UER-named arrays -> Hugging Face-named arrays (the segment table without UER's padding row 0). Names that
  match no rule are an error listing them."""
  out, unknown = {}, []
  for name, value in state.items():
    for pat, template in _COMPILED:
      m = pat.match(name)
      if m:
        new = m.expand(template)
        if new in out:
          raise mapping.ConversionError(f"{source}: {name} maps to {new}, which another tensor already gave")
        out[new] = value
        break
    else:
      unknown.append(name)
  if unknown:
    hint = ""
    if any(n.startswith(("encoder.transformer_", "decoder.", "encoder.encoder_", "encoder.rnn")) for n in unknown):
      hint = " (this looks like a non-BERT UER model)"
    raise mapping.ConversionError(f"{source}: {len(unknown)} UER tensor name(s) have no BERT equivalent{hint}: "
                                  f"{sorted(unknown)[:12]}")
  if _SEGMENT in out:
    seg = out[_SEGMENT]
    if seg.shape[0] < 2:
      raise mapping.ConversionError(f"{source}: segment embedding has {seg.shape[0]} row(s); UER's BERT has "
                                    "a padding row 0 plus one row per segment")
    out[_SEGMENT] = seg[1:]
  return out


def read_uer_state_dict(path: str) -> Dict[str, np.ndarray]:
  """{name: float32/int array} of a UER .bin (torch, weights only) or .safetensors file."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"UER checkpoint {path} does not exist")
  if path.endswith(".safetensors"):
    return hf._read_safetensors(path)  # pylint: disable=protected-access
  try:
    return hf._read_torch_bin(path)  # pylint: disable=protected-access
  except ImportError:
    raise
  except Exception as e:  # torch's unpickler refuses anything but tensors and containers (weights_only)
    raise mapping.ConversionError(f"{path}: not a PyTorch state dict of tensors that loads with "
                                  f"weights_only=True ({type(e).__name__}: {e})") from e


def check_bert_config(cfg: dict, source: str) -> None:
  """Raises ConversionError when UER's config.json describes a model that is not BERT."""
  for field, ok in _BERT_FIELDS.items():
    if field in cfg and cfg[field] not in ok:
      raise mapping.ConversionError(f"{source}: {field}={cfg[field]!r}; only BERT-family UER models convert "
                                    f"(BERT has {field}={ok[0]!r})")
  emb = cfg.get("embedding")
  if emb is not None:
    parts = set(emb) if isinstance(emb, list) else set(str(emb).split("_"))
    if not {"word", "pos", "seg"} <= parts:
      raise mapping.ConversionError(f"{source}: embedding={emb!r}; BERT needs word + pos + seg embeddings")
  if "emb_size" in cfg and "hidden_size" in cfg and int(cfg["emb_size"]) != int(cfg["hidden_size"]):
    raise mapping.ConversionError(f"{source}: emb_size={cfg['emb_size']} != hidden_size={cfg['hidden_size']} "
                                  "(ALBERT-style factorised embeddings are not BERT)")
  missing = [k for k in ("hidden_size", "layers_num", "heads_num", "feedforward_size") if k not in cfg]
  if missing:
    raise mapping.ConversionError(f"{source}: UER config lacks {missing}")


def uer_config_to_bert(cfg: dict, hf_state: Dict[str, np.ndarray], source: str) -> BertConfig:
  """Our BertConfig from UER's config.json and the (HF-named) tensors."""
  check_bert_config(cfg, source)
  for need in ("bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight", _SEGMENT):
    if need not in hf_state:
      raise mapping.ConversionError(f"{source}: the checkpoint has no {need.split('.')[2]} table; "
                                    "not a BERT-family UER model")
  act = str(cfg.get("hidden_act", "gelu"))
  if act not in _ACTS:
    raise mapping.ConversionError(f"{source}: hidden_act={act!r}; expected one of {sorted(_ACTS)}")
  dropout = float(cfg.get("dropout", 0.1))
  return BertConfig(vocab_size=int(hf_state["bert.embeddings.word_embeddings.weight"].shape[0]),
                    hidden_size=int(cfg["hidden_size"]), num_hidden_layers=int(cfg["layers_num"]),
                    num_attention_heads=int(cfg["heads_num"]), intermediate_size=int(cfg["feedforward_size"]),
                    hidden_act=_ACTS[act], hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                    max_position_embeddings=int(hf_state["bert.embeddings.position_embeddings.weight"].shape[0]),
                    type_vocab_size=int(hf_state[_SEGMENT].shape[0]))


def import_uer(input_path: str, config_path: str, output: Optional[str] = None, vocab_file: Optional[str] = None,
               do_lower_case: Optional[bool] = None, seed: int = 0):
  """Converts a UER BERT checkpoint. Returns (config, params, report); writes `output` when given.
  vocab_file defaults to vocab.txt beside the checkpoint."""
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"UER config {config_path} does not exist (UER's models/bert/*_config.json)")
  with open(config_path, encoding="utf-8") as f:
    try:
      cfg = json.load(f)
    except json.JSONDecodeError as e:
      raise mapping.ConversionError(f"{config_path}: not valid JSON ({e})") from None
  if not isinstance(cfg, dict):   # a list or a number was an AttributeError traceback in check_bert_config
    raise mapping.ConversionError(f"{config_path}: expected a JSON object of UER model settings, got a "
                                  f"{type(cfg).__name__}")
  check_bert_config(cfg, config_path)    # before reading a possibly large checkpoint
  report = mapping.ConversionReport(source=input_path, fmt="uer")
  state = uer_to_hf_names(read_uer_state_dict(input_path), input_path)
  config = uer_config_to_bert(cfg, state, config_path)
  report.notes.append("UER names renamed to Hugging Face's; segment table row 0 (UER padding) dropped")
  state = hf.normalize_hf_state_dict(state, report)
  params = mapping.assign_params(state, "hf", config, report, seed=seed)
  if vocab_file is None:
    vocab_file = os.path.join(os.path.dirname(os.path.abspath(input_path)), "vocab.txt")
    if not os.path.exists(vocab_file):
      raise FileNotFoundError(f"no vocab.txt beside {input_path}; pass --vocab=PATH (UER's models/*_vocab.txt)")
  mapping.check_vocab_size(vocab_file, params_dir.count_vocab_lines(vocab_file), config, config_path, report)
  do_lower_case = mapping.resolve_casing(do_lower_case, report, functools.partial(
      params_dir.guess_do_lower_case_why, vocab_file, hint=os.path.basename(input_path)))
  if output:
    mapping.save_imported(output, config, params, vocab_file, input_path, "uer", do_lower_case, report)
  return config, params, report
