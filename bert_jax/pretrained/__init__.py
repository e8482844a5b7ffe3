"""Pre-trained weights on disk: the params-directory format, the model zoo, and the one loader.

    from bert_jax.pretrained import load_pretrained, save_params_dir
    got = load_pretrained("hfl/chinese-roberta-wwm-ext")   # zoo name, params dir, fine-tuning or pre-training
    got.config, got.params, got.vocab_file, got.do_lower_case   # work dir

Imports models and input_pipeline.fileio only (no TensorFlow, no training code), so the converters, the
training loops and fine-tuning all read and write weights through this one package.
"""

from bert_jax.pretrained.load import (Pretrained, describe_pretrained, is_workdir, load_pretrained,
                                     load_workdir_params)
from bert_jax.pretrained.params_dir import (guess_do_lower_case, is_params_dir, load_params_dir, read_info,
                                            save_params_dir)
from bert_jax.pretrained.zoo import REGISTRY, ZooError, resolve

__all__ = ["Pretrained", "describe_pretrained", "load_pretrained", "load_workdir_params", "is_workdir", "save_params_dir",
           "load_params_dir", "is_params_dir", "read_info", "guess_do_lower_case", "REGISTRY", "ZooError",
           "resolve"]
