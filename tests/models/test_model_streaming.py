"""Acceptance 1-2 of issue 2: streaming equals training, and RLT-2 reduces to RLT-1 at B=1.

Every variant is also checked against the naive reference of SPEC section 1 (rlt_reference).
"""

from __future__ import annotations

import pytest
import torch

from tests.models.conftest import make_rlt, make_transformer
from tests.models.rlt_reference import reference_rlt, reference_transformer

VARIANTS = [1, 3, 4, None]  # RLT-1, RLT-2 B=3, RLT-2 B=4, RLT-0
SPLITS = ["4+4", "8+0", "2+3", "0+2"]
PROMPT_ENDS = [0, 6, 13, 20, 21]  # 13 falls inside a chunk for B=3 and B=4, 6 for B=4


def stream(model, tokens: torch.Tensor, prompt_end: int) -> torch.Tensor:
    """prefill(tokens[:, :p]) then one step per remaining token -> logits (N, T, V)."""
    logits, state = model.prefill(tokens[:, :prompt_end], model.init_state(tokens.shape[0]))
    out = [logits]
    for t in range(prompt_end, tokens.shape[1]):
        step_logits, state = model.step(tokens[:, t], state)
        out.append(step_logits[:, None])
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("feedback_interval", VARIANTS)
def test_rlt_streaming_equals_forward(split: str, feedback_interval: int | None, tokens) -> None:
    model = make_rlt(split, feedback_interval, window=4)
    with torch.no_grad():
        expected = model(tokens)
        for p in PROMPT_ENDS:
            got = stream(model, tokens, p)
            assert (got - expected).abs().max() <= 1e-5, f"prompt end {p}"


def test_transformer_streaming_equals_forward(tokens) -> None:
    model = make_transformer(n_layers=3)
    with torch.no_grad():
        expected = model(tokens)
        for p in PROMPT_ENDS:
            assert (stream(model, tokens, p) - expected).abs().max() <= 1e-5, f"prompt end {p}"


def test_streaming_under_autograd_matches_too(tokens) -> None:
    """With grad enabled the caches concatenate instead of writing in place: same numbers."""
    model = make_rlt("2+2", 3)
    got = stream(model, tokens, 7)
    assert got.requires_grad
    assert (got - model(tokens)).abs().max() <= 1e-5
    got.sum().backward()  # nothing was modified in place under autograd


@pytest.mark.parametrize("feedback_interval", [1, 4])
def test_prefill_in_pieces_equals_forward(feedback_interval: int, tokens) -> None:
    """Where the prompt ends never changes RLT-2's computation: any cut, any piece lengths."""
    model = make_rlt("2+2", feedback_interval)
    with torch.no_grad():
        expected = model(tokens)
        for cuts in ([3, 10], [1, 2, 3], [6, 7, 15], [13]):
            state, out, prev = model.init_state(tokens.shape[0]), [], 0
            for cut in [*cuts, tokens.shape[1]]:
                logits, state = model.prefill(tokens[:, prev:cut], state)
                out.append(logits)
                prev = cut
            assert (torch.cat(out, dim=1) - expected).abs().max() <= 1e-5, cuts


def test_rlt2_with_b1_is_rlt1(tokens) -> None:
    rlt2 = make_rlt("2+2", feedback_interval=4)
    rlt1 = make_rlt("2+2", feedback_interval=1, seed=7)
    rlt1.load_state_dict(rlt2.state_dict())
    rlt2.feedback_interval = 1
    with torch.no_grad():
        assert torch.equal(rlt2(tokens), rlt1(tokens))


def test_chunking_changes_the_output(tokens) -> None:
    """The variants really differ (otherwise the tests above would prove little)."""
    model = make_rlt("2+2", feedback_interval=1)
    with torch.no_grad():
        rlt1 = model(tokens)
        model.feedback_interval = 4
        rlt2 = model(tokens)
    # position 0 merges with s* in both (one position vs a chunk of 4: rounding only)
    assert (rlt1[:, 0] - rlt2[:, 0]).abs().max() <= 1e-6
    assert (rlt1[:, 1:] - rlt2[:, 1:]).abs().max() > 1e-6


@pytest.mark.parametrize("feedback_interval", VARIANTS)
@pytest.mark.parametrize("split", ["2+2", "3+0"])
@pytest.mark.parametrize("pos_encoding", ["rope", "none"])
def test_rlt_matches_naive_reference(split, feedback_interval, pos_encoding, tokens) -> None:
    model = make_rlt(split, feedback_interval, pos_encoding=pos_encoding, window=3).double()
    with torch.no_grad():
        assert (model(tokens) - reference_rlt(model, tokens)).abs().max() <= 1e-9


def test_enc_final_norm_matches_naive_reference(tokens) -> None:
    model = make_rlt("1+2", 2, enc_final_norm=True).double()
    assert model.memory_norm is not None
    with torch.no_grad():
        assert (model(tokens) - reference_rlt(model, tokens)).abs().max() <= 1e-9


def test_transformer_matches_naive_reference(tokens) -> None:
    model = make_transformer(n_layers=2).double()
    with torch.no_grad():
        assert (model(tokens) - reference_transformer(model, tokens)).abs().max() <= 1e-9


@pytest.mark.parametrize("window", [1, 2, 30])
def test_window_sizes(window: int, tokens) -> None:
    """W=1 (no past), W=2, and W longer than the sequence."""
    model = make_rlt("1+2", 1, window=window).double()
    with torch.no_grad():
        expected = model(tokens)
        assert (expected - reference_rlt(model, tokens)).abs().max() <= 1e-9
        assert (stream(model, tokens, 6) - expected).abs().max() <= 1e-9
