"""The fused decoder recurrence's loops (rlt/models/recurrence.py says what and why): the
forward token loop writing preallocated buffers, and the hand-written backward.

The two token loops (the forward's and the backward's sequential part) also exist in C++,
call for call (rlt/models/csrc/token_loop.cpp, ``native=True``; rlt/models/native.py): a
change to a loop here is a change there, and tests/models/test_model_native.py holds the two
equal bit for bit.

Legend of the short names (buffers the forward saves for the backward live on ``sv``):

    T, N, d, h, dh, f   positions, batch, width, heads, head dim, FFN width
    W, B                sliding-window size and feedback interval (spec.window, spec.interval)
    wm1                 W - 1: cache slots before a chunk's first position
    b_int               B, as the loop's chunk-boundary test ``b % b_int == 0``
    sv.S                the state s* entering each chunk
    sv.out              decoder outputs s_t
    sv.XH / sv.INV      RMS-normalised inputs of the three sublayers (SWA, cross, FFN) and
                        their 1/rms, for the norm backward
    sv.QC, sv.QKV       cross-attention queries; SWA q (scaled), rotated k, v
    sv.K, sv.V          the SWA key/value cache slots (W - 1 slots of history, then T)
    sv.Z13              SwiGLU pre-activations [W1 h | W3 h] (W13 = W1 and W3 side by side)
    xh_c, inv_c, z13_c  the same buffers split into per-chunk views
    a, b                the chunk's first position and one past its last
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rlt.models.blocks import BlockWeights, causal_mask, complex_dtype, window_mask
from rlt.models.layouts import TimeMajor

LAYER_WEIGHTS = len(BlockWeights._fields)  # tensors per decoder block (DecoderBlock.fused_weights)


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
        freqs = torch.ones(
            length, head_dim // 2, dtype=complex_dtype(like.dtype), device=like.device
        )
    return torch.stack([freqs * head_dim**-0.5, freqs], dim=1)[:, None, :, None, :]


def _rotate(x: Tensor, rotation: Tensor) -> None:
    """Multiply (..., Dh) real pairs (2i, 2i+1) in place by complex rotations (..., Dh/2)."""
    if x.dtype in (torch.float32, torch.float64):
        torch.view_as_complex(x.view(*x.shape[:-1], -1, 2)).mul_(rotation)
    else:  # no complex bfloat16: rotate in float32
        pairs = torch.view_as_complex(x.float().view(*x.shape[:-1], -1, 2))
        x.copy_(torch.view_as_real(pairs * rotation).flatten(-2))


def _normalize(x: Tensor, eps: Tensor, xhat: Tensor, inv: Tensor) -> Tensor:
    """xhat = x / sqrt(mean(x^2) + eps) into ``xhat``, with 1/rms into ``inv`` (..., 1).

    The norm weight is folded into the next matmul. Three kernels: F.rms_norm on CPU
    decomposes into ~17 (dtype round trips included), which dominates a per-token loop at
    small widths. ``eps`` is a 0-dim tensor: a Python float would be converted every call.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    torch.addcmul(eps, norm, norm, value=1.0 / x.shape[-1], out=inv).rsqrt_()
    return torch.mul(x, inv, out=xhat)


def _rms_backward(
    dh: Tensor, weight: Tensor, xhat: Tensor, inv: Tensor, residual: Tensor | None, out: Tensor
) -> Tensor:
    """dL/dx (+ a residual gradient) into ``out``, from dL/dh of h = weight * xhat, xhat = x * inv:
    g = weight * dh, dx = inv * (g - xhat <g, xhat> / d)."""
    g = dh * weight
    dot = torch.linalg.vecdot(g, xhat).unsqueeze(-1)  # (..., 1)
    base = g * inv if residual is None else torch.addcmul(residual, g, inv)
    return torch.addcmul(base, xhat, dot * inv, value=-1.0 / dh.shape[-1], out=out)


class _Saved:
    """Buffers the forward fills and the backward reads (a plain namespace)."""


