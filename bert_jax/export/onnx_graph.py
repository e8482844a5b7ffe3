"""An ONNX graph of a BERT-family encoder and its serving head, written from the params with onnx.helper.

    model = build_onnx(config, params, head)        # onnx.ModelProto: token ids in, the head's outputs out
    onnx.save(model, "model.onnx")

Why not a converter: jax2tf in this JAX emits one XlaCallModule op (StableHLO inside a TF graph), which
tf2onnx cannot translate, and jax2onnx pins an older orbax-checkpoint than this project uses. BERT's forward
pass is a dozen standard ONNX operators (opset 17: LayerNormalization), so the graph is written here from the
same parameter tree the Flax modules read, and the exporter's parity check (export/parity.py) runs it in
onnxruntime against the JAX model before anything is kept.

Covered: the transformer family with post-LN (BERT) or pre-LN layers, factorised embeddings (ALBERT's E -> H
projection) and shared layers, gelu / gelu_tanh / relu / silu / tanh; heads: pooled features (cls / first /
mean / max / last, optional L2 normalisation), sequence classification (softmax / sigmoid / regression
score), token classification without CRF, SQuAD span logits. Anything else raises ValueError with the
reason (the command turns it into one `error:` line).

Inputs: input_ids, input_mask, segment_ids, int64 [batch, length] (both dimensions dynamic). Outputs: float32,
named as in the signature.json of the export (heads.ServingHead.outputs).
"""

from __future__ import annotations

import math
from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INPUTS = ("input_ids", "input_mask", "segment_ids")
_SHAPES = {"embedding": ["batch", "hidden"], "probabilities": ["batch", "labels"], "score": ["batch"],
           "tag_probabilities": ["batch", "length", "labels"], "start_logits": ["batch", "length"],
           "end_logits": ["batch", "length"]}
_ACTS = ("gelu", "gelu_new", "gelu_tanh", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh")


class _Graph:
  """A tiny builder: unique names, initializers from numpy, one node per call."""

  def __init__(self):
    self.nodes: List[onnx.NodeProto] = []
    self.inits: List[onnx.TensorProto] = []
    self._n = 0

  def const(self, value, name: str = "c") -> str:
    self._n += 1
    full = f"{name}_{self._n}"
    arr = np.asarray(value)
    if arr.dtype == np.float64:
      arr = arr.astype(np.float32)
    self.inits.append(numpy_helper.from_array(arr, full))
    return full

  def op(self, op_type: str, *inputs: str, out: str = "", **attrs) -> str:
    self._n += 1
    out = out or f"{op_type.lower()}_{self._n}"
    self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"n{self._n}_{op_type}", **attrs))
    return out

  def dense(self, x: str, kernel, bias=None) -> str:
    y = self.op("MatMul", x, self.const(np.asarray(kernel, np.float32), "kernel"))
    return y if bias is None else self.op("Add", y, self.const(np.asarray(bias, np.float32), "bias"))

  def layer_norm(self, x: str, p: dict, eps: float) -> str:
    return self.op("LayerNormalization", x, self.const(np.asarray(p["scale"], np.float32), "ln_scale"),
                   self.const(np.asarray(p["bias"], np.float32), "ln_bias"), axis=-1, epsilon=float(eps))

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
  """ValueError naming what the ONNX writer does not cover (the transformer family only)."""
  if getattr(config, "encoder", "transformer") != "transformer":
    raise ValueError(f"the {config.encoder!r} encoder family has no ONNX writer here (transformer only); export "
                     "it as stablehlo or savedmodel instead")
  if config.hidden_act not in _ACTS:
    raise ValueError(f"hidden_act={config.hidden_act!r} has no ONNX form here")
  if config.layer_norm_type not in ("post", "pre"):
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


def encoder(g: _Graph, bert: dict, cfg) -> Dict[str, str]:
  """The encoder's nodes: {"sequence_output" [B, T, H], "pooled_output" [B, H], "mask" float [B, T]}."""
  emb = bert["embeddings"]
  ids, seg = INPUTS[0], INPUTS[2]
  length = g.op("Gather", g.op("Shape", ids), g.const(np.array(1, np.int64), "axis1"), axis=0)
  positions = g.op("Range", g.const(np.array(0, np.int64), "zero"), length, g.const(np.array(1, np.int64), "one"))
  x = g.op("Gather", g.const(np.asarray(emb["word_embeddings"]["embedding"], np.float32), "word_embeddings"), ids)
  x = g.op("Add", x, g.op("Gather", g.const(np.asarray(emb["position_embeddings"]["embedding"], np.float32),
                                            "position_embeddings"), positions))
  x = g.op("Add", x, g.op("Gather", g.const(np.asarray(emb["token_type_embeddings"]["embedding"], np.float32),
                                            "token_type_embeddings"), seg))
  x = g.layer_norm(x, emb["LayerNorm"], cfg.layer_norm_eps)
  if "projection" in emb:
    x = g.dense(x, emb["projection"]["kernel"], emb["projection"]["bias"])
  mask = g.op("Cast", INPUTS[1], to=TensorProto.FLOAT)                       # [B, T]
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
  return {"sequence_output": x, "pooled_output": pooled, "first": first, "mask": mask}


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
    n = g.op("ReduceSum", g.op("Cast", INPUTS[1], to=TensorProto.INT64), g.const(np.array([1], np.int64), "axes"),
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


def build_onnx(config, params: dict, head) -> onnx.ModelProto:
  """The ONNX model of `head` (heads.ServingHead): token ids in, head.outputs out (float32)."""
  check_exportable(config)
  g = _Graph()
  enc = encoder(g, params["bert"], config)
  outs: Dict[str, str] = {}
  kind = head.kind
  if kind == "features":
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
  elif kind == "ner":
    c = params["classifier"]
    outs["tag_probabilities"] = g.op("Softmax", g.dense(enc["sequence_output"], c["kernel"], c["bias"]), axis=-1)
  elif kind == "squad":
    c = params["qa_outputs"]
    logits = g.dense(enc["sequence_output"], c["kernel"], c["bias"])           # [B, T, 2]
    for i, name in enumerate(("start_logits", "end_logits")):
      outs[name] = g.op("Squeeze", g.op("Gather", logits, g.const(np.array([i], np.int64)), axis=2),
                        g.const(np.array([2], np.int64), "axes"))
  else:
    raise ValueError(f"head kind {kind!r} has no ONNX form here")
  final = []
  for name, src in outs.items():
    g.nodes.append(helper.make_node("Identity", [src], [name], name=f"out_{name}"))
    final.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, _SHAPES[name]))
  inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "length"]) for n in INPUTS]
  graph = helper.make_graph(g.nodes, "bert_jax_serving", inputs, final, initializer=g.inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bert_jax")
  model.ir_version = 8
  onnx.checker.check_model(model)
  return model
