"""PD-SSM (Terzic, Menet, Hersche, Hofmann and Rahimi, IBM Research, NeurIPS 2025, "Structured
Sparse Transition Matrices to Enable State Tracking in State-Space Models"): a state-space model
whose transition is a column one-hot matrix times a complex diagonal (issue 57, not in the
report).

Per head, with a complex state h_t of N entries (``state_size``) and the block input x_t:

    h_t = A_t h_{t-1} + B x_t,      A_t = P_t D_t,      y_t = Re(C h_t) + skip * x_t,

    P_t     column one-hot (N x N): column j is e_i for i = argmax_i M_t[i, j], where
            M_t = sum_k s_{t,k} A_k is a mix of K trainable N x N matrices (``dict_size``)
            with s_t = softmax(W_S x_t): state j moves to state i = P_t(j)
    D_t     complex diagonal, D_t[j] = r_j exp(2 pi i phi_j) with r = sigmoid(W_m x_t + b_m)
            and phi = sigmoid(W_p x_t + b_p), so 0 < |D_t[j]| < 1
    B, C    complex, input-independent (B: d -> N, C: N -> d); skip: the paper's D u_t term.

So (A_t h)[i] = sum over j with P_t(j) = i of D_t[j] h[j]: each entry is scaled and rotated
and moved to one place, and ||A_t h||_1 <= ||h||_1 (BIBO-stable: every eigenvalue of A_t has
modulus < 1). A one-hot h_{t-1} = e_q moves to D_t[q] e_{P_t(q)}: one layer can run any N-state
automaton (the paper's construction; P_t a permutation for a group).

P_t is hard in the forward and trained straight-through, as the paper does: the forward uses
the one-hot, the gradient is that of the column softmax softmax_i(M_t[i, j]) (temperature 1).
We write P = hard + (soft - soft.detach()), which equals the one-hot exactly in floating point
(the authors' (hard - soft).detach() + soft is within rounding of it), so training, prefill and
step compute the same transitions.

Our choices where the paper and the authors' code (github.com/IBM/expressive-sparse-state-space-
model, state_tracking_PyTorch/models/pdssm.py) leave room or differ:

- P_t is column one-hot and A_t = P_t D_t, as the paper writes. The authors' PyTorch code takes
  the softmax/argmax over each row instead (row one-hot, a gather: h'[i] = D[i] h[P(i)]); we
  follow the paper's equations.
- D's magnitude and phase each come from one linear map of x_t plus a bias per entry, where the
  authors' code uses a two-layer GELU MLP (width 2N) for each: at our widths those MLPs alone
  would outweigh an attention layer. Magnitudes start in [0.9, 0.999] (the LRU's ring, Orvieto
  et al. 2023) and phases uniform on the circle; the authors' code starts near 0.5 and pi.
- h_0 = e_1 in every head: the automaton's start state of the paper's construction, as in the
  authors' code. Dropping the state (rlt/models/intervene.py) puts it back there.
- One PD-SSM head per attention head (``n_heads`` from the scale), each with its own selector,
  dictionary, D maps and slice of B and C; C reads all heads' real and imaginary parts.
- The authors' block is post-LayerNorm with the SSM alone; ours is DeltaNet's pre-norm block,
  x + PDSSM(RMSNorm(x)), x + SwiGLU(RMSNorm(x)), with the FFN width chosen so a block has the
  Transformer block's parameters where the scale allows (PDSSMConfig.matched_d_ff). No bias
  anywhere but the two D biases (the authors' readout has one); the skip starts at ones (as
  Mamba's D), the authors' at N(0, 1/d).
- The recurrence runs token by token (vectorised over batch and heads) in float32 even under
  autocast: the argmax in bfloat16 would pick other columns than the float32 forward.

Every tensor of the recurrence is real: a complex number is the pair (real, imaginary) in the
last dimension, so the state saves, loads and checksums like every other state here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlt.models.config import PDSSMConfig
from rlt.models.mixing import MixingModel
from rlt.models.state import LayersMemory


@dataclass
class PDSSMState(LayersMemory):
    """Every layer's complex state after ``position`` tokens, as (real, imaginary) pairs."""

    position: int
    layers: list[Tensor]  # one per block: (N, H, S, 2)

    @property
    def batch_size(self) -> int:
        return self.layers[0].shape[0]

    def clone(self) -> PDSSMState:
        return PDSSMState(self.position, [h.clone() for h in self.layers])

    def nbytes(self) -> int:
        return sum(h.numel() * h.element_size() for h in self.layers)


