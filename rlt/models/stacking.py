"""K seeds of one model in one batched step: the measurement behind issue 53.

``stack(models)`` returns one module that runs K models of the same configuration (K seeds) on
a seed-major batch ``(K*N, T)``: every operation without parameters runs once over all K*N
sequences, and every operation with parameters reads the K seeds' own weights, stacked per
call (a linear map is one ``bmm`` over the K weight matrices, an embedding one lookup into
the K tables, an RMSNorm one normalisation and a per-seed scale). The weights stay in the K
models: a backward through the stacked module fills each seed's own ``.grad``, so each seed
keeps its own optimizer, clipping and schedule unchanged. Each seed's logits and gradients are
its unstacked ones bit for bit in portable arithmetic (tests/models/test_stacking.py holds
them to K separate forward/backward passes).

What stacks: a model whose every parameter belongs to an ``nn.Linear``, ``nn.Embedding`` or
``nn.RMSNorm`` and whose forward reaches its parameters only through those modules: the
Transformer and RLT-0. :func:`why_not` names what keeps any other model from stacking (the
RLT-1/RLT-2 fused recurrence reads its weights directly into a hand-written backward; the LSTM
is one ``torch.nn.LSTM``; DeltaNet, DeltaProduct and PD-SSM have free parameters and
convolutions). Training does not use it: ``python -m rlt.bench --stack K`` times it against K
single steps and against one step at K times the batch (the floor any stacking can reach).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

STACKABLE = (nn.Linear, nn.Embedding, nn.RMSNorm)


class StackError(ValueError):
    """These models cannot run as one stacked module."""


def why_not(model: nn.Module) -> str | None:
    """Why ``model`` cannot stack, or None if it can."""
    if getattr(model, "_use_fused", None) is not None and model._use_fused():
        return (
            "its recurrence trains through the fused token loop, which reads the weights "
            "directly into a hand-written backward"
        )
    for name, m in model.named_modules():
        if isinstance(m, nn.Embedding) and (m.padding_idx is not None or m.max_norm or m.sparse):
            return f"embedding {name} has padding_idx, max_norm or sparse, which the stack ignores"
        if isinstance(m, nn.RMSNorm) and m.weight is None:
            return f"RMSNorm {name} has no scale to stack"
    owned = {id(p) for m in model.modules() if isinstance(m, STACKABLE) for p in m.parameters()}
    for name, p in model.named_parameters():
        if id(p) not in owned:
            owner = name.rpartition(".")[0] or "the model"
            kind = type(model.get_submodule(name.rpartition(".")[0])).__name__
            return f"parameter {name} belongs to {owner} ({kind}), not a Linear/Embedding/RMSNorm"
    return None


def _seeds(x: Tensor, k: int) -> Tensor:
    """(K*N, ..., d) -> (K, N*..., d): each seed's rows together, the batch seed-major."""
    return x.reshape(k, -1, x.shape[-1])


class SeedLinear(nn.Module):
    """``x W_k^T (+ b_k)`` for the rows of seed k: one bmm (baddbmm with a bias)."""

    def __init__(self, sources: list[nn.Linear]) -> None:
        super().__init__()
        self.sources = sources  # a plain list: the parameters stay the seeds' own

    @property
    def weight(self) -> Tensor:  # dtype and device for code that asks a layer for them
        return self.sources[0].weight

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.sources)
        w_t = torch.stack([s.weight for s in self.sources]).transpose(1, 2)  # (K, in, out)
        if self.sources[0].bias is None:
            y = torch.bmm(_seeds(x, k), w_t)
        else:
            bias = torch.stack([s.bias for s in self.sources])[:, None, :]  # (K, 1, out)
            y = torch.baddbmm(bias, _seeds(x, k), w_t)
        return y.reshape(*x.shape[:-1], w_t.shape[-1])


class SeedEmbedding(nn.Module):
    """Seed k's tokens look up seed k's table: one lookup in the K tables laid end to end."""

    def __init__(self, sources: list[nn.Embedding]) -> None:
        super().__init__()
        self.sources = sources

    @property
    def weight(self) -> Tensor:
        return self.sources[0].weight

    def forward(self, tokens: Tensor) -> Tensor:
        k = len(self.sources)
        table = torch.stack([s.weight for s in self.sources])  # (K, V, d)
        vocab = table.shape[1]
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab):  # else: the next seed's
            raise IndexError(
                f"token ids must lie in [0, {vocab}), got {tokens.min()}..{tokens.max()}"
            )
        offset = torch.arange(k, device=tokens.device) * vocab
        shifted = tokens.reshape(k, -1) + offset[:, None]
        out = F.embedding(shifted, table.reshape(k * vocab, -1))  # (K, N*T, d)
        return out.reshape(*tokens.shape, -1)


class SeedRMSNorm(nn.Module):
    """RMS normalisation of every row, then seed k's scale."""

    def __init__(self, sources: list[nn.RMSNorm]) -> None:
        super().__init__()
        self.sources = sources
        self.shape, self.eps = sources[0].normalized_shape, sources[0].eps

    @property
    def weight(self) -> Tensor:
        return self.sources[0].weight

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.sources)
        normed = F.rms_norm(x, self.shape, None, self.eps)
        scale = torch.stack([s.weight for s in self.sources])[:, None, :]  # (K, 1, d)
        return (_seeds(normed, k) * scale).reshape(x.shape)


SEED_FORMS = ((nn.Linear, SeedLinear), (nn.Embedding, SeedEmbedding), (nn.RMSNorm, SeedRMSNorm))


def stack(models: list[nn.Module]) -> nn.Module:
    """One module that runs ``models`` (K seeds, one configuration) on a seed-major batch."""
    if len(models) < 1:
        raise StackError("stack needs at least one model")
    shapes = [[(n, tuple(p.shape)) for n, p in m.named_parameters()] for m in models]
    if any(s != shapes[0] for s in shapes[1:]):
        raise StackError("the models differ in their parameters: stack seeds of one configuration")
    for m in models:
        if (reason := why_not(m)) is not None:
            raise StackError(f"{type(m).__name__} cannot stack: {reason}")
    stacked = copy.deepcopy(models[0])
    for name, module in list(stacked.named_modules()):
        form = next((seed for plain, seed in SEED_FORMS if isinstance(module, plain)), None)
        if form is None:
            continue
        parent, _, leaf = name.rpartition(".")
        sources = [m.get_submodule(name) for m in models]
        setattr(stacked.get_submodule(parent) if parent else stacked, leaf, form(sources))
    return stacked
