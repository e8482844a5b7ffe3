"""An ONNX graph of a BERT-family encoder and its serving head, written from the params with onnx.helper.

    model = build_onnx(config, params, head)        # onnx.ModelProto: token ids in, the head's outputs out
    onnx.save(model, "model.onnx")

Why not a converter: jax2tf in this JAX emits one XlaCallModule op (StableHLO inside a TF graph), which
tf2onnx cannot translate, and jax2onnx pins an older orbax-checkpoint than this project uses. BERT's forward
pass is a dozen standard ONNX operators (opset 17: LayerNormalization), so the graph is written here from the
same parameter tree the Flax modules read, and the exporter's parity check (export/parity.py) runs it in
onnxruntime against the JAX model before anything is kept.

Covered: the transformer family with post-LN (BERT) or pre-LN layers, factorised embeddings (ALBERT's E -> H
projection) and shared layers, gelu / gelu_tanh / relu / silu / tanh; the modernbert family (embeddings and
norm without positions or token types, pre-norm layers with layer 0's attention norm the identity, fused QKV,
rotary in the rotate-half form with the global / local theta, sliding-window layers as a banded mask
|i - j| <= local_attention / 2 added to the padding mask, GeGLU, the final norm, the prediction head as
pooler and token output). Heads: pooled features (cls / first / mean / max / last, or splade over BERT's
masked-LM head; optional L2 normalisation), sequence classification (softmax / sigmoid / regression score),
token classification, with a CRF too (the Viterbi decode as two ONNX Scans, forward over the time axis and back along the
back-pointers, over the words' first pieces: word_mask), SQuAD span logits, multiple choice (each choice a
row, one score each, softmax over the real choices). Anything else raises ValueError with the reason (the
command turns it into one `error:` line).

Inputs: head.inputs, int64: input_ids, input_mask, segment_ids [batch, length] (all dimensions dynamic), plus
word_mask [batch, length] and window_continues / window_continued [batch] for a CRF tagger; multiple choice
takes the ids as [batch, choices, length] and choice_mask [batch, choices]. Outputs: float32 (a CRF's
tag_ids int32), named as in the signature.json of the export (heads.ServingHead.outputs).
"""

from __future__ import annotations

import math
from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bert_jax.models import crf, rotary
from bert_jax.models.encoders import modernbert
from bert_jax.models.heads import LEXICAL_POOLINGS

OPSET = 17
INPUTS = ("input_ids", "input_mask", "segment_ids")
_SHAPES = {"embedding": ["batch", "hidden"], "probabilities": ["batch", "labels"], "score": ["batch"],
           "tag_probabilities": ["batch", "length", "labels"], "start_logits": ["batch", "length"],
           "end_logits": ["batch", "length"], "tag_ids": ["batch", "length"],
           "emissions": ["batch", "length", "labels"]}