def column_one_hot(m: Tensor) -> Tensor:
    """Scores m (..., S, S) -> P (..., S, S), column j = e_i for i = argmax_i m[i, j]; the
    gradient is that of the column softmax (straight-through)."""
    soft = m.softmax(dim=-2)
    hard = F.one_hot(m.argmax(dim=-2), m.shape[-2]).transpose(-1, -2).to(soft.dtype)
    return hard + (soft - soft.detach())


def pd_recurrence(p: Tensor, d: Tensor, b: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
    """h_t = P_t D_t h_{t-1} + b_t, token by token. p (N, H, t, S, S) real; d, b (N, H, t, S, 2)
    and h (N, H, S, 2) complex as (real, imaginary) -> the states (N, H, t, S, 2) and the last."""
    outs = []
    for i in range(p.shape[2]):
        dr, di = d[:, :, i, :, 0], d[:, :, i, :, 1]  # (N, H, S)
        hr, hi = h[..., 0], h[..., 1]
        scaled = torch.stack([dr * hr - di * hi, dr * hi + di * hr], dim=-1)  # D_t h: (N, H, S, 2)
        h = p[:, :, i] @ scaled + b[:, :, i]
        outs.append(h)
    return torch.stack(outs, dim=2), h


class PDSSMLayer(nn.Module):
    """Token mixing by the PD-SSM recurrence, H heads of N complex entries each."""

    def __init__(self, config: PDSSMConfig) -> None:
        super().__init__()
        d, h = config.d_model, config.n_heads
        s, k = config.state_size, config.dict_size
        self.n_heads, self.state_size, self.dict_size = h, s, k
        self.select = nn.Linear(d, h * k, bias=False)  # W_S: the dictionary weights s_t
        # The dictionary A_k as in the authors' code: N(0, 1/N) entries.
        self.dictionary = nn.Parameter(torch.randn(h, k, s, s) / math.sqrt(s))
        self.magnitude = nn.Linear(d, h * s, bias=False)  # W_m
        self.phase = nn.Linear(d, h * s, bias=False)  # W_p
        self.magnitude_bias = nn.Parameter(torch.logit(torch.empty(h * s).uniform_(0.9, 0.999)))
        self.phase_bias = nn.Parameter(torch.logit(torch.empty(h * s).uniform_(0.001, 0.999)))
        self.B = nn.Linear(d, 2 * h * s, bias=False)  # complex: (head, entry, re/im) rows
        self.C = nn.Linear(2 * h * s, d, bias=False)  # Re(C h) over (head, entry, re/im)
        self.C.is_residual = True
        self.skip = nn.Parameter(torch.ones(d))

    def transition(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (N, t, d) -> P (N, H, t, S, S), D (N, H, t, S, 2) and B x (N, H, t, S, 2)."""
        n, t, _ = x.shape
        h, s, k = self.n_heads, self.state_size, self.dict_size
        weights = self.select(x).view(n, t, h, k).softmax(dim=-1)  # s_t: (N, t, H, K)
        scores = torch.einsum("nthk,hkij->nhtij", weights, self.dictionary)  # M_t
        magnitude = torch.sigmoid(self.magnitude(x) + self.magnitude_bias)  # (N, t, H S)
        angle = 2 * math.pi * torch.sigmoid(self.phase(x) + self.phase_bias)
        d = torch.stack([magnitude * angle.cos(), magnitude * angle.sin()], dim=-1)
        d = d.view(n, t, h, s, 2).transpose(1, 2)  # (N, H, t, S, 2)
        b = self.B(x).view(n, t, h, s, 2).transpose(1, 2)
        return column_one_hot(scores), d, b

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, t, d) after the state (N, H, S, 2) -> y (N, t, d) and the state after x."""
        n, t, _ = x.shape
        dtype = x.dtype
        with torch.autocast(device_type=x.device.type, enabled=False):
            # float32 under bf16 autocast (the weights' own width); in the weights' width when
            # they are themselves half precision (trainer.precision=bf16-true)
            x = x.to(torch.promote_types(dtype, self.select.weight.dtype))
            p, d, b = self.transition(x)
            states, state = pd_recurrence(p, d, b, state.to(x.dtype))
            y = self.C(states.transpose(1, 2).reshape(n, t, -1)) + self.skip * x
        return y.to(dtype), state


class PDSSM(MixingModel):
    """``embed -> n_layers PD-SSM blocks -> RMSNorm -> untied head``."""

    layer_class = PDSSMLayer

    def init_state(self, batch_size: int) -> PDSSMState:
        """h_0 = e_1 in every head of every layer."""
        c = self.config
        layers = []
        for _ in self.blocks:
            h = self.head.weight.new_zeros(batch_size, c.n_heads, c.state_size, 2)
            h[:, :, 0, 0] = 1.0
            layers.append(h)
        return PDSSMState(0, layers)
