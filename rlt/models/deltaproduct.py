"""Gated DeltaProduct with eigenvalues in [-1, 1] (Siems et al., 2025, "DeltaProduct: Improving
State-Tracking in Linear RNNs via Householder Products"): DeltaNet with n_h delta-rule steps per
token, so each token's transition is a product of n_h generalised Householder matrices
(issue 57, not in the report).

Per head, in the paper's notation (state S of shape d_v x d_k, readout o_t = S_t q_t), token t
first decays the state by its gate alpha_t in (0, 1], then takes n_h steps j = 1..n_h with its
own unit key k_{t,j}, value v_{t,j} and step size beta_{t,j}:

    H_0 = alpha_t S_{t-1}
    H_j = H_{j-1} (I - beta_{t,j} k_{t,j} k_{t,j}^T) + beta_{t,j} v_{t,j} k_{t,j}^T
    S_t = H_{n_h},                                              o_t = S_t q_t.

We store the transpose, (d_k x d_v), as rlt/models/deltanet.py does: H_j = (I - beta k k^T)
H_{j-1} + beta k v^T and o_t = S_t^T q_t; the state's transition over token t is then

    A_t = alpha_t (I - beta_{t,n_h} k_{t,n_h} k_{t,n_h}^T) ... (I - beta_{t,1} k_{t,1} k_{t,1}^T).

Each factor is symmetric with eigenvalues 1 (d_k - 1 times) and 1 - beta; beta = 2 sigmoid(.)
in (0, 2) puts 1 - beta in (-1, 1) (``neg_eigval=True``; False: beta = sigmoid(.), [0, 1)),
so every factor has spectral norm <= 1 and A_t has spectral radius <= alpha_t <= 1, with
eigenvalue -1 reachable (beta -> 2: a reflection). With n_h >= 2 the product is no longer
symmetric: it can rotate (two reflections), which S5-style state tracking needs.

The gate is the paper's gated form, as in Gated DeltaNet (and flash-linear-attention's
GatedDeltaProduct): alpha_t = exp(g_t) with g_t = -exp(A_log) softplus(W_a x_t + dt_bias), one
scalar per head and token, applied once before the n_h steps (``gated=False``: alpha_t = 1).

Our choices, following DeltaNet's layer here so depth, width and parameters compare: q and
the n_h keys and values come from one projection d -> (1 + 2 n_h) d, split as [q | k_1..k_n_h |
v_1..v_n_h], through one short causal depthwise convolution (kernel 4) and SiLU; q and every
k_{t,j} L2-normalised per head; beta_{t,j} from a linear map d -> H n_h; the head outputs
through DeltaNet's per-head RMSNorm and SiLU output gate. The FFN is narrowed so a block keeps
the Transformer block's parameters (DeltaProductConfig.matched_d_ff: at n_h = 2, 170 -> 95 at
the laptop width, 1365 -> 842 at the report's). With n_h = 1 the layer is Gated DeltaNet's (the
same weights give the same outputs; the FFN width at a scale follows the exact count, a few
columns off DeltaNet's floor(d/3) rule).

The recurrence is computed as DeltaNet's over the sub-steps: token t becomes n_h consecutive
positions (k_{t,j}, v_{t,j}, beta_{t,j}), the decay sits on the first (log decay g_t, 0 on the
others) and the query on the last (0 on the others, whose outputs are dropped). So training
runs DeltaNet's chunked (UT) form over T n_h positions, ``chunk_size`` tokens (chunk_size n_h
positions) per chunk, and streaming its token-by-token form; both are tested against a naive
loop of the equations above with explicit matrices (tests/models/test_model_deltaproduct_pdssm.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlt.models.config import DeltaProductConfig
from rlt.models.deltanet import DeltaNet, DeltaNetLayer, chunked_delta, recurrent_delta
from rlt.models.state import LayersMemory


@dataclass
class DeltaProductLayerState:
    """One layer's streaming state: the last (kernel - 1) inputs of the short convolution and
    the matrix state S of every head (stored d_k x d_v, as DeltaNet's)."""

    conv: Tensor  # (N, kernel - 1, (1 + 2 n_h) d): q and every step's k, v before the conv
    s: Tensor  # (N, H, Dk, Dv)


@dataclass
class DeltaProductState(LayersMemory):
    position: int
    layers: list[DeltaProductLayerState]

    @property
    def batch_size(self) -> int:
        return self.layers[0].s.shape[0]

    def clone(self) -> DeltaProductState:
        layers = [DeltaProductLayerState(x.conv.clone(), x.s.clone()) for x in self.layers]
        return DeltaProductState(self.position, layers)

    def nbytes(self) -> int:
        return sum((x.conv.numel() + x.s.numel()) * x.s.element_size() for x in self.layers)


def substeps(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """Token t's n_h steps as n_h consecutive delta-rule positions: q (N, H, t, D), k and v
    (N, H, t, n_h, D), beta (N, H, t, n_h), g (N, H, t) or None -> q, k, v (N, H, t n_h, D),
    beta and g (N, H, t n_h), the query on each token's last step and the decay on its first."""
    n, h, t, nh, dk = k.shape
    q_sub = q.new_zeros(n, h, t, nh, dk)
    q_sub[:, :, :, -1] = q
    g_sub = None
    if g is not None:
        g_sub = g.new_zeros(n, h, t, nh)
        g_sub[:, :, :, 0] = g
        g_sub = g_sub.flatten(2)
    flat = (x.flatten(2, 3) for x in (q_sub, k, v))
    return *flat, beta.flatten(2), g_sub


class DeltaProductLayer(DeltaNetLayer):
    """DeltaNet's layer with n_h keys, values and step sizes per token."""

    def __init__(self, config: DeltaProductConfig) -> None:
        super().__init__(config)  # the gate, decay, output norm and projection are DeltaNet's
        d, h, nh = config.d_model, config.n_heads, config.n_householder
        width = (1 + 2 * nh) * d
        self.qkv = nn.Linear(d, width, bias=False)
        self.conv = nn.Conv1d(width, width, config.conv_size, groups=width, bias=False)
        self.beta = nn.Linear(d, h * nh, bias=False)

    def _mix_inputs(
        self, x: Tensor, conv_state: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """x (N, t, d) after conv_state -> q (N, H, t, Dh), k and v (N, H, t, n_h, Dh), beta
        (N, H, t, n_h), and the convolution state after x."""
        n, t, d = x.shape
        h, dh, nh = self.n_heads, self.head_dim, self.config.n_householder
        mixed, conv = self._convolved(x, conv_state)  # (N, t, (1 + 2 n_h) d)
        q, k, v = mixed.split([d, nh * d, nh * d], dim=-1)
        q = q.view(n, t, h, dh).transpose(1, 2)  # (N, H, t, Dh)
        k, v = (z.view(n, t, nh, h, dh).permute(0, 3, 1, 2, 4) for z in (k, v))
        q = F.normalize(q, dim=-1, eps=1e-6)
        k = F.normalize(k, dim=-1, eps=1e-6)  # (N, H, t, n_h, Dh)
        beta = torch.sigmoid(self.beta(x)).view(n, t, nh, h).permute(0, 3, 1, 2)
        if self.config.neg_eigval:
            beta = 2 * beta  # (N, H, t, n_h) in (0, 2)
        return q, k, v, beta, conv

    def forward(
        self, x: Tensor, state: DeltaProductLayerState
    ) -> tuple[Tensor, DeltaProductLayerState]:
        nh = self.config.n_householder
        q, k, v, beta, conv = self._mix_inputs(x, state.conv)
        q, k, v, beta, g = substeps(q, k, v, beta, self.log_decay(x))
        if x.shape[1] > 1 and self.config.chunk_size > 1:
            o, s = chunked_delta(q, k, v, beta, state.s, self.config.chunk_size * nh, g)
        else:
            o, s = recurrent_delta(q, k, v, beta, state.s, g)
        o = o[:, :, nh - 1 :: nh]  # (N, H, t, Dv): each token's last step
        return self._output(x, o), replace(state, conv=conv, s=s)


class DeltaProduct(DeltaNet):
    """``embed -> n_layers DeltaProduct blocks -> RMSNorm -> untied head``; DeltaNet's model
    with DeltaProduct's token mixing and state."""

    layer_class = DeltaProductLayer
    state_class = DeltaProductState
    layer_state_class = DeltaProductLayerState