def _split(x: Tensor, sizes: list[int], *shape: int) -> tuple[Tensor, ...]:
    """One view per chunk of a time-major buffer x (T, ...), each viewed as (c, *shape) or,
    with ``shape == (-1, k)``, flattened to (c * N, k). Made once per call: indexing inside
    the token loop would cost a few microseconds of Python per view, per token."""
    if shape and shape[0] == -1:
        rows = x.shape[1]
        return x.reshape(-1, shape[1]).split([c * rows for c in sizes])
    chunks = x.split(sizes)
    return tuple(t.view(t.shape[0], *shape) for t in chunks) if shape else chunks


def _folded_weights(layers, w_sp: Tensor, w_sn: Tensor, dh: int):
    """Norm weights folded into the following projections, cross queries carrying 1/sqrt(Dh),
    all stored (in, out): MKL runs x @ W^T for (64, 512) x (512, 2730) at half the speed of
    the same product with W^T contiguous (measured; odd output widths suffer most)."""
    projections = [
        tuple(
            w.T.contiguous()
            for w in (
                lw.qkv * lw.attn_norm,
                lw.attn_out,
                lw.cross_q * (lw.cross_norm * dh**-0.5),
                lw.cross_out,
                lw.w13 * lw.ffn_norm,
                lw.w2,
            )
        )
        for lw in layers
    ]
    return projections, (w_sp * w_sn).T.contiguous()


def _forward_buffers(spec, ops, mops, e: Tensor, n_layers: int, f: int, chunks, tables) -> _Saved:
    """The buffers the forward fills and the backward reads (see the module's legend)."""
    t_len, n, d = e.shape
    h, wm1 = spec.n_heads, spec.window - 1
    dh = d // h
    sv = _Saved()
    sv.chunks, sv.sizes, sv.tables = chunks, [b - a for a, b, _ in chunks], tables
    sv.S = e.new_empty(len(chunks), n, d)  # boundary state entering each chunk
    sv.out = e.new_empty(t_len, n, d)  # decoder outputs s_t
    sv.XH = e.new_empty(n_layers, 3, t_len, n, d)  # normalised inputs of SWA, cross, FFN
    sv.INV = e.new_empty(n_layers, 3, t_len, n, 1)  # and their 1/rms
    sv.A1 = e.new_empty(n_layers, t_len, n, d)  # SWA output before its projection
    sv.A2 = e.new_empty(n_layers, t_len, n, d)  # cross-attention output before its projection
    sv.QC = e.new_empty(n_layers, t_len, n, d)  # scaled cross queries
    sv.Z13 = e.new_empty(n_layers, t_len, n, 2 * f)  # SwiGLU pre-activations [W1 h | W3 h]
    sv.QKV = e.new_empty(n_layers, t_len, n, 3, h, dh)  # q (scaled) and k rotated, v
    # keys/values of position t in slot W-1+t; the zero slots stand for positions < 0
    sv.K = ops.kv_buffer(n_layers, t_len + wm1, n, h, dh, e)
    sv.V = ops.kv_buffer(n_layers, t_len + wm1, n, h, dh, e)
    sv.P1 = [None] * (n_layers * len(chunks))  # SWA probabilities, [layer * C + chunk]
    sv.P2 = mops.p2_buffer(n_layers, t_len, n, h, e)  # memory attention probabilities
    return sv


