"""DeltaNet (Yang et al., 2024) with the extended eigenvalue range of Grazzi et al. (ICLR 2025):
a linear RNN whose state is updated by the delta rule, as a state-tracking baseline (issue 14).

Per head, with the state S (d_k x d_v), a unit key k_t, value v_t, query q_t and a step size
beta_t:

    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,        o_t = S_t^T q_t.

The transition I - beta k k^T has eigenvalues 1 (d_k - 1 times) and 1 - beta. With
beta = sigmoid(.) in (0, 1) they lie in [0, 1) (``neg_eigval=False``, the original DeltaNet);
with beta = 2 sigmoid(.) in (0, 2) in (-1, 1) (``neg_eigval=True``), so the state can reflect
(eigenvalue -1 at beta -> 2), which parity needs.

Our choices (the layer of the papers' setup, as in the common open implementations): q, k, v
projections each followed by a short causal depthwise convolution (kernel 4) and SiLU; q and k
L2-normalised per head; beta from a linear map of the block input; the head outputs go through
an RMSNorm (per head, shared weight) times a SiLU output gate, then the output projection.
Blocks are pre-norm: x + DeltaNet(RMSNorm(x)), x + SwiGLU(RMSNorm(x)). The FFN width defaults
to floor(8d/3) - floor(d/3), which parameter-matches the Transformer of the same depth and
width to within 1% (the DeltaNet layer has one d x d matrix more than attention).

Two equal forms of the recurrence (tested equal in outputs and gradients in float64):
``recurrent_delta`` (token by token, the reference and the streaming step) and ``chunked_delta``
(the UT/WY representation: within a chunk of C positions the state updates are one triangular
solve, across chunks a short sequential loop), used for training.

Gated DeltaNet (Yang, Kautz and Hatamizadeh, ICLR 2025), ``gated=True``: the state decays by a
data-dependent alpha_t = exp(g_t) in (0, 1] per head before each update,

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,

with g_t = -exp(A_log) softplus(W_a x_t + dt_bias) (the Mamba-2 parameterisation). With
``neg_eigval`` the transition's eigenvalues lie in (-alpha_t, alpha_t], the [-1, 1] variant of
the later work. Both forms take the decay; the fla kernel path is not wired for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlt.models.config import DeltaNetConfig
from rlt.models.mixing import MixingModel
from rlt.models.state import LayersMemory


# --------------------------------------------------------------------------------------------
# The delta rule: two forms of one recurrence
# --------------------------------------------------------------------------------------------
def recurrent_delta(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, state: Tensor, g: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Token-by-token delta rule. q, k (N, H, T, Dk), v (N, H, T, Dv), beta (N, H, T),
    state (N, H, Dk, Dv) -> outputs (N, H, T, Dv) and the state after the last position.
    ``g`` (N, H, T): the log decay of the gated delta rule (S_{t-1} -> exp(g_t) S_{t-1} before
    the update); None = no decay."""
    outs = []
    for t in range(q.shape[2]):
        kt, vt, bt = k[:, :, t], v[:, :, t], beta[:, :, t, None]  # (N, H, Dk), (N, H, Dv)
        if g is not None:
            state = state * g[:, :, t, None, None].exp()
        predicted = torch.einsum("nhk,nhkv->nhv", kt, state)  # S^T k: what the state recalls
        state = state + torch.einsum("nhk,nhv->nhkv", kt, bt * (vt - predicted))
        outs.append(torch.einsum("nhk,nhkv->nhv", q[:, :, t], state))
    return torch.stack(outs, dim=2), state


