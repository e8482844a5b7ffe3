"""BERT-family models in Flax linen (UER-style: embedding, encoder and targets are separate modules).

Imports JAX and Flax only, never TensorFlow, so models run where only JAX is installed.
"""

from bert_jax.models import axes, heads, losses
from bert_jax.models.bert import BertForPreTraining, BertModel, validate_targets
from bert_jax.models.config import SIZES, BertConfig
from bert_jax.models.embeddings import BertEmbeddings
from bert_jax.models.electra import ElectraForPreTraining, ElectraSettings, pretraining_model
# The built-in encoder families: importing a family's module registers it (models/encoders/__init__.py).
from bert_jax.models import encoders
from bert_jax.models.encoders.transformer import TransformerEncoder, TransformerLayer
from bert_jax.models.encoders.lstm import LstmEncoder
from bert_jax.models.heads import (BertForQuestionAnswering, BertForSequenceClassification,
                                   BertForTokenClassification)
from bert_jax.models.params import count_params, dummy_inputs, scan_params, unscan_params
from bert_jax.models.targets import TARGETS

__all__ = [
    "axes", "heads", "losses", "BertConfig", "SIZES", "BertModel", "BertForPreTraining", "BertEmbeddings",
    "TransformerEncoder", "TransformerLayer", "LstmEncoder", "encoders", "TARGETS", "validate_targets",
    "BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering",
    "ElectraForPreTraining", "ElectraSettings", "pretraining_model",
    "count_params", "dummy_inputs", "scan_params", "unscan_params",
]
