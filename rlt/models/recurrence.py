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

from rlt.models.blocks import causal_mask, window_mask

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


def rope_tables(
    cos: Tensor | None, sin: Tensor | None, length: int, head_dim: int, like: Tensor
) -> tuple[Tensor, Tensor]:
    """(cos, signed sin) for q and k stacked, each (2, T, Dh); q's carry the 1/sqrt(Dh) scale.

    Rotate-half RoPE as ``y = x * cos + roll(x, Dh/2) * sin'`` with sin' = [-sin_1, sin_2];
    its transpose is ``dx = dy * cos + roll(dy * sin', Dh/2)``: three ops either way.
    """
    scale = head_dim**-0.5
    if cos is None:  # pos_encoding="none": the identity rotation
        cos = like.new_ones(length, head_dim)
        sin = like.new_zeros(length, head_dim)
    half = head_dim // 2
    signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)  # (T, Dh)
    cos = cos.to(like.dtype)
    signed = signed.to(like.dtype)
    return torch.stack([cos * scale, cos]), torch.stack([signed * scale, signed])  # (2, T, Dh)


def _rms_stats(x: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """xhat = x * inv, inv = 1/rms(x), and xi = xhat * inv / d (for the backward)."""
    inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
    xhat = x * inv
    return xhat, inv, xhat * (inv / x.shape[-1])


def _rms_backward(dxhat: Tensor, xhat: Tensor, inv: Tensor, xi: Tensor, residual: Tensor | None, out: Tensor) -> Tensor:
    """dL/dx for xhat = x / rms(x), plus a residual gradient, written into ``out``."""
    dot = torch.linalg.vecdot(dxhat, xhat).unsqueeze(-1)  # (..., 1)
    base = dxhat * inv if residual is None else torch.addcmul(residual, dxhat, inv)
    return torch.addcmul(base, xi, dot, value=-1.0, out=out)


class _Saved:
    """Buffers the forward fills and the backward reads (a plain namespace)."""


def _forward(spec: RecurrenceSpec, tables, e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers) -> _Saved:
    t_len, n, d = e.shape
    h, n_layers, wm1, b_int = spec.n_heads, len(layers), spec.window - 1, spec.interval
    dh = d // h
    half = dh // 2
    f = layers[0][8].shape[1] if layers else 0
    fcos, fsin = (t.permute(1, 0, 2)[:, None, :, None, :] for t in tables)  # (T, 1, 2, 1, Dh)
    chunks = spec.chunks(t_len)
    w_q_scaled = [layer[4] * dh**-0.5 for layer in layers]  # cross queries carry 1/sqrt(Dh)

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
    sv.Q = e.new_empty(n_layers, n, h, t_len, dh)  # scaled, rotated SWA queries
    sv.K = e.new_zeros(n_layers, n, h, t_len + wm1, dh)  # SWA keys; W-1 zero slots before 0
    sv.V = e.new_zeros(n_layers, n, h, t_len + wm1, dh)
    sv.P1 = [[] for _ in layers]  # SWA probabilities per chunk, (N, H, c, W-1+c)
    sv.P2 = e.new_zeros(n_layers, n, h, t_len, t_len)  # memory attention probabilities

    s = s0
    for ci, (a, b, _) in enumerate(chunks):
        c = b - a
        sv.S[ci].copy_(s)
        # gated merge: one (N, d) x (d, 2d) matmul per chunk, the rest elementwise
        z = F.rms_norm(s, (d,), w_sn, spec.eps) @ w_sp.T  # (N, 2d): [gate half, W_s r]
        gate = torch.sigmoid(ge[a:b] + z[:, :d])  # (c, N, d)
        torch.addcmul(e[a:b], gate, z[:, d:] * spec.alpha, out=sv.X[0, a:b])
        swa_mask = window_mask(a, c, spec.window, e.device)
        mem_mask = causal_mask(c, b, e.device)
        for li, (w_an, w_qkv, w_o, w_cn, w_q, w_co, w_fn, w_13, w_2) in enumerate(layers):
            x = sv.X[li, a:b]  # (c, N, d)
            # -- sliding-window self-attention over the layer's own keys
            hid = F.rms_norm(x, (d,), w_an, spec.eps).view(c * n, d)
            qkv = (hid @ w_qkv.T).view(c, n, 3, h, dh)
            qk = qkv[:, :, :2]  # (c, N, 2, H, Dh)
            rot = torch.addcmul(qk * fcos[a:b], qk.roll(half, -1), fsin[a:b])  # (c, N, 2, H, Dh)
            sv.Q[li, :, :, a:b] = rot[:, :, 0].permute(1, 2, 0, 3)  # (N, H, c, Dh)
            sv.K[li, :, :, wm1 + a : wm1 + b] = rot[:, :, 1].permute(1, 2, 0, 3)
            sv.V[li, :, :, wm1 + a : wm1 + b] = qkv[:, :, 2].permute(1, 2, 0, 3)
            scores = sv.Q[li, :, :, a:b] @ sv.K[li, :, :, a : b + wm1].transpose(-1, -2)  # (N, H, c, W-1+c)
            if swa_mask is not None:
                scores.masked_fill_(~swa_mask, float("-inf"))
            p = torch.softmax(scores, dim=-1)
            sv.P1[li].append(p)
            att = p @ sv.V[li, :, :, a : b + wm1]  # (N, H, c, Dh)
            sv.A1[li, a:b].view(c, n, h, dh).copy_(att.permute(2, 0, 1, 3))
            x1 = sv.X1[li, a:b].view(c * n, d)
            torch.addmm(x.view(c * n, d), sv.A1[li, a:b].view(c * n, d), w_o.T, out=x1)
            # -- memory cross-attention over the prefix 0..b-1
            hid = F.rms_norm(x1, (d,), w_cn, spec.eps)
            torch.mm(hid, w_q_scaled[li].T, out=sv.QC[li, a:b].view(c * n, d))
            qc = sv.QC[li, a:b].view(c, n, h, dh).permute(1, 2, 0, 3)  # (N, H, c, Dh)
            scores = qc @ mem_k[:, :, :b].transpose(-1, -2)  # (N, H, c, b)
            if mem_mask is not None:
                scores.masked_fill_(~mem_mask, float("-inf"))
            p = torch.softmax(scores, dim=-1)
            sv.P2[li, :, :, a:b, :b] = p
            att = p @ mem_v[:, :, :b]  # (N, H, c, Dh)
            sv.A2[li, a:b].view(c, n, h, dh).copy_(att.permute(2, 0, 1, 3))
            x2 = sv.X2[li, a:b].view(c * n, d)
            torch.addmm(x1, sv.A2[li, a:b].view(c * n, d), w_co.T, out=x2)
            # -- SwiGLU
            hid = F.rms_norm(x2, (d,), w_fn, spec.eps)
            z13 = sv.Z13[li, a:b].view(c * n, 2 * f)
            torch.mm(hid, w_13.T, out=z13)
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
    half = dh // 2
    f = layers[0][8].shape[1] if layers else 0
    scale = dh**-0.5
    chunks = sv.chunks
    bcos, bsin = (t[:, None, None, :, :] for t in sv.tables)  # (2, 1, 1, T, Dh)

    # -- batched preparation: everything that does not depend on the incoming gradient
    xs = [_rms_stats(sv.X[li], spec.eps) for li in range(n_layers)]
    x1s = [_rms_stats(sv.X1[li], spec.eps) for li in range(n_layers)]
    x2s = [_rms_stats(sv.X2[li], spec.eps) for li in range(n_layers)]
    folded = [
        (w_qkv * w_an, w_q * (w_cn * scale), w_13 * w_fn)  # norm weights folded into matmuls
        for (w_an, w_qkv, _, w_cn, w_q, _, w_fn, w_13, _) in layers
    ]
    swiglu = []  # d(silu(A) * Bv)/dA and /dBv, interleaved like Z13: (T, N, 2, f)
    for li in range(n_layers):
        pre_a, pre_b = sv.Z13[li, ..., :f], sv.Z13[li, ..., f:]
        sig = torch.sigmoid(pre_a)
        silu = pre_a * sig
        swiglu.append(torch.stack([pre_b * sig * (1 + pre_a * (1 - sig)), silu], dim=2))
    shat, sinv, sxi = _rms_stats(sv.S, spec.eps)  # (C, N, d)
    r = shat * w_sn
    z = r @ w_sp.T  # (C, N, 2d)
    chunk_of = torch.tensor([ci for ci, (a, b, _) in enumerate(chunks) for _ in range(a, b)], device=e.device)
    gate = torch.sigmoid(ge + z[chunk_of, :, :d])  # (T, N, d)
    k_gate = alpha * z[chunk_of, :, d:] * gate * (1 - gate)  # d u / d (gate pre-activation)
    k_ws = alpha * gate  # d u / d (W_s r)
    w_sp_folded = w_sp * w_sn

    # -- gradient buffers
    gx = e.new_empty(n_layers + 1, t_len, n, d)  # dL/dX[l]
    gx[n_layers].copy_(grad_out.transpose(0, 1))
    gx1 = e.new_empty(n_layers, t_len, n, d)
    gx2 = e.new_empty(n_layers, t_len, n, d)
    gqkv = e.new_empty(n_layers, t_len, n, 3, h, dh)
    gqc = e.new_empty(n_layers, t_len, n, d)
    g13 = e.new_empty(n_layers, t_len, n, 2 * f)
    gk = torch.zeros_like(sv.K)  # (L, N, H, T+W-1, Dh) accumulated over later positions
    gv = torch.zeros_like(sv.V)
    ds2 = torch.zeros_like(sv.P2)  # memory-attention score gradients
    gge = e.new_empty(t_len, n, d)
    gz = e.new_empty(len(chunks), n, 2 * d)
    ds0 = None

    for ci in range(len(chunks) - 1, -1, -1):
        a, b, cut = chunks[ci]
        c = b - a
        for li in range(n_layers - 1, -1, -1):
            _, w_qkv, w_o, _, _, w_co, _, _, w_2 = layers[li]
            f_qkv, f_q, f_13 = folded[li]
            # -- SwiGLU
            g_out = gx[li + 1, a:b].view(c * n, d)
            dm = g_out @ w_2  # (c*N, f)
            g13_chunk = g13[li, a:b].view(c, n, 2, f)
            torch.mul(dm.view(c, n, 1, f), swiglu[li][a:b], out=g13_chunk)
            xhat, inv, xi = (t[a:b] for t in x2s[li])
            dxh = (g13[li, a:b].view(c * n, 2 * f) @ f_13).view(c, n, d)
            _rms_backward(dxh, xhat, inv, xi, gx[li + 1, a:b], out=gx2[li, a:b])
            # -- memory cross-attention
            da = (gx2[li, a:b].view(c * n, d) @ w_co).view(c, n, h, dh).permute(1, 2, 0, 3)  # (N, H, c, Dh)
            p = sv.P2[li, :, :, a:b, :b]  # (N, H, c, b)
            dp = da @ mem_v[:, :, :b].transpose(-1, -2)
            dsc = ds2[li, :, :, a:b, :b]
            torch.mul(p, dp - torch.linalg.vecdot(dp, p).unsqueeze(-1), out=dsc)
            dq = dsc @ mem_k[:, :, :b]  # (N, H, c, Dh)
            gqc[li, a:b].view(c, n, h, dh).copy_(dq.permute(2, 0, 1, 3))
            xhat, inv, xi = (t[a:b] for t in x1s[li])
            dxh = (gqc[li, a:b].view(c * n, d) @ f_q).view(c, n, d)
            _rms_backward(dxh, xhat, inv, xi, gx2[li, a:b], out=gx1[li, a:b])
            # -- sliding-window self-attention
            da = (gx1[li, a:b].view(c * n, d) @ w_o).view(c, n, h, dh).permute(1, 2, 0, 3)  # (N, H, c, Dh)
            p = sv.P1[li][ci]  # (N, H, c, W-1+c)
            dp = da @ sv.V[li, :, :, a : b + wm1].transpose(-1, -2)
            dsc = p * (dp - torch.linalg.vecdot(dp, p).unsqueeze(-1))
            dq = dsc @ sv.K[li, :, :, a : b + wm1]  # (N, H, c, Dh), w.r.t. the scaled rotated q
            lo = max(a, cut + wm1) - a  # keys before the latest TBPTT cut are detached
            gk[li, :, :, a + lo : b + wm1] += dsc[..., lo:].transpose(-1, -2) @ sv.Q[li, :, :, a:b]
            gv[li, :, :, a + lo : b + wm1] += p[..., lo:].transpose(-1, -2) @ da
            dqk = torch.stack([dq, gk[li, :, :, wm1 + a : wm1 + b]])  # (2, N, H, c, Dh)
            tmp = dqk * bsin[:, :, :, a:b]
            g_qk = gqkv[li, a:b, :, :2].permute(2, 1, 3, 0, 4)  # (2, N, H, c, Dh) view
            torch.addcmul(tmp.roll(half, -1), dqk, bcos[:, :, :, a:b], out=g_qk)
            gqkv[li, a:b, :, 2].copy_(gv[li, :, :, wm1 + a : wm1 + b].permute(2, 0, 1, 3))
            xhat, inv, xi = (t[a:b] for t in xs[li])
            dxh = (gqkv[li, a:b].view(c * n, 3 * d) @ f_qkv).view(c, n, d)
            _rms_backward(dxh, xhat, inv, xi, gx1[li, a:b], out=gx[li, a:b])
        # -- gated merge: dL/du = gx[0, a:b] (which is also dL/de)
        du = gx[0, a:b]  # (c, N, d)
        torch.mul(du, k_gate[a:b], out=gge[a:b])
        torch.sum(gge[a:b], dim=0, out=gz[ci, :, :d])
        torch.sum(du * k_ws[a:b], dim=0, out=gz[ci, :, d:])
        dxh = gz[ci] @ w_sp_folded  # (N, d)
        ds = _rms_backward(dxh, shat[ci], sinv[ci], sxi[ci], None, out=torch.empty_like(dxh))
        if a == 0:
            ds0 = ds
        elif cut != a:  # the state entering a chunk after a cut is detached
            gx[n_layers, a - 1] += ds

    # -- batched weight and memory gradients
    flat = (t_len * n, -1)
    g_w_sp = gz.reshape(len(chunks) * n, 2 * d).T @ r.reshape(len(chunks) * n, d)
    g_w_sn = (shat * (gz @ w_sp)).sum(dim=(0, 1))
    layer_grads = []
    g_mem_k = None if mem_k is None else torch.zeros_like(mem_k)
    g_mem_v = None if mem_v is None else torch.zeros_like(mem_v)
    for li, (w_an, w_qkv, _, w_cn, w_q, w_co, w_fn, w_13, _) in enumerate(layers):
        xhat0, xhat1, xhat2 = xs[li][0], x1s[li][0], x2s[li][0]
        pre_a, pre_b = sv.Z13[li, ..., :f], sv.Z13[li, ..., f:]
        m = F.silu(pre_a) * pre_b  # (T, N, f)
        g_qkv = gqkv[li].view(flat)
        g_q = gqc[li].view(flat)
        g_1 = g13[li].view(flat)
        layer_grads += [
            (xhat0 * (g_qkv @ w_qkv).view(t_len, n, d)).sum(dim=(0, 1)),
            g_qkv.T @ (xhat0 * w_an).view(flat),
            gx1[li].view(flat).T @ sv.A1[li].view(flat),
            (xhat1 * (g_q @ w_q).view(t_len, n, d)).sum(dim=(0, 1)) * scale,
            (g_q.T @ (xhat1 * w_cn).view(flat)) * scale,
            gx2[li].view(flat).T @ sv.A2[li].view(flat),
            (xhat2 * (g_1 @ w_13).view(t_len, n, d)).sum(dim=(0, 1)),
            g_1.T @ (xhat2 * w_fn).view(flat),
            gx[li + 1].view(flat).T @ m.view(flat),
        ]
        da2 = (gx2[li].view(flat) @ w_co).view(t_len, n, h, dh).permute(1, 2, 0, 3)  # (N, H, T, Dh)
        g_mem_v += sv.P2[li].transpose(-1, -2) @ da2
        qc = sv.QC[li].view(t_len, n, h, dh).permute(1, 2, 0, 3)
        g_mem_k += ds2[li].transpose(-1, -2) @ qc
    return [gx[0], gge, g_mem_k, g_mem_v, ds0, g_w_sn, g_w_sp, *layer_grads]


class _FusedRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, spec, cos, sin, e, ge, mem_k, mem_v, s0, w_sn, w_sp, *layer_weights):
        t_len, _, d = e.shape
        layers = [layer_weights[i : i + LAYER_WEIGHTS] for i in range(0, len(layer_weights), LAYER_WEIGHTS)]
        tables = rope_tables(cos, sin, t_len, d // spec.n_heads, e)
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
        return (None, None, None, *grads)


def fused_decode(
    spec: RecurrenceSpec,
    rope: tuple[Tensor, Tensor] | None,
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
    cos, sin = (None, None) if rope is None else rope
    mem_k, mem_v = (None, None) if memory is None else memory
    out = _FusedRecurrence.apply(
        spec,
        cos,
        sin,
        e.transpose(0, 1).contiguous(),  # (T, N, d)
        ge.transpose(0, 1).contiguous(),
        mem_k,
        mem_v,
        s0.contiguous(),
        *merge_weights,
        *layer_weights,
    )
    return out