def chunked_delta(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    state: Tensor,
    chunk: int,
    g: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The same recurrence in chunks of ``chunk`` positions (any T; the last chunk is padded
    with k = v = q = beta = g = 0, which leaves the state unchanged).

    Inside a chunk with start state S0, the new values u_i = beta_i (v_i - S_{i-1}^T k_i)
    satisfy (I + A) U = diag(beta) (V - K S0) with A = strictly_lower(diag(beta) K K^T), a unit
    lower-triangular system (the UT transform); then O = Q S0 + tril(Q K^T) U and
    S_C = S0 + K^T U. Everything but the S0 terms is computed for all chunks at once.

    With the gate (``g``, log decays), let G_i be the sum of g over the chunk up to i and
    D_ij = exp(G_i - G_j) (j <= i): A and tril(Q K^T) are weighted by D, the S0 terms by
    exp(G_i) (K S0 -> diag(exp G) K S0, Q S0 -> diag(exp G) Q S0), and
    S_C = exp(G_C) S0 + (diag(exp(G_C - G)) K)^T U.

    Under autocast (bf16-mixed) the whole form runs in float32: the triangular solve has no
    bfloat16 kernel on CPU or CUDA, and the UT system is where low precision would hurt most.
    The output comes back in the inputs' dtype; the state stays float32.
    """
    dtype = q.dtype
    work = torch.promote_types(dtype, torch.float32)  # float64 stays float64
    with torch.autocast(device_type=q.device.type, enabled=False):
        wide = (x.to(work) for x in (q, k, v, beta, state))
        out, state = _chunked_delta_fp32(*wide, chunk, None if g is None else g.to(work))
    return out.to(dtype), state


def _chunked_delta_fp32(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, state: Tensor, chunk: int, g: Tensor | None
) -> tuple[Tensor, Tensor]:
    """:func:`chunked_delta`'s arithmetic, in the dtype it is given."""
    n, h, t, dk = k.shape
    pad = (-t) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        beta = F.pad(beta, (0, pad))
        g = None if g is None else F.pad(g, (0, pad))
    c = (t + pad) // chunk
    q, k, v = (x.reshape(n, h, c, chunk, x.shape[-1]) for x in (q, k, v))
    beta = beta.reshape(n, h, c, chunk, 1)
    eye = torch.eye(chunk, dtype=k.dtype, device=k.device)
    strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=k.device), -1)
    kk = k @ k.transpose(-1, -2)
    qk = torch.tril(q @ k.transpose(-1, -2))  # (N, H, C, chunk, chunk), diagonal included
    k_s0 = beta * k  # the rows that meet S0 in the UT system
    if g is not None:
        cum = g.reshape(n, h, c, chunk).cumsum(-1)  # G_i
        lower = strict | eye.bool()
        decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, -torch.inf).exp()
        kk, qk = kk * decay, qk * decay
        k_s0 = k_s0 * cum[..., None].exp()
        q_s0 = q * cum[..., None].exp()
        k_end = k * (cum[..., -1:] - cum)[..., None].exp()  # decayed to the chunk's end
        s_end = cum[..., -1].exp()[..., None, None]  # (N, H, C, 1, 1)
    unit_lower = eye + (beta * kk).masked_fill(~strict, 0)
    # U = T diag(beta) V and W = T diag(beta) K with T = (I + A)^-1, for all chunks at once.
    w = torch.linalg.solve_triangular(unit_lower, k_s0, upper=False, unitriangular=True)
    u = torch.linalg.solve_triangular(unit_lower, beta * v, upper=False, unitriangular=True)
    outs = []
    for i in range(c):
        new = u[:, :, i] - w[:, :, i] @ state  # (N, H, chunk, Dv): values given the start state
        if g is None:
            outs.append(q[:, :, i] @ state + qk[:, :, i] @ new)
            state = state + k[:, :, i].transpose(-1, -2) @ new
        else:
            outs.append(q_s0[:, :, i] @ state + qk[:, :, i] @ new)
            state = s_end[:, :, i] * state + k_end[:, :, i].transpose(-1, -2) @ new
    out = torch.stack(outs, dim=2).reshape(n, h, c * chunk, -1)
    return out[:, :, :t], state


def use_fla(kernel: str, x: Tensor, gated: bool = False) -> bool:
    """Whether to run flash-linear-attention's kernel: ``kernel=fla`` (an error without CUDA or
    the package), or ``auto`` on a CUDA tensor with the package installed. The gated delta
    rule always runs the PyTorch forms here (``kernel=fla`` with the gate is an error)."""
    if kernel == "fla" and gated:
        raise ValueError(
            "model.kernel=fla is not wired for the gated delta rule (model.gated=true); use "
            "model.kernel=torch or auto"
        )
    if kernel == "torch" or gated or (kernel == "auto" and not x.is_cuda):
        return False
    try:
        import fla.ops.delta_rule  # noqa: F401
    except ImportError as e:
        if kernel == "fla":
            raise ImportError(
                "model.kernel=fla needs flash-linear-attention: pip install -e '.[gpu]' on a "
                "CUDA machine (or model.kernel=torch)"
            ) from e
        return False
    if not x.is_cuda:
        raise ValueError(
            "model.kernel=fla runs on CUDA only; use trainer=gpu or model.kernel=torch"
        )
    return True


