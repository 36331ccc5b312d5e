"""Shared fixtures for the model tests: tiny sizes so the whole suite runs in seconds."""

from __future__ import annotations

import pytest
import torch

from rlt.models import RLTConfig, TransformerConfig, build_model

TINY = dict(d_model=32, n_heads=4, d_ff=48, vocab_size=140)


def make_rlt(split: str = "2+2", feedback_interval: int | None = 1, seed: int = 0, **fields):
    torch.manual_seed(seed)
    fields = {**TINY, "window": 4, **fields}
    return build_model(RLTConfig.from_split(split, feedback_interval=feedback_interval, **fields))


def make_transformer(n_layers: int = 3, seed: int = 0, **fields):
    torch.manual_seed(seed)
    return build_model(TransformerConfig(n_layers=n_layers, **{**TINY, **fields}))


@pytest.fixture(autouse=True)
def _single_threaded(one_thread):
    """Every model test runs single-threaded (tests/conftest.py: one_thread)."""


@pytest.fixture
def tokens() -> torch.Tensor:
    """(3, 21): longer than the window (4) several times over, not a multiple of B=4."""
    return torch.randint(1, 140, (3, 21), generator=torch.Generator().manual_seed(1))
