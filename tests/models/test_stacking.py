"""rlt.models.stacking: K seeds in one batched step give each seed its own numbers bit for bit.

The reference is the plain path: each seed's model run on its own slice of the batch, its own
backward and optimizer. Parameters are randomised away from their initialisation (RMSNorm
scales of 1 would hide a wrong scale) and the K seeds differ, so reading one seed's weights for
another shows in the logits or the gradients.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rlt.models import DeltaNetConfig, LSTMConfig, RLTConfig, TransformerConfig, build_model
from rlt.models.stacking import StackError, stack, why_not
from rlt.tasks import metrics as task_metrics

TINY = dict(d_model=16, n_heads=2, d_ff=40, vocab_size=12)
LAPTOP = dict(d_model=64, n_heads=4, d_ff=170, vocab_size=40)


def seeds(make, k: int, std: float = 0.1) -> list[nn.Module]:
    out = []
    for i in range(k):
        model = make()
        g = torch.Generator().manual_seed(100 + i)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * std + (1.0 if p.ndim == 1 else 0.0))
        out.append(model)
    return out


def batch(k: int, n: int, t: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (k, n, t), generator=g), torch.randint(
        0, vocab, (k, n, t), generator=g
    )


def alone(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor):
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    task_metrics.loss(logits, labels).backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


def together(models: list[nn.Module], tokens: torch.Tensor, labels: torch.Tensor):
    k, n, t = tokens.shape
    for m in models:
        m.zero_grad(set_to_none=True)
    logits = stack(models)(tokens.reshape(k * n, t)).reshape(k, n, t, -1)
    losses = torch.stack([task_metrics.loss(logits[i], labels[i]) for i in range(k)])
    losses.sum().backward()
    return logits.detach(), [[p.grad.clone() for p in m.parameters()] for m in models]


MAKERS = {
    "transformer tiny": lambda: build_model(TransformerConfig(n_layers=2, **TINY)),
    "rlt0 tiny": lambda: build_model(RLTConfig.from_split("2+2", feedback_interval=None, **TINY)),
    "transformer laptop": lambda: build_model(TransformerConfig(n_layers=2, **LAPTOP)),
    "rlt0 laptop": lambda: build_model(
        RLTConfig.from_split("1+1", feedback_interval=None, **LAPTOP)
    ),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_each_seed_gets_its_own_logits_and_gradients_bit_for_bit(name):
    k = 3
    models = seeds(MAKERS[name], k)
    vocab = models[0].config.vocab_size
    tokens, labels = batch(k, 8, 11, vocab)
    logits, grads = together(models, tokens, labels)
    for i, model in enumerate(models):
        ref_logits, ref_grads = alone(model, tokens[i], labels[i])
        assert torch.equal(logits[i], ref_logits), f"seed {i}: logits differ"
        for (pname, _), g, ref in zip(model.named_parameters(), grads[i], ref_grads):
            assert torch.equal(g, ref), f"seed {i}: gradient of {pname} differs"


def test_three_optimizer_steps_stacked_equal_three_alone():
    """Each seed's own AdamW and clipping after the stacked backward: the weights after three
    steps are those of the seed trained alone."""
    k, steps = 3, 3
    plain = seeds(MAKERS["transformer tiny"], k)
    stacked_models = copy.deepcopy(plain)

    def optimizers(models):
        return [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) for m in models]

    opt_plain, opt_stacked = optimizers(plain), optimizers(stacked_models)
    for step in range(steps):
        tokens, labels = batch(k, 8, 9, TINY["vocab_size"], seed=step)
        for i, model in enumerate(plain):
            alone(model, tokens[i], labels[i])
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt_plain[i].step()
        together(stacked_models, tokens, labels)
        for model, opt in zip(stacked_models, opt_stacked):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    for a, b in zip(plain, stacked_models):
        for (name, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), f"{name} differs after {steps} steps"


class Biased(nn.Module):
    """A linear map with a bias between an embedding and an RMSNorm (no model has one yet)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 6, bias=True)
        self.norm = nn.RMSNorm(6, eps=1e-6)

    def forward(self, tokens):
        return self.norm(self.proj(self.embed(tokens)))


def test_a_linear_with_a_bias_stacks_bit_for_bit():
    k = 4
    models = seeds(Biased, k, std=0.5)
    tokens = torch.randint(0, 10, (k, 5, 7), generator=torch.Generator().manual_seed(1))
    out = stack(models)(tokens.reshape(k * 5, 7)).reshape(k, 5, 7, 6)
    out.square().sum().backward()
    stacked_grads = [[p.grad.clone() for p in m.parameters()] for m in models]
    for i, model in enumerate(models):
        model.zero_grad(set_to_none=True)
        ref = model(tokens[i])
        ref.square().sum().backward()
        assert torch.equal(out[i].detach(), ref.detach())
        assert all(torch.equal(g, p.grad) for g, p in zip(stacked_grads[i], model.parameters()))


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda: build_model(RLTConfig.from_split("1+1", feedback_interval=1, **TINY)), "fused"),
        (
            lambda: build_model(
                RLTConfig.from_split("1+1", feedback_interval=1, fused=False, **TINY)
            ),
            "s_star",
        ),
        (lambda: build_model(LSTMConfig(d_model=16, n_layers=1, vocab_size=12)), "LSTM"),
        (lambda: build_model(DeltaNetConfig(n_layers=1, **TINY)), "Conv1d"),
    ],
)
def test_a_model_that_cannot_stack_says_why(make, says):
    model = make()
    assert says in why_not(model)
    with pytest.raises(StackError, match=says):
        stack([model, make()])


def test_models_of_different_configurations_are_refused():
    a = build_model(TransformerConfig(n_layers=2, **TINY))
    b = build_model(TransformerConfig(n_layers=1, **TINY))
    with pytest.raises(StackError, match="one configuration"):
        stack([a, b])


def test_a_token_outside_the_vocabulary_is_an_error_not_the_next_seeds_row():
    models = seeds(Biased, 2)
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        stack(models)(torch.tensor([[1, 10], [0, 2]]))


def test_an_embedding_with_padding_is_refused():
    class Padded(Biased):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 8, padding_idx=0)

    assert "padding_idx" in why_not(Padded())