def fla_delta(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The delta rule through flash-linear-attention's chunked Triton kernel; same arguments
    and results as :func:`chunked_delta`. fla takes (N, T, H, D) tensors and scales q by
    1/sqrt(Dk) unless told otherwise: our q is already L2-normalised and unscaled (scale 1).
    beta up to 2 (the [-1, 1] eigenvalue range) is passed as is."""
    from fla.ops.delta_rule import chunk_delta_rule

    o, s = chunk_delta_rule(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        beta.transpose(1, 2),
        scale=1.0,
        initial_state=state,
        output_final_state=True,
    )
    return o.transpose(1, 2), s


# --------------------------------------------------------------------------------------------
# The layer, the block, the model
# --------------------------------------------------------------------------------------------
@dataclass
class DeltaNetLayerState:
    """One layer's streaming state: the last (kernel - 1) inputs of each short convolution and
    the delta-rule state S of every head."""

    conv: Tensor  # (N, kernel - 1, 3 d): q, k, v projections before the convolution
    s: Tensor  # (N, H, Dk, Dv)


@dataclass
class DeltaNetState(LayersMemory):
    position: int
    layers: list[DeltaNetLayerState]

    @property
    def batch_size(self) -> int:
        return self.layers[0].s.shape[0]

    def clone(self) -> DeltaNetState:
        return DeltaNetState(
            self.position, [DeltaNetLayerState(x.conv.clone(), x.s.clone()) for x in self.layers]
        )

    def nbytes(self) -> int:
        return sum((x.conv.numel() + x.s.numel()) * x.s.element_size() for x in self.layers)


class DeltaNetLayer(nn.Module):
    """Token mixing by the delta rule, with short convolutions, normalised q/k and a gate."""

    def __init__(self, config: DeltaNetConfig) -> None:
        super().__init__()
        d, h = config.d_model, config.n_heads
        self.config = config
        self.n_heads, self.head_dim = h, d // h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.conv = nn.Conv1d(3 * d, 3 * d, config.conv_size, groups=3 * d, bias=False)
        self.beta = nn.Linear(d, h, bias=False)
        self.gate = nn.Linear(d, d, bias=False)
        self.o_norm = nn.RMSNorm(self.head_dim, eps=config.norm_eps)
        self.out = nn.Linear(d, d, bias=False)
        self.out.is_residual = True
        if config.gated:
            # Gated DeltaNet's decay, parameterised as in Mamba-2: g = -exp(A_log) *
            # softplus(W_a x + dt_bias) <= 0, A in [1, 16] and dt in [1e-3, 0.1] at init.
            self.decay = nn.Linear(d, h, bias=False)
            self.A_log = nn.Parameter(torch.empty(h).uniform_(1, 16).log())
            dt = torch.empty(h).uniform_(math.log(1e-3), math.log(0.1)).exp()
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)

    def log_decay(self, x: Tensor) -> Tensor | None:
        """The gated delta rule's log decay g (N, H, t) <= 0 from the block input; None when
        the layer is not gated."""
        if not self.config.gated:
            return None
        dt = F.softplus(self.decay(x) + self.dt_bias)
        return (-self.A_log.exp() * dt).transpose(1, 2)

    def _convolved(self, x: Tensor, conv_state: Tensor) -> tuple[Tensor, Tensor]:
        """The q, k, v projections of x (N, t, d) through the short convolution and SiLU, after
        conv_state (N, K-1, C): (N, t, C), and the convolution state after x."""
        raw = torch.cat([conv_state, self.qkv(x)], dim=1)  # (N, K-1+t, C)
        mixed = F.silu(self.conv(raw.transpose(1, 2)).transpose(1, 2))  # (N, t, C)
        keep = self.config.conv_size - 1
        return mixed, raw[:, raw.shape[1] - keep :]

    def _mix_inputs(
        self, x: Tensor, conv_state: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """x (N, t, d) after conv_state (N, K-1, 3d) -> q, k, v (N, H, t, Dh), beta (N, H, t),
        and the convolution state after x."""
        n, t, d = x.shape
        mixed, conv = self._convolved(x, conv_state)  # (N, t, 3d)
        q, k, v = (
            z.view(n, t, self.n_heads, self.head_dim).transpose(1, 2) for z in mixed.chunk(3, -1)
        )
        q = F.normalize(q, dim=-1, eps=1e-6)
        k = F.normalize(k, dim=-1, eps=1e-6)
        beta = torch.sigmoid(self.beta(x)).transpose(1, 2)  # (N, H, t)
        if self.config.neg_eigval:
            beta = 2 * beta
        return q, k, v, beta, conv

    def _output(self, x: Tensor, o: Tensor) -> Tensor:
        n, _, t, _ = o.shape
        o = self.o_norm(o).transpose(1, 2).reshape(n, t, -1)  # (N, t, d)
        return self.out(o * F.silu(self.gate(x)))

    def forward(self, x: Tensor, state: DeltaNetLayerState) -> tuple[Tensor, DeltaNetLayerState]:
        q, k, v, beta, conv = self._mix_inputs(x, state.conv)
        g = self.log_decay(x)
        if use_fla(self.config.kernel, x, self.config.gated):
            o, s = fla_delta(q, k, v, beta, state.s)
        elif x.shape[1] > 1 and self.config.chunk_size > 1:
            o, s = chunked_delta(q, k, v, beta, state.s, self.config.chunk_size, g)
        else:
            o, s = recurrent_delta(q, k, v, beta, state.s, g)
        return self._output(x, o), replace(state, conv=conv, s=s)


class DeltaNet(MixingModel):
    """``embed -> n_layers DeltaNet blocks -> RMSNorm -> untied head``."""

    # What a subclass with another token mixing (rlt/models/deltaproduct.py) replaces.
    layer_class: type[nn.Module] = DeltaNetLayer
    state_class: type = DeltaNetState
    layer_state_class: type = DeltaNetLayerState

    def init_state(self, batch_size: int) -> DeltaNetState:
        c = self.config
        like = self.head.weight
        dh = c.d_model // c.n_heads
        layers = [
            self.layer_state_class(
                like.new_zeros(batch_size, c.conv_size - 1, block.mix.conv.in_channels),
                like.new_zeros(batch_size, c.n_heads, dh, dh),
            )
            for block in self.blocks
        ]
        return self.state_class(0, layers)
