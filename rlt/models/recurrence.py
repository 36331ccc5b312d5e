"""The fused decoder recurrence: the training path of RLT-1 and RLT-2, with a hand-written backward.

Why: with autograd, every token adds ~45 small graph nodes per decoder block, and every weight
gets T separate (d x 64) gradient matmuls that autograd then sums one by one. Here the token
loop runs on preallocated time-major buffers with no graph at all, and the backward loop
carries only what is truly sequential (the gradient chain through the blocks and the state);
everything else is done once over all positions, batched:

- before the backward loop: RMSNorm statistics, SwiGLU and gate derivatives, folded weights;
- after it: every weight gradient as one (T*N)-deep matmul, the memory K/V gradients as one
  batched matmul per layer, norm-weight gradients as one reduction.

Semantics are exactly ``RecurrentLoopedTransformer.decode`` from the initial state (chunks of
B anchored at 0, TBPTT cuts of s and the SWA caches); tests/models/test_model_fused.py checks
outputs and every gradient against that plain autograd path.

Layouts: ``(T, N, ...)`` time-major for per-position activations, so a chunk is one contiguous
slice; ``(N, H, T, Dh)`` for keys/values/queries that attention batches over heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from rlt.models.blocks import causal_mask, complex_dtype, window_mask

LAYER_WEIGHTS = 9  # attn_norm, qkv, attn_out, cross_norm, cross_q, cross_out, ffn_norm, w13, w2


@dataclass(frozen=True)
class RecurrenceSpec:
    """The non-tensor settings of one decoder recurrence."""

    n_heads: int
    window: int  # W
    interval: int  # B (1 = RLT-1)
    alpha: float
    eps: float
    tbptt: int | None

    def chunks(self, length: int) -> list[tuple[int, int, int]]:
        """(a, b, cut) per chunk [a, b): cut is the latest TBPTT cut at or before a."""
        out, cut, prev = [], 0, 0
        for a in range(0, length, self.interval):
            if self.tbptt is not None and a // self.tbptt > prev // self.tbptt:
                cut = a
            out.append((a, min(length, a + self.interval), cut))
            prev = a
        return out


def rope_tables(freqs: Tensor | None, length: int, head_dim: int, like: Tensor) -> Tensor:
    """Rotations of q (times 1/sqrt(Dh)) and k stacked: (T, 1, 2, 1, Dh/2) complex.

    The backward applies the conjugates: a rotation's transpose is its inverse.
    """
    if freqs is None:  # pos_encoding="none": the identity rotation
        freqs = torch.ones(length, head_dim // 2, dtype=complex_dtype(like.dtype), device=like.device)
    return torch.stack([freqs * head_dim**-0.5, freqs], dim=1)[:, None, :, None, :]


def _rotate(x: Tensor, rotation: Tensor) -> None:
    """Multiply (..., Dh) real pairs (2i, 2i+1) in place by complex rotations (..., Dh/2)."""
    if x.dtype in (torch.float32, torch.float64):
        torch.view_as_complex(x.view(*x.shape[:-1], -1, 2)).mul_(rotation)
    else:  # no complex bfloat16: rotate in float32
        pairs = torch.view_as_complex(x.float().view(*x.shape[:-1], -1, 2))
        x.copy_(torch.view_as_real(pairs * rotation).flatten(-2))


def _inv_rms(x: Tensor, eps: Tensor) -> Tensor:
    """1 / sqrt(mean(x^2) + eps) over the last dim, as (..., 1), in three kernels.

    F.rms_norm on CPU decomposes into ~17 kernels (dtype round trips included), which
    dominates a per-token loop at small widths. ``eps`` is a 0-dim tensor: a Python float
    would be converted on every call.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return torch.addcmul(eps, norm, norm, value=1.0 / x.shape[-1]).rsqrt_()


