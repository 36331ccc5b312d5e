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


@pytest.mark.parametrize("model", ["deltaproduct", "pdssm", "deltanet", "rlt1"])
def test_every_family_computes_in_bf16_weights(model):
    """trainer.precision=bf16-true casts the weights themselves: the recurrences that compute
    their transition in float32 under autocast (PD-SSM, DeltaNet's family) follow the weights'
    width there instead of mixing dtypes (a PD-SSM of bf16 weights used to raise)."""
    import torch

    from rlt.models import DeltaNetConfig, DeltaProductConfig, PDSSMConfig, RLTConfig, build_model

    small = dict(d_model=32, n_heads=4, vocab_size=140)
    config = {
        "deltaproduct": lambda: DeltaProductConfig(n_layers=2, **small),
        "pdssm": lambda: PDSSMConfig(n_layers=2, **small),
        "deltanet": lambda: DeltaNetConfig(n_layers=2, **small),
        "rlt1": lambda: RLTConfig.from_split("1+1", feedback_interval=1, **small),
    }[model]()
    torch.manual_seed(0)
    net = build_model(config).to(torch.bfloat16)
    logits = net(torch.randint(1, 140, (2, 9), generator=torch.Generator().manual_seed(1)))
    assert logits.dtype == torch.bfloat16 and bool(torch.isfinite(logits.float()).all())
