"""Acceptance 3-4 of issue 2: the recurrence is real, and TBPTT cuts exactly where it should."""

from __future__ import annotations

import pytest
import torch

from tests.models.conftest import make_rlt


@pytest.mark.parametrize("feedback_interval", [1, 4])
def test_s_star_reaches_the_last_position_through_the_state_chain(feedback_interval: int) -> None:
    """T=40 >> W=4: s* reaches the last logits only via s_1, s_2, ... (the SWA of a 2-block
    decoder spans 7 positions and merges beyond chunk 0 never see s* directly)."""
    model = make_rlt("2+2", feedback_interval, window=4)
    tokens = torch.randint(1, 140, (2, 40), generator=torch.Generator().manual_seed(0))
    model(tokens)[:, -1].sum().backward()
    grad = model.merge.s_star.grad
    assert grad is not None and grad.abs().max() > 0


def test_rlt0_has_no_feedback_parameters() -> None:
    model = make_rlt("2+2", feedback_interval=None)
    assert model.merge is None
    names = [name for name, _ in model.named_parameters()]
    assert not any("s_star" in n or "gate" in n or "state_" in n for n in names), names


def decoder_grads(
    model, tokens: torch.Tensor, tbptt: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """d(last logits)/d(e) through the decoder (memory detached), d/d(e) through the memory
    only, and d/d(s*)."""
    e = model.encode(tokens).detach().requires_grad_(True)  # (N, T, d)
    e_mem = model.encode(tokens).detach().requires_grad_(True)
    s, _, _ = model.decode(e, model.memory_kv(e_mem), tbptt=tbptt)
    model.readout(s)[:, -1].sum().backward()
    return e.grad, e_mem.grad, model.merge.s_star.grad


def test_gradients_flow_through_state_caches_and_memory() -> None:
    model = make_rlt("1+2", 1, window=4)
    tokens = torch.randint(1, 140, (2, 12), generator=torch.Generator().manual_seed(0))
    through_decoder, through_memory, s_star = decoder_grads(model, tokens, tbptt=128)
    per_position = through_decoder.abs().sum(dim=(0, 2))  # (T,)
    assert (per_position > 0).all()  # every earlier input reaches the last position
    assert (through_memory.abs().sum(dim=(0, 2)) > 0).all()
    assert s_star.abs().max() > 0


def test_swa_cache_carries_gradient_without_feedback() -> None:
    """alpha=0 silences the merge: e_{t-1} reaches position t only through the SWA cache."""
    model = make_rlt("1+2", 1, window=4, alpha=0.0)
    tokens = torch.randint(1, 140, (2, 12), generator=torch.Generator().manual_seed(0))
    through_decoder, _, _ = decoder_grads(model, tokens, tbptt=128)
    per_position = through_decoder.abs().sum(dim=(0, 2))  # (T,)
    assert (per_position[-7:] > 0).all()  # 2 decoder blocks of W=4: 7 positions of reach
    assert (per_position[:-7] == 0).all()  # and nothing further (no feedback path)
    model.zero_grad()
    cut, _, _ = decoder_grads(model, tokens, tbptt=11)  # cut right before the last position
    cut_per_position = cut.abs().sum(dim=(0, 2))
    assert (cut_per_position[:-1] == 0).all()  # the SWA cache was detached
    assert cut_per_position[-1] > 0


@pytest.mark.parametrize(
    ("feedback_interval", "last_cut"),
    [
        (1, 18),  # cuts at 6, 12, 18
        (3, 18),  # chunk starts 0, 3, ..., 18: the first start in each new window of 6
        (4, 12),  # chunk starts 0, 4, 8, 12, 16: cuts at 8 and 12; 16 is in 12's window
    ],
)
def test_tbptt_cuts_state_gradients_at_the_interval(feedback_interval: int, last_cut: int) -> None:
    model = make_rlt("1+2", feedback_interval, window=4)
    tokens = torch.randint(1, 140, (2, 20), generator=torch.Generator().manual_seed(0))
    through_decoder, through_memory, s_star = decoder_grads(model, tokens, tbptt=6)
    per_position = through_decoder.abs().sum(dim=(0, 2))  # (T,)
    assert (per_position[:last_cut] == 0).all()
    assert (per_position[last_cut:] > 0).all()
    assert (through_memory.abs().sum(dim=(0, 2)) > 0).all()  # the memory is never cut
    assert s_star is None or s_star.abs().max() == 0


def test_forward_uses_the_configured_tbptt() -> None:
    model = make_rlt("1+2", 1, window=4, tbptt=5)
    tokens = torch.randint(1, 140, (2, 20), generator=torch.Generator().manual_seed(0))
    model(tokens)[:, -1].sum().backward()
    assert model.merge.s_star.grad is None or model.merge.s_star.grad.abs().max() == 0


@pytest.mark.parametrize("feedback_interval", [1, 4, None])
def test_activation_checkpointing_gives_the_same_gradients(feedback_interval) -> None:
    tokens = torch.randint(1, 140, (2, 11), generator=torch.Generator().manual_seed(0))
    grads = []
    for checkpoint in (False, True):
        model = make_rlt("2+2", feedback_interval, checkpoint_activations=checkpoint)
        model(tokens).square().mean().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-6, rtol=1e-5), name
