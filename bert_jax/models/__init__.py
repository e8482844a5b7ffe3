"""BERT-family models in Flax linen (UER-style: embedding, encoder and pre-training objectives
(models/objectives/, one registry) are separate modules).

Imports JAX and Flax only, never TensorFlow, so models run where only JAX is installed.
"""

from bert_jax.models import axes, heads, losses, objectives
from bert_jax.models.bert import BertModel
from bert_jax.models.config import SIZES, BertConfig
from bert_jax.models.embeddings import BertEmbeddings
from bert_jax.models.electra import ElectraForPreTraining, ElectraSettings
# The built-in encoder families: importing a family's module registers it (models/encoders/__init__.py).
from bert_jax.models import encoders
from bert_jax.models.encoders.transformer import TransformerEncoder, TransformerLayer
from bert_jax.models.encoders.lstm import LstmEncoder
from bert_jax.models.encoders.modernbert import ModernBertEncoder
from bert_jax.models.heads import (BertForQuestionAnswering, BertForSequenceClassification,
                                   BertForTokenClassification)
from bert_jax.models.params import count_params, dummy_inputs, scan_params, unscan_params
from bert_jax.models.objectives import OBJECTIVES, validate_targets
from bert_jax.models.pretraining import BertForPreTraining, pretraining_model

__all__ = [
    "axes", "heads", "losses", "objectives", "BertConfig", "SIZES", "BertModel", "BertForPreTraining", "BertEmbeddings",
    "TransformerEncoder", "TransformerLayer", "LstmEncoder", "ModernBertEncoder", "encoders", "OBJECTIVES", "validate_targets",
    "BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering",
    "ElectraForPreTraining", "ElectraSettings", "pretraining_model",
    "count_params", "dummy_inputs", "scan_params", "unscan_params",
]