_INT_OUTPUTS = ("tag_ids",)
_FAMILIES = ("transformer", "modernbert")
_ACTS = ("gelu", "gelu_new", "gelu_tanh", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh")


class _Graph:
  """A tiny builder: unique names, initializers from numpy, one node per call."""

  def __init__(self, prefix: str = ""):
    self.nodes: List[onnx.NodeProto] = []
    self.inits: List[onnx.TensorProto] = []
    self._n = 0
    self.prefix = prefix   # a Scan body's names must not clash with the outer graph's

  def const(self, value, name: str = "c") -> str:
    self._n += 1
    full = f"{self.prefix}{name}_{self._n}"
    arr = np.asarray(value)
    if arr.dtype == np.float64:
      arr = arr.astype(np.float32)
    self.inits.append(numpy_helper.from_array(arr, full))
    return full

  def op(self, op_type: str, *inputs: str, out: str = "", **attrs) -> str:
    self._n += 1
    out = out or f"{self.prefix}{op_type.lower()}_{self._n}"
    self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"{self.prefix}n{self._n}_{op_type}",
                                       **attrs))
    return out

  def dense(self, x: str, kernel, bias=None) -> str:
    y = self.op("MatMul", x, self.const(np.asarray(kernel, np.float32), "kernel"))
    return y if bias is None else self.op("Add", y, self.const(np.asarray(bias, np.float32), "bias"))

  def layer_norm(self, x: str, p: dict, eps: float) -> str:
    """LayerNormalization with p's scale and bias (ModernBERT's norms without norm_bias: zeros)."""
    scale = np.asarray(p["scale"], np.float32)
    bias = np.asarray(p["bias"], np.float32) if "bias" in p else np.zeros_like(scale)
    return self.op("LayerNormalization", x, self.const(scale, "ln_scale"), self.const(bias, "ln_bias"), axis=-1,
                   epsilon=float(eps))

  def linear(self, x: str, p: dict) -> str:
    """A dense layer whose bias is optional (ModernBERT's attention_bias / mlp_bias / classifier_bias)."""
    return self.dense(x, p["kernel"], p.get("bias"))

  def i64(self, *values) -> str:
    return self.const(np.array(values, np.int64), "i64")

  def activation(self, x: str, name: str) -> str:
    if name == "gelu":                                      # exact: x * 0.5 * (1 + erf(x / sqrt(2)))
      e = self.op("Erf", self.op("Div", x, self.const(np.float32(math.sqrt(2.0)))))
      return self.op("Mul", self.op("Mul", x, self.const(np.float32(0.5))),
                     self.op("Add", e, self.const(np.float32(1.0))))
    if name in ("gelu_new", "gelu_tanh", "gelu_pytorch_tanh"):   # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      cube = self.op("Mul", self.op("Mul", x, x), x)
      inner = self.op("Add", x, self.op("Mul", cube, self.const(np.float32(0.044715))))
      t = self.op("Tanh", self.op("Mul", inner, self.const(np.float32(math.sqrt(2.0 / math.pi)))))
      return self.op("Mul", self.op("Mul", x, self.const(np.float32(0.5))),
                     self.op("Add", t, self.const(np.float32(1.0))))
    if name == "relu":
      return self.op("Relu", x)
    if name in ("silu", "swish"):
      return self.op("Mul", x, self.op("Sigmoid", x))
    if name == "tanh":
      return self.op("Tanh", x)
    raise ValueError(f"hidden_act={name!r} has no ONNX form here; expected one of {', '.join(_ACTS)}")


def check_exportable(config) -> None:
  """ValueError naming what the ONNX writer does not cover (the transformer and modernbert families)."""
  family = getattr(config, "encoder", "transformer")
  if family not in _FAMILIES:
    raise ValueError(f"the {config.encoder!r} encoder family has no ONNX writer here ({' and '.join(_FAMILIES)} "
                     "only); export it as stablehlo or savedmodel instead")
  if config.hidden_act not in _ACTS:
    raise ValueError(f"hidden_act={config.hidden_act!r} has no ONNX form here")
  if family == "modernbert":
    if config.classifier_activation not in _ACTS:
      raise ValueError(f"classifier_activation={config.classifier_activation!r} has no ONNX form here")
  elif config.layer_norm_type not in ("post", "pre"):
    raise ValueError(f"layer_norm_type={config.layer_norm_type!r} has no ONNX form here")


def _attention(g: _Graph, x: str, p: dict, mask_bias: str, cfg) -> str:
  nh = cfg.num_attention_heads
  dh = cfg.hidden_size // nh

  def heads(name):   # [B, T, H] -> [B, nh, T, dh]
    k = np.asarray(p[name]["kernel"], np.float32).reshape(cfg.hidden_size, nh * dh)
    y = g.dense(x, k, np.asarray(p[name]["bias"], np.float32).reshape(nh * dh))
    y = g.op("Reshape", y, g.const(np.array([0, 0, nh, dh], np.int64), "shape"))
    return g.op("Transpose", y, perm=[0, 2, 1, 3])

  q, k, v = heads("query"), heads("key"), heads("value")
  scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
  scores = g.op("Add", g.op("Mul", scores, g.const(np.float32(1.0 / math.sqrt(dh)))), mask_bias)
  ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)                 # [B, nh, T, dh]
  ctx = g.op("Reshape", g.op("Transpose", ctx, perm=[0, 2, 1, 3]),
             g.const(np.array([0, 0, nh * dh], np.int64), "shape"))
  out = p["output"]
  return g.dense(ctx, np.asarray(out["kernel"], np.float32).reshape(nh * dh, cfg.hidden_size), out["bias"])


