"""The gated merge that feeds the recurrent state back into the decoder input (RLT-1, RLT-2)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn


class MergeWeights(NamedTuple):
    """The merge's weights the fused recurrence takes per chunk (the state-dependent half)."""

    state_norm: Tensor  # (d,)
    state_proj: Tensor  # (2d, d): [r half of W_g ; W_s]


class GatedMerge(nn.Module):
    """``u_t = e_t + alpha * sigmoid(W_g [e_t ; r] + b_g) * (W_s r)`` with ``r = RMSNorm(s)``.

    W_g is stored as its two halves: the e_t half (with b_g) depends only on the encoder, so
    ``gate_input`` runs once for all positions in parallel; the state half is fused with W_s
    into one (2d x d) projection, the only matmul per merge. Parameters: s*, the state norm,
    W_g (d x 2d), b_g, W_s (d x d) = 3d^2 + 3d, exactly what RLT-0 lacks.

    Mirrored by hand in the fused recurrence (rlt/models/recurrence.py, fed by
    :meth:`fused_weights`, :meth:`gate_input` and :meth:`initial_state`): a change to the merge
    must be made there too; tests/models/test_model_fused.py holds the two equal.
    """

    def __init__(self, d_model: int, alpha: float, eps: float) -> None:
        super().__init__()
        self.alpha = alpha
        self.s_star = nn.Parameter(torch.zeros(d_model))  # s_0 of every sequence, learned
        self.state_norm = nn.RMSNorm(d_model, eps=eps)
        self.gate_e = nn.Linear(d_model, d_model, bias=True)  # e half of W_g, and b_g
        self.state_proj = nn.Linear(d_model, 2 * d_model, bias=False)  # [r half of W_g ; W_s]

    def reset_parameters(self, std: float) -> None:
        nn.init.normal_(self.s_star, std=std)

    def fused_weights(self) -> MergeWeights:
        return MergeWeights(state_norm=self.state_norm.weight, state_proj=self.state_proj.weight)

    def initial_state(self, batch_size: int) -> Tensor:
        return self.s_star.expand(batch_size, -1)  # (N, d)

    def gate_input(self, e: Tensor) -> Tensor:
        """The state-independent half of the gate pre-activation, W_g^e e_t + b_g."""
        return self.gate_e(e)  # (N, T, d)

    def forward(self, e: Tensor, ge: Tensor, s: Tensor) -> Tensor:
        """Merge c positions with one state: e, ge (N, c, d), s (N, d) -> u (N, c, d)."""
        gs, ws = self.state_proj(self.state_norm(s)).chunk(2, dim=-1)  # (N, d) each
        gate = torch.sigmoid(ge + gs[:, None])  # (N, c, d)
        return e + self.alpha * gate * ws[:, None]
