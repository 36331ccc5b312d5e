"""Fixtures: synthetic sweeps written once per session (see analysis_synthetic.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.analysis_synthetic import make_sweep


@pytest.fixture(scope="session")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sweep(tmp_path_factory.mktemp("sweep") / "synthetic")


@pytest.fixture(scope="session")
def full_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sweep(tmp_path_factory.mktemp("full") / "synthetic", holes=False, grid=False)
