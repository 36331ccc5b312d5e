"""Shared test setup: W&B never reaches a server, and Hydra resolvers are registered."""

import os

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import rlt.training.hydra_support  # noqa: E402,F401  (registers OmegaConf resolvers)
