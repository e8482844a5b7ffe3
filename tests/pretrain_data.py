"""`pretrain_data(...)`: a PretrainData for the tests of the pre-training reader (make_pretraining_dataset):
configs/pretrain.py's data fields, not checked by the plan, so a test can give the reader what the plan would
refuse (records of another length, a corpus of one document) and see the reader's own error."""

import dataclasses

from bert_jax.input_pipeline.data_plan import PretrainData
from configs import pretrain as pretrain_config


def pretrain_data(input_files, batch_size, vocab_file=None, **fields) -> PretrainData:
  """configs/pretrain.py's defaults (data.* fields of the same name, the config's seed) with `input_files`, a
  per-host `batch_size`, `vocab_file` ("" = none) and `fields` (PretrainData field names) set."""
  config = pretrain_config.get_config()
  defaults = {f.name: config.data[f.name] for f in dataclasses.fields(PretrainData) if f.name in config.data}
  return PretrainData(**{**defaults, "input_files": input_files, "per_host_batch_size": batch_size,
                         "vocab_file": vocab_file or "", "seed": config.seed, **fields})
