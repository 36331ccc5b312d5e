"""The fused recurrence (rlt/models/recurrence.py) against the plain autograd path.

The plain path is the readable reference (and is itself checked against the naive
implementation in rlt_reference); the fused one must give the same outputs and the same
gradient for every parameter, in every configuration it serves.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rlt.models.layouts as layouts
from rlt.models.native import native_available
from rlt.models.rlt import RecurrentLoopedTransformer
from tests.models.conftest import make_rlt


def outputs_and_grads(model, tokens: torch.Tensor, fused: bool):
    model.config.fused = fused
    model.zero_grad(set_to_none=True)
    weights = torch.randn(
        *tokens.shape, 140, generator=torch.Generator().manual_seed(5), dtype=torch.float64
    )
    logits = model(tokens)
    (logits * weights.to(logits.dtype)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def assert_same(model, tokens: torch.Tensor) -> None:
    plain_out, plain_grads = outputs_and_grads(model, tokens, fused=False)
    fused_out, fused_grads = outputs_and_grads(model, tokens, fused=True)
    assert (fused_out - plain_out).abs().max() <= 1e-12
    assert plain_grads.keys() == fused_grads.keys()
    for name, grad in plain_grads.items():
        scale = grad.abs().max().clamp_min(1e-12)
        assert (fused_grads[name] - grad).abs().max() / scale <= 1e-9, name


needs_native = pytest.mark.skipif(
    not native_available()[0], reason=f"no C++ token loop here: {native_available()[1]}"
)


@pytest.fixture(params=["python", pytest.param("native", marks=needs_native)])
def loop(request, monkeypatch):
    """Run each test with both token loops: Python, and the same loop in C++ (native.py)."""
    if request.param == "native":
        monkeypatch.setattr(RecurrentLoopedTransformer, "native_step", True)
    return request.param


@pytest.fixture(params=["broadcast", "matmul"])
def attention_kernel(request, monkeypatch):
    """Run each test with both attention kernels (the head-dim switch picks one by size)."""
    if request.param == "matmul":
        monkeypatch.setattr(layouts, "MATMUL_HEAD_DIM", 1)
    return request.param


@pytest.mark.parametrize("feedback_interval", [1, 3, 4])
@pytest.mark.parametrize("split", ["2+2", "0+2", "3+0"])
def test_fused_equals_plain(split, feedback_interval, attention_kernel, loop, tokens) -> None:
    model = make_rlt(split, feedback_interval, window=4).double()
    assert_same(model, tokens)


@pytest.mark.parametrize(
    "fields",
    [
        dict(tbptt=5),  # cuts inside the sequence: s and the SWA caches detached
        dict(tbptt=6, feedback_interval=4),  # cuts that fall inside chunks
        dict(window=1),
        dict(window=30),  # window longer than the sequence
        dict(pos_encoding="none"),
        dict(alpha=0.0),
        dict(enc_final_norm=True),
    ],
)
def test_fused_equals_plain_options(fields, attention_kernel, loop, tokens) -> None:
    fields = {"feedback_interval": 1, **fields}
    model = make_rlt("1+2", **fields).double()
    assert_same(model, tokens)


def test_fused_path_is_the_training_default(tokens) -> None:
    model = make_rlt("2+2", 1)
    assert model._use_fused()
    with torch.no_grad():
        assert not model._use_fused()  # inference needs no saved buffers: the plain path
    model.config.checkpoint_activations = True
    assert not model._use_fused()
    assert not make_rlt("2+2", None)._use_fused()  # RLT-0 runs in parallel anyway


def test_fused_float32_matches_plain(loop, tokens) -> None:
    model = make_rlt("2+2", 1)
    plain_out, plain_grads = outputs_and_grads(model, tokens, fused=False)
    fused_out, fused_grads = outputs_and_grads(model, tokens, fused=True)
    assert (fused_out - plain_out).abs().max() <= 1e-5
    for name, grad in plain_grads.items():
        assert (fused_grads[name] - grad).abs().max() <= 1e-4 * grad.abs().max(), name


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_fused_bf16_autocast_runs_close_to_fp32(loop, tokens) -> None:
    """The GPU path's bf16 autocast, exercised on CPU: everything inside runs in bf16."""
    model = make_rlt("2+2", 1)
    reference = model(tokens).detach()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens)
    logits.float().square().mean().backward()
    assert logits.dtype == torch.bfloat16
    assert (logits.float() - reference).abs().max() < 0.05
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


class _SyncDetector(TorchDispatchMode):
    """Records ops that would force a device-to-host synchronisation on a GPU."""

    SYNCING = ("_local_scalar_dense", "item", "nonzero", "equal", "is_nonzero", "masked_select")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(name in str(func) for name in self.SYNCING):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_fused_training_step_has_no_host_sync(loop, tokens) -> None:
    """Static control flow: the token loop never reads a tensor value back to the host."""
    model = make_rlt("2+2", 4)
    with _SyncDetector() as detector:
        model(tokens).sum().backward()
    assert detector.seen == []


@pytest.mark.parametrize("fields", [dict(feedback_interval=1, tbptt=5), dict(feedback_interval=4)])
def test_memory_layouts_give_the_same_numbers_bit_for_bit(fields, tokens, monkeypatch) -> None:
    """The memory stored head-major (HeadMajor) or slot-major with query-major probabilities
    (SlotMajor, issue 42) feeds the same matmuls the same values: float32 outputs and every
    gradient equal bit for bit (the Python loop, which takes either; the C++ loop ties the
    memory's layout to the window's)."""
    import rlt.models.recurrence as recurrence

    runs = []
    for memory_layout in (layouts.HeadMajor, layouts.SlotMajor):
        monkeypatch.setattr(recurrence, "memory_layout_for", lambda _dh, m=memory_layout: m)
        model = make_rlt("1+2", d_model=64, n_heads=1, **fields)  # Dh=64: the matmul window
        runs.append(outputs_and_grads(model, tokens, fused=True))
    (head_out, head_grads), (slot_out, slot_grads) = runs
    assert torch.equal(head_out, slot_out)
    assert head_grads.keys() == slot_grads.keys()
    for name, grad in head_grads.items():
        assert torch.equal(slot_grads[name], grad), name
