"""Name and shape mapping between our parameter tree and Google TF1 / Hugging Face BERT checkpoints.

One table (`name_table`) lists, for every parameter of `BertForPreTraining(cfg, ("mlm", "nsp"))`, its path in
our un-scanned tree, its Google TF1 variable name, its Hugging Face state-dict key and a *kind* saying how
the array is laid out in each format:

  kind          ours               Google TF1           Hugging Face (torch Linear is [out, in])
  same          any                same                 same
  dense_kernel  [in, out]          [in, out]            [out, in]
  qkv_kernel    [H, heads, hd]     [H, heads*hd]        [heads*hd, H]
  qkv_bias      [heads, hd]        [heads*hd]           [heads*hd]
  out_kernel    [heads, hd, H]     [heads*hd, H]        [H, heads*hd]
  nsp_kernel    [H, 2]             [2, H] (output_weights is stored transposed in Google's checkpoints)

The encoder layers' rows come from the encoder family (models/encoders: each family's `checkpoint_names`, per
module of one layer; `layer_entries` expands them), the heads' from the objectives; a family without names
(the lstm, a pre-LN transformer) is refused with its own statement (`check_post_ln_transformer`).

A `Layout` is a checkpoint family: its name table, the pre-training targets its heads are and the head groups
a checkpoint may lack. `BERT` is the default everywhere; convert/hf_albert.py defines `ALBERT` (SOP head,
shared layers, factorised embeddings).

`assign_params` turns a {source name: array} dict into our tree, asserting every shape against the model's
own shapes (`jax.eval_shape` of init), listing source names that map to nothing, naming missing targets,
and initialising whole optional groups (pooler / MLM head / NSP head) that a checkpoint lacks.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import flax
import flax.linen as nn
import jax
import numpy as np
from flax import traverse_util

from bert_jax.models import BertForPreTraining, dummy_inputs
from bert_jax.models.objectives import OBJECTIVES
from bert_jax.models import encoders, layers
from bert_jax.models.config import BertConfig
from bert_jax.input_pipeline import tokenization
from bert_jax.pretrained import params_dir

FORMATS = ("google", "hf")
LINEAR_KINDS = ("dense_kernel", "qkv_kernel", "out_kernel", "nsp_kernel")
# Groups that a checkpoint may lack as a whole: HF BertForMaskedLM has no pooler and no NSP head, a bare
# BertModel (sentence-transformers) has no heads. They are then initialised fresh and reported.
BERT_TARGETS = ("mlm", "nsp")    # the pre-training heads of Google's and HF's BertForPreTraining checkpoints
OPTIONAL_GROUPS = ("pooler",) + BERT_TARGETS
REQUIRED_GROUPS = ("embeddings", "encoder")


class ConversionError(ValueError):
  """A checkpoint that cannot be converted exactly; the message names the variables involved."""


@dataclasses.dataclass(frozen=True)
class Entry:
  ours: Tuple[str, ...]     # path in params, e.g. ("bert", "encoder", "layer_0", "attention", "query", "kernel")
  google: str               # Google TF1 variable name
  hf: str                   # Hugging Face state-dict key (with the "bert." prefix)
  kind: str                 # layout kind, see the module docstring
  group: str                # embeddings | encoder | pooler | mlm | nsp

  def source(self, fmt: str) -> str:
    return self.google if fmt == "google" else self.hf

  @property
  def path(self) -> str:
    return "/".join(self.ours)


def _ln(ours: Tuple[str, ...], google: str, hf: str, group: str) -> List[Entry]:
  return [Entry(ours + ("scale",), google + "/gamma", hf + ".weight", "same", group),
          Entry(ours + ("bias",), google + "/beta", hf + ".bias", "same", group)]


def _dense(ours: Tuple[str, ...], google: str, hf: str, group: str, kernel_kind="dense_kernel",
           bias_kind="same") -> List[Entry]:
  return [Entry(ours + ("kernel",), google + "/kernel", hf + ".weight", kernel_kind, group),
          Entry(ours + ("bias",), google + "/bias", hf + ".bias", bias_kind, group)]


# hidden_act values the model computes (models.layers.ACTIVATIONS), and transformers' other names for two of
# them (gelu_python: the erf GELU in Python; gelu_fast: the tanh approximation, gelu_new's formula).
HIDDEN_ACTS = tuple(layers.ACTIVATIONS)
HIDDEN_ACT_ALIASES = {"gelu_python": "gelu", "gelu_fast": "gelu_new"}


def check_hidden_act(act, source: str) -> str:
  """A checkpoint config's hidden_act as the model's name for it; one it cannot compute is a ConversionError
  naming `source` (not a model-building error after the weights are read)."""
  act = HIDDEN_ACT_ALIASES.get(act, act) if isinstance(act, str) else act
  if act not in HIDDEN_ACTS:
    raise ConversionError(f"{source}: hidden_act={act!r} is not supported; expected one of "
                          f"{HIDDEN_ACTS + tuple(HIDDEN_ACT_ALIASES)}")
  return act


def capped_lines(lines: List[str], limit: int = 10) -> str:
  """At most `limit` lines of a problem list, then how many more (a wrong config mismatches every tensor)."""
  shown = lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
  return "\n  " + "\n  ".join(shown)


def check_post_ln_transformer(config: BertConfig) -> Tuple[encoders.LayerParam, ...]:
  """The names one encoder layer has in Google's, HF's and UER's checkpoints, which config's encoder family
  carries (models/encoders; today the post-LN transformer's); a ConversionError with the family's reason when
  it has none."""
  try:
    return encoders.checkpoint_names(config)
  except ValueError as e:
    raise ConversionError(str(e)) from None


_KERNEL_KINDS = {"qkv": "qkv_kernel", "out": "out_kernel", "dense": "dense_kernel"}


def layer_entries(names: Sequence[encoders.LayerParam], ours: Tuple[str, ...], google: str, hf: str,
                  group: str) -> List[Entry]:
  """One encoder layer's entries: its family's per-module `names` under our path `ours`, Google's scope
  `google` and HF's prefix `hf`."""
  t: List[Entry] = []
  for p in names:
    o, g, h = ours + p.ours, f"{google}/{p.google}", f"{hf}.{p.hf}"
    if p.kind == "layer_norm":
      t += _ln(o, g, h, group)
    else:
      t += _dense(o, g, h, group, kernel_kind=_KERNEL_KINDS[p.kind],
                  bias_kind="qkv_bias" if p.kind == "qkv" else "same")
  return t


def embedding_entries(hf_model: str, google_model: str = "bert") -> List[Entry]:
  """The embedding tables and their LayerNorm (bert/embeddings/* of ours), under Google's scope
  `google_model`/embeddings and HF's `hf_model`.embeddings: BERT's, ALBERT's ("albert") and ELECTRA's
  ("electra", Google's "electra" or "generator") name them alike."""
  emb = ("bert", "embeddings")
  t = [Entry(emb + (name, "embedding"), f"{google_model}/embeddings/{name}", f"{hf_model}.embeddings.{name}.weight",
             "same", "embeddings") for name in ("word_embeddings", "position_embeddings", "token_type_embeddings")]
  return t + _ln(emb + ("LayerNorm",), f"{google_model}/embeddings/LayerNorm", f"{hf_model}.embeddings.LayerNorm",
                 "embeddings")


def name_table(config: BertConfig) -> List[Entry]:
  """Every parameter of BertForPreTraining(config, ("mlm", "nsp")) with its Google and HF names."""
  layer_names = check_post_ln_transformer(config)
  if config.share_layers or config.factorised_embeddings:
    raise ConversionError(
        f"share_layers={config.share_layers}, embedding_size={config.embedding_size}: an ALBERT-style model has "
        "no BERT checkpoint layout; it converts to and from Hugging Face ALBERT (bert_jax/convert/hf_albert.py)")
  t = embedding_entries("bert")
  for i in range(config.num_hidden_layers):
    t += layer_entries(layer_names, ("bert", "encoder", f"layer_{i}"), f"bert/encoder/layer_{i}",
                       f"bert.encoder.layer.{i}", "encoder")
  t += _dense(("bert", "pooler"), "bert/pooler/dense", "bert.pooler.dense", "pooler")
  t += objective_entries("bert", BERT_TARGETS)
  return t


def objective_entries(layout: str, targets: Sequence[str]) -> List[Entry]:
  """The head parameters of `targets` in a `layout` checkpoint, with their Google and HF names: each
  objective's own `conversion` (models/objectives/), grouped under the objective's name."""
  return [Entry(ours, google, hf, kind, name) for name in targets
          for ours, google, hf, kind in OBJECTIVES[name].conversion[layout]]


@dataclasses.dataclass(frozen=True)
class Layout:
  """A checkpoint family: `table(config)` lists every parameter of BertForPreTraining(config, targets)."""
  name: str
  table: Callable[[BertConfig], List[Entry]]
  targets: Tuple[str, ...]
  optional_groups: Tuple[str, ...]


BERT = Layout("bert", name_table, BERT_TARGETS, OPTIONAL_GROUPS)


# ---- layouts ---------------------------------------------------------------------------------------------
def source_shape(fmt: str, kind: str, target: Sequence[int]) -> Tuple[int, ...]:
  """The shape a parameter of our shape `target` has in checkpoint format `fmt`."""
  t = tuple(int(x) for x in target)
  if kind == "qkv_kernel":
    g = (t[0], t[1] * t[2])
  elif kind == "qkv_bias":
    g = (t[0] * t[1],)
  elif kind == "out_kernel":
    g = (t[0] * t[1], t[2])
  elif kind == "nsp_kernel":
    return (t[1], t[0])                    # [2, H] in both Google's and HF's checkpoints
  else:
    g = t
  if fmt == "hf" and kind in LINEAR_KINDS:
    g = g[::-1]
  return g


def to_ours(fmt: str, kind: str, array: np.ndarray, target: Sequence[int]) -> np.ndarray:
  if kind == "nsp_kernel" or (fmt == "hf" and kind in LINEAR_KINDS):
    array = array.T
  return np.ascontiguousarray(array.reshape(tuple(target)))


def from_ours(fmt: str, kind: str, array: np.ndarray) -> np.ndarray:
  array = np.asarray(array)
  if kind == "nsp_kernel":
    return np.ascontiguousarray(array.T)
  g = source_shape("google", kind, array.shape)
  out = array.reshape(g)
  if fmt == "hf" and kind in LINEAR_KINDS:
    out = out.T
  return np.ascontiguousarray(out)


# ---- expected shapes ---------------------------------------------------------------------------------------
def expected_shapes(config: BertConfig, targets: Tuple[str, ...] = ("mlm", "nsp")
                    ) -> Dict[Tuple[str, ...], Tuple[Tuple[int, ...], np.dtype]]:
  """{path: (shape, dtype)} of BertForPreTraining(config, targets) params, from jax.eval_shape."""
  return dict(_expected_shapes(config.replace(scan_layers=False), tuple(targets)))


@functools.lru_cache(maxsize=16)
def _expected_shapes(config: BertConfig, targets: Tuple[str, ...]):
  cfg = config.replace(scan_layers=False)
  model = BertForPreTraining(cfg, targets=targets)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *dummy_inputs(cfg)))
  params = nn.unbox(flax.core.unfreeze(shapes["params"]))
  flat = traverse_util.flatten_dict(params)
  return {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in flat.items()}