def _layer(g: _Graph, x: str, p: dict, mask_bias: str, cfg) -> str:
  eps = cfg.layer_norm_eps

  def ffn(h):
    h = g.activation(g.dense(h, p["ffn"]["intermediate"]["kernel"], p["ffn"]["intermediate"]["bias"]),
                     cfg.hidden_act)
    return g.dense(h, p["ffn"]["output"]["kernel"], p["ffn"]["output"]["bias"])

  if cfg.layer_norm_type == "post":
    x = g.layer_norm(g.op("Add", x, _attention(g, x, p["attention"], mask_bias, cfg)), p["attention_LayerNorm"], eps)
    return g.layer_norm(g.op("Add", x, ffn(x)), p["output_LayerNorm"], eps)
  x = g.op("Add", x, _attention(g, g.layer_norm(x, p["attention_LayerNorm"], eps), p["attention"], mask_bias, cfg))
  return g.op("Add", x, ffn(g.layer_norm(x, p["output_LayerNorm"], eps)))


def _layers(enc: dict, cfg) -> List[dict]:
  if cfg.share_layers:
    shared = [v for k, v in enc.items() if k not in ("final_LayerNorm",)]
    if len(shared) != 1:
      raise ValueError(f"shared-layer params {sorted(enc)}: expected one shared layer")
    return shared * cfg.num_hidden_layers
  missing = [i for i in range(cfg.num_hidden_layers) if f"layer_{i}" not in enc]
  if missing:
    raise ValueError(f"encoder params lack layer_{missing[0]} (keys {sorted(enc)[:4]}...): a scanned or unknown layout")
  return [enc[f"layer_{i}"] for i in range(cfg.num_hidden_layers)]


def encoder(g: _Graph, bert: dict, cfg, ids: str = INPUTS[0], mask_ids: str = INPUTS[1],
            seg: str = INPUTS[2]) -> Dict[str, str]:
  """The encoder's nodes: {"sequence_output" [B, T, H], "pooled_output" [B, H], "token_output" [B, T, H] (what
  a token-level head reads), "first" [B, H], "mask" float [B, T], "mask_ids" (the int64 mask's name)}."""
  if getattr(cfg, "encoder", "transformer") == "modernbert":
    return modernbert_encoder(g, bert, cfg, ids, mask_ids)
  emb = bert["embeddings"]
  length = g.op("Gather", g.op("Shape", ids), g.const(np.array(1, np.int64), "axis1"), axis=0)
  positions = g.op("Range", g.const(np.array(0, np.int64), "zero"), length, g.const(np.array(1, np.int64), "one"))
  table = g.const(np.asarray(emb["word_embeddings"]["embedding"], np.float32), "word_embeddings")
  x = g.op("Gather", table, ids)
  x = g.op("Add", x, g.op("Gather", g.const(np.asarray(emb["position_embeddings"]["embedding"], np.float32),
                                            "position_embeddings"), positions))
  x = g.op("Add", x, g.op("Gather", g.const(np.asarray(emb["token_type_embeddings"]["embedding"], np.float32),
                                            "token_type_embeddings"), seg))
  x = g.layer_norm(x, emb["LayerNorm"], cfg.layer_norm_eps)
  if "projection" in emb:
    x = g.dense(x, emb["projection"]["kernel"], emb["projection"]["bias"])
  mask = g.op("Cast", mask_ids, to=TensorProto.FLOAT)                        # [B, T]
  # [B, 1, 1, T]: 0 for real tokens, -1e9 for padding (the Flax mask drops them the same way in float32)
  bias = g.op("Mul", g.op("Sub", g.const(np.float32(1.0)), mask), g.const(np.float32(-1e9)))
  bias = g.op("Unsqueeze", bias, g.const(np.array([1, 2], np.int64), "axes"))
  for p in _layers(bert["encoder"], cfg):
    x = _layer(g, x, p, bias, cfg)
  if cfg.layer_norm_type == "pre":
    x = g.layer_norm(x, bert["encoder"]["final_LayerNorm"], cfg.layer_norm_eps)
  first = g.op("Gather", x, g.const(np.array(0, np.int64), "idx0"), axis=1)       # [B, H]
  pooled = ""
  if "pooler" in bert:
    pooled = g.op("Tanh", g.dense(first, bert["pooler"]["kernel"], bert["pooler"]["bias"]))
  return {"sequence_output": x, "pooled_output": pooled, "first": first, "mask": mask, "token_output": x,
          "mask_ids": mask_ids, "word_table": table}


