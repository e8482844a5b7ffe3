"""Serving exports of a checkpoint, each checked against `python -m bert_jax.predict` before it is kept.

    python -m bert_jax.export savedmodel --model=runs/ft_sst2 --output=export/sst2_tf     # raw text in (TF-Text)
    python -m bert_jax.export onnx --model=runs/ft_sst2 --output=export/sst2_onnx         # token ids in
    python -m bert_jax.export stablehlo --model=runs/ft_sst2 --output=export/sst2_hlo     # jax.export, ids in
    python -m bert_jax.export sentence-transformers --model=converted/minilm --output=export/st

    from bert_jax.export import export
    export("onnx", "runs/ft_sst2", "export/sst2_onnx")      # {"output", "head", "max_abs_diff", ...}

Modules: heads (what a checkpoint serves, as one JAX function of token ids, and predict's answer on the same
texts), writer (temp folder -> parity -> swap in), stablehlo, onnx_graph + onnx_export, savedmodel (imports
TensorFlow: only the savedmodel format loads it), st_export, docs (signature.json and README.md).
"""

from bert_jax.export.heads import KINDS, ServingHead, resolve_head
from bert_jax.export.writer import FORMATS, export

__all__ = ["FORMATS", "KINDS", "ServingHead", "export", "resolve_head"]
