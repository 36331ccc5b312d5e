"""Parameter counts of the report's configurations (shared/SPEC.md section 1, Table 4)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlt.models import RLTConfig, TransformerConfig, count_parameters
from rlt.models.build import PAPER, SPLITS_8, SPLITS_16

FEEDBACK = 787_968  # d*d + 2*d*d + 3*d at d = 512: s*, state norm, W_g, b_g, W_s


def millions(n: int) -> float:
    return round(n / 1e6, 2)


def test_transformer_8() -> None:
    assert millions(count_parameters(TransformerConfig(n_layers=8, **PAPER))) == 25.31


@pytest.mark.parametrize(("split", "expected"), [("8+0", 26.10), ("4+4", 28.73)])
def test_rlt1_reported_counts(split: str, expected: float) -> None:
    assert millions(count_parameters(RLTConfig.from_split(split, **PAPER))) == expected


@pytest.mark.parametrize("split", SPLITS_8 + SPLITS_16)
def test_rlt0_has_exactly_the_feedback_parameters_less(split: str) -> None:
    rlt1 = count_parameters(RLTConfig.from_split(split, feedback_interval=1, **PAPER))
    rlt2 = count_parameters(RLTConfig.from_split(split, feedback_interval=4, **PAPER))
    rlt0 = count_parameters(RLTConfig.from_split(split, feedback_interval=None, **PAPER))
    assert rlt1 == rlt2
    assert rlt1 - rlt0 == FEEDBACK


def test_rlt1_range_over_8_layer_splits() -> None:
    counts = [count_parameters(RLTConfig.from_split(s, **PAPER)) for s in SPLITS_8]
    assert (millions(min(counts)), millions(max(counts))) == (26.10, 28.73)


@pytest.mark.slow
def test_params_command_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlt.models", "params"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    ).stdout
    rows = {tuple(line.split()[:3]): line for line in out.splitlines()}
    assert "25.31" in rows[("Transformer", "8", "-")]
    assert "28.73" in rows[("RLT-1/RLT-2", "4+4", "28,725,248")]
    assert "26.10" in rows[("RLT-1/RLT-2", "8+0", "26,101,760")]
    for split in SPLITS_8 + SPLITS_16:
        line = next(line for line in out.splitlines() if line.split()[1:2] == [split])
        assert line.endswith("787,968"), line
    assert any(line.startswith("Transformer 16") for line in out.splitlines())
    d, v = PAPER["d_model"], PAPER["vocab_size"]
    lstm8 = 2 * v * d + 8 * (8 * d * d + 8 * d)  # embedding, head, 8 layers of 4 gates
    assert f"{lstm8:,}" in rows[("LSTM", "8", "-")]
