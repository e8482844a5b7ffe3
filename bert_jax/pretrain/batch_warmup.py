"""Batch-size warmup (ModernBERT: 768 -> 4,608 sequences over its first 50B tokens): the first steps learn from
fewer sequences, so early on each token buys more optimizer steps' worth of progress.

    --config.batch_warmup_steps=2000 --config.batch_warmup_start=0.25

At step s < batch_warmup_steps the gradient comes from the first
    rows(s) = round(B x (start + (1 - start) x s / batch_warmup_steps))
of the B = batch_size sequences (each host: its share of them), then from all B.

How, and why this way: the compiled step and the data pipeline keep one shape. The rows past rows(s) get
masked_lm_weights 0 on the host, before the batch goes to the devices. The MLM loss is a sum over weighted
positions divided by the batch's sum of weights (the step factory's denominators), so the step's gradient is
exactly the gradient of the smaller batch, at every step size, with nothing recompiled. A stepwise schedule of
a few batch shapes (one compile each) or a varying gradient-accumulation count would also avoid a compile per
step; both need the data pipeline and the step to change shape mid-phase, and neither is exact at every
step. The price: the inactive rows are still read and computed (their tokens are not learned from), so the
warmup costs what full batches cost, (1 - start) / 2 of batch_warmup_steps steps' compute spent on rows that
add nothing (ModernBERT's 50B of 2T tokens: ~1% of the run).

Only objectives whose loss counts rows through masked_lm_weights take part (`Objective.row_weighted`: MLM);
NSP/SOP labels have no weights, so a run with them and batch warmup is refused when the plan resolves.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, Sequence

import numpy as np

from bert_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class BatchWarmup:
  """steps: how many steps the batch grows for (0: off); start: the share of the batch at step 0."""
  steps: int = 0
  start: float = 1.0

  @property
  def enabled(self) -> bool:
    return self.steps > 0 and self.start < 1.0

  def rows(self, step: int, batch_size: int) -> int:
    """Sequences that count at `step` out of `batch_size` (at least 1)."""
    if not self.enabled or step >= self.steps:
      return batch_size
    share = self.start + (1.0 - self.start) * step / self.steps
    return max(1, min(batch_size, int(round(batch_size * share))))

  def describe(self, batch_size: int) -> str:
    if not self.enabled:
      return "off"
    return (f"{self.rows(0, batch_size)} -> {batch_size} sequences over {self.steps} steps (rows past the "
            "count get masked_lm_weights 0)")


def resolve_batch_warmup(config, objectives: Sequence) -> BatchWarmup:
  """config.batch_warmup_steps / batch_warmup_start as a BatchWarmup; UserError naming the field for a bad
  value, or for targets whose loss does not count rows by masked_lm_weights (module docstring)."""
  steps, start = config.get("batch_warmup_steps", 0), config.get("batch_warmup_start", 1.0)
  if int(steps) != steps or steps < 0:
    raise UserError(f"config.batch_warmup_steps={steps!r}; expected an integer >= 0 (0: off)")
  if not 0.0 < float(start) <= 1.0:
    raise UserError(f"config.batch_warmup_start={start!r}; expected the share of batch_size at step 0, in (0, 1]")
  warmup = BatchWarmup(int(steps), float(start))
  if warmup.enabled:
    other = [o.name for o in objectives if not o.row_weighted]
    if other:
      raise UserError(f"config.batch_warmup_steps={steps} with targets {other}: batch-size warmup leaves rows out "
                      "by their masked_lm_weights, which these targets' losses do not read; use "
                      "--config.targets=\"('mlm',)\" or --config.batch_warmup_steps=0")
  return warmup


class WarmupBatches:
  """This host's batches with the rows past the warmup's count weighted 0 (module docstring); `state()` and
  `close()` are the wrapped iterator's."""

  def __init__(self, batches, warmup: BatchWarmup, global_batch_size: int, start_step: int):
    self._batches = batches
    self._warmup = warmup
    self._global = int(global_batch_size)
    self._step = int(start_step)

  def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
    return self

  def __next__(self) -> Dict[str, np.ndarray]:
    batch = next(self._batches)
    step, self._step = self._step, self._step + 1
    if not self._warmup.enabled or step >= self._warmup.steps:
      return batch
    local = int(np.shape(batch["masked_lm_weights"])[0])
    # Each host keeps its share: rows(step) of the global batch x local / global, at least one row.
    keep = max(1, int(round(self._warmup.rows(step, self._global) * local / self._global)))
    if keep >= local:
      return batch
    weights = np.array(batch["masked_lm_weights"], copy=True)
    weights[keep:] = 0.0
    return {**batch, "masked_lm_weights": weights}

  def state(self):
    return self._batches.state()

  def close(self) -> None:
    self._batches.close()

  def __getattr__(self, name):     # anything else the loop asks of its iterator
    return getattr(self._batches, name)
