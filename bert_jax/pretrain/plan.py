"""A pre-training config resolved once into what the run will do: `resolve_pretrain(config, workdir)`.

    plan = resolve_pretrain(config, workdir)     # UserError for the first mistake, before any model or data work
    print(plan.describe())                       # the short table train.py logs at start-up
    plan.save()                                  # workdir/plan.json
    pretrain.run_plan(plan)                      # the loop only runs it

Resolving is validating: each rule below is written once, here, and raises `bert_jax.errors.UserError` naming
the field (as `config.a.b=value`) and what was expected, so an entry point prints one `error: ...` line a few
seconds after launch instead of a traceback from inside jit, Orbax or tf.data. What the plan settles:

  - the vocab: the work dir's on resume, else `data.vocab_file`, else the init checkpoint's; it exists, is
    UTF-8 and holds [PAD] [UNK] [CLS] [SEP] [MASK]; an init checkpoint's embedding rows equal its size;
  - the model: the work dir's architecture on resume (a resume that asks for another one is refused), else
    `init_checkpoint`'s, else the size table with `config.model`'s overrides; then this run's runtime fields
    (dtype, dropout, attention path, scan, remat) in one function, `train_step.model_config`;
  - the phases and the data arguments (`input_pipeline.data_plan.resolve_data_plan`, the data rules; the same
    `PretrainData` that `inspect` opens), with each phase's length checked against the position embeddings;
  - the mesh shape, the data shards and `batch_size` divisible by shards x `grad_accum_steps` and by the
    process count;
  - the optimizer settings (the optimizer is built once here, so its own checks run now);

A plan is a frozen dataclass. It also carries the step settings the state/step factory reads (`seed`,
`targets`, `grad_accum_steps`, `nan_policy`, `logical_axis_rules`, `optimizer`, `num_train_steps`,
`warmup_steps`), so `train_step.create_train_state(plan, ...)` takes it as its run config. The generic field
and file checks are `input_pipeline/checks.py`, the device and checkpoint ones `engine/validation.py`, shared
with the fine-tuning plan.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Dict, Optional, Tuple

import jax

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.input_pipeline import checks
from bert_jax.input_pipeline.data_plan import Phase, PretrainData, phase_fields, resolve_data_plan
from bert_jax.models import BertConfig, objectives
from bert_jax.models.objectives import OBJECTIVES, Objective
from bert_jax.models.config import SIZES
from bert_jax.pretrained import params_dir
from bert_jax.pretrained.load import CHECKPOINT_SUBDIR, check_vocab_matches, read_config
from bert_jax.engine import optimizers, sharding
from bert_jax.engine.checkpoints import config_to_dict
from bert_jax.engine import run_files
from bert_jax.engine import train_step as ts
from bert_jax.engine import validation as v
from bert_jax.engine import workdir as workdir_lib
from bert_jax.engine.watchdog import GuardSettings, resolve_guard

log = logging.getLogger(__name__)



@dataclasses.dataclass(frozen=True)
class PretrainPlan:
  """What a pre-training run does (see the module docstring)."""
  workdir: str
  resume: bool                       # the work dir holds a checkpoint: continue it
  vocab_file: str
  do_lower_case: bool
  model: BertConfig
  targets: Tuple[str, ...]
  objectives: Tuple[Objective, ...]  # the targets resolved (models/objectives/), each with its config subtree
  init_checkpoint: Optional[str]     # directory whose params start a new run (None on resume / from scratch)
  phases: Tuple[Phase, ...]
  data: PretrainData
  batch_size: int                    # global; each host reads batch_size / process_count rows
  mesh_shape: Tuple[int, ...]
  mesh_axes: Tuple[str, ...]
  logical_axis_rules: Tuple
  batch_shards: int
  process_count: int
  optimizer: optimizers.OptimizerSettings
  seed: int
  grad_accum_steps: int
  num_train_steps: int
  warmup_steps: int
  nan_policy: str
  max_consecutive_nonfinite: int
  log_every_steps: int
  checkpoint_every_steps: int
  keep_checkpoints: int
  eval_every_steps: int
  eval_steps: int
  peak_flops_per_device: float
  progress_bar: bool
  compilation_cache_dir: str
  guard: GuardSettings               # dead/stuck-host detection (engine/watchdog.py)
  config: Dict[str, Any]             # the run config as asked (config.json)

  def phase_at(self, step: int) -> Optional[Phase]:
    return next((p for p in self.phases if p.start <= step < p.end), None)

  def to_dict(self) -> dict:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("config", "objectives")}
    # each objective's settings under its config subtree's name, as config.json has them
    out.update({o.name: dataclasses.asdict(o.settings) for o in self.objectives if o.settings is not None})
    out.update(model=self.model.to_dict(), data=dataclasses.asdict(self.data), guard=dataclasses.asdict(self.guard),
               optimizer=dataclasses.asdict(self.optimizer), phases=[dataclasses.asdict(p) for p in self.phases])
    return json.loads(json.dumps(out, default=list))

  def describe(self) -> str:
    """The plan as a short table (logged at start-up)."""
    m = self.model
    start = ("resume from " + fileio.join(self.workdir, CHECKPOINT_SUBDIR) if self.resume else
             f"init_checkpoint {self.init_checkpoint}" if self.init_checkpoint else f"from scratch (seed {self.seed})")
    rows = [
        ("start", start),
        ("model", f"L{m.num_hidden_layers}/H{m.hidden_size}/A{m.num_attention_heads}, vocab {m.vocab_size}, "
                  f"{m.encoder} {m.layer_norm_type}-LN, {m.dtype}, attention {m.attention_impl}"
                  f"{', scan' if m.scan_layers else ''}{'' if m.remat_policy == 'none' else ', remat ' + m.remat_policy}"),
        ("targets", ", ".join(o.describe() for o in self.objectives)),
        ("vocab", f"{self.vocab_file} ({'lower-cased' if self.do_lower_case else 'cased'})"),
        ("data", f"{self.data.input_files}; masking {self.data.masking}, pairs {self.data.pair_mode}"
                 f"{', packed (' + self.data.packing + ')' if self.data.packing != 'pairs' else ''}"
                 f"{f', at most {self.data.max_examples_per_row} per row' if self.data.max_examples_per_row else ''}"
                 f"{', eval ' + self.data.eval_input_files if self.data.eval_input_files else ''}"),
    ]
    rows += [("", str(p)) for p in self.phases]
    o = self.optimizer
    rows += [
        ("batch", f"{self.batch_size} = {self.batch_shards} data shard(s) x {self.batch_size // self.batch_shards}"
                  f"{f', {self.grad_accum_steps} micro-batches' if self.grad_accum_steps > 1 else ''}; "
                  f"{self.process_count} process(es)"),
        ("mesh", " x ".join(f"{a}={s}" for a, s in zip(self.mesh_axes, self.mesh_shape))),
        ("optimizer", f"{o.name} lr {o.learning_rate:g} ({o.schedule}), warmup {self.warmup_steps} of "
                      f"{self.num_train_steps} steps, weight decay {o.weight_decay:g}"),
        ("checkpoints", f"every {self.checkpoint_every_steps} steps, keep {self.keep_checkpoints}; log every "
                        f"{self.log_every_steps}" + (f"; eval {self.eval_steps} batches every "
                                                     f"{self.eval_every_steps}" if self.data.eval_input_files else "")),
        ("hosts", self.guard.describe()),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {val}" for k, val in rows)

  def save(self) -> None:
    """workdir/plan.json (process 0), as every run writes it (engine/run_files.py). config.json is written with
    model_config.json once the state is restored (checkpoints.write_workdir_files), only when it changed."""
    if self.workdir and jax.process_index() == 0:
      run_files.write_run_files(self.workdir, self.to_dict())


# ---- resolution --------------------------------------------------------------------------------------------
def _check_fields(config) -> None:
  """Ranges and choices of the model, optimizer and loop fields of configs/pretrain.py (the data fields are the
  data plan's; a field another change removed is skipped)."""
  for path in ("grad_accum_steps", "num_train_steps", "keep_checkpoints", "log_every_steps", "eval_steps",
               "max_consecutive_nonfinite", "model.max_position_embeddings"):
    checks.check_range(config, path, lo=1, integer=True)
  for path in ("warmup_steps", "checkpoint_every_steps", "eval_every_steps"):
    checks.check_range(config, path, lo=0, integer=True)
  checks.check_range(config, "peak_flops_per_device", lo=0)
  checks.check_choice(config, "nan_policy", ("stop", "skip"))
  checks.check_range(config, "model.vocab_size", lo=1, allow=(-1,), integer=True)
  # -1 keeps the size table's value; 0 layers (an embedding-only model) or a negative width was accepted or
  # refused as "config.model: BertConfig.<field>", not the field the user set
  for path in ("model.num_hidden_layers", "model.hidden_size", "model.num_attention_heads",
               "model.intermediate_size"):
    checks.check_range(config, path, lo=1, allow=(-1,), integer=True)
  checks.check_range(config, "model.embedding_size", lo=0, integer=True)
  _check_heads_divide_width(config.model)
  checks.check_range(config, "model.hidden_dropout_prob", lo=0, hi=1, hi_open=True)
  checks.check_range(config, "model.attention_probs_dropout_prob", lo=0, hi=1, hi_open=True)
  v.check_optimizer_fields(config)


def _check_heads_divide_width(model) -> None:
  """config.model.num_attention_heads divides the width (config.model.hidden_size, or the size table's): the
  model's own error named neither config field nor where the width came from."""
  heads, width = int(model.get("num_attention_heads", -1)), int(model.get("hidden_size", -1))
  if heads < 1 or str(model.get("size")) not in SIZES:
    return
  source = "config.model.hidden_size" if width > 0 else f"hidden_size of config.model.size={model.size!r}"
  width = width if width > 0 else SIZES[str(model.size)][1]
  if width % heads:
    raise UserError(f"config.model.num_attention_heads={heads} does not divide {source}={width}; expected a "
                    f"divisor of {width} (e.g. {max(1, width // 64)}: 64-wide heads), or -1 for width / 64")


def _resolve_objectives(config, targets: Tuple[str, ...]) -> Tuple[Objective, ...]:
  """config.targets as objectives (models/objectives/, the registry), each with its settings from its config
  subtree (config.<name>, each field's range checked here); a subtree changed for an objective the run does not
  train is a warning."""
  try:
    objectives.validate_targets(targets)
  except ValueError as e:
    raise UserError(f"config.targets={targets!r}: {e}") from e
  for name, cls in OBJECTIVES.items():
    if cls.settings_type is None or name in targets:
      continue
    given, default = config.get(name) or {}, cls.settings_type()
    changed = [f"config.{name}.{f.name}={given[f.name]!r}" for f in dataclasses.fields(cls.settings_type)
               if f.name in given and given[f.name] != getattr(default, f.name)]
    if changed:
      checks.warn(f"{', '.join(changed)} has no effect: config.targets={targets!r} has no {name!r} (set "
                  f"--config.targets='(\"{name}\",)' to train {cls.title or name})")
  out = []
  for name in targets:
    cls = OBJECTIVES[name]
    settings = None
    if cls.settings_type is not None:
      for field, limits in cls.settings_ranges.items():
        checks.check_range(config, f"{name}.{field}", **limits)
      given, default = config.get(name) or {}, cls.settings_type()
      settings = cls.settings_type(**{f.name: type(getattr(default, f.name))(given.get(f.name, getattr(default, f.name)))
                                      for f in dataclasses.fields(cls.settings_type)})
    out.append(cls(settings))
  return tuple(out)


def _check_positions(config, phases, max_positions: int) -> None:
  """Each phase's length fits the model's position embeddings."""
  for p in phases:
    name, _ = phase_fields(config, p)
    if p.max_seq_length > max_positions:
      raise UserError(f"{name}={p.max_seq_length} exceeds model.max_position_embeddings={max_positions}: the "
                      "position embeddings have no row for the later tokens; shorten the sequences or raise "
                      "--config.model.max_position_embeddings (random init only)")


def _warn_warmup(config) -> None:
  if int(config.warmup_steps) < int(config.num_train_steps):
    return
  peak, steps, warmup = float(config.optimizer.learning_rate), int(config.num_train_steps), int(config.warmup_steps)
  if str(config.optimizer.get("schedule", "linear")) == "google":   # Google's warmup is not clamped
    effect = (f"the learning rate never reaches its peak {peak:g} (Google's linear warmup stops at "
              f"{peak * steps / max(1, warmup):.3g})")
  else:   # make_schedule clamps the warmup to the run
    effect = ("the whole run is warmup: the learning rate reaches its peak "
              f"{peak:g} only at the last step and never decays")
  checks.warn(f"config.warmup_steps={warmup} >= config.num_train_steps={steps}: {effect}; lower "
         "--config.warmup_steps (BERT: 1% of the steps)")


def _warn_other_vocab(given: str, workdir_vocab: str) -> None:
  """A resumed run tokenizes with the work dir's vocab.txt (its model's token ids): a config.data.vocab_file
  that is missing or has other tokens is not used, and a warning says so (it was dropped without a word)."""
  if not given:
    return
  try:
    why = None if fileio.read_bytes(given) == fileio.read_bytes(workdir_vocab) else "has other tokens"
  except OSError as e:
    why = f"cannot be read ({e.strerror or e})"
  if why:
    checks.warn(f"config.data.vocab_file={given} {why}: this resumed run uses the work dir's {workdir_vocab} "
                "(its checkpoints' token ids); to train with another vocab, start a new --workdir")


def _resolve_vocab(config, workdir: str, resume: bool, init_dir: Optional[str]) -> Tuple[str, int]:
  """(vocab file, its size): the work dir's on resume, else data.vocab_file, else the init checkpoint's."""
  vocab_file, field = config.data.vocab_file, "config.data.vocab_file"
  workdir_vocab = fileio.join(workdir, params_dir.VOCAB_NAME)
  if resume and fileio.exists(workdir_vocab):
    _warn_other_vocab(vocab_file, workdir_vocab)
    vocab_file, field = workdir_vocab, f"the work dir's vocab ({workdir})"
  elif not vocab_file and init_dir is not None:
    vocab_file = params_dir.vocab_path(init_dir) or ""
    field = f"config.init_checkpoint={config.init_checkpoint!r}'s vocab.txt"
  if not vocab_file:
    raise UserError("config.data.vocab_file is empty: pass --config.data.vocab_file=vocab.txt (the WordPiece "
                    "vocab; python -m bert_jax.input_pipeline.build_vocab makes one)")
  return vocab_file, checks.check_vocab(vocab_file, field)


def read_model_config(directory: str, field: str) -> BertConfig:
  """A checkpoint directory's architecture (scan_layers off); an unreadable one is a UserError naming `field`."""
  try:
    return params_dir.read_model_config(directory).replace(scan_layers=False)
  except (FileNotFoundError, ValueError, TypeError) as e:
    raise UserError(f"{field}: no readable model config in {directory} ({e})") from e


def _resolve_model(config, workdir: str, resume: bool, init_dir: Optional[str], vocab_file: str,
                   vocab_lines: int) -> BertConfig:
  """Start-up order: the work dir's architecture on resume (a resume asking for another is refused), else
  init_checkpoint's (whose embedding rows must equal the vocab's size), else the size table."""
  vocab_size = int(config.model.vocab_size) if int(config.model.vocab_size) > 0 else vocab_lines
  saved_path = fileio.join(workdir, params_dir.CONFIG_NAME)
  if resume and fileio.exists(saved_path):
    saved = read_model_config(workdir, f"the work dir's {params_dir.CONFIG_NAME} ({workdir})")
    wanted, source = ts.build_model_config(config.model, vocab_size), f"model.size={config.model.size}"
    if config.init_checkpoint:
      try:
        wanted, source = read_config(config.init_checkpoint), f"init_checkpoint={config.init_checkpoint}"
      except FileNotFoundError as e:
        wanted = None
        log.warning("resuming: cannot read init_checkpoint's model config to compare (%s)", e)
    if wanted is not None:
      workdir_lib.check_resume_model_config(workdir, saved.to_dict(), wanted.to_dict(), source)
    return ts.build_model_config(config.model, vocab_size, saved)
  if init_dir is not None:
    loaded = read_model_config(init_dir, f"config.init_checkpoint={config.init_checkpoint!r}")
    check_vocab_matches(loaded.vocab_size, init_dir, vocab_file)   # ids must mean the same in both
    return ts.build_model_config(config.model, vocab_size, loaded)
  return ts.build_model_config(config.model, vocab_size)


def _check_steps_left(config, workdir: str) -> None:
  """UserError when a resumed run's num_train_steps lies below the work dir's newest checkpoint: it trained
  nothing, exited 0 and rewrote config.json with the smaller number (the work dir then misdescribed its run)."""
  saved, wanted = v.latest_checkpoint_step(workdir), int(config.num_train_steps)
  if saved is not None and wanted < saved:
    raise UserError(f"config.num_train_steps={wanted} is below step {saved}, the newest checkpoint of the work "
                    f"dir {workdir} this run resumes: pass --config.num_train_steps={saved} or more to go on, or a "
                    f"new --workdir (with --config.init_checkpoint={workdir} to start from its weights)")


_SCHEDULE_FIELDS = ("learning_rate", "schedule", "power", "end_learning_rate")


def schedule_change(previous: Dict[str, Any], optimizer: "optimizers.OptimizerSettings", num_train_steps: int,
                    warmup_steps: int, step: int) -> Optional[str]:
  """One line saying how a resumed run's learning-rate schedule differs from the one the work dir ran
  (`previous`: its plan.json), or None when it is the same: a smaller num_train_steps made the rate drop at
  once and decay to its end sooner, without a word."""
  old_opt = previous.get("optimizer") or {}
  changes = []
  for name, old, new in [("num_train_steps", previous.get("num_train_steps"), num_train_steps),
                         ("warmup_steps", previous.get("warmup_steps"), warmup_steps)] + \
                        [(f"optimizer.{f}", old_opt.get(f), getattr(optimizer, f)) for f in _SCHEDULE_FIELDS]:
    if old is not None and old != new:
      changes.append(f"{name} {old} -> {new}")
  if not changes:
    return None
  try:
    old_settings = dataclasses.replace(optimizer, **{f: old_opt[f] for f in _SCHEDULE_FIELDS if f in old_opt})
    old_total = int(previous.get("num_train_steps", num_train_steps))
    old_lr = float(optimizers.make_schedule(old_settings, old_total, int(previous.get("warmup_steps", warmup_steps)))(step))
    new_lr = float(optimizers.make_schedule(optimizer, num_train_steps, warmup_steps)(step))
  except (TypeError, ValueError, UserError):   # a plan.json from another version: name the changes only
    return f"resuming at step {step} with a changed learning-rate schedule: {', '.join(changes)}"
  decays = optimizer.schedule != "constant" and not (optimizer.schedule == "polynomial" and optimizer.power == 0)
  end = "" if not decays else (f" and decays to {0.0 if optimizer.schedule == 'google' else optimizer.end_learning_rate:g}"
                               f" at step {num_train_steps}" + (f" (was {old_total})" if old_total != num_train_steps
                                                                else ""))
  return (f"resuming at step {step} with a changed learning-rate schedule: {', '.join(changes)}; the rate at "
          f"step {step} is {new_lr:.3g} (the run had {old_lr:.3g}){end}")


def _warn_schedule_change(workdir: str, optimizer, num_train_steps: int, warmup_steps: int) -> None:
  path = fileio.join(workdir, run_files.PLAN_NAME)
  step = v.latest_checkpoint_step(workdir)
  if step is None or not fileio.exists(path):
    return
  try:
    previous = json.loads(fileio.read_text(path))
  except (OSError, ValueError):   # unreadable: the run file checks say so elsewhere
    return
  line = schedule_change(previous, optimizer, num_train_steps, warmup_steps, step) if isinstance(previous, dict) \
      else None
  if line:
    log.warning("%s", line)


def resolve_pretrain(config, workdir: Optional[str], *, num_devices: Optional[int] = None,
                     process_count: Optional[int] = None) -> PretrainPlan:
  """The plan of a configs/pretrain.py config; UserError for the first mistake (module docstring).

  num_devices / process_count default to jax.device_count() / jax.process_count(): resolve after
  jax.distributed.initialize on multi-host runs. workdir None: a plan with no work dir (`inspect`).
  """
  num_devices = jax.device_count() if num_devices is None else int(num_devices)
  process_count = jax.process_count() if process_count is None else int(process_count)
  workdir = fileio.abspath(workdir) if workdir else ""
  v.check_workdir(workdir)
  targets = tuple(config.targets)
  resolved = _resolve_objectives(config, targets)
  _check_fields(config)
  resume = v.has_checkpoint(workdir)
  if resume:
    if config.init_checkpoint:         # the start-up order: the work dir's checkpoint wins, said once
      log.warning("config.init_checkpoint=%s is not loaded: the work dir %s resumes from its own checkpoint "
                  "(to start a new run from those weights, use a new --workdir)", config.init_checkpoint, workdir)
    _check_steps_left(config, workdir)
  init_dir = v.checkpoint_dir(config.init_checkpoint) if config.init_checkpoint and not resume else None
  vocab_file, vocab_lines = _resolve_vocab(config, workdir, resume, init_dir)
  model = _resolve_model(config, workdir, resume, init_dir, vocab_file, vocab_lines)
  _warn_warmup(config)
  if config.data.eval_input_files and int(config.eval_every_steps) == 0:
    checks.warn(f"config.data.eval_input_files={config.data.eval_input_files!r} is never read: "
                "config.eval_every_steps=0 turns evaluation off; set it > 0 (the run also evaluates at its last "
                "step)")
  optimizer = optimizers.optimizer_settings(config.optimizer, int(config.num_train_steps), int(config.warmup_steps))
  if resume:
    _warn_schedule_change(workdir, optimizer, int(config.num_train_steps), int(config.warmup_steps))
  rules = sharding.normalize_rules(config.logical_axis_rules)
  mesh_shape, shards = v.check_batch_divisible(int(config.batch_size), int(config.grad_accum_steps),
                                               config.mesh.shape, config.mesh.axes, rules, num_devices,
                                               process_count)
  data_plan = resolve_data_plan(config, vocab_file, process_count)
  _check_positions(config, data_plan.phases, model.max_position_embeddings)
  # data.packing=documents: block-diagonal attention and per-document positions (0: one example per row)
  model = v.packed_model(model, data_plan.data.max_examples_per_row, "config.data.packing=documents")
  return PretrainPlan(
      workdir=workdir, resume=resume, vocab_file=vocab_file, do_lower_case=bool(config.data.do_lower_case),
      model=model, targets=targets, objectives=resolved, init_checkpoint=init_dir, phases=data_plan.phases, data=data_plan.data,
      batch_size=int(config.batch_size), mesh_shape=mesh_shape, mesh_axes=tuple(config.mesh.axes),
      logical_axis_rules=rules, batch_shards=shards, process_count=process_count, optimizer=optimizer,
      seed=int(config.seed), grad_accum_steps=int(config.grad_accum_steps),
      num_train_steps=int(config.num_train_steps), warmup_steps=int(config.warmup_steps),
      nan_policy=str(config.nan_policy), max_consecutive_nonfinite=int(config.max_consecutive_nonfinite),
      log_every_steps=int(config.log_every_steps), checkpoint_every_steps=int(config.checkpoint_every_steps),
      keep_checkpoints=int(config.keep_checkpoints), eval_every_steps=int(config.eval_every_steps),
      eval_steps=int(config.eval_steps), peak_flops_per_device=float(config.peak_flops_per_device),
      progress_bar=bool(config.progress_bar),
      compilation_cache_dir=str(config.get("compilation_cache_dir", "auto")),
      guard=resolve_guard(config, process_count),
      config=config_to_dict(config))