def forward_pass(
    spec: RecurrenceSpec, ops, mops, tables, e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers, native
) -> _Saved:
    t_len, n, d = e.shape
    h, n_layers = spec.n_heads, len(layers)
    dh = d // h
    f = layers[0][8].shape[1] if layers else 0
    chunks = spec.chunks(t_len)
    sizes = [b - a for a, b, _ in chunks]
    eps = torch.full((), spec.eps, dtype=e.dtype, device=e.device)  # no host-to-device copy
    projections, w_sp_folded = _folded_weights(layers, w_sp, w_sn, dh)
    sv = _forward_buffers(spec, ops, mops, e, n_layers, f, chunks, tables)
    # the residual stream itself is only needed within a chunk: three scratch rows
    scratch = e.new_empty(3, max(sizes), n, d)

    if native is not None:  # the same loop in C++ (rlt/models/csrc/token_loop.cpp)
        sv.P1 = native.forward_loop(
            [i for chunk in chunks for i in chunk],
            *(h, spec.window, spec.interval, spec.alpha, ops is TimeMajor),
            *(eps, e, ge, mem_k, mem_v, s0, w_sp_folded),
            [w for layer in projections for w in layer],
            tables,
            *(sv.S, sv.out, sv.XH, sv.INV, sv.A1, sv.A2, sv.QC, sv.Z13, sv.QKV, sv.K, sv.V),
            *(sv.P2, scratch),
        )
        return sv
    _forward_loop(
        spec, ops, mops, sv, e, ge, mem_k, mem_v, s0, projections, w_sp_folded, eps, scratch
    )
    return sv


def _forward_loop(
    spec, ops, mops, sv, e, ge, mem_k, mem_v, s0, projections, w_sp_folded, eps, scratch
) -> None:
    """The forward token loop in Python (its C++ twin: token_loop.cpp's forward_loop)."""
    t_len, n, d = e.shape
    h, n_layers, wm1, b_int = spec.n_heads, len(projections), spec.window - 1, spec.interval
    dh = d // h
    f = sv.Z13.shape[-1] // 2
    chunks, sizes, tables = sv.chunks, sv.sizes, sv.tables
    x_in, x_1, x_2 = ([t[:c] for c in sizes] for t in scratch)
    # per-chunk views, made once (see _split)
    e_c, ge_c, out_c = _split(e, sizes), _split(ge, sizes), _split(sv.out, sizes)
    rot_c = _split(tables, sizes)
    xh_c = [[_split(t, sizes) for t in sv.XH[li]] for li in range(n_layers)]
    inv_c = [[_split(t, sizes) for t in sv.INV[li]] for li in range(n_layers)]
    qkv_c = [_split(sv.QKV[li], sizes) for li in range(n_layers)]
    a1_c = [_split(sv.A1[li], sizes, n, h, dh) for li in range(n_layers)]
    a2_c = [_split(sv.A2[li], sizes, n, h, dh) for li in range(n_layers)]
    qc_c = [_split(sv.QC[li], sizes, n, h, dh) for li in range(n_layers)]
    z13_c = [_split(sv.Z13[li], sizes, -1, 2 * f) for li in range(n_layers)]

    s = s0
    for ci, (a, b, _) in enumerate(chunks):
        c = b - a
        sv.S[ci].copy_(s)
        # gated merge: one (N, d) x (d, 2d) matmul per chunk, the rest elementwise
        norm = torch.linalg.vector_norm(s, dim=-1, keepdim=True)
        z = (s * torch.addcmul(eps, norm, norm, value=1.0 / d).rsqrt_()) @ w_sp_folded  # (N, 2d)
        gate = torch.sigmoid(ge_c[ci] + z[:, :d])  # (c, N, d)
        x = out_c[ci] if n_layers == 0 else x_in[ci]  # u, the first block's input
        torch.addcmul(e_c[ci], gate, z[:, d:] * spec.alpha, out=x)
        swa_mask = window_mask(a, c, spec.window, e.device)  # (c, W-1+c) or None
        mem_mask = causal_mask(c, b, e.device)  # (c, b) or None
        window = slice(a, b + wm1)  # key slots of positions a-W+1 .. b-1
        own, prefix = slice(a + wm1, b + wm1), slice(0, b)  # this chunk's slots; memory 0..b-1
        for li in range(n_layers):
            p_qkv, p_o, p_q, p_co, p_13, p_2 = projections[li]
            xh, inv = [t[ci] for t in xh_c[li]], [t[ci] for t in inv_c[li]]  # 3 x (c, N, d|1)
            # -- sliding-window self-attention over the layer's own keys
            qkv = qkv_c[li][ci]  # (c, N, 3, H, Dh)
            _normalize(x, eps, xh[0], inv[0])
            torch.mm(xh[0].view(c * n, d), p_qkv, out=qkv.view(c * n, 3 * d))
            _rotate(qkv[:, :, :2], rot_c[ci])
            ops.put(sv.K[li], own, qkv[:, :, 1])
            ops.put(sv.V[li], own, qkv[:, :, 2])
            keys, values = ops.keys(sv.K[li], window), ops.keys(sv.V[li], window)
            p1 = ops.attend(qkv[:, :, 0], keys, values, swa_mask, out=a1_c[li][ci])
            sv.P1[li * len(chunks) + ci] = p1
            x1 = x_1[ci]
            torch.addmm(x.view(c * n, d), a1_c[li][ci].view(c * n, d), p_o, out=x1.view(c * n, d))
            # -- memory cross-attention over the prefix 0..b-1
            qc = qc_c[li][ci]  # (c, N, H, Dh)
            _normalize(x1, eps, xh[1], inv[1])
            torch.mm(xh[1].view(c * n, d), p_q, out=qc.view(c * n, d))
            keys, values = mops.keys(mem_k, prefix), mops.keys(mem_v, prefix)
            p = mops.attend(qc, keys, values, mem_mask, out=a2_c[li][ci])
            mops.p2(sv.P2[li], slice(a, b), b).copy_(p)
            x2 = x_2[ci]
            torch.addmm(x1.view(c * n, d), a2_c[li][ci].view(c * n, d), p_co, out=x2.view(c * n, d))
            # -- SwiGLU
            z13 = z13_c[li][ci]  # (c*N, 2f)
            _normalize(x2, eps, xh[2], inv[2])
            torch.mm(xh[2].view(c * n, d), p_13, out=z13)
            m = F.silu(z13[:, :f]) * z13[:, f:]  # (c*N, f)
            x = out_c[ci] if li == n_layers - 1 else x_in[ci]
            torch.addmm(x2.view(c * n, d), m, p_2, out=x.view(c * n, d))
        if b % b_int == 0:
            s = out_c[ci][-1]  # a complete chunk: the next boundary state


