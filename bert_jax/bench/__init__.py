"""Benchmark of the real pre-training step (model, loss, optimizer, sharding path); see __main__.py."""
