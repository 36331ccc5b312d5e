"""Device and dtype discipline without a GPU (issue 22): every tensor a model makes follows its
input's or its parameters' device and dtype, never the process defaults.

The check: build a model, then switch the defaults to what no tensor of the run should have
(default device ``meta``, default dtype float64) and run forward, backward, prefill and greedy
generation. A tensor created without ``device=`` lands on meta and the next op with a CPU
tensor raises; one created without ``dtype=`` is float64 and either raises in a matmul or
silently promotes the output, which the dtype assertions catch. The results must equal those
of the same model run under the normal defaults.
"""

from __future__ import annotations

import contextlib
import copy

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

TINY = dict(d_model=32, n_heads=4, d_ff=48, vocab_size=140)

CONFIGS = {
    "rlt1 fused": lambda: RLTConfig.from_split("2+2", feedback_interval=1, window=4, **TINY),
    "rlt1 plain": lambda: RLTConfig.from_split(
        "2+2", feedback_interval=1, window=4, fused=False, **TINY
    ),
    "rlt2 B=4 tbptt": lambda: RLTConfig.from_split(
        "1+2", feedback_interval=4, window=4, tbptt=6, **TINY
    ),
    "rlt0": lambda: RLTConfig.from_split("2+2", feedback_interval=None, window=4, **TINY),
    "transformer": lambda: TransformerConfig(n_layers=2, **TINY),
    "lstm": lambda: LSTMConfig(n_layers=2, d_model=32, vocab_size=140),
    "deltanet": lambda: DeltaNetConfig(n_layers=2, chunk_size=4, **TINY),
    "gated deltanet": lambda: DeltaNetConfig(n_layers=2, chunk_size=4, gated=True, **TINY),
    "deltaproduct": lambda: DeltaProductConfig(n_layers=2, chunk_size=4, **TINY),
    "pdssm": lambda: PDSSMConfig(n_layers=2, **TINY),
}


@contextlib.contextmanager
def hostile_defaults():
    """Default device meta and default dtype float64 for the duration."""
    dtype = torch.get_default_dtype()
    torch.set_default_device("meta")
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_device(None)
        torch.set_default_dtype(dtype)


def exercise(model, tokens):
    """Training forward and backward, prefill from a fresh state, and greedy generation."""
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    logits.float().square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        pre, _ = model.prefill(tokens[:, :5], model.init_state(tokens.shape[0]))
        gen = model.generate(tokens[:, :5], max_new_tokens=4)
    return logits.detach(), grads, pre, gen


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_no_tensor_follows_the_process_defaults(name):
    torch.manual_seed(0)
    model = build_model(CONFIGS[name]())
    twin = copy.deepcopy(model)  # fresh caches (RoPE tables) for the run under hostile defaults
    tokens = torch.randint(1, 140, (2, 11), generator=torch.Generator().manual_seed(3))
    logits, grads, pre, gen = exercise(model, tokens)
    with hostile_defaults():
        h_logits, h_grads, h_pre, h_gen = exercise(twin, tokens)
    assert h_logits.device.type == "cpu" and h_logits.dtype == torch.float32
    assert h_pre.dtype == torch.float32 and h_gen.dtype == tokens.dtype
    assert set(h_grads) == set(grads) and all(g.dtype == torch.float32 for g in h_grads.values())
    torch.testing.assert_close(h_logits, logits, rtol=0, atol=0)
    torch.testing.assert_close(h_pre, pre, rtol=0, atol=0)
    assert torch.equal(h_gen, gen)
    for key, grad in grads.items():
        torch.testing.assert_close(h_grads[key], grad, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_float64_model_computes_in_float64(name):
    """The same models in float64: every activation and gradient stays float64 (a tensor made
    in the default float32 would either raise or drag a value down to float32 precision)."""
    torch.manual_seed(0)
    model = build_model(CONFIGS[name]()).double()
    tokens = torch.randint(1, 140, (2, 11), generator=torch.Generator().manual_seed(3))
    logits, grads, pre, _ = exercise(model, tokens)
    assert logits.dtype == torch.float64 and pre.dtype == torch.float64
    assert all(g.dtype == torch.float64 for g in grads.values())
    assert torch.isfinite(logits).all()