def _merge_factors(spec, sv: _Saved, ge: Tensor, w_sn: Tensor, w_sp: Tensor, alpha: float):
    """The merge's state-dependent factors, batched over chunks (small: one row per chunk):
    (s_hat, 1/rms(s), r, d u / d gate pre-activation, d u / d (W_s r))."""
    d = sv.out.shape[-1]
    s_inv = torch.rsqrt(sv.S.pow(2).mean(-1, keepdim=True) + spec.eps)  # (C, N, 1)
    s_hat = sv.S * s_inv
    r = s_hat * w_sn
    z = r @ w_sp.T  # (C, N, 2d)
    chunk_of = torch.arange(sv.out.shape[0], device=ge.device) // spec.interval  # from 0
    gate = torch.sigmoid(ge + z[chunk_of, :, :d])  # (T, N, d)
    k_gate = alpha * z[chunk_of, :, d:] * gate * (1 - gate)
    return s_hat, s_inv, r, k_gate, alpha * gate


def _backward_buffers(
    sv: _Saved, e: Tensor, grad_out: Tensor, n_layers: int, f: int, n_chunks: int
):
    """What the batched weight gradients need, laid out like the forward's buffers:
    (gx, gx1, gx2, gqkv, gk, gv, gqc, g13, gh, ga2, ds2, gge, gz, gr)."""
    t_len, n, d = sv.out.shape
    gx = e.new_empty(n_layers + 1, t_len, n, d)  # dL/d(input of block l); [L]: of the outputs
    gx[n_layers].copy_(grad_out.transpose(0, 1))
    return (
        gx,
        e.new_empty(n_layers, t_len, n, d),  # gx1: dL/d(after SWA)
        e.new_empty(n_layers, t_len, n, d),  # gx2: dL/d(after cross-attention)
        torch.empty_like(sv.QKV),  # gqkv: dL/d(q, k, v) before rotation
        torch.zeros_like(sv.K),  # gk, gv: accumulate over the windows of later positions
        torch.zeros_like(sv.V),
        e.new_empty(n_layers, t_len, n, d),  # gqc
        e.new_empty(n_layers, t_len, n, 2 * f),  # g13
        e.new_empty(n_layers, 3, t_len, n, d),  # gh: dL/d(normed inputs), for norm weights
        e.new_empty(n_layers, t_len, n, d),  # ga2: dL/d(memory-attention output)
        torch.zeros_like(sv.P2),  # ds2: memory-attention score gradients
        e.new_empty(t_len, n, d),  # gge
        e.new_empty(n_chunks, n, 2 * d),  # gz
        e.new_empty(n_chunks, n, d),  # gr
    )


