"""Package discovery only (metadata and dependencies live in pyproject.toml): every bert_jax package, plus
configs/*.py shipped as the top-level package `bert_jax_configs` (the files stay in configs/ in a checkout)."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["bert_jax", "bert_jax.*"]) + ["bert_jax_configs"],
      package_dir={"bert_jax_configs": "configs"})
