"""Each encoder family counts its own parameters and FLOPs (EncoderFamily.params / flops_per_sequence), which
objectives/base.py's encoder_params / encoder_flops and so the MFU read: the transformer's count is the formula
the MFU always used, bit for bit; the lstm's is checked against an initialised LstmEncoder's parameter tree.
(The default for a family that states neither is in tests/test_encoders_plugin.py, with its plug-in family.)"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from bert_jax.models import BertConfig, encoders
from bert_jax.models.encoders.lstm import LstmEncoder, LstmFamily
from bert_jax.models.encoders.transformer import TransformerEncoder, TransformerFamily
from bert_jax.models.objectives import base
from bert_jax.pretrain import flops

LENGTHS = (1, 32, 128, 512)
VARIANTS = ({}, {"share_layers": True}, {"embedding_size": 128}, {"share_layers": True, "embedding_size": 128},
            {"layer_norm_type": "pre"}, {"scan_layers": True})


def old_encoder_params(config):
  """objectives/base.py's encoder_params before the families counted themselves, verbatim."""
  h, i = config.hidden_size, config.intermediate_size
  per_layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
  return config.num_hidden_layers * per_layer


def old_encoder_flops(config, seq_len):
  """objectives/base.py's encoder_flops before the families counted themselves, verbatim."""
  h, layers, e = config.hidden_size, config.num_hidden_layers, config.embedding_width
  flops = 6.0 * old_encoder_params(config) * seq_len + 12.0 * layers * seq_len ** 2 * h
  if config.factorised_embeddings:
    flops += 6.0 * seq_len * e * h
  return flops


def param_count(tree):
  return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(tree))


def init_params(module, config, length=8):
  x = jnp.zeros((1, length, config.hidden_size), jnp.float32)
  mask = jnp.ones((1, length), jnp.int32)
  return module(config, deterministic=True).init(jax.random.PRNGKey(0), x, mask)["params"]


@pytest.mark.parametrize("size, variant", list(itertools.product(("tiny", "base"), VARIANTS)))
def test_transformer_and_albert_counts_are_bit_for_bit_the_old_formula(size, variant):
  config = BertConfig.from_size(size, vocab_size=30522, **variant)
  assert base.encoder_params(config) == old_encoder_params(config)
  for t in LENGTHS:
    assert base.encoder_flops(config, t) == old_encoder_flops(config, t), t       # exact float equality
    # The whole model too (MLM head on 20 positions + NSP): the encoder part is the only one that moved.
    heads = sum(o.flops(config, t, 20) for o in base.resolve(("mlm", "nsp")))
    assert flops.flops_per_sequence(config, t, 20) == old_encoder_flops(config, t) + heads


def test_bert_base_figures_stay_the_published_ones():
  config = BertConfig.from_size("base", vocab_size=30522)
  # 12 layers x 7,087,872: BERT-base's 110M less its embeddings and pooler.
  assert TransformerFamily.params(config) == 85_054_464
  # 6 x 85,054,464 x 512 + 12 x 12 x 512^2 x 768 = 261.3 + 29.0 GFLOPs per 512-token sequence.
  assert TransformerFamily.flops_per_sequence(config, 512) == 290_278_342_656.0


@pytest.mark.parametrize("variant", ({}, {"num_hidden_layers": 3, "hidden_size": 96, "intermediate_size": 160}))
def test_transformer_params_equal_an_initialised_post_ln_stack_and_the_generic_default(variant):
  config = BertConfig.from_size("tiny", vocab_size=96, **variant)
  assert TransformerFamily.params(config) == param_count(init_params(TransformerEncoder, config))
  default = super(TransformerFamily, TransformerFamily)            # EncoderFamily's count, from eval_shape
  assert default.params(config) == TransformerFamily.params(config)
  # Sharing: one stored layer, still L applications' worth of parameters per token.
  shared = config.replace(share_layers=True)
  stored = param_count(init_params(TransformerEncoder, shared))
  assert stored * shared.num_hidden_layers == TransformerFamily.params(shared) == default.params(shared)
  # Pre-LN's final LayerNorm (2H, applied once) is outside the formula, as it always was.
  pre = config.replace(layer_norm_type="pre")
  assert default.params(pre) == TransformerFamily.params(pre) + 2 * pre.hidden_size


@pytest.mark.parametrize("layers, hidden", ((2, 128), (3, 64)))
def test_lstm_params_equal_an_initialised_lstm_encoders_tree(layers, hidden):
  config = BertConfig.from_size("tiny", vocab_size=96, encoder="lstm", num_hidden_layers=layers,
                                hidden_size=hidden, intermediate_size=4 * hidden)
  params = init_params(LstmEncoder, config)
  assert LstmFamily.params(config) == param_count(params)
  assert base.encoder_params(config) == param_count(params)
  flat = traverse_util.flatten_dict(params)
  units = hidden // 2
  assert flat[("forward_0", "cell", "ii", "kernel")].shape == (hidden, units)   # input kernel, no bias
  assert flat[("backward_0", "cell", "hg", "kernel")].shape == (units, units)   # recurrent kernel ...
  assert flat[("backward_0", "cell", "hg", "bias")].shape == (units,)           # ... with its bias


def test_lstm_flops_are_2_per_kernel_weight_per_token_forward_and_no_attention():
  config = BertConfig.from_size("tiny", vocab_size=96, encoder="lstm")      # L2/H128: 64 units per direction
  kernels = [v for k, v in traverse_util.flatten_dict(init_params(LstmEncoder, config)).items() if k[-1] == "kernel"]
  assert sum(k.size for k in kernels) == 2 * 2 * 4 * (128 * 64 + 64 * 64)  # layers x directions x gates x (in + rec)
  for t in LENGTHS:
    assert LstmFamily.flops_per_sequence(config, t) == 6.0 * t * sum(k.size for k in kernels)
    assert base.encoder_flops(config, t) == LstmFamily.flops_per_sequence(config, t)
  # Linear in T: a 512-token sequence costs 4x a 128-token one (a Transformer's T^2 term would make it more).
  assert LstmFamily.flops_per_sequence(config, 512) == 4 * LstmFamily.flops_per_sequence(config, 128) == 603_979_776
  # What the Transformer formula gave it before: 355M at T=128 (an L2/H128 Transformer), 2.35x its own 151M.
  assert math.isclose(old_encoder_flops(config, 128) / base.encoder_flops(config, 128), 2.35, rel_tol=0.01)


def test_factorised_embeddings_add_their_projection_whatever_the_family():
  lstm = BertConfig.from_size("tiny", vocab_size=96, encoder="lstm")
  factorised = lstm.replace(embedding_size=32)
  assert base.encoder_flops(factorised, 64) - base.encoder_flops(lstm, 64) == 6.0 * 64 * 32 * 128
  assert encoders.family("lstm") is LstmFamily
