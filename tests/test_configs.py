"""configs/common.py's typed reader of the string after the colon, and the presets of configs/presets.py as
data composed with the size table and runlocal."""

import dataclasses

import pytest

from bert_jax.errors import UserError
from bert_jax.models import BertConfig
from configs import common, presets
from configs import pretrain as pretrain_config

SPEC = dict(size=(None, common.SIZES), steps=(100, int), lr=(1e-3, float), name=("x", str), runlocal=False)


def test_parse_arg_reads_typed_values_flags_and_bare_words_and_defaults_the_rest():
  got = common.parse_arg("steps=7, lr=5e-4,mini,debug", "f.py", bare=common.size_words(), **SPEC)
  assert got.to_dict() == {"size": "mini", "steps": 7, "lr": 5e-4, "name": "x", "runlocal": True}
  assert common.parse_arg(None, "f.py", **SPEC).to_dict() == {"size": None, "steps": 100, "lr": 1e-3, "name": "x",
                                                                "runlocal": False}
  assert common.parse_arg("runlocal=false", "f.py", **SPEC).runlocal is False
  assert common.parse_arg("runlocal=True", "f.py", **SPEC).runlocal is True


@pytest.mark.parametrize("arg, message", [
    ("steps=ten", r"^f.py: steps='ten'; expected steps=INT \(invalid literal"),
    ("lr=fast", r"^f.py: lr='fast'; expected lr=FLOAT"),
    ("size=huge", r"^f.py: unknown size 'huge'; expected one of tiny, mini, small, medium, base, large$"),
    ("size=", r"^f.py: size needs a value; expected size=tiny\|mini\|small\|medium\|base\|large$"),
    ("runlocal=maybe", r"^f.py: runlocal='maybe'; expected runlocal alone, runlocal=true or runlocal=false$"),
    ("epochs=3", r"^f.py: unknown config argument 'epochs=3'; expected size=tiny\|mini\|small\|medium\|base\|large, "
                 r"steps=INT, lr=FLOAT, name=STR, runlocal \(or one of tiny, .*, large, debug alone\)$"),
    ("huge", r"^f.py: unknown config argument 'huge'"),
    ("steps=1,steps=2", r"^f.py: steps given twice \('steps=1' and 'steps=2'\); expected one$"),
    ("tiny,size=base", r"^f.py: size given twice \('tiny' and 'size=base'\); expected one$"),
    ("runlocal,debug", r"^f.py: runlocal given twice \('runlocal' and 'debug'\)"),
])
def test_a_bad_config_argument_is_one_user_error_naming_the_key_and_what_is_allowed(arg, message):
  with pytest.raises(UserError, match=message) as e:
    common.parse_arg(arg, "f.py", bare=common.size_words(), **SPEC)
  assert isinstance(e.value, ValueError) and "\n" not in str(e.value)   # ml_collections' loader catches ValueError


def test_without_bare_words_the_unknown_argument_error_lists_only_the_keys():
  with pytest.raises(UserError, match=r"^f.py: unknown config argument 'tiny'; expected size=.*, runlocal$"):
    common.parse_arg("tiny", "f.py", **SPEC)


def test_every_preset_field_is_a_field_of_the_config_or_of_bert_config():
  """override() adds a field that is not there (ALBERT's model.hidden_act, a BertConfig field the config does
  not list), so a misspelt preset field would be a silent no-op; this names it."""
  config, model_fields = pretrain_config.get_config(), {f.name for f in dataclasses.fields(BertConfig)}
  for name, fields in presets.PRESETS.items():
    for path in fields:
      parent, _, leaf = path.rpartition(".")
      node = config[parent] if parent else config
      assert leaf in node or (parent == "model" and leaf in model_fields), f"preset {name}: {path}"


def test_presets_compose_with_the_size_table_and_runlocal():
  lamb = pretrain_config.get_config("preset=lamb_pod")
  assert (lamb.model.size, lamb.batch_size, lamb.optimizer.name) == ("large", 65_536, "lamb")
  assert pretrain_config.get_config("mini,preset=lamb_pod").model.size == "mini"   # an explicit size wins
  local = pretrain_config.get_config("size=tiny,preset=budget,runlocal")
  assert (local.model.size, local.targets, local.data.masked_lm_prob) == ("tiny", ("mlm",), 0.25)
  assert (local.batch_size, local.num_train_steps, local.data.max_predictions_per_seq) == (16, 20, 10)  # runlocal last
  budget = pretrain_config.get_config("preset=budget")
  assert budget.warmup_steps == 500
  budget.num_train_steps = 4_000       # --config.num_train_steps=4000: the 5% warmup follows it
  assert budget.warmup_steps == 200
  albert = pretrain_config.get_config("preset=albert,fast")
  assert (albert.model.hidden_act, albert.model.embedding_size, albert.data.masking_strategy) == ("gelu_new", 128,
                                                                                                  "span")


def test_override_refuses_a_section_the_config_does_not_have():
  with pytest.raises(KeyError, match="p.py:x: optimiser.learning_rate: the config has no 'optimiser'"):
    common.override(pretrain_config.get_config(), {"optimiser.learning_rate": 1.0}, "p.py:x")