def _weight_grads(mops, sv: _Saved, g, layers, mem_k, mem_v, h: int, scale: float):
    """Batched weight and memory gradients: every weight as one (T*N)-deep matmul, the memory
    K/V as one batched matmul per layer. Returns (per-block grads, dL/d mem_k, dL/d mem_v), the
    memory's gradients laid out as the caller's memory, (N, H, T, Dh)."""
    gx, gx1, gx2, gqkv, _, _, gqc, g13, gh, ga2, ds2, _, _, _ = g
    t_len, n, d = sv.out.shape
    f, dh, flat = g13.shape[-1] // 2, d // h, (t_len * n, -1)
    layer_grads = []
    g_mem_k = None if mem_k is None else mops.grad_buffer(mem_k)  # (N, H, T, Dh)
    g_mem_v = None if mem_v is None else mops.grad_buffer(mem_v)
    for li, lw in enumerate(layers):
        norms = (lw.attn_norm, lw.cross_norm, lw.ffn_norm)
        normed = [(sv.XH[li, i] * w).view(flat) for i, w in enumerate(norms)]
        m = F.silu(sv.Z13[li, ..., :f]) * sv.Z13[li, ..., f:]  # (T, N, f)
        g_norm = (sv.XH[li] * gh[li]).sum(dim=(1, 2))  # (3, d)
        layer_grads += BlockWeights(
            attn_norm=g_norm[0],
            qkv=gqkv[li].view(flat).T @ normed[0],
            attn_out=gx1[li].view(flat).T @ sv.A1[li].view(flat),
            cross_norm=g_norm[1],
            cross_q=(gqc[li].view(flat).T @ normed[1]) * scale,
            cross_out=gx2[li].view(flat).T @ sv.A2[li].view(flat),
            ffn_norm=g_norm[2],
            w13=g13[li].view(flat).T @ normed[2],
            w2=gx[li + 1].view(flat).T @ m.view(flat),
        )
        g_mem_v += mops.memory_grad(sv.P2[li], ga2[li].view(t_len, n, h, dh))
        g_mem_k += mops.memory_grad(ds2[li], sv.QC[li].view(t_len, n, h, dh))
    return layer_grads, g_mem_k, g_mem_v


