"""The GPU path, checked wherever it can be (issue 22): the fused recurrence against the plain
autograd path in float32 and under bf16 autocast, and one bf16-mixed training step of every
model family. Each test runs on the CPU here and again on CUDA where there is one
(``pytest -m cuda`` selects the CUDA half: scripts/gpu_check.sh runs it on a lent GPU).

Tolerances, as a fraction of each tensor's largest entry: float32 1e-4 for outputs and
gradients (measured on the CPU: 5e-7; the two paths sum in different orders); bf16 autocast
5e-2 (measured on the CPU: 6e-3 outputs, 1.8e-2 gradients; bfloat16 keeps 8 bits of mantissa
and the two paths round at different points of a few dozen ops).
"""

from __future__ import annotations

import pytest
import torch

from rlt.models import (
    DeltaNetConfig,
    DeltaProductConfig,
    LSTMConfig,
    PDSSMConfig,
    RLTConfig,
    TransformerConfig,
    build_model,
)
from rlt.models.native import native_available

TINY = dict(d_model=32, n_heads=4, d_ff=48, vocab_size=140)
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ],
    ),
]
TOLERANCE = {"fp32": (1e-4, 1e-4), "bf16": (5e-2, 5e-2)}


def outputs_and_grads(model, tokens, fused: bool, bf16: bool):
    model.config.fused = fused
    model.zero_grad(set_to_none=True)
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(tokens)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(5))
    (logits.float() * weights.to(logits.device)).sum().backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach().float(), grads


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def assert_close(out, grads, plain_out, plain_grads, precision: str) -> None:
    """Outputs and every gradient within the precision's tolerance of the plain path's."""
    out_tol, grad_tol = TOLERANCE[precision]
    assert relative(out, plain_out) <= out_tol
    assert grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert relative(grads[name], grad) <= grad_tol, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "fields",
    [
        dict(split="2+2", feedback_interval=1),
        dict(split="1+2", feedback_interval=4, tbptt=6),  # T not a multiple of B, cuts in chunks
    ],
)
@pytest.mark.parametrize(
    "loop",
    [
        "python",
        pytest.param(
            "native",
            marks=pytest.mark.skipif(not native_available()[0], reason="no C++ token loop"),
        ),
    ],
)
def test_fused_recurrence_equals_the_plain_path(device, precision, fields, loop):
    """Both token loops: Python, and the same ATen calls from C++ (rlt/models/native.py), which
    dispatch to the tensors' device like the Python ones."""
    fields = dict(fields)
    split = fields.pop("split")
    torch.manual_seed(0)
    model = build_model(RLTConfig.from_split(split, window=4, **TINY, **fields)).to(device)
    model.native_step = loop == "native"
    tokens = torch.randint(1, 140, (3, 21), generator=torch.Generator().manual_seed(1)).to(device)
    bf16 = precision == "bf16"
    plain_out, plain_grads = outputs_and_grads(model, tokens, fused=False, bf16=bf16)
    fused_out, fused_grads = outputs_and_grads(model, tokens, fused=True, bf16=bf16)
    assert_close(fused_out, fused_grads, plain_out, plain_grads, precision)


FAMILIES = {
    "rlt1": lambda: RLTConfig.from_split("1+1", feedback_interval=1, **TINY),
    "rlt2": lambda: RLTConfig.from_split("1+1", feedback_interval=4, **TINY),
    "rlt0": lambda: RLTConfig.from_split("1+1", feedback_interval=None, **TINY),
    "transformer": lambda: TransformerConfig(n_layers=2, **TINY),
    "lstm": lambda: LSTMConfig(n_layers=2, d_model=32, vocab_size=140),
    "deltanet": lambda: DeltaNetConfig(n_layers=2, chunk_size=4, **TINY),
    "gated_deltanet": lambda: DeltaNetConfig(n_layers=2, chunk_size=4, gated=True, **TINY),
    "deltaproduct": lambda: DeltaProductConfig(n_layers=2, chunk_size=4, **TINY),
    "pdssm": lambda: PDSSMConfig(n_layers=2, **TINY),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_bf16_mixed_training_step_is_finite(device, family):
    """A step as bf16-mixed takes it: bf16 autocast forward, float32 master weights."""
    torch.manual_seed(0)
    model = build_model(FAMILIES[family]()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(1, 140, (4, 19), generator=torch.Generator().manual_seed(2)).to(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens.flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    opt.step()
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_compiled_step_on_cuda_equals_the_plain_path():
    """The compiled chunk step with inductor's CUDA graphs (rlt/models/compiled.py) under bf16
    autocast, as trainer=gpu trains: two steps in a row (the second replays the graphs),
    against the plain path. One case (B=4 with TBPTT cuts inside chunks and T not a multiple
    of B) because each compiles Triton kernels within the check's time; the CPU half, every
    case in float32, is tests/models/test_model_compiled.py."""
    precision = "bf16"
    torch.manual_seed(0)
    config = RLTConfig.from_split("1+2", window=4, feedback_interval=4, tbptt=6, **TINY)
    model = build_model(config).cuda()
    tokens = torch.randint(1, 140, (3, 21), generator=torch.Generator().manual_seed(1)).cuda()
    bf16 = precision == "bf16"
    plain_out, plain_grads = outputs_and_grads(model, tokens, fused=False, bf16=bf16)
    model.compiled_step = True
    for _ in range(2):
        out, grads = outputs_and_grads(model, tokens, fused=True, bf16=bf16)
    assert_close(out, grads, plain_out, plain_grads, precision)
