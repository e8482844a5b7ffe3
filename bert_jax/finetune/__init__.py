"""Fine-tuning: task readers and their registry (`tasks/`), data loading and batches (`data`), task heads,
losses and the prediction step (`model`), the loop (`loop.run`, what finetune.py runs) and inference on raw
text (`predict.Predictor`).

Imports go down only: finetune -> engine -> pretrained -> input_pipeline -> models (never pretrain/); evaluation is a leaf
that the task registry calls for the official metrics.
"""