def _backward_loop(
    spec, ops, mops, sv, g, layers, mem_k, mem_v, w_q_scaled, inverse_rotations, merge
) -> Tensor | None:
    """The backward token loop in Python (its C++ twin: token_loop.cpp's backward_loop); fills
    the gradient buffers ``g`` and returns dL/d s0."""
    s_hat, s_inv, k_gate, k_ws, w_sn, w_sp = merge
    gx, gx1, gx2, gqkv, gk, gv, gqc, g13, gh, ga2, ds2, gge, gz, gr = g
    (_, n, d), n_layers, h, wm1 = sv.out.shape, len(layers), spec.n_heads, spec.window - 1
    dh, f, chunks, sizes = d // h, g13.shape[-1] // 2, sv.chunks, sv.sizes
    silu_backward, ds0 = torch.ops.aten.silu_backward.grad_input, None
    # per-chunk views, made once (see _split)
    xh_c = [[_split(t, sizes) for t in sv.XH[li]] for li in range(n_layers)]
    inv_c = [[_split(t, sizes) for t in sv.INV[li]] for li in range(n_layers)]
    gh_c = [[_split(t, sizes, -1, d) for t in gh[li]] for li in range(n_layers)]
    z13_c = [_split(sv.Z13[li], sizes, -1, 2 * f) for li in range(n_layers)]
    g13_c = [_split(g13[li], sizes, -1, 2 * f) for li in range(n_layers)]
    gx_c = [_split(gx[li], sizes) for li in range(n_layers + 1)]
    gx1_c = [_split(gx1[li], sizes) for li in range(n_layers)]
    gx2_c = [_split(gx2[li], sizes) for li in range(n_layers)]
    ga2_c = [_split(ga2[li], sizes, n, h, dh) for li in range(n_layers)]
    gqc_c = [_split(gqc[li], sizes, n, h, dh) for li in range(n_layers)]
    gqkv_c = [_split(gqkv[li], sizes) for li in range(n_layers)]
    q_c = [_split(sv.QKV[li, :, :, 0], sizes) for li in range(n_layers)]
    inv_rot_c = _split(inverse_rotations, sizes)
    k_gate_c, k_ws_c, gge_c = _split(k_gate, sizes), _split(k_ws, sizes), _split(gge, sizes)

    for ci in range(len(chunks) - 1, -1, -1):
        a, b, cut = chunks[ci]
        c = b - a
        window, own, prefix = slice(a, b + wm1), slice(a + wm1, b + wm1), slice(0, b)
        lo = max(a, cut + wm1)  # slots before the latest TBPTT cut are detached
        for li in range(n_layers - 1, -1, -1):
            lw = layers[li]
            w_an, w_cn, w_fn = lw.attn_norm, lw.cross_norm, lw.ffn_norm
            w_qkv, w_o, w_co, w_13, w_2 = lw.qkv, lw.attn_out, lw.cross_out, lw.w13, lw.w2
            xh, inv = [t[ci] for t in xh_c[li]], [t[ci] for t in inv_c[li]]
            g_out, g_2, g_1 = gx_c[li + 1][ci], gx2_c[li][ci], gx1_c[li][ci]  # (c, N, d)
            # -- SwiGLU
            dm = g_out.view(c * n, d) @ w_2  # (c*N, f)
            pre, grad = z13_c[li][ci], g13_c[li][ci]  # (c*N, 2f)
            silu_backward(dm * pre[:, f:], pre[:, :f], grad_input=grad[:, :f])
            torch.mul(dm, F.silu(pre[:, :f]), out=grad[:, f:])
            dh_ = torch.mm(grad, w_13, out=gh_c[li][2][ci]).view(c, n, d)
            _rms_backward(dh_, w_fn, xh[2], inv[2], g_out, out=g_2)
            # -- memory cross-attention
            da = ga2_c[li][ci]  # (c, N, H, Dh)
            torch.mm(g_2.view(c * n, d), w_co, out=da.view(c * n, d))
            keys, values = mops.keys(mem_k, prefix), mops.keys(mem_v, prefix)
            p = mops.p2(sv.P2[li], slice(a, b), b)
            dsc = mops.attend_backward(p, da, keys, values, dq=gqc_c[li][ci])
            mops.p2(ds2[li], slice(a, b), b).copy_(dsc)
            dh_ = torch.mm(gqc_c[li][ci].view(c * n, d), w_q_scaled[li], out=gh_c[li][1][ci])
            _rms_backward(dh_.view(c, n, d), w_cn, xh[1], inv[1], g_2, out=g_1)
            # -- sliding-window self-attention
            da = (g_1.view(c * n, d) @ w_o).view(c, n, h, dh)
            g_own = gqkv_c[li][ci]  # (c, N, 3, H, Dh)
            keys, values = ops.keys(sv.K[li], window), ops.keys(sv.V[li], window)
            p = sv.P1[li * len(chunks) + ci]
            dsc = ops.attend_backward(p, da, keys, values, dq=g_own[:, :, 0])
            live = slice(lo, b + wm1)
            ops.accumulate(ops.keys(gk[li], live), dsc, lo - a, q_c[li][ci])
            ops.accumulate(ops.keys(gv[li], live), p, lo - a, da)
            g_own[:, :, 1] = ops.own(gk[li], own)  # complete: later windows are done
            g_own[:, :, 2] = ops.own(gv[li], own)
            _rotate(g_own[:, :, :2], inv_rot_c[ci])
            dh_ = torch.mm(g_own.view(c * n, 3 * d), w_qkv, out=gh_c[li][0][ci])
            _rms_backward(dh_.view(c, n, d), w_an, xh[0], inv[0], g_1, out=gx_c[li][ci])
        # -- gated merge: dL/du = gx[0, a:b] (which is also dL/de)
        du = gx_c[0][ci]  # (c, N, d)
        torch.mul(du, k_gate_c[ci], out=gge_c[ci])
        torch.sum(gge_c[ci], dim=0, out=gz[ci, :, :d])
        torch.sum(du * k_ws_c[ci], dim=0, out=gz[ci, :, d:])
        torch.mm(gz[ci], w_sp, out=gr[ci])  # dL/dr (N, d)
        ds = _rms_backward(gr[ci], w_sn, s_hat[ci], s_inv[ci], None, out=torch.empty_like(gr[ci]))
        if a == 0:
            ds0 = ds
        elif cut != a:  # the state entering a chunk after a cut is detached
            gx[n_layers, a - 1] += ds
    return ds0