# ---- modernbert ---------------------------------------------------------------------------------------------
def _rotary_tables(g: _Graph, positions: str, head_dim: int, theta: float):
  """rotary.cos_sin in ONNX: positions float [B, T] -> (cos, sin) [B, T, 1, head_dim] (the same float32
  inverse frequencies)."""
  inv = g.const(rotary.inverse_frequencies(head_dim, theta).reshape(1, 1, -1), "inv_freq")
  freqs = g.op("Mul", g.op("Unsqueeze", positions, g.i64(2)), inv)                   # [B, T, hd/2]
  angles = g.op("Unsqueeze", g.op("Concat", freqs, freqs, axis=-1), g.i64(2))        # [B, T, 1, hd]
  return g.op("Cos", angles), g.op("Sin", angles)


def _rotate(g: _Graph, x: str, cos: str, sin: str, head_dim: int) -> str:
  """rotary.apply_rotary: x * cos + rotate_half(x) * sin, rotate_half(x1, x2) = (-x2, x1) on the last axis."""
  half = head_dim // 2
  x1 = g.op("Slice", x, g.i64(0), g.i64(half), g.i64(-1))
  x2 = g.op("Slice", x, g.i64(half), g.i64(head_dim), g.i64(-1))
  rot = g.op("Concat", g.op("Neg", x2), x1, axis=-1)
  return g.op("Add", g.op("Mul", x, cos), g.op("Mul", rot, sin))


def _modernbert_attention(g: _Graph, x: str, p: dict, bias: str, tables, cfg) -> str:
  nh, hd, h = cfg.num_attention_heads, cfg.head_dim, cfg.hidden_size
  qkv = g.op("Reshape", g.linear(x, p["Wqkv"]), g.i64(0, 0, 3, nh, hd))             # [B, T, 3, nh, hd]

  def part(i):   # [B, T, nh, hd], rotated for q and k, then [B, nh, T, hd]
    y = g.op("Squeeze", g.op("Gather", qkv, g.i64(i), axis=2), g.i64(2))
    if i < 2:
      y = _rotate(g, y, tables[0], tables[1], hd)
    return g.op("Transpose", y, perm=[0, 2, 1, 3])

  q, k, v = part(0), part(1), part(2)
  scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
  scores = g.op("Add", g.op("Mul", scores, g.const(np.float32(1.0 / math.sqrt(hd)))), bias)
  ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
  ctx = g.op("Reshape", g.op("Transpose", ctx, perm=[0, 2, 1, 3]), g.i64(0, 0, h))
  return g.linear(ctx, p["Wo"])


