"""The compiled chunk step (rlt/models/compiled.py) against the plain autograd path.

The plain path (``decode``) is the readable reference; the compiled one must give the same
outputs and the same gradient for every parameter, in float32 (the dtype it is compiled for
on the CPU): outputs within 2e-5 and every gradient within 2e-4 of its largest entry (float32
rounding through a differently ordered computation; measured: about 5e-7).

Each distinct shape compiles a forward and a backward graph, so the cases share shapes where
they can: see the notes per case. Inductor's code generation on the CPU costs a minute or more
per graph on a 2-core CI machine (the first case: RLT-1, whose graph the streaming cases
share); the other cases run the same traced graphs, dynamo's and AOT autograd's (the
functional rewrite under test), on eager kernels (``backend="aot_eager"``, the ``traced``
fixture): their semantics are checked, inductor's lowering of them is not. With
``RLT_TEST_INDUCTOR=all`` every case compiles with inductor.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from rlt.models import compiled
from rlt.models.compiled import BUCKET, compiler_available, padded_length
from rlt.training.spec import ConfigError
from rlt.training.trainer_setup import resolve_compile
from tests.models.conftest import make_rlt

needs_compiler = pytest.mark.skipif(
    not compiler_available("cpu")[0], reason="torch.compile cannot generate CPU code here"
)

OUT_TOL, GRAD_TOL = 2e-5, 2e-4


@pytest.fixture
def traced(monkeypatch):
    """The compiled chunk step traced as for inductor and run on eager kernels (see the module's
    docstring); inductor itself with ``RLT_TEST_INDUCTOR=all``."""
    if os.environ.get("RLT_TEST_INDUCTOR") == "all":
        return
    step = functools.cache(
        lambda device_type: torch.compile(
            compiled.chunk_group, fullgraph=True, dynamic=False, backend="aot_eager"
        )
    )
    monkeypatch.setattr(compiled, "compiled_step", step)


def outputs_and_grads(model, tokens: torch.Tensor, *, compiled: bool):
    model.compiled_step = compiled
    model.config.fused = compiled  # the reference is the plain autograd path
    model.zero_grad(set_to_none=True)
    weights = torch.randn(*tokens.shape, 140, generator=torch.Generator().manual_seed(5))
    logits = model(tokens)
    (logits * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def assert_same(model, tokens: torch.Tensor) -> None:
    plain_out, plain_grads = outputs_and_grads(model, tokens, compiled=False)
    out, grads = outputs_and_grads(model, tokens, compiled=True)
    assert (out - plain_out).abs().max() <= OUT_TOL * plain_out.abs().max()
    assert plain_grads.keys() == grads.keys()
    for name, grad in plain_grads.items():
        scale = grad.abs().max().clamp_min(1e-12)
        assert (grads[name] - grad).abs().max() / scale <= GRAD_TOL, name


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize(
    "fields, inductor",
    [
        # RLT-1, T=21 (padded to 32): window edges (positions < W-1), TBPTT cuts at 5, 10, ...
        # Inductor: the streaming cases below share its graph
        (dict(feedback_interval=1, tbptt=5), True),
        # RLT-2 B=4, T=21 not a multiple of B (the last chunk is padded), cuts at 8, 12, 20
        (dict(feedback_interval=4, tbptt=6), False),
        # the same graph as the case above (RoPE tables are inputs): identity rotations
        (dict(feedback_interval=4, pos_encoding="none"), False),
        # a window of one position: no cache slots at all
        (dict(feedback_interval=1, window=1), False),
    ],
)
def test_compiled_equals_plain(fields, inductor, tokens, request) -> None:
    if not inductor:
        request.getfixturevalue("traced")
    assert_same(make_rlt("1+2", **fields), tokens)


@pytest.mark.slow
@needs_compiler
def test_compiled_without_decoder_blocks(tokens, traced) -> None:
    """Split 2+0: the merge alone feeds the head (no memory, no caches)."""
    assert_same(make_rlt("2+0", 1), tokens)


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("prompt", [1, 7, 20])
def test_compiled_training_forward_equals_streaming(prompt, tokens) -> None:
    """Wherever the prompt ends, prefill + steps (eager) give the compiled forward's logits.
    Same graph as the first case of test_compiled_equals_plain."""
    model = make_rlt("1+2", 1, tbptt=5)
    model.compiled_step = True
    logits = model(tokens)  # grad mode: the compiled training path
    assert model._use_fused()
    with torch.no_grad():
        out, state = model.prefill(tokens[:, :prompt], model.init_state(tokens.shape[0]))
        steps = [out]
        for t in range(prompt, tokens.shape[1]):
            step_logits, state = model.step(tokens[:, t], state)
            steps.append(step_logits[:, None])
    streamed = torch.cat(steps, dim=1)
    assert (logits.detach() - streamed).abs().max() <= OUT_TOL * streamed.abs().max()


def test_padded_length_is_a_multiple_of_the_bucket_and_of_b() -> None:
    for interval in (1, 3, 4, 7):
        for length in range(1, 70):
            padded = padded_length(length, interval)
            assert padded >= length and padded % BUCKET == 0 and padded % interval == 0
            assert padded - length < BUCKET * interval  # never a whole extra quantum


def test_compile_setting_off_and_models_without_a_recurrence_stay_eager() -> None:
    assert resolve_compile("off", make_rlt("1+1", 1), "cpu")[0] is False
    assert resolve_compile(False, make_rlt("1+1", 1), "cpu")[0] is False
    # RLT-0 runs its decoder in parallel: nothing to compile, even when asked
    assert resolve_compile("on", make_rlt("1+1", None), "cpu")[0] is False
    plain = make_rlt("1+1", 1)
    plain.config.fused = False  # the reference path stays the reference
    assert resolve_compile("on", plain, "cpu")[0] is False


def test_auto_never_compiles_on_compiles(monkeypatch) -> None:
    """auto: the C++ token loop measured faster at every shape (BENCHMARKS.md)."""
    monkeypatch.setattr("rlt.models.compiled.compiler_available", lambda device: (True, "ok"))
    wide = make_rlt("1+1", 4, d_model=256, n_heads=4, d_ff=64)
    for device in ("cpu", "cuda"):
        on, why = resolve_compile("auto", wide, device)
        assert not on and "trainer.native" in why
        assert resolve_compile("on", wide, device)[0] is True
        assert resolve_compile(True, make_rlt("1+1", 1), device)[0] is True


def test_without_a_compiler_on_names_the_fix(monkeypatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    model = make_rlt("1+1", 1)
    assert resolve_compile("auto", model, "cpu")[0] is False
    with pytest.raises(ConfigError, match="trainer.compile=auto"):
        resolve_compile("on", model, "cpu")
    assert compiler_available("mps")[0] is False
