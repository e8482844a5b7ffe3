"""BERT input pipeline: tokenization, vocab building, pre-training instances, masking, TFRecords, tf.data.

Modules that import TensorFlow (`tf_tokenization`, `tf_masking`, `pretrain_dataset`, `tfrecord_io`) are not
imported here, so `from bert_jax.input_pipeline import tokenization` stays TensorFlow-free.
"""
