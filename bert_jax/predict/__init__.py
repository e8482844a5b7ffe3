"""Using a model on raw text: fill-mask (cloze), sentence features, and predictions of a fine-tuned model.
The command line is `python -m bert_jax.predict {fill-mask, features, classify}` (see __main__.py).

    from bert_jax.predict import FillMask, FeatureExtractor
    FillMask("runs/bert_tiny").predict(["今天天气很[MASK]。"], top_k=5)
    # [{"text": ..., "masks": [{"position": 5, "candidates": [{"token": "好", "id": 1234, "score": 0.41}, ...]}]}]
    FeatureExtractor("converted/minilm", pooling="mean").encode(["a sentence", ...])   # [N, H] float32

`model` is anything `bert_jax.pretrained.load_pretrained` accepts: a zoo name, a converted directory, a
pre-training work dir or a fine-tuning work dir. Fill-mask needs the masked-LM head (params["mlm"]: a
pre-training work dir, or a Google / Hugging Face checkpoint that has `cls.predictions`); encoders saved
without it (e.g. sentence-transformers' MiniLM) raise a UserError saying so. Inputs run in fixed-size batches
(one compile), with a progress bar when there is more than one batch.

Packing (the default, `packing=True`; the command line's --packing=false turns it off): texts are packed
best-fit into rows (input_pipeline/example_packing.py), at most `max_examples_per_row` per row, each attending
only to itself with its own positions (models/layers.py), so a batch of rows carries several texts where the
padded path carried one and padding. The outputs come back per text, in input order, and equal the padded
path's to float32 rounding (tests/test_predict_packing.py).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Dict, List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from bert_jax.errors import UserError
from bert_jax.logs import log_once
from bert_jax.finetune.predict import Predictor
from bert_jax.finetune.tasks.embedding import BiEncoder
from bert_jax.input_pipeline import example_packing, tokenization
from bert_jax.models import BertForPreTraining, BertModel
from bert_jax.models.objectives import OBJECTIVES
from bert_jax.models.objectives.electra import Electra
from bert_jax.models.objectives.mlm import MaskedLM
from bert_jax.models.heads import LEXICAL_POOLINGS, POOLINGS, SPARSE_POOLINGS, pool
from bert_jax.pretrained import Pretrained, is_workdir, load_pretrained, params_dir
from bert_jax.engine.train_step import compute_dtype

log = logging.getLogger(__name__)

MASK = "[MASK]"
# Examples per packed row when predicting: raw texts are often short, and a larger cap costs only the [B, T, K]
# one-hot the poolings read. 16 x 8 tokens fills a 128-token row.
PREDICT_MAX_EXAMPLES = 16


def load_model(model: str) -> Pretrained:
  """load_pretrained with user-facing errors (a path or zoo name that is not a checkpoint is a UserError)."""
  try:
    return load_pretrained(model)
  except (FileNotFoundError, ValueError) as e:
    raise UserError(f"--model={model!r}: {e}") from None


def make_tokenizer(pre: Pretrained) -> tokenization.FullTokenizer:
  try:
    vocab = pre.require_vocab()
    lower = pre.do_lower_case
    if lower is None:
      lower = params_dir.guess_do_lower_case(vocab, hint=pre.directory)
    return tokenization.load_tokenizer(vocab, do_lower_case=bool(lower))
  except (FileNotFoundError, ValueError) as e:     # no vocab, or one that does not read (encoding, specials)
    raise UserError(f"{pre.directory}: {e}") from None


def untrained_pooler(pre: Pretrained) -> str:
  """Why `pre`'s pooler (the dense + tanh over [CLS] that pooling="cls" reads) holds its random init, or "":
  a converter initialised it (ELECTRA, MaskedLM-only checkpoints), or a pre-training work dir trained no
  sentence-level target (nsp / sop) that reads it (MLM-only, ELECTRA). Fine-tuned models are not judged."""
  if pre.finetune_info:
    return ""
  if "pooler" in pre.info.get("report", {}).get("fresh_groups", []):
    return "its pooler was randomly initialised at conversion (the source checkpoint has none)"
  sentence_level = [name for name, cls in OBJECTIVES.items() if cls.trains_pooler]
  if is_workdir(pre.directory) and not set(sentence_level) & set(pre.params):
    return (f"it was pre-trained without a sentence-level target ({' or '.join(sentence_level)}), so its pooler "
            "never left its random init")
  return ""


def _progress(total: int, desc: str):
  return tqdm(total=total, desc=desc, disable=total <= 1, mininterval=1.0, dynamic_ncols=True)


def _pad_rows(rows: Sequence[Sequence[int]], length: int) -> np.ndarray:
  out = np.zeros((len(rows), length), np.int32)
  for i, r in enumerate(rows):
    out[i, :len(r)] = r
  return out


def cap_seq_length(max_seq_length: int, pre) -> int:
  """`max_seq_length`, capped at the model's position table with a warning naming both numbers (it was capped
  silently: a user asking for 1024 tokens got 512 and no word of it)."""
  limit = int(pre.config.max_position_embeddings)
  if int(max_seq_length) > limit:
    print(f"warning: --max_seq_length={int(max_seq_length)} exceeds the model's max_position_embeddings={limit} "
          f"({pre.directory}); using {limit}", file=sys.stderr)
    return limit
  return int(max_seq_length)


class FillMask:
  """Top-k tokens at each [MASK] of a text, from the checkpoint's masked-LM head."""

  def __init__(self, model: str, batch_size: int = 16, max_seq_length: int = 128, packing: bool = True,
               max_examples_per_row: int = PREDICT_MAX_EXAMPLES):
    self.pre = load_model(model)
    mlm, generator = MaskedLM.param_groups[0], Electra.param_groups[0]
    if mlm not in self.pre.params and generator in self.pre.params:
      raise UserError(
          f"--model={model!r} ({self.pre.directory}) is an ELECTRA model: its discriminator has no masked-LM "
          "head; its generator has one. Write the generator out and fill masks with it: python -m "
          f"bert_jax.convert export-hf --input={self.pre.directory} --output=GEN_HF --heads=mlm, then "
          "import-hf --input=GEN_HF --output=GEN and --model=GEN")
    if mlm not in self.pre.params:
      raise UserError(
          f"--model={model!r} ({self.pre.directory}) has no masked-LM head (params['mlm']; top-level keys "
          f"{sorted(self.pre.params)}), so it cannot fill masks. Use a pre-training work dir or a checkpoint "
          "converted with its cls.predictions head (bare encoders such as sentence-transformers' MiniLM have none)")
    fresh = self.pre.info.get("report", {}).get("fresh_groups", [])
    if mlm in fresh:   # a converter initialised the head because the source checkpoint had none
      raise UserError(
          f"--model={model!r} ({self.pre.directory}): its masked-LM head was randomly initialised at conversion "
          "(the source checkpoint had no cls.predictions weights, e.g. sentence-transformers' MiniLM), so it "
          "cannot fill masks; use features instead, or a checkpoint with its pre-training head")
    self.tokenizer = make_tokenizer(self.pre)
    if MASK not in self.tokenizer.vocab:
      raise UserError(f"{self.pre.vocab_file} has no {MASK} token")
    self.mask_id = self.tokenizer.vocab[MASK]
    self.inv_vocab = self.tokenizer.inv_vocab   # a tokenizer.json's own token names, not BERT's aliases
    self.batch_size = int(batch_size)
    self.max_seq_length = cap_seq_length(max_seq_length, self.pre)
    cfg = self.pre.config.replace(dtype=compute_dtype("auto"), scan_layers=False)
    self.cap = packing_cap(cfg, packing, max_examples_per_row)
    cfg = cfg.replace(max_examples_per_row=self.cap)
    model_ = BertForPreTraining(cfg, targets=(MaskedLM(),))
    self.params = jax.device_put({"bert": self.pre.params["bert"], mlm: self.pre.params[mlm]})

    def forward(params, ids, mask, positions, k):
      out = model_.apply({"params": params}, ids, mask, jnp.zeros_like(ids), positions, deterministic=True)
      probs = jax.nn.softmax(out[f"{mlm}_logits"], axis=-1)
      return jax.lax.top_k(probs, k)

    self._forward = jax.jit(forward, static_argnums=4)

  def encode(self, text: str) -> List[int]:
    """[CLS] text [SEP] ids with [MASK] kept as one token (the basic tokenizer would split it)."""
    pieces = text.split(MASK)
    if len(pieces) < 2:
      raise UserError(f"the text has no {MASK}: {text!r}")
    if getattr(self.tokenizer, "reads_special_tokens", False):
      # a tokenizer.json finds [MASK] in the text itself, with its own rules (ModernBERT's absorbs the space
      # before it), as transformers' pipeline does
      ids = self.tokenizer.encode(text)
    else:
      ids = []
      for i, piece in enumerate(pieces):
        if i:
          ids.append(self.mask_id)
        ids.extend(self.tokenizer.encode(piece))
    cls, sep = self.tokenizer.vocab["[CLS]"], self.tokenizer.vocab["[SEP]"]
    if len(ids) + 2 > self.max_seq_length:
      raise UserError(f"the text has {len(ids) + 2} tokens, more than max_seq_length={self.max_seq_length}")
    return [cls] + ids + [sep]

  def predict(self, texts: Sequence[str], top_k: int = 5) -> List[dict]:
    if top_k < 1:
      raise UserError(f"--top_k={top_k}; expected >= 1")
    rows = [self.encode(t) for t in texts]
    # packed (cap > 0): several texts per row; padded: a cap of 1 is one text per row, as before
    layout = example_packing.best_fit([len(r) for r in rows], self.max_seq_length, self.cap or 1)
    ids, mask = packed_rows(rows, layout)
    where = [[int(layout.offset[i]) + j for j, x in enumerate(r) if x == self.mask_id] for i, r in enumerate(rows)]
    per_row = [[] for _ in range(layout.num_rows)]            # each row's mask positions, example by example
    for i, positions in enumerate(where):
      per_row[layout.row[i]].extend(positions)
    width = max(len(p) for p in per_row)
    positions = np.zeros((layout.num_rows, width), np.int32)
    for r, p in enumerate(per_row):
      positions[r, :len(p)] = p
    k = min(top_k, self.pre.config.vocab_size)
    probs = np.zeros((layout.num_rows, width, k), np.float32)
    idx = np.zeros((layout.num_rows, width, k), np.int32)
    bar = _progress(-(-layout.num_rows // self.batch_size), "fill-mask")
    for start in range(0, layout.num_rows, self.batch_size):
      real = min(self.batch_size, layout.num_rows - start)
      take = np.arange(start, start + self.batch_size) % layout.num_rows   # the last batch repeats rows
      p, t = self._forward(self.params, ids[take], mask[take], positions[take], k)
      probs[start:start + real], idx[start:start + real] = np.asarray(p)[:real], np.asarray(t)[:real]
      bar.update(1)
    bar.close()
    out: List[dict] = []
    for i, text in enumerate(texts):
      r, first = layout.row[i], per_row[layout.row[i]].index(where[i][0])
      masks = []
      for m, pos in enumerate(where[i]):
        masks.append({"position": int(pos - layout.offset[i]), "candidates": [
            {"token": self.inv_vocab.get(int(t), "[UNK]"), "id": int(t), "score": round(float(s), 6)}
            for t, s in zip(idx[r, first + m], probs[r, first + m])]})
      out.append({"text": text, "masks": masks})
    return out


def recorded_pipeline(pre: Pretrained) -> dict:
  """The sentence pipeline a checkpoint records: an embedding task's finetune_info.json "sentence_embedding",
  else an import's convert_info.json one (sentence-transformers' modules.json), else {}."""
  return (pre.finetune_info or {}).get("sentence_embedding") or (pre.info or {}).get("sentence_embedding") or {}


def sentence_pipeline(pre: Pretrained):
  """(pooling, normalize) the checkpoint says its sentence vectors take: an imported sentence-transformers
  model's modules.json (convert_info.json "sentence_embedding": Pooling mode, Normalize module), or an
  embedding task's finetune_info.json; ("mean", False) when it says nothing."""
  said = recorded_pipeline(pre)
  return str(said.get("pooling", "mean")), bool(said.get("normalize", False))


def query_idf(pre: Pretrained) -> Optional[np.ndarray]:
  """The IDF table [V] an inference-free sparse model weights a query's tokens with (embedding.query_encoder=idf,
  recorded in finetune_info.json), or None for a model that encodes queries as passages."""
  said = recorded_pipeline(pre)
  if said.get("query_encoder") != "idf":
    return None
  group = pre.params.get("query_encoder") or {}
  if "idf" not in group:
    raise UserError(f"{pre.directory}: its sentence pipeline says query_encoder=idf, but the params hold no "
                    "query_encoder/idf table")
  return np.asarray(group["idf"], np.float32)


def sparse_head_params(pre: Pretrained, pooling: str) -> dict:
  """The params a sparse pooling's BiEncoder reads: the encoder and, for splade, the masked-LM head
  (params["mlm"]); for lexical / lexical_log, the term-weight head of a model fine-tuned with it, else that
  head's initial value (every token weighs 1: the term frequency fine-tuning starts from)."""
  if pooling in LEXICAL_POOLINGS:
    head = pre.params.get("term_weight") or {"kernel": np.zeros((pre.config.hidden_size, 1), np.float32),
                                             "bias": np.ones((1,), np.float32)}
    return {"bert": pre.params["bert"], "term_weight": head}
  return {"bert": pre.params["bert"], "mlm": pre.params["mlm"]}


def sentence_max_length(pre: Pretrained) -> int:
  """The token limit the checkpoint's sentence pipeline records (sentence-transformers' max_seq_length), else
  128."""
  said = recorded_pipeline(pre)
  return int(said.get("max_seq_length") or 128)


class FeatureExtractor:
  """Sentence vectors [N, H] (float32) from the encoder, pooled by `pooling` (models.heads.POOLINGS) and
  L2-normalised when `normalize`; None takes what the checkpoint records (sentence_pipeline). `encode` embeds
  passages (documents); `encode_queries` embeds queries, the same way except for an inference-free sparse model
  (query_idf), whose query is the set of its tokens weighted by IDF."""

  def __init__(self, model: str, pooling: Optional[str] = None, batch_size: int = 32,
               max_seq_length: Optional[int] = None, packing: bool = True,
               max_examples_per_row: int = PREDICT_MAX_EXAMPLES, normalize: Optional[bool] = None,
               pre: Optional[Pretrained] = None):
    if pooling is not None and pooling not in POOLINGS + SPARSE_POOLINGS:
      raise UserError(f"--pooling={pooling!r}; expected one of {', '.join(POOLINGS + SPARSE_POOLINGS)}")
    if max_seq_length is not None and int(max_seq_length) < 2:   # 1 was a numpy ValueError traceback
      raise UserError(f"--max_seq_length={max_seq_length}; expected >= 2 (a row holds [CLS] and [SEP])")
    self.pre = pre if pre is not None else load_model(model)
    max_seq_length = max_seq_length or sentence_max_length(self.pre)
    said_pooling, said_normalize = sentence_pipeline(self.pre)
    pooling = pooling or said_pooling
    self.normalize = said_normalize if normalize is None else bool(normalize)
    if "bert" not in self.pre.params:
      raise UserError(f"{self.pre.directory}: no encoder parameters (params['bert'])")
    why = untrained_pooler(self.pre) if pooling == "cls" else ""
    if why:
      raise UserError(f"--pooling=cls reads the pooler of {self.pre.directory}, but {why}; use --pooling=first "
                      "(the same [CLS] vector without the pooler) or --pooling=mean")
    self.tokenizer = make_tokenizer(self.pre)
    self.pooling, self.batch_size = pooling, int(batch_size)
    self.query_idf = query_idf(self.pre) if pooling in SPARSE_POOLINGS else None
    self.max_seq_length = cap_seq_length(max_seq_length, self.pre)
    self.truncated = 0
    cfg = self.pre.config.replace(dtype=compute_dtype("auto"), scan_layers=False)
    self.layout = None      # the last encode's packing (padding shares before / after)
    normalize = self.normalize
    self.dim = cfg.hidden_size
    if pooling in SPARSE_POOLINGS:
      self._sparse_model(cfg, normalize)
      return
    self.cap = packing_cap(cfg, packing, max_examples_per_row)
    cfg = cfg.replace(max_examples_per_row=self.cap)
    model_ = BertModel(cfg)
    self.params = jax.device_put(self.pre.params["bert"])

    def forward(params, ids, mask):
      enc = model_.apply({"params": params}, ids, mask, jnp.zeros_like(ids), deterministic=True)
      v = pool(enc, mask, pooling, cfg.max_examples_per_row).astype(jnp.float32)
      if normalize:   # as sentence-transformers' Normalize (torch.nn.functional.normalize: eps 1e-12)
        v = v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
      return v

    self._forward = jax.jit(forward)

  def encode(self, texts: Sequence[str]) -> np.ndarray:
    cls, sep = self.tokenizer.vocab["[CLS]"], self.tokenizer.vocab["[SEP]"]
    batch_tok = tokenization.fast_batch_tokenizer(self.tokenizer)
    rows = []
    for ids in batch_tok.encode_batch(list(texts)):
      if len(ids) > self.max_seq_length - 2:
        self.truncated += 1
        ids = ids[:self.max_seq_length - 2]
      rows.append([cls] + ids + [sep])
    length = max(len(r) for r in rows) if rows else 2
    length = min(self.max_seq_length, -(-length // 8) * 8)   # one compile per multiple of 8 tokens
    if self.cap and rows:
      return self._encode_packed(rows, length)
    out = np.zeros((len(rows), self.dim), np.float32)
    bar = _progress(-(-len(rows) // self.batch_size), "features")
    for start in range(0, len(rows), self.batch_size):
      chunk = rows[start:start + self.batch_size]
      real = len(chunk)
      ids = _pad_rows(chunk + [chunk[0]] * (self.batch_size - real), length)
      mask = np.zeros_like(ids)
      for i, r in enumerate(chunk + [chunk[0]] * (self.batch_size - real)):
        mask[i, :len(r)] = 1
      out[start:start + real] = np.asarray(self._forward(self.params, ids, mask))[:real]
      bar.update(1)
    bar.close()
    return out

  def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
    """Query vectors: encode(texts), or for an inference-free model (query_idf) [N, V] with each of the query's
    tokens (at most max_seq_length - 2, as in training) at its IDF, L2-normalised when `normalize`."""
    if self.query_idf is None:
      return self.encode(texts)
    out = np.zeros((len(texts), len(self.query_idf)), np.float32)
    for i, ids in enumerate(tokenization.fast_batch_tokenizer(self.tokenizer).encode_batch(list(texts))):
      if len(ids) > self.max_seq_length - 2:
        self.truncated += 1
      ids = np.asarray(ids[:self.max_seq_length - 2], np.int64)
      out[i, ids] = self.query_idf[ids]
    if self.normalize:
      out /= np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
    return out

  def _sparse_model(self, cfg, normalize: bool):
    """pooling=splade: the encoder and its masked-LM head at every token, SPLADE's max of log(1 + relu) per
    vocabulary entry ([N, V]); pooling=lexical: the term-weight head's weight of each token summed per entry
    (lexical_log: log(1 + the sum); a model without one, e.g. a pre-training work dir: every token 1, the term
    frequency fine-tuning starts from). One padded row per text (a packed row's [T, V] vectors per example would
    cost K times the memory)."""
    self.cap, self.dim = 0, cfg.vocab_size
    mlm = MaskedLM.param_groups[0]
    if self.pooling == "splade" and (mlm not in self.pre.params or mlm in self.pre.fresh_groups()):
      raise UserError(f"--pooling=splade reads the masked-LM head (params['{mlm}']), but {self.pre.directory} "
                      + ("has it only randomly initialised at conversion" if mlm in self.pre.params else "has none")
                      + "; use a pre-training work dir, an embedding model fine-tuned with pooling=splade, or "
                      "--pooling=mean")
    model_ = BiEncoder(cfg, self.pooling, normalize)
    self.params = jax.device_put(sparse_head_params(self.pre, self.pooling))

    def forward(params, ids, mask):
      return model_.apply({"params": params}, ids, mask, jnp.zeros_like(ids))["embeddings"][:, 0]

    self._forward = jax.jit(forward)

  def _encode_packed(self, rows: List[List[int]], length: int) -> np.ndarray:
    """encode() on packed rows of `length` tokens: [N, H] in the order of `rows`."""
    layout = example_packing.best_fit([len(r) for r in rows], length, self.cap)
    self.layout = layout
    ids, mask = packed_rows(rows, layout)
    out = np.zeros((layout.num_rows, self.cap, self.dim), np.float32)
    bar = _progress(-(-layout.num_rows // self.batch_size), "features")
    for start in range(0, layout.num_rows, self.batch_size):
      real = min(self.batch_size, layout.num_rows - start)
      take = np.arange(start, start + self.batch_size) % layout.num_rows   # the last batch repeats rows
      out[start:start + real] = np.asarray(self._forward(self.params, ids[take], mask[take]))[:real]
      bar.update(1)
    bar.close()
    return example_packing.unpack_outputs({"v": out}, layout, token_level=False)["v"]


def packing_cap(cfg, packing: bool, max_examples_per_row: int) -> int:
  """The cap of examples per row a predictor packs with (0: padded rows: packing off, or an encoder family
  that cannot keep packed examples apart); UserError for a cap below 1."""
  if not packing:
    return 0
  if int(max_examples_per_row) < 1:
    raise UserError(f"--max_examples_per_row={max_examples_per_row}; expected >= 1 (or --packing=false)")
  try:
    cfg.replace(max_examples_per_row=int(max_examples_per_row))
  except ValueError:    # a family that cannot keep a row's examples apart (the lstm): padded rows, as
    # finetune.predict.Predictor does; packing is the default, so this is a note, not an error
    log_once(log, f"packing: encoder={cfg.encoder!r} cannot keep packed texts apart; one padded row per text")
    return 0
  return int(max_examples_per_row)


def packed_rows(rows: Sequence[Sequence[int]], layout) -> tuple:
  """(input_ids, input_mask) [R, T] int32 of token-id rows packed by `layout` (input_mask numbers examples)."""
  ids = np.zeros((layout.num_rows, layout.seq_len), np.int32)
  mask = np.zeros_like(ids)
  for i, r in enumerate(rows):
    row, start = layout.row[i], layout.offset[i]
    ids[row, start:start + len(r)] = r
    mask[row, start:start + len(r)] = layout.slot[i] + 1
  return ids, mask


def read_lines(path: str) -> List[str]:
  """Every line of a UTF-8 text file (empty lines included, so output row i is input line i)."""
  try:
    with open(path, encoding="utf-8-sig") as f:
      text = f.read()
  except FileNotFoundError:
    raise UserError(f"--input={path}: no such file") from None
  except IsADirectoryError:
    raise UserError(f"--input={path} is a directory; expected a text file, one text per line") from None
  except PermissionError:
    raise UserError(f"--input={path}: not readable (permission denied)") from None
  except UnicodeDecodeError as e:
    raise UserError(f"--input={path}: not UTF-8 ({e.reason} at byte {e.start})") from None
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [l.rstrip("\r") for l in lines]


def classify(model: str, texts: Sequence[str], text_pairs: Optional[Sequence[str]] = None,
             batch_size: int = 32, packing: bool = True) -> List[Dict]:
  """Predictions of a fine-tuning work dir (any task; multiple-choice tasks take JSON question lines); packed
  (the kinds that pack) unless packing=False."""
  pre = load_model(model)
  if not pre.finetune_info:
    raise UserError(f"--model={model!r} ({pre.directory}) is not a fine-tuned checkpoint (no finetune_info.json); "
                    "classify needs a fine-tuning work dir")
  p = Predictor(pre, batch_size=batch_size, packing=packing, max_examples_per_row=PREDICT_MAX_EXAMPLES)
  out: List[Dict] = []
  step = batch_size * max(1, p.cap)     # packed: enough texts per call to fill batch_size rows
  bar = _progress(-(-len(texts) // step), "classify")
  for start in range(0, len(texts), step):
    chunk = list(texts[start:start + step])
    if p.task.takes_choices:
      questions = []
      for i, line in enumerate(chunk):
        try:
          questions.append(json.loads(line))
        except json.JSONDecodeError as e:
          raise UserError(f"input line {start + i + 1}: a multiple-choice model takes JSON lines "
                          f'{{"context", "question", "choices"}} ({e.msg})') from None
      out.extend(p.predict_choices(questions))
    else:
      pairs = None if text_pairs is None else list(text_pairs[start:start + step])
      out.extend(p.predict(chunk, pairs))
    bar.update(1)
  bar.close()
  return out
