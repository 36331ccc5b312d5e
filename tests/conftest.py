"""Shared test setup: W&B never reaches a server, and Hydra resolvers are registered."""

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import rlt.training.hydra_support  # noqa: E402,F401  (registers OmegaConf resolvers)


@pytest.fixture
def one_thread():
    """Tiny tensors gain nothing from threads, and on a busy machine 2 threads per op can be
    100x slower than 1 (spin-waiting workers). The model and benchmark tests use it for every
    test (``pytestmark`` / an autouse wrapper)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
