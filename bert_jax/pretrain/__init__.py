"""The pre-training application, on bert_jax.engine: `plan` (a config resolved once into what the run will
do), `loop` (runs a plan: phases, evaluation, checkpoints) and `flops` (model FLOPs for MFU). What train.py
calls:

    from bert_jax.pretrain import loop
    loop.train_and_evaluate(config, workdir)
"""