def backward_pass(
    spec: RecurrenceSpec, ops, mops, sv: _Saved, grad_out: Tensor, tensors, native
) -> list[Tensor | None]:
    e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers = tensors
    t_len, n, d = sv.out.shape
    n_layers, h, alpha = len(layers), spec.n_heads, spec.alpha
    dh = d // h
    f = layers[0][8].shape[1] if layers else 0
    scale = dh**-0.5
    chunks = sv.chunks
    inverse_rotations = sv.tables.conj()  # (T, 1, 2, 1, Dh/2)
    w_q_scaled = [layer[4] * scale for layer in layers]

    s_hat, s_inv, r, k_gate, k_ws = _merge_factors(spec, sv, ge, w_sn, w_sp, alpha)
    g = _backward_buffers(sv, e, grad_out, n_layers, f, len(chunks))
    gx, gx1, gx2, gqkv, gk, gv, gqc, g13, gh, ga2, ds2, gge, gz, gr = g
    ds0 = None

    if native is not None:  # the same loop in C++ (rlt/models/csrc/token_loop.cpp)
        ds0 = native.backward_loop(
            [i for chunk in chunks for i in chunk],
            *(h, spec.window, spec.interval, ops is TimeMajor),
            [w for layer in layers for w in layer],
            *(w_q_scaled, w_sn, w_sp, mem_k, mem_v, inverse_rotations, sv.P1),
            *(sv.XH, sv.INV, sv.Z13, sv.QKV, sv.K, sv.V, sv.P2, s_hat, s_inv, k_gate, k_ws),
            *(gx, gx1, gx2, gqkv, gk, gv, gqc, g13, gh, ga2, ds2, gge, gz, gr),
        )
    else:
        ds0 = _backward_loop(
            spec,
            ops,
            mops,
            sv,
            g,
            layers,
            mem_k,
            mem_v,
            w_q_scaled,
            inverse_rotations,
            (s_hat, s_inv, k_gate, k_ws, w_sn, w_sp),
        )

    g_w_sp = gz.reshape(len(chunks) * n, 2 * d).T @ r.reshape(len(chunks) * n, d)
    g_w_sn = (s_hat * gr).sum(dim=(0, 1))
    layer_grads, g_mem_k, g_mem_v = _weight_grads(mops, sv, g, layers, mem_k, mem_v, h, scale)
    return [gx[0], gge, g_mem_k, g_mem_v, ds0, g_w_sn, g_w_sp, *layer_grads]
