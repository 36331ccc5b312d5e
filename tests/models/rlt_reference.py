"""A deliberately naive second implementation of SPEC section 1, for equivalence tests.

One position at a time, explicit softmax attention over explicit key lists, its own RoPE and
RMSNorm, reading only the weights of a built model. Slow and obviously faithful: the fast
paths are checked against it, not against themselves.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlt.models import DecoderOnlyTransformer, RecurrentLoopedTransformer


def rms_norm(x: Tensor, norm) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps) * norm.weight


def rope(x: Tensor, position: int, base: float, enabled: bool) -> Tensor:
    """Rotate (N, H, Dh) by the angles of one position; pairs are (2i, 2i + 1)."""
    if not enabled:
        return x
    i = torch.arange(x.shape[-1] // 2, dtype=torch.float64)
    angle = position * base ** (-2 * i / x.shape[-1])
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


def attend(q: Tensor, keys: list[Tensor], values: list[Tensor]) -> Tensor:
    """q (N, H, Dh) over lists of (N, H, Dh) -> (N, H, Dh)."""
    k, v = torch.stack(keys, dim=2), torch.stack(values, dim=2)  # (N, H, L, Dh)
    scores = torch.einsum("nhd,nhld->nhl", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("nhl,nhld->nhd", torch.softmax(scores, dim=-1), v)


def ffn(block, x: Tensor) -> Tensor:
    w1, w3 = block.ffn.w13.weight.chunk(2, dim=0)
    h = rms_norm(x, block.ffn_norm)
    return (torch.nn.functional.silu(h @ w1.T) * (h @ w3.T)) @ block.ffn.w2.weight.T


def causal_stack(blocks, x: Tensor, heads: int, base: float, use_rope: bool) -> Tensor:
    """Encoder/Transformer blocks, position by position with growing key lists."""
    n, t, d = x.shape
    dh = d // heads
    for block in blocks:
        keys, values, outs = [], [], []
        for pos in range(t):
            h = rms_norm(x[:, pos], block.attn_norm)
            q, k, v = (h @ block.attn.qkv.weight.T).view(n, 3, heads, dh).unbind(1)
            keys.append(rope(k, pos, base, use_rope))
            values.append(v)
            a = attend(rope(q, pos, base, use_rope), keys, values).reshape(n, d)
            y = x[:, pos] + a @ block.attn.out.weight.T
            outs.append(y + ffn(block, y))
        x = torch.stack(outs, dim=1)
    return x


def reference_transformer(model: DecoderOnlyTransformer, tokens: Tensor) -> Tensor:
    c = model.config
    x = causal_stack(
        model.blocks, model.embed.weight[tokens], c.n_heads, c.rope_base, c.pos_encoding == "rope"
    )
    return rms_norm(x, model.norm) @ model.head.weight.T


def reference_rlt(model: RecurrentLoopedTransformer, tokens: Tensor) -> Tensor:
    """Logits (N, T, V) of an RLT, position by position, chunk boundaries every B tokens."""
    c = model.config
    n, t = tokens.shape
    d, heads, use_rope = c.d_model, c.n_heads, c.pos_encoding == "rope"
    dh = d // heads
    e = causal_stack(model.encoder, model.embed.weight[tokens], heads, c.rope_base, use_rope)
    if model.memory is not None:
        mem_in = rms_norm(e, model.memory_norm) if model.memory_norm is not None else e
        mem_k, mem_v = (
            (mem_in @ model.memory.weight.T).view(n, t, 2, heads, dh).unbind(2)
        )  # (N, T, H, Dh)
    merge = model.merge
    boundary = None if merge is None else merge.s_star.expand(n, d)
    swa_k = [[] for _ in model.decoder]
    swa_v = [[] for _ in model.decoder]
    outs = []
    for pos in range(t):
        if merge is None:
            u = e[:, pos]
        else:
            r = rms_norm(boundary, merge.state_norm)
            w_g = torch.cat([merge.gate_e.weight, merge.state_proj.weight[:d]], dim=1)  # (d, 2d)
            g = torch.sigmoid(torch.cat([e[:, pos], r], dim=-1) @ w_g.T + merge.gate_e.bias)
            u = e[:, pos] + c.alpha * g * (r @ merge.state_proj.weight[d:].T)
        h = u
        for layer, block in enumerate(model.decoder):
            a_in = rms_norm(h, block.attn_norm)
            q, k, v = (a_in @ block.attn.qkv.weight.T).view(n, 3, heads, dh).unbind(1)
            swa_k[layer].append(rope(k, pos, c.rope_base, use_rope))
            swa_v[layer].append(v)
            lo = max(0, pos - c.window + 1)
            a = attend(rope(q, pos, c.rope_base, use_rope), swa_k[layer][lo:], swa_v[layer][lo:])
            h = h + a.reshape(n, d) @ block.attn.out.weight.T
            qc = (rms_norm(h, block.cross_norm) @ block.cross.q.weight.T).view(n, heads, dh)
            a = attend(qc, list(mem_k[:, : pos + 1].unbind(1)), list(mem_v[:, : pos + 1].unbind(1)))
            h = h + a.reshape(n, d) @ block.cross.out.weight.T
            h = h + ffn(block, h)
        outs.append(h)
        if merge is not None and (pos + 1) % c.feedback_interval == 0:
            boundary = h
    s = torch.stack(outs, dim=1)
    return rms_norm(s, model.norm) @ model.head.weight.T
