"""Hugging Face `BertForPreTraining` (PyTorch) on the same configuration, for the speed ratio.

Imported only when torch and transformers are available. Same batch, sequence length, masked positions,
optimizer (AdamW) and precision; HF's MLM head runs at all positions (that is how it is written).
"""

from __future__ import annotations

import gc
import time

import numpy as np

from bert_jax.models.config import BertConfig


def available() -> bool:
  try:   # lazy: torch and transformers are optional and heavy (the baseline only)
    import torch  # noqa: F401
    import transformers  # noqa: F401
  except ImportError:
    return False
  return True


def run(cfg: BertConfig, batch: dict, dtype: str, steps: int, warmup: int, compile: bool = False) -> dict:
  """Times `steps` training steps of HF BertForPreTraining on `batch` (numpy, Google feature names)."""
  import torch  # lazy: optional and heavy, see available()
  import transformers  # lazy: as torch

  device = "cuda" if torch.cuda.is_available() else "cpu"
  hf_cfg = transformers.BertConfig(
      vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
      num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
      hidden_dropout_prob=cfg.hidden_dropout_prob, attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
      max_position_embeddings=cfg.max_position_embeddings, layer_norm_eps=cfg.layer_norm_eps,
      attn_implementation="sdpa")
  model = transformers.BertForPreTraining(hf_cfg).to(device).train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
  ids = torch.as_tensor(batch["input_ids"], dtype=torch.long, device=device)
  mask = torch.as_tensor(batch["input_mask"], dtype=torch.long, device=device)
  seg = torch.as_tensor(batch["segment_ids"], dtype=torch.long, device=device)
  labels = np.full(batch["input_ids"].shape, -100, np.int64)
  rows = np.arange(labels.shape[0])[:, None]
  w = batch["masked_lm_weights"] > 0
  labels[np.broadcast_to(rows, w.shape)[w], batch["masked_lm_positions"][w]] = batch["masked_lm_ids"][w]
  labels = torch.as_tensor(labels, device=device)
  nsp = torch.as_tensor(batch["next_sentence_labels"].reshape(-1), dtype=torch.long, device=device)
  autocast_dtype = torch.bfloat16 if dtype == "bfloat16" else None

  def step():
    with torch.autocast(device_type=device, dtype=autocast_dtype, enabled=autocast_dtype is not None):
      loss = model(input_ids=ids, attention_mask=mask, token_type_ids=seg, labels=labels,
                   next_sentence_label=nsp).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss

  fn = torch.compile(step) if compile else step
  if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
  for _ in range(warmup):
    fn()
  if device == "cuda":
    torch.cuda.synchronize()
  t0 = time.perf_counter()
  for _ in range(steps):
    loss = fn()
  loss.item()
  if device == "cuda":
    torch.cuda.synchronize()
  dt = (time.perf_counter() - t0) / steps
  peak_gib = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
  del fn, step, model, opt, loss
  gc.collect()
  if device == "cuda":
    torch.cuda.empty_cache()   # give the memory back before the JAX steps of the same run
  return {"step_time_s": dt, "seq_per_sec": ids.shape[0] / dt, "threads": torch.get_num_threads(),
          "peak_memory_gib": peak_gib}