def modernbert_encoder(g: _Graph, bert: dict, cfg, ids: str, mask_ids: str) -> Dict[str, str]:
  """ModernBertEncoder's nodes (models/encoders/modernbert.py), the same outputs as encoder(). Rotary positions
  are cumsum(input_mask) - 1: 0..n-1 over a row's real tokens, as layers.example_positions gives an unpacked
  row (padding's own positions are never read)."""
  eps = cfg.norm_eps
  emb = bert["embeddings"]
  x = g.op("Gather", g.const(np.asarray(emb["word_embeddings"]["embedding"], np.float32), "word_embeddings"), ids)
  x = g.layer_norm(x, emb["norm"], eps)
  mask = g.op("Cast", mask_ids, to=TensorProto.FLOAT)                                # [B, T]
  positions = g.op("Relu", g.op("Sub", g.op("CumSum", mask, g.i64(1)), g.const(np.float32(1.0))))
  pad = g.op("Unsqueeze", g.op("Mul", g.op("Sub", g.const(np.float32(1.0)), mask), g.const(np.float32(-1e9))),
             g.i64(1, 2))                                                            # [B, 1, 1, T]
  # the sliding layers' band, |i - j| <= local_attention / 2, added to the padding mask: [B, 1, T, T]
  length = g.op("Gather", g.op("Shape", ids), g.i64(1), axis=0)
  pos = g.op("Range", g.const(np.array(0, np.int64), "zero"), length, g.const(np.array(1, np.int64), "one"))
  dist = g.op("Abs", g.op("Sub", g.op("Unsqueeze", pos, g.i64(1)), g.op("Unsqueeze", pos, g.i64(0))))
  near = g.op("LessOrEqual", dist, g.const(np.array(cfg.local_attention // 2, np.int64)))
  band = g.op("Where", near, g.const(np.float32(0.0)), g.const(np.float32(-1e9)))   # [T, T]
  biases = {"full_attention": pad, "sliding_attention": g.op("Add", pad, band)}
  thetas = {"full_attention": cfg.global_rope_theta, "sliding_attention": cfg.local_rope_theta}
  kinds = modernbert.layer_types(cfg)
  tables = {k: _rotary_tables(g, positions, cfg.head_dim, thetas[k]) for k in sorted(set(kinds))}
  enc = bert["encoder"]
  for i, kind in enumerate(kinds):
    p = enc[f"layer_{i}"]
    h = x if i == 0 else g.layer_norm(x, p["attn_norm"], eps)
    x = g.op("Add", x, _modernbert_attention(g, h, p["attn"], biases[kind], tables[kind], cfg))
    wi = g.linear(g.layer_norm(x, p["mlp_norm"], eps), p["mlp"]["Wi"])             # [B, T, 2I]: input, gate
    inter = cfg.intermediate_size
    inp = g.op("Slice", wi, g.i64(0), g.i64(inter), g.i64(-1))
    gate = g.op("Slice", wi, g.i64(inter), g.i64(2 * inter), g.i64(-1))
    x = g.op("Add", x, g.linear(g.op("Mul", g.activation(inp, cfg.hidden_act), gate), p["mlp"]["Wo"]))
  x = g.layer_norm(x, enc["final_norm"], eps)
  first = g.op("Gather", x, g.const(np.array(0, np.int64), "idx0"), axis=1)          # [B, H]
  head = bert["pooler"]

  def prediction_head(v):   # modernbert.PredictionHead: norm(act(dense(v)))
    return g.layer_norm(g.activation(g.linear(v, head["dense"]), cfg.classifier_activation), head["norm"], eps)

  if cfg.classifier_pooling == "cls":
    features = first
  else:   # the mean over the real tokens (pooled_features)
    m3 = g.op("Unsqueeze", mask, g.i64(2))
    total = g.op("ReduceSum", g.op("Mul", x, m3), g.i64(1), keepdims=0)
    features = g.op("Div", total, g.op("Max", g.op("ReduceSum", m3, g.i64(1), keepdims=0),
                                       g.const(np.float32(1.0))))
  return {"sequence_output": x, "pooled_output": prediction_head(features), "first": first, "mask": mask,
          "token_output": prediction_head(x), "mask_ids": mask_ids}


def pool(g: _Graph, enc: Dict[str, str], pooling: str) -> str:
  """heads.pool's sentence vector [B, H] in ONNX."""
  x, mask = enc["sequence_output"], enc["mask"]
  m3 = g.op("Unsqueeze", mask, g.const(np.array([2], np.int64), "axes"))      # [B, T, 1]
  if pooling == "cls":
    if not enc["pooled_output"]:
      raise ValueError("pooling=cls reads the pooler, which these params lack")
    return enc["pooled_output"]
  if pooling == "first":
    return enc["first"]
  if pooling == "mean":
    total = g.op("ReduceSum", g.op("Mul", x, m3), g.const(np.array([1], np.int64), "axes"), keepdims=0)
    count = g.op("ReduceSum", m3, g.const(np.array([1], np.int64), "axes"), keepdims=0)
    return g.op("Div", total, g.op("Max", count, g.const(np.float32(1.0))))
  if pooling == "max":
    neg = g.op("Mul", g.op("Sub", g.const(np.float32(1.0)), m3), g.const(np.float32(-1e4)))
    masked = g.op("Add", g.op("Mul", x, m3), neg)   # real tokens: x; padding: -1e4 (heads.pool's fill)
    return g.op("ReduceMax", masked, axes=[1], keepdims=0)   # opset 17: axes an attribute (ReduceSum: input)
  if pooling == "last":
    n = g.op("ReduceSum", g.op("Cast", enc["mask_ids"], to=TensorProto.INT64), g.const(np.array([1], np.int64), "axes"),
             keepdims=1)
    last = g.op("Max", g.op("Sub", n, g.const(np.array(1, np.int64))), g.const(np.array(0, np.int64)))
    idx = g.op("Unsqueeze", last, g.const(np.array([2], np.int64), "axes"))   # [B, 1, 1]
    h = g.op("Shape", x)
    idx = g.op("Expand", idx, g.op("Concat", g.op("Slice", h, g.const(np.array([0], np.int64)),
                                                  g.const(np.array([1], np.int64))),
                                   g.const(np.array([1], np.int64)),
                                   g.op("Slice", h, g.const(np.array([2], np.int64)), g.const(np.array([3], np.int64))),
                                   axis=0))
    return g.op("Squeeze", g.op("GatherElements", x, idx, axis=1), g.const(np.array([1], np.int64), "axes"))
  raise ValueError(f"pooling={pooling!r} has no ONNX form here")


def l2_normalize(g: _Graph, v: str) -> str:
  """v / max(||v||, 1e-12), as torch.nn.functional.normalize (sentence-transformers' Normalize)."""
  norm = g.op("ReduceL2", v, axes=[-1], keepdims=1)
  return g.op("Div", v, g.op("Max", norm, g.const(np.float32(1e-12))))


def viterbi(g: _Graph, emissions: str, word_mask: str, window_continues: str, window_continued: str,
            params: dict, label_list, scheme: str) -> str:
  """crf.viterbi_decode in ONNX over emissions [B, T, K] and word_mask [B, T] (the positions the chain links):
  int32 [B, T], the best path's tag at each word_mask position, 0 elsewhere; equal to the JAX decode, ties
  included (ArgMax keeps the first maximum, as jnp.argmax).

  Forward, a Scan over the time axis with (delta [B, K], started [B]) as state: a masked-out position keeps
  delta and emits the identity back-pointer; the first masked-in one starts delta = start + emission; later
  ones delta = max_i(delta_i + trans_ij) + emission_j with the arg-max as back-pointer. JAX compacts the
  masked-in positions first and runs over them; skipping the others with identity back-pointers is the same
  chain. Backward, a reversed Scan from argmax(delta + end) along the back-pointers. start / end carry the
  scheme's constraints (crf.NEG), lifted for windows inside a sentence as BertForTokenClassificationCRF does."""
  k = len(label_list)
  pen_start, pen_trans, pen_end = crf.constraint_penalties(crf.transition_constraints(label_list, scheme))
  scores = params["crf"]
  trans = g.const((np.asarray(scores["transitions"], np.float32) + pen_trans).astype(np.float32), "crf_trans")

  def per_row(learned, penalty, flag):   # learned + penalty * (1 - flag): [B, K]
    lift = g.op("Sub", g.const(np.float32(1.0)), g.op("Unsqueeze", g.op("Cast", flag, to=TensorProto.FLOAT),
                                                      g.i64(1)))
    return g.op("Add", g.const(np.asarray(learned, np.float32).reshape(1, k), "crf_learned"),
                g.op("Mul", g.const(penalty.reshape(1, k), "crf_penalty"), lift))

  start = per_row(scores["start"], pen_start, window_continues)
  end = per_row(scores["end"], pen_end, window_continued)
  identity = g.const(np.arange(k, dtype=np.int64).reshape(1, k), "crf_identity")
  em_t = g.op("Transpose", emissions, perm=[1, 0, 2])                                  # [T, B, K]
  valid_t = g.op("Cast", g.op("Transpose", word_mask, perm=[1, 0]), to=TensorProto.BOOL)   # [T, B]
  started0 = g.op("Cast", g.op("Mul", window_continues, g.const(np.array(0, np.int64))), to=TensorProto.BOOL)

  f = _Graph("fwd_")
  names = ("delta_in", "started_in", "em", "valid")
  valid, started = f.op("Unsqueeze", "fwd_valid", f.i64(1)), f.op("Unsqueeze", "fwd_started_in", f.i64(1))
  cand = f.op("Add", f.op("Unsqueeze", "fwd_delta_in", f.i64(2)), trans)                # [B, K(prev), K(next)]
  best = f.op("Add", f.op("ReduceMax", cand, axes=[1], keepdims=0), "fwd_em")
  back = f.op("ArgMax", cand, axis=1, keepdims=0)                                      # int64 [B, K]
  go = f.op("And", valid, started)
  f.op("Where", go, best, f.op("Where", valid, f.op("Add", start, "fwd_em"), "fwd_delta_in"), out="fwd_delta_out")
  f.op("Or", "fwd_started_in", "fwd_valid", out="fwd_started_out")
  f.op("Where", go, back, identity, out="fwd_back")
  body = helper.make_graph(
      f.nodes, "viterbi_forward",
      [helper.make_tensor_value_info("fwd_" + n, t, None)
       for n, t in zip(names, (TensorProto.FLOAT, TensorProto.BOOL, TensorProto.FLOAT, TensorProto.BOOL))],
      [helper.make_tensor_value_info("fwd_delta_out", TensorProto.FLOAT, None),
       helper.make_tensor_value_info("fwd_started_out", TensorProto.BOOL, None),
       helper.make_tensor_value_info("fwd_back", TensorProto.INT64, None)], initializer=f.inits)
  g._n += 1
  delta, back_t = f"viterbi_delta_{g._n}", f"viterbi_back_{g._n}"
  g.nodes.append(helper.make_node("Scan", [start, started0, em_t, valid_t],
                                  [delta, f"viterbi_started_{g._n}", back_t], name=f"n{g._n}_ViterbiForward",
                                  num_scan_inputs=2, body=body))
  last = g.op("ArgMax", g.op("Add", delta, end), axis=1, keepdims=0)                    # [B] int64

  r = _Graph("bwd_")
  prev = r.op("GatherElements", "bwd_back", r.op("Unsqueeze", "bwd_tag_in", r.i64(1)), axis=1)
  r.op("Squeeze", prev, r.i64(1), out="bwd_tag_out")
  r.op("Identity", "bwd_tag_in", out="bwd_tag")
  body = helper.make_graph(
      r.nodes, "viterbi_backward",
      [helper.make_tensor_value_info("bwd_tag_in", TensorProto.INT64, None),
       helper.make_tensor_value_info("bwd_back", TensorProto.INT64, None)],
      [helper.make_tensor_value_info("bwd_tag_out", TensorProto.INT64, None),
       helper.make_tensor_value_info("bwd_tag", TensorProto.INT64, None)], initializer=r.inits)
  g._n += 1
  path_t = f"viterbi_path_{g._n}"
  g.nodes.append(helper.make_node("Scan", [last, back_t], [f"viterbi_first_{g._n}", path_t],
                                  name=f"n{g._n}_ViterbiBackward", num_scan_inputs=1, body=body,
                                  scan_input_directions=[1], scan_output_directions=[1]))
  path = g.op("Transpose", path_t, perm=[1, 0])                                        # [B, T]
  path = g.op("Where", g.op("Cast", word_mask, to=TensorProto.BOOL), path, g.const(np.array(0, np.int64)))
  return g.op("Cast", path, to=TensorProto.INT32)


def _flat_choices(g: _Graph, name: str) -> str:
  """[B, C, T] -> [B * C, T]: each choice a row of its own."""
  length = g.op("Slice", g.op("Shape", name), g.i64(2), g.i64(3))
  return g.op("Reshape", name, g.op("Concat", g.i64(-1), length, axis=0))


def splade(g: _Graph, enc: Dict[str, str], mlm: dict, cfg) -> str:
  """heads.splade_pool over BERT's masked-LM head (targets.LanguageModelHead: dense, activation, LayerNorm, the
  decoder tied to the word embeddings, output_bias) at every token, in ONNX: [B, V]."""
  if "word_table" not in enc:
    raise ValueError(f"pooling=splade has no ONNX form here for encoder={cfg.encoder!r} (its masked-LM head is "
                     "its own); export stablehlo or savedmodel")
  h = g.activation(g.dense(enc["sequence_output"], mlm["transform"]["kernel"], mlm["transform"]["bias"]),
                   cfg.hidden_act)
  h = g.layer_norm(h, mlm["LayerNorm"], cfg.layer_norm_eps)
  logits = g.op("Add", g.op("MatMul", h, g.op("Transpose", enc["word_table"], perm=[1, 0])),
                g.const(np.asarray(mlm["output_bias"], np.float32), "output_bias"))
  w = g.op("Log", g.op("Add", g.op("Relu", logits), g.const(np.float32(1.0))))     # log(1 + relu): >= 0
  w = g.op("Mul", w, g.op("Unsqueeze", enc["mask"], g.i64(2)))                   # padding: 0, never the max
  return g.op("ReduceMax", w, axes=[1], keepdims=0)


def lexical(g: _Graph, enc: Dict[str, str], term_weight: dict, cfg, saturate: bool = False) -> str:
  """heads.lexical_pool over the term-weight head (relu of a dense to one weight per token), in ONNX: each
  token's weight added at its id (ScatterElements, reduction add) into zeros [B, V]; `saturate`
  (pooling=lexical_log): log(1 + that)."""
  w = g.op("Relu", g.dense(enc["sequence_output"], term_weight["kernel"], term_weight["bias"]))   # [B, T, 1]
  w = g.op("Mul", g.op("Squeeze", w, g.i64(2)), enc["mask"])                                    # padding: 0
  batch = g.op("Slice", g.op("Shape", INPUTS[0]), g.i64(0), g.i64(1))
  zeros = g.op("ConstantOfShape", g.op("Concat", batch, g.i64(cfg.vocab_size), axis=0),
               value=numpy_helper.from_array(np.zeros(1, np.float32)))
  v = g.op("ScatterElements", zeros, INPUTS[0], w, axis=1, reduction="add")
  return g.op("Log", g.op("Add", v, g.const(np.float32(1.0)))) if saturate else v


def build_onnx(config, params: dict, head) -> onnx.ModelProto:
  """The ONNX model of `head` (heads.ServingHead): head.inputs in (int64), head.outputs out."""
  check_exportable(config)
  g = _Graph()
  kind = head.kind
  if kind == "multiple_choice":
    enc = encoder(g, params["bert"], config, *(_flat_choices(g, n) for n in INPUTS))
  else:
    enc = encoder(g, params["bert"], config)
  outs: Dict[str, str] = {}
  if kind == "features":
    if head.pooling == "splade":
      v = splade(g, enc, params["mlm"], config)
    elif head.pooling in LEXICAL_POOLINGS:
      v = lexical(g, enc, params["term_weight"], config, saturate=head.pooling == "lexical_log")
    else:
      v = pool(g, enc, head.pooling)
    outs["embedding"] = l2_normalize(g, v) if head.normalize else g.op("Identity", v)
  elif kind in ("classification", "regression", "multilabel"):
    c = params["classifier"]
    logits = g.dense(pool(g, enc, head.pooling), c["kernel"], c["bias"])
    if kind == "classification":
      outs["probabilities"] = g.op("Softmax", logits, axis=-1)
    elif kind == "multilabel":
      outs["probabilities"] = g.op("Sigmoid", logits)
    else:
      outs["score"] = g.op("Squeeze", logits, g.const(np.array([1], np.int64), "axes"))
  elif kind == "multiple_choice":
    c = params["classifier"]
    scores = g.op("Reshape", g.dense(pool(g, enc, head.pooling), c["kernel"], c["bias"]),
                  g.op("Shape", "choice_mask"))                                          # [B, C]
    scores = g.op("Where", g.op("Cast", "choice_mask", to=TensorProto.BOOL), scores, g.const(np.float32(-1e9)))
    outs["probabilities"] = g.op("Softmax", scores, axis=-1)
  elif kind == "ner":
    c = params["classifier"]
    logits = g.dense(enc["token_output"], c["kernel"], c["bias"])
    if head.crf:
      outs["tag_ids"] = viterbi(g, logits, "word_mask", "window_continues", "window_continued", params,
                                head.labels, head.task.scheme)
      outs["emissions"] = g.op("Identity", logits)
    else:
      outs["tag_probabilities"] = g.op("Softmax", logits, axis=-1)
  elif kind == "squad":
    c = params["qa_outputs"]
    logits = g.dense(enc["token_output"], c["kernel"], c["bias"])               # [B, T, 2]
    for i, name in enumerate(("start_logits", "end_logits")):
      outs[name] = g.op("Squeeze", g.op("Gather", logits, g.const(np.array([i], np.int64)), axis=2),
                        g.const(np.array([2], np.int64), "axes"))
  else:
    raise ValueError(f"head kind {kind!r} has no ONNX form here")
  final = []
  for name, src in outs.items():
    g.nodes.append(helper.make_node("Identity", [src], [name], name=f"out_{name}"))
    shape = ["batch", "choices"] if kind == "multiple_choice" else _SHAPES[name]
    dtype = TensorProto.INT32 if name in _INT_OUTPUTS else TensorProto.FLOAT
    final.append(helper.make_tensor_value_info(name, dtype, shape))
  inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, list(dims)) for n, dims in head.inputs.items()]
  graph = helper.make_graph(g.nodes, "bert_jax_serving", inputs, final, initializer=g.inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bert_jax")
  model.ir_version = 8
  onnx.checker.check_model(model)
  return model
