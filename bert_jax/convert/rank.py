"""Which pre-trained model fits my data? Rank checkpoints by masked-LM loss on a sample of the task's text.

    python -m bert_jax.convert rank --checkpoints=DIR1,DIR2,zoo-name --text=unlabeled.txt \
        [--num_sequences=64 --max_seq_length=128 --seed=0 --output_json=rank.json]

A cheap proxy of domain fit (the idea behind UER's model zoo of models trained on different corpora): the
model whose MLM head best predicts held-out words of *your* text has seen text most like it.

Protocol (deterministic for a seed):
  1. Sample `num_sequences` windows of consecutive non-empty lines from the text file.
  2. Split each window into words with BERT's basic tokenizer (whitespace, punctuation, one word per CJK
     character): the words and their character spans do not depend on any vocabulary.
  3. Keep the longest prefix of words that fits `max_seq_length - 2` WordPieces under *every* checkpoint's
     own tokenizer, and choose 15% of its words to mask, among words that no vocabulary maps to [UNK]
     ("where vocabularies allow"). Every checkpoint is scored on the same words of the same windows.
  4. Each checkpoint replaces all WordPieces of the chosen words with [MASK] and predicts them.
     Reported: loss per masked WordPiece and its accuracy (comparable between checkpoints that share a
     vocabulary), and loss per masked word = sum of the NLLs of its pieces (comparable across vocabularies;
     with a shared vocabulary it orders checkpoints exactly as the per-piece loss). Ranking uses the latter.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Dict, List, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.input_pipeline.tokenization import basic_tokenize, load_tokenizer
from bert_jax.models import BertForPreTraining
from bert_jax.models.objectives.mlm import MaskedLM
from bert_jax.pretrained import params_dir
from bert_jax.pretrained.load import load_pretrained

_MASK, _CLS, _SEP, _UNK, _PAD = "[MASK]", "[CLS]", "[SEP]", "[UNK]", "[PAD]"


@dataclasses.dataclass
class Candidate:
  name: str
  directory: str
  config: object
  params: dict
  tokenizer: object
  fresh_mlm: bool


def load_candidate(name_or_path: str, search_dirs: Sequence[str] = ()) -> Candidate:
  ckpt = load_pretrained(name_or_path, search_dirs)
  config, params, vocab_file, directory = ckpt.config, ckpt.params, ckpt.require_vocab(), ckpt.directory
  mlm = MaskedLM.param_groups[0]   # the masked-LM head ranks the candidates
  if mlm not in params or "bert" not in params:
    raise ValueError(f"{directory}: params have no MLM head (top-level keys {sorted(params)}); ranking by "
                     "masked-LM loss needs a pre-training checkpoint")
  do_lower_case = ckpt.do_lower_case
  if do_lower_case is None:
    do_lower_case = params_dir.guess_do_lower_case(vocab_file)
  tok = load_tokenizer(vocab_file, do_lower_case=bool(do_lower_case),
                       required_tokens=(_UNK, _CLS, _SEP, _MASK))
  if tok.vocab_size > config.vocab_size:
    raise ValueError(f"{vocab_file}: {tok.vocab_size} ids but the model has vocab_size={config.vocab_size}")
  fresh = mlm in ckpt.info.get("report", {}).get("fresh_groups", [])
  return Candidate(name_or_path, directory, config, {"bert": params["bert"], mlm: params[mlm]}, tok, fresh)


def read_lines(text_file: str) -> List[str]:
  if not os.path.exists(text_file):
    raise FileNotFoundError(f"text file not found: {text_file}")
  with open(text_file, encoding="utf-8", errors="replace") as f:
    lines = [line.strip() for line in f]
  lines = [line for line in lines if line]
  if not lines:
    raise ValueError(f"{text_file}: no non-empty lines to rank on")
  return lines


@dataclasses.dataclass
class Window:
  words: List[str]                    # basic-tokenizer words (original casing), the same for all candidates
  pieces: List[List[List[str]]]       # [candidate][word] -> WordPieces
  masked: List[int]                   # indices of the masked words


def sample_windows(lines: List[str], tokenizers: Sequence, num_sequences: int, max_seq_length: int,
                   masked_lm_prob: float, seed: int) -> List[Window]:
  """The shared evaluation sample (see the module docstring)."""
  rng = np.random.default_rng(seed)
  budget = max_seq_length - 2
  starts = rng.permutation(len(lines))[:num_sequences] if num_sequences < len(lines) else \
      rng.integers(0, len(lines), size=num_sequences)
  windows = []
  for start in starts:
    words: List[str] = []
    i = int(start)
    while len(words) < budget and i < len(lines):   # words <= pieces, so `budget` words always suffice
      words += basic_tokenize(lines[i], do_lower_case=False)
      i += 1
    pieces = [[tok.tokenize(w) for w in words] for tok in tokenizers]
    n = len(words)
    for per_word in pieces:
      total = 0
      for j, p in enumerate(per_word):
        total += len(p)
        if total > budget:
          n = min(n, j)
          break
    words = words[:n]
    pieces = [per_word[:n] for per_word in pieces]
    eligible = [j for j in range(n)
                if all(p[j] and _UNK not in p[j] for p in pieces)]
    if not eligible:
      continue
    k = min(len(eligible), max(1, int(round(masked_lm_prob * n))))
    masked = sorted(int(j) for j in rng.choice(eligible, size=k, replace=False))
    windows.append(Window(words, pieces, masked))
  if not windows:
    raise ValueError("no window of the text has a word that every vocabulary can represent without [UNK]")
  return windows


def _encode(cand_index: int, cand: Candidate, windows: List[Window], max_seq_length: int):
  """Arrays for one candidate: ids/mask [N, T]; positions/labels/weights/word ids [N, P]."""
  vocab = cand.tokenizer.vocab
  rows = []
  for w in windows:
    ids, positions, labels, word_of = [vocab[_CLS]], [], [], []
    masked = set(w.masked)
    for j, pieces in enumerate(w.pieces[cand_index]):
      for p in pieces:
        pid = vocab[p]
        if j in masked:
          positions.append(len(ids))
          labels.append(pid)
          word_of.append(j)
          ids.append(vocab[_MASK])
        else:
          ids.append(pid)
    ids.append(vocab[_SEP])
    rows.append((ids, positions, labels, word_of))
  n_pred = max(len(r[1]) for r in rows)
  n_pred = int(math.ceil(n_pred / 8) * 8)
  N = len(rows)
  input_ids = np.full((N, max_seq_length), vocab.get(_PAD, 0), np.int32)
  input_mask = np.zeros((N, max_seq_length), np.int32)
  pos = np.zeros((N, n_pred), np.int32)
  lab = np.zeros((N, n_pred), np.int32)
  wts = np.zeros((N, n_pred), np.float32)
  word = np.full((N, n_pred), -1, np.int32)
  for i, (ids, positions, labels, word_of) in enumerate(rows):
    input_ids[i, :len(ids)] = ids
    input_mask[i, :len(ids)] = 1
    pos[i, :len(positions)] = positions
    lab[i, :len(labels)] = labels
    wts[i, :len(labels)] = 1.0
    word[i, :len(word_of)] = word_of
  return input_ids, input_mask, pos, lab, wts, word


@functools.lru_cache(maxsize=8)
def _nll_fn(config):
  """Jitted (params, ids, mask, positions, labels) -> (nll [B, P], correct [B, P]); one compile per config."""
  model = BertForPreTraining(config, targets=(MaskedLM(),))

  @jax.jit
  def nll_and_correct(params, ids, mask, positions, labels):
    logits = model.apply({"params": params}, ids, mask, jnp.zeros_like(ids), positions)[f"{MaskedLM.name}_logits"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    return nll, jnp.argmax(logits, axis=-1) == labels

  return nll_and_correct


def score(cand: Candidate, cand_index: int, windows: List[Window], max_seq_length: int,
          batch_size: int = 16) -> Dict[str, float]:
  input_ids, input_mask, pos, lab, wts, word = _encode(cand_index, cand, windows, max_seq_length)
  nll_and_correct = _nll_fn(cand.config.replace(scan_layers=False, dtype="float32"))

  N = input_ids.shape[0]
  pad = (-N) % batch_size
  def padded(a):
    return np.concatenate([a, np.repeat(a[:1], pad, axis=0)]) if pad else a
  arrays = [padded(a) for a in (input_ids, input_mask, pos, lab)]
  nll_all, correct_all = [], []
  for b in range(0, N + pad, batch_size):
    nll, correct = nll_and_correct(cand.params, *(a[b:b + batch_size] for a in arrays))
    nll_all.append(np.asarray(nll))
    correct_all.append(np.asarray(correct))
  nll = np.concatenate(nll_all)[:N].astype(np.float64) * wts
  correct = np.concatenate(correct_all)[:N] & (wts > 0)
  n_tokens = float(wts.sum())
  # Per word: sum of piece NLLs; correct only if all pieces are.
  word_nll, word_ok = {}, {}
  for i in range(N):
    for p in range(pos.shape[1]):
      if wts[i, p] > 0:
        key = (i, int(word[i, p]))
        word_nll[key] = word_nll.get(key, 0.0) + float(nll[i, p])
        word_ok[key] = word_ok.get(key, True) and bool(correct[i, p])
  n_words = len(word_nll)
  return {
      "mlm_loss_per_token": float(nll.sum() / n_tokens),
      "mlm_accuracy": float(correct.sum() / n_tokens),
      "mlm_loss_per_word": float(sum(word_nll.values()) / n_words),
      "word_accuracy": float(sum(word_ok.values()) / n_words),
      "masked_tokens": int(n_tokens),
      "masked_words": n_words,
  }


def rank_checkpoints(checkpoints: Sequence[str], text_file: str, num_sequences: int = 64,
                     max_seq_length: int = 128, masked_lm_prob: float = 0.15, seed: int = 0,
                     batch_size: int = 16, search_dirs: Sequence[str] = ()) -> List[dict]:
  """Scores every checkpoint on the same masked words; returns rows sorted best (lowest loss) first."""
  if not checkpoints:
    raise ValueError("no checkpoints to rank")
  cands = [load_candidate(c, search_dirs) for c in checkpoints]
  for c in cands:
    if max_seq_length > c.config.max_position_embeddings:
      raise ValueError(f"{c.name}: --max_seq_length={max_seq_length} exceeds its max_position_embeddings="
                       f"{c.config.max_position_embeddings}; pass --max_seq_length="
                       f"{min(x.config.max_position_embeddings for x in cands)} or less")
  windows = sample_windows(read_lines(text_file), [c.tokenizer for c in cands], num_sequences, max_seq_length,
                           masked_lm_prob, seed)
  same_vocab = len({(tuple(c.tokenizer.vocab.items()), c.tokenizer.do_lower_case) for c in cands}) == 1
  rows = []
  for i, c in enumerate(cands):
    row = {"checkpoint": c.name, "directory": c.directory, "layers": c.config.num_hidden_layers,
           "hidden": c.config.hidden_size, "vocab_size": c.config.vocab_size,
           "fresh_mlm_head": c.fresh_mlm, "sequences": len(windows), "same_vocabulary": same_vocab}
    row.update(score(c, i, windows, max_seq_length, batch_size))
    rows.append(row)
  rows.sort(key=lambda r: r["mlm_loss_per_word"])
  for r, row in enumerate(rows, 1):
    row["rank"] = r
  return rows


def format_table(rows: List[dict]) -> str:
  header = ["rank", "checkpoint", "L/H", "loss/word", "word acc", "loss/token", "token acc", "tokens", "words"]
  body = []
  for r in rows:
    name = r["checkpoint"] + ("  (MLM head untrained!)" if r["fresh_mlm_head"] else "")
    body.append([str(r["rank"]), name, f"{r['layers']}/{r['hidden']}", f"{r['mlm_loss_per_word']:.3f}",
                 f"{r['word_accuracy']:.3f}", f"{r['mlm_loss_per_token']:.3f}", f"{r['mlm_accuracy']:.3f}",
                 str(r["masked_tokens"]), str(r["masked_words"])])
  widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
  line = lambda cells: "  ".join(c.ljust(w) if i == 1 else c.rjust(w)  # noqa: E731
                                 for i, (c, w) in enumerate(zip(cells, widths)))
  out = [line(header), line(["-" * w for w in widths])] + [line(b) for b in body]
  if rows and not rows[0]["same_vocabulary"]:
    out.append("vocabularies differ: ranked by loss per masked word (per-token figures are not comparable)")
  return "\n".join(out)