def _norm_terms(x: Tensor, weight: Tensor, eps: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """For h = weight * x / rms(x): xhat = x / rms(x), and the three factors of the backward,
    weight / rms, weight * xhat and xhat / (rms * d) (see ``_rms_backward``)."""
    inv = _inv_rms(x, eps)  # (..., 1)
    xhat = x * inv
    return xhat, weight * inv, weight * xhat, xhat * (inv / x.shape[-1])


def _rms_backward(
    dh: Tensor, w_inv: Tensor, w_xhat: Tensor, xi: Tensor, residual: Tensor | None, out: Tensor
) -> Tensor:
    """dL/dx (+ a residual gradient) into ``out``, from dL/dh of h = w * x / rms(x):
    dx = (w / rms) dh - xhat / (rms d) <dh, w xhat>."""
    dot = torch.linalg.vecdot(dh, w_xhat).unsqueeze(-1)  # (..., 1)
    base = dh * w_inv if residual is None else torch.addcmul(residual, dh, w_inv)
    return torch.addcmul(base, xi, dot, value=-1.0, out=out)


# Attention on (N, H, L, Dh) operands. Below this head dim, N*H tiny matrix products cost more
# in BLAS call overhead than broadcasting elementwise products; from it on, BLAS wins
# (measured on the bench machine: 2x either way at Dh=16 and Dh=128).
MATMUL_HEAD_DIM = 64


def _scores(q: Tensor, k: Tensor) -> Tensor:
    """(N, H, c, Dh) x (N, H, L, Dh) -> (N, H, c, L)."""
    if q.shape[-1] >= MATMUL_HEAD_DIM:
        return q @ k.transpose(-1, -2)
    return (q[..., :, None, :] * k[..., None, :, :]).sum(-1)


def _mix(p: Tensor, v: Tensor, out: Tensor | None = None) -> Tensor:
    """(N, H, c, L) x (N, H, L, Dh) -> (N, H, c, Dh), optionally into ``out``."""
    if v.shape[-1] >= MATMUL_HEAD_DIM:
        mixed = p @ v
        return mixed if out is None else out.copy_(mixed)
    return torch.sum(p[..., None] * v[..., None, :, :], dim=-2, out=out)


def _outer_accumulate(acc: Tensor, p: Tensor, x: Tensor) -> None:
    """acc (N, H, L, Dh) += p^T (N, H, L, c) x (N, H, c, Dh)."""
    if p.shape[-2] == 1:
        acc.addcmul_(p.transpose(-1, -2), x)
    else:
        acc += p.transpose(-1, -2) @ x


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Scaled queries (N, H, c, Dh) over keys/values (N, H, L, Dh), True in mask (c, L) = may
    attend. Returns the probabilities (N, H, c, L) (kept for the backward) and the output."""
    scores = _scores(q, k)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return p, _mix(p, v)


def _attend_backward(p: Tensor, da: Tensor, k: Tensor, v: Tensor, dq: Tensor) -> Tensor:
    """Score gradients (N, H, c, L) from dL/d(output) da (N, H, c, Dh); dL/dq goes into dq."""
    dp = _scores(da, v)  # (N, H, c, L)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    _mix(ds, k, out=dq)
    return ds


class _Saved:
    """Buffers the forward fills and the backward reads (a plain namespace)."""


def _heads(x: Tensor) -> Tensor:
    """Time-major (c, N, H, Dh) as head-major (N, H, c, Dh), a view."""
    return x.permute(1, 2, 0, 3)


def _forward(spec: RecurrenceSpec, tables, e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers) -> _Saved:
    t_len, n, d = e.shape
    h, n_layers, wm1, b_int = spec.n_heads, len(layers), spec.window - 1, spec.interval
    dh = d // h
    f = layers[0][8].shape[1] if layers else 0
    chunks = spec.chunks(t_len)
    eps = e.new_tensor(spec.eps)
    # norm weights folded into the following projections; cross queries carry 1/sqrt(Dh)
    folded = [
        (w_qkv * w_an, w_q * (w_cn * dh**-0.5), w_13 * w_fn)
        for (w_an, w_qkv, _, w_cn, w_q, _, w_fn, w_13, _) in layers
    ]
    w_sp_folded = w_sp * w_sn

    sv = _Saved()
    sv.chunks, sv.tables = chunks, tables
    sv.S = e.new_empty(len(chunks), n, d)  # boundary state entering each chunk
    sv.X = e.new_empty(n_layers + 1, t_len, n, d)  # X[l]: input of layer l; X[L]: outputs
    sv.X1 = e.new_empty(n_layers, t_len, n, d)  # after SWA
    sv.X2 = e.new_empty(n_layers, t_len, n, d)  # after cross-attention
    sv.A1 = e.new_empty(n_layers, t_len, n, d)  # SWA output before its projection
    sv.A2 = e.new_empty(n_layers, t_len, n, d)  # cross-attention output before its projection
    sv.QC = e.new_empty(n_layers, t_len, n, d)  # scaled cross queries
    sv.Z13 = e.new_empty(n_layers, t_len, n, 2 * f)  # SwiGLU pre-activations [W1 h | W3 h]
    sv.QKV = e.new_empty(n_layers, t_len, n, 3, h, dh)  # q (scaled) and k rotated, v
    # head-major keys/values, position t at W-1+t; the zero slots stand for positions < 0
    sv.K = e.new_zeros(n_layers, n, h, t_len + wm1, dh)
    sv.V = e.new_zeros(n_layers, n, h, t_len + wm1, dh)
    sv.P1 = [[] for _ in layers]  # SWA probabilities per chunk, (N, H, c, W-1+c)
    sv.P2 = e.new_zeros(n_layers, n, h, t_len, t_len)  # memory attention probabilities

    s = s0
    for ci, (a, b, _) in enumerate(chunks):
        c = b - a
        sv.S[ci].copy_(s)
        # gated merge: one (N, d) x (d, 2d) matmul per chunk, the rest elementwise
        z = (s * _inv_rms(s, eps)) @ w_sp_folded.T  # (N, 2d): [gate half, W_s r]
        gate = torch.sigmoid(ge[a:b] + z[:, :d])  # (c, N, d)
        torch.addcmul(e[a:b], gate, z[:, d:] * spec.alpha, out=sv.X[0, a:b])
        swa_mask = window_mask(a, c, spec.window, e.device)  # (c, W-1+c) or None
        mem_mask = causal_mask(c, b, e.device)  # (c, b) or None
        window = slice(a, b + wm1)  # key slots of positions a-W+1 .. b-1
        for li, (_, _, w_o, _, _, w_co, _, _, w_2) in enumerate(layers):
            f_qkv, f_q, f_13 = folded[li]
            x = sv.X[li, a:b].view(c * n, d)
            # -- sliding-window self-attention over the layer's own keys
            qkv = sv.QKV[li, a:b]  # (c, N, 3, H, Dh)
            torch.mm(x * _inv_rms(x, eps), f_qkv.T, out=qkv.view(c * n, 3 * d))
            _rotate(qkv[:, :, :2], tables[a:b])
            sv.K[li, :, :, wm1 + a : wm1 + b] = _heads(qkv[:, :, 1])
            sv.V[li, :, :, wm1 + a : wm1 + b] = _heads(qkv[:, :, 2])
            p, att = _attend(_heads(qkv[:, :, 0]), sv.K[li, :, :, window], sv.V[li, :, :, window], swa_mask)
            sv.P1[li].append(p)
            sv.A1[li, a:b].view(c, n, h, dh).copy_(att.permute(2, 0, 1, 3))
            x1 = sv.X1[li, a:b].view(c * n, d)
            torch.addmm(x, sv.A1[li, a:b].view(c * n, d), w_o.T, out=x1)
            # -- memory cross-attention over the prefix 0..b-1
            qc = sv.QC[li, a:b]  # (c, N, d)
            torch.mm(x1 * _inv_rms(x1, eps), f_q.T, out=qc.view(c * n, d))
            p, att = _attend(_heads(qc.view(c, n, h, dh)), mem_k[:, :, :b], mem_v[:, :, :b], mem_mask)
            sv.P2[li, :, :, a:b, :b] = p
            sv.A2[li, a:b].view(c, n, h, dh).copy_(att.permute(2, 0, 1, 3))
            x2 = sv.X2[li, a:b].view(c * n, d)
            torch.addmm(x1, sv.A2[li, a:b].view(c * n, d), w_co.T, out=x2)
            # -- SwiGLU
            z13 = sv.Z13[li, a:b].view(c * n, 2 * f)
            torch.mm(x2 * _inv_rms(x2, eps), f_13.T, out=z13)
            m = F.silu(z13[:, :f]) * z13[:, f:]  # (c*N, f)
            torch.addmm(x2, m, w_2.T, out=sv.X[li + 1, a:b].view(c * n, d))
        if b % b_int == 0:
            s = sv.X[n_layers, b - 1]  # a complete chunk: the next boundary state
    return sv


def _backward(spec: RecurrenceSpec, sv: _Saved, grad_out: Tensor, tensors) -> list[Tensor | None]:
    e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers = tensors
    n_layers, t_len, n, d = sv.X.shape[0] - 1, *sv.X.shape[1:]
    h, wm1, alpha = spec.n_heads, spec.window - 1, spec.alpha
    dh = d // h
    f = layers[0][8].shape[1] if layers else 0
    scale = dh**-0.5
    chunks = sv.chunks
    eps = e.new_tensor(spec.eps)
    inverse_rotations = sv.tables.conj()  # (T, 1, 2, 1, Dh/2)

    # -- batched preparation: everything that does not depend on the incoming gradient
    norms = [
        (
            _norm_terms(sv.X[li], w_an, eps),
            _norm_terms(sv.X1[li], w_cn, eps),
            _norm_terms(sv.X2[li], w_fn, eps),
        )
        for li, (w_an, _, _, w_cn, _, _, w_fn, _, _) in enumerate(layers)
    ]
    swiglu = []  # d(silu(A) * Bv)/dA and /dBv, interleaved like Z13: (T, N, 2, f)
    for li in range(n_layers):
        pre_a, pre_b = sv.Z13[li, ..., :f], sv.Z13[li, ..., f:]
        sig = torch.sigmoid(pre_a)
        swiglu.append(torch.stack([pre_b * sig * (1 + pre_a * (1 - sig)), pre_a * sig], dim=2))
    w_q_scaled = [layer[4] * scale for layer in layers]
    s_norm = _norm_terms(sv.S, w_sn, eps)  # boundary states (C, N, d)
    r = s_norm[0] * w_sn
    z = r @ w_sp.T  # (C, N, 2d)
    chunk_of = torch.tensor([ci for ci, (a, b, _) in enumerate(chunks) for _ in range(a, b)], device=e.device)
    gate = torch.sigmoid(ge + z[chunk_of, :, :d])  # (T, N, d)
    k_gate = alpha * z[chunk_of, :, d:] * gate * (1 - gate)  # d u / d (gate pre-activation)
    k_ws = alpha * gate  # d u / d (W_s r)

    # -- gradient buffers, laid out like the forward's
    gx = e.new_empty(n_layers + 1, t_len, n, d)  # dL/dX[l]
    gx[n_layers].copy_(grad_out.transpose(0, 1))
    gx1 = e.new_empty(n_layers, t_len, n, d)
    gx2 = e.new_empty(n_layers, t_len, n, d)
    gqkv = torch.empty_like(sv.QKV)  # dL/d(q, k, v) before rotation
    gk = torch.zeros_like(sv.K)  # accumulate over the windows of later positions
    gv = torch.zeros_like(sv.V)
    gqc = e.new_empty(n_layers, t_len, n, d)
    g13 = e.new_empty(n_layers, t_len, n, 2 * f)
    gh = e.new_empty(n_layers, 3, t_len, n, d)  # dL/d(normed inputs): for norm-weight grads
    ga2 = e.new_empty(n_layers, t_len, n, d)  # dL/d(memory-attention output): for memory grads
    ds2 = torch.zeros_like(sv.P2)  # memory-attention score gradients
    gge = e.new_empty(t_len, n, d)
    gz = e.new_empty(len(chunks), n, 2 * d)
    gr = e.new_empty(len(chunks), n, d)
    ds0 = None

    for ci in range(len(chunks) - 1, -1, -1):
        a, b, cut = chunks[ci]
        c = b - a
        window = slice(a, b + wm1)
        for li in range(n_layers - 1, -1, -1):
            _, w_qkv, w_o, _, _, w_co, _, w_13, w_2 = layers[li]
            n_attn, n_cross, n_ffn = ((t[a:b] for t in terms[1:]) for terms in norms[li])
            # -- SwiGLU
            dm = gx[li + 1, a:b].view(c * n, d) @ w_2  # (c*N, f)
            torch.mul(dm.view(c, n, 1, f), swiglu[li][a:b], out=g13[li, a:b].view(c, n, 2, f))
            torch.mm(g13[li, a:b].view(c * n, 2 * f), w_13, out=gh[li, 2, a:b].view(c * n, d))
            _rms_backward(gh[li, 2, a:b], *n_ffn, gx[li + 1, a:b], out=gx2[li, a:b])
            # -- memory cross-attention
            torch.mm(gx2[li, a:b].view(c * n, d), w_co, out=ga2[li, a:b].view(c * n, d))
            da = _heads(ga2[li, a:b].view(c, n, h, dh))  # (N, H, c, Dh)
            dq = _heads(gqc[li, a:b].view(c, n, h, dh))
            p = sv.P2[li, :, :, a:b, :b]
            ds2[li, :, :, a:b, :b] = _attend_backward(p, da, mem_k[:, :, :b], mem_v[:, :, :b], dq=dq)
            torch.mm(gqc[li, a:b].view(c * n, d), w_q_scaled[li], out=gh[li, 1, a:b].view(c * n, d))
            _rms_backward(gh[li, 1, a:b], *n_cross, gx2[li, a:b], out=gx1[li, a:b])
            # -- sliding-window self-attention
            da = _heads((gx1[li, a:b].view(c * n, d) @ w_o).view(c, n, h, dh))  # (N, H, c, Dh)
            g_own = gqkv[li, a:b]  # (c, N, 3, H, Dh)
            p = sv.P1[li][ci]  # (N, H, c, W-1+c)
            dsc = _attend_backward(p, da, sv.K[li, :, :, window], sv.V[li, :, :, window], dq=_heads(g_own[:, :, 0]))
            lo = max(a, cut + wm1)  # keys before the latest TBPTT cut are detached
            q = _heads(sv.QKV[li, a:b, :, 0])
            _outer_accumulate(gk[li, :, :, lo : b + wm1], dsc[..., lo - a :], q)
            _outer_accumulate(gv[li, :, :, lo : b + wm1], p[..., lo - a :], da)
            g_own[:, :, 1] = gk[li, :, :, wm1 + a : wm1 + b].permute(2, 0, 1, 3)  # complete now
            g_own[:, :, 2] = gv[li, :, :, wm1 + a : wm1 + b].permute(2, 0, 1, 3)
            _rotate(g_own[:, :, :2], inverse_rotations[a:b])
            torch.mm(g_own.view(c * n, 3 * d), w_qkv, out=gh[li, 0, a:b].view(c * n, d))
            _rms_backward(gh[li, 0, a:b], *n_attn, gx1[li, a:b], out=gx[li, a:b])
        # -- gated merge: dL/du = gx[0, a:b] (which is also dL/de)
        du = gx[0, a:b]  # (c, N, d)
        torch.mul(du, k_gate[a:b], out=gge[a:b])
        torch.sum(gge[a:b], dim=0, out=gz[ci, :, :d])
        torch.sum(du * k_ws[a:b], dim=0, out=gz[ci, :, d:])
        torch.mm(gz[ci], w_sp, out=gr[ci])  # dL/dr (N, d)
        ds = _rms_backward(gr[ci], *(t[ci] for t in s_norm[1:]), None, out=torch.empty_like(gr[ci]))
        if a == 0:
            ds0 = ds
        elif cut != a:  # the state entering a chunk after a cut is detached
            gx[n_layers, a - 1] += ds

    # -- batched weight and memory gradients
    flat = (t_len * n, -1)
    g_w_sp = gz.reshape(len(chunks) * n, 2 * d).T @ r.reshape(len(chunks) * n, d)
    g_w_sn = (s_norm[0] * gr).sum(dim=(0, 1))
    layer_grads = []
    g_mem_k = None if mem_k is None else torch.zeros_like(mem_k)
    g_mem_v = None if mem_v is None else torch.zeros_like(mem_v)
    for li, (w_an, _, _, w_cn, _, _, w_fn, _, _) in enumerate(layers):
        xhat0, xhat1, xhat2 = (terms[0] for terms in norms[li])
        m = F.silu(sv.Z13[li, ..., :f]) * sv.Z13[li, ..., f:]  # (T, N, f)
        layer_grads += [
            (xhat0 * gh[li, 0]).sum(dim=(0, 1)),
            gqkv[li].view(flat).T @ (xhat0 * w_an).view(flat),
            gx1[li].view(flat).T @ sv.A1[li].view(flat),
            (xhat1 * gh[li, 1]).sum(dim=(0, 1)),
            (gqc[li].view(flat).T @ (xhat1 * w_cn).view(flat)) * scale,
            gx2[li].view(flat).T @ sv.A2[li].view(flat),
            (xhat2 * gh[li, 2]).sum(dim=(0, 1)),
            g13[li].view(flat).T @ (xhat2 * w_fn).view(flat),
            gx[li + 1].view(flat).T @ m.view(flat),
        ]
        g_mem_v += sv.P2[li].transpose(-1, -2) @ _heads(ga2[li].view(t_len, n, h, dh))
        g_mem_k += ds2[li].transpose(-1, -2) @ _heads(sv.QC[li].view(t_len, n, h, dh))
    return [gx[0], gge, g_mem_k, g_mem_v, ds0, g_w_sn, g_w_sp, *layer_grads]


class _FusedRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, spec, freqs, e, ge, mem_k, mem_v, s0, w_sn, w_sp, *layer_weights):
        t_len, _, d = e.shape
        layers = [layer_weights[i : i + LAYER_WEIGHTS] for i in range(0, len(layer_weights), LAYER_WEIGHTS)]
        tables = rope_tables(freqs, t_len, d // spec.n_heads, e)
        sv = _forward(spec, tables, e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers)
        ctx.spec, ctx.sv = spec, sv
        ctx.save_for_backward(e, ge, mem_k, mem_v, s0, w_sn, w_sp, *layer_weights)
        ctx.n_layers = len(layers)
        return sv.X[len(layers)].transpose(0, 1)  # (N, T, d)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        e, ge, mem_k, mem_v, s0, w_sn, w_sp, *flat = ctx.saved_tensors
        layers = [flat[i : i + LAYER_WEIGHTS] for i in range(0, len(flat), LAYER_WEIGHTS)]
        grads = _backward(ctx.spec, ctx.sv, grad_out, (e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers))
        ctx.sv = None
        return (None, None, *grads)


def fused_decode(
    spec: RecurrenceSpec,
    rope: Tensor | None,
    e: Tensor,
    ge: Tensor,
    memory: tuple[Tensor, Tensor] | None,
    s0: Tensor,
    merge_weights: tuple[Tensor, Tensor],
    layer_weights: list[Tensor],
) -> Tensor:
    """Decoder outputs (N, T, d) from e, ge (N, T, d), memory K/V (N, H, T, Dh) and s0 (N, d).

    ``layer_weights`` lists, per decoder block, the LAYER_WEIGHTS tensors in the order of
    ``RecurrentLoopedTransformer.fused_weights``. Under autocast everything runs in the
    autocast dtype (weights cast once, outside the loop).
    """
    device = e.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
        with torch.autocast(device, enabled=False):
            return fused_decode(
                spec,
                rope,
                cast(e),
                cast(ge),
                None if memory is None else (cast(memory[0]), cast(memory[1])),
                cast(s0),
                tuple(cast(w) for w in merge_weights),
                [cast(w) for w in layer_weights],
            )
    mem_k, mem_v = (None, None) if memory is None else memory
    out = _FusedRecurrence.apply(
        spec,
        rope,
        e.transpose(0, 1).contiguous(),  # (T, N, d)
        ge.transpose(0, 1).contiguous(),
        mem_k,  # (N, H, T, Dh)
        mem_v,
        s0.contiguous(),
        *merge_weights,
        *layer_weights,
    )
    return out
