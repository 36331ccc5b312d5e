"""bf16-mixed end to end on the CPU (issue 22): a tiny run of every model family finishes with
finite losses and writes its results, as `trainer=gpu` (bf16-mixed) would on a GPU."""

from __future__ import annotations

import math

import pytest

from rlt.training.run import run
from tests.training.helpers import compose_cfg, load_results


@pytest.mark.parametrize(
    "model",
    [
        "rlt1",
        "rlt2",
        "rlt0",
        "transformer",
        "lstm",
        "deltanet",
        "gated_deltanet",
        "deltaproduct",
        "pdssm",
    ],
)
def test_a_tiny_bf16_mixed_run_of_every_family_finishes(tmp_path, model):
    cfg = compose_cfg(
        [
            "experiment=tiny",
            f"root={tmp_path}",
            "task=parity",
            f"model={model}",
            "split=1+1",
            "trainer.precision=bf16-mixed",
        ]
    )
    out = run(cfg)
    assert out["state"] == "done"
    results = load_results(out["run_dir"])
    losses = [row["loss"] for row in results["train_curve"]] + [
        row["loss"] for row in results["val_curve"]
    ]
    assert losses and all(math.isfinite(x) for x in losses)
    assert results["test_by_policy"]["min_val_loss"]