def init_params(config: BertConfig, seed: int = 0,
                paths: Optional[Iterable[Tuple[str, ...]]] = None, targets: Tuple[str, ...] = ("mlm", "nsp")
                ) -> dict:
  """Freshly initialised BertForPreTraining(config, ("mlm", "nsp")) params, as BERT initialises them:
  kernels and embeddings truncated normal(stddev=initializer_range, cut at 2 stddev), biases zero,
  LayerNorm scales one. NumPy only (no XLA compile): conversion fills absent head groups with this.
  `paths` restricts the result to those parameters (the rest is not even drawn)."""
  shapes = expected_shapes(config, targets)
  if paths is not None:
    shapes = {p: shapes[p] for p in paths}
  rng = np.random.default_rng(seed)
  std = config.initializer_range
  flat = {}
  for path, (shape, dtype) in sorted(shapes.items()):
    leaf = path[-1]
    if leaf == "scale":
      flat[path] = np.ones(shape, dtype)
    elif leaf in ("bias", "output_bias"):
      flat[path] = np.zeros(shape, dtype)
    else:
      x = rng.standard_normal(shape)
      bad = np.abs(x) > 2.0
      while bad.any():                      # resample outside +-2 stddev (truncated normal)
        x[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(x) > 2.0
      # flax's truncated_normal rescales so that the *truncated* distribution has stddev `std`.
      flat[path] = (x * (std / 0.87962566103423978)).astype(dtype)
  return traverse_util.unflatten_dict(flat)


def checked_table(config: BertConfig, layout: Layout = BERT) -> Tuple[List[Entry], Dict]:
  """layout.table(config), verified to cover exactly the model's parameters (guards against model renames)."""
  table = layout.table(config)
  shapes = expected_shapes(config, layout.targets)
  ours = {e.ours for e in table}
  extra, missing = sorted(ours - set(shapes)), sorted(set(shapes) - ours)
  if extra or missing:
    raise RuntimeError("bert_jax.convert.mapping is out of date with bert_jax.models: table entries without a "
                       f"model parameter {['/'.join(p) for p in extra]}, model parameters without a table "
                       f"entry {['/'.join(p) for p in missing]}")
  return table, shapes


# ---- assignment ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class ConversionReport:
  source: str
  fmt: str
  loaded: int = 0
  fresh_groups: List[str] = dataclasses.field(default_factory=list)
  ignored: List[str] = dataclasses.field(default_factory=list)      # known-ignorable names (optimizer slots...)
  notes: List[str] = dataclasses.field(default_factory=list)
  source_dtypes: Dict[str, int] = dataclasses.field(default_factory=dict)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  def summary(self) -> str:
    lines = [f"converted {self.loaded} tensors from {self.fmt} checkpoint {self.source}"]
    if self.source_dtypes:
      lines.append("source dtypes: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.source_dtypes.items())))
    if self.fresh_groups:
      lines.append(f"initialised fresh (absent from the checkpoint): {', '.join(self.fresh_groups)}")
    if self.ignored:
      shown = ", ".join(self.ignored[:6]) + (f", ... ({len(self.ignored)} in all)" if len(self.ignored) > 6 else "")
      lines.append(f"ignored {len(self.ignored)} known non-model variables: {shown}")
    lines += self.notes
    return "\n".join(lines)


def resolve_casing(do_lower_case: Optional[bool], report: "ConversionReport",
                   guess: Callable[[], Tuple[bool, str]]) -> bool:
  """do_lower_case as the user passed it, else `guess()`'s (value, reason), the choice and its reason noted in
  `report` (every importer's tokenizer note). The guess is the caller's: a vocab and a folder or file name
  (params_dir.guess_do_lower_case_why) or a Hugging Face folder's tokenizer files (hf.hf_do_lower_case); it is
  called only when there is something to guess."""
  if do_lower_case is None:
    do_lower_case, why = guess()
    report.notes.append(f"tokenizer: do_lower_case={do_lower_case} ({why}; pass --do_lower_case to override)")
  return do_lower_case


def save_imported(output: str, config: BertConfig, params, vocab_file: str, source: str, fmt: str,
                  do_lower_case: bool, report: "ConversionReport") -> None:
  """Writes an imported checkpoint as a params dir, its info naming the source, format and conversion report
  (the one writer of import-tf, import-hf and import-uer)."""
  params_dir.save_params_dir(output, config, params, vocab_file,
                             info={"source": os.path.abspath(source), "format": fmt,
                                   "do_lower_case": bool(do_lower_case), "report": report.to_dict()})


def check_vocab_size(vocab_file: str, n_vocab: int, config: BertConfig, config_name: str,
                     report: ConversionReport) -> None:
  """A vocab longer than the embedding table is an error (ids would overflow); a shorter one is noted (the
  table is padded, as some released models are)."""
  if n_vocab > config.vocab_size:
    raise ConversionError(f"{vocab_file} has {n_vocab} lines but {config_name} says vocab_size="
                          f"{config.vocab_size}: token ids would overflow the embedding table")
  # A file that is no BERT vocab (a JSON file passed as --vocab, a vocab without [CLS]/[SEP]/[MASK]) was written
  # out, and the converted directory failed only later, in fine-tuning or predict.
  try:
    tokenization.load_vocab(vocab_file)
  except ValueError as e:
    raise ConversionError(f"{e} (is it this model's vocab? pass --vocab=PATH)") from None
  if n_vocab < config.vocab_size:
    report.notes.append(f"vocab.txt has {n_vocab} tokens for vocab_size={config.vocab_size} (padded table)")


def assign_params(source: Mapping[str, np.ndarray], fmt: str, config: BertConfig, report: ConversionReport,
                  ignorable: Callable[[str], bool] = lambda name: False, seed: int = 0,
                  layout: Layout = BERT) -> dict:
  """{source name: array} in format `fmt` -> our params tree (float32 numpy, un-scanned).

  Raises ConversionError when a source name maps to nothing (unless `ignorable(name)`; those are recorded in
  `report.ignored`), when a shape differs from the model's, or when a target parameter has no source (except
  whole optional groups, which are initialised from `seed` and recorded in `report.fresh_groups`).
  """
  if fmt not in FORMATS:
    raise ValueError(f"unknown checkpoint format {fmt!r}; expected one of {FORMATS}")
  table, shapes = checked_table(config, layout)
  by_source = {e.source(fmt): e for e in table}
  unknown = sorted(n for n in source if n not in by_source and not ignorable(n))
  if unknown:
    hint = ""
    if fmt == "hf":
      hint = "; a fine-tuned model's task head (e.g. classifier.*) is dropped on purpose with --ignore='^classifier\\.'"
    elif any(n.endswith("/.ATTRIBUTES/VARIABLE_VALUE") for n in unknown):
      hint = ("; these are a TF2 object-based checkpoint's names (tf.train.Checkpoint, e.g. the TF Model Garden's "
              "BERT), not Google's TF1 variable names (bert/encoder/layer_0/...), which import-tf reads")
    raise ConversionError(
        f"{report.source}: {len(unknown)} {fmt} variable(s) map to no parameter of BertForPreTraining: "
        f"{unknown[:20]}" + (f" ... and {len(unknown) - 20} more" if len(unknown) > 20 else "") + hint)
  report.ignored = sorted(n for n in source if n not in by_source)

  present_groups = {e.group for e in table if e.source(fmt) in source}
  missing = [e for e in table if e.source(fmt) not in source]
  optional = layout.optional_groups
  fresh = sorted({e.group for e in missing if e.group in optional and e.group not in present_groups},
                 key=optional.index)
  hard_missing = [e for e in missing if e.group not in fresh]
  if hard_missing:
    raise ConversionError(
        f"{report.source}: {len(hard_missing)} parameter(s) of the model have no {fmt} variable: " +
        ", ".join(f"{e.source(fmt)} (-> {e.path})" for e in hard_missing[:20]) +
        (f" ... and {len(hard_missing) - 20} more" if len(hard_missing) > 20 else ""))

  mismatched = []
  flat: Dict[Tuple[str, ...], np.ndarray] = {}
  for e in table:
    if e.group in fresh:
      continue
    array = np.asarray(source[e.source(fmt)])
    target_shape, target_dtype = shapes[e.ours]
    want = source_shape(fmt, e.kind, target_shape)
    if tuple(array.shape) != want:
      mismatched.append(f"{e.source(fmt)}: checkpoint shape {tuple(array.shape)}, model expects {want} "
                        f"(-> {e.path} {target_shape})")
      continue
    report.source_dtypes[str(array.dtype)] = report.source_dtypes.get(str(array.dtype), 0) + 1
    flat[e.ours] = to_ours(fmt, e.kind, array.astype(target_dtype, copy=False), target_shape)
  if mismatched:
    raise ConversionError(f"{report.source}: {len(mismatched)} shape mismatch(es) between the checkpoint and "
                          f"the model config (is it this checkpoint's config?):" + capped_lines(mismatched))
  if fresh:
    fresh_paths = [e.ours for e in table if e.group in fresh]
    init = traverse_util.flatten_dict(init_params(config, seed, paths=fresh_paths, targets=layout.targets))
    for path in fresh_paths:
      flat[path] = init[path]
    report.fresh_groups = fresh
  report.loaded = len(table) - sum(1 for e in table if e.group in fresh)
  return traverse_util.unflatten_dict(flat)


def export_arrays(params: Mapping, fmt: str, config: BertConfig,
                  groups: Iterable[str] = REQUIRED_GROUPS + OPTIONAL_GROUPS,
                  layout: Layout = BERT) -> Dict[str, np.ndarray]:
  """Our params tree -> {name in format `fmt`: array}, for the given groups; every shape asserted."""
  table, shapes = checked_table(config, layout)
  flat = traverse_util.flatten_dict(dict(params))
  groups = tuple(groups)
  out: Dict[str, np.ndarray] = {}
  problems = []
  for e in table:
    if e.group not in groups:
      continue
    if e.ours not in flat:
      problems.append(f"{e.path}: missing from the params")
      continue
    array = np.asarray(flat[e.ours])
    if tuple(array.shape) != shapes[e.ours][0]:
      problems.append(f"{e.path}: shape {tuple(array.shape)}, config expects {shapes[e.ours][0]}")
      continue
    out[e.source(fmt)] = from_ours(fmt, e.kind, array.astype(np.float32))
  if problems:
    raise ConversionError("params do not match the model config:\n  " + "\n  ".join(problems))
  return out

