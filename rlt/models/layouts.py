"""Attention layouts of the fused recurrence (rlt/models/recurrence.py): the same operations on
keys, values and probabilities laid out time-major (``TimeMajor``: elementwise products, fast
at small head dims) or head-major (``HeadMajor``: batched matmuls, fast from
``MATMUL_HEAD_DIM`` on). The forward and backward token loops call them without knowing which
is in use.
"""

from __future__ import annotations

import torch
from torch import Tensor


class TimeMajor:
    """Attention with time leading: keys/values (L, N, H, Dh), probabilities (c, L, N, H).

    For small head dims: N*H tiny matrix products would cost more in BLAS call overhead
    than these elementwise products and sums over contiguous rows (and softmax over a short
    last dim is slow on CPU; here it runs over the leading dim).
    """

    @staticmethod
    def kv_buffer(n_layers: int, slots: int, n: int, h: int, dh: int, like: Tensor) -> Tensor:
        return like.new_zeros(n_layers, slots, n, h, dh)

    @staticmethod
    def put(buffer: Tensor, slots: slice, x: Tensor) -> None:
        buffer[slots] = x  # x (c, N, H, Dh)

    @staticmethod
    def keys(buffer: Tensor, slots: slice) -> Tensor:
        return buffer[slots]  # (L, N, H, Dh)

    @staticmethod
    def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, out: Tensor) -> Tensor:
        """Scaled q (c, N, H, Dh) over k, v (L, N, H, Dh); True in mask (c, L) = may attend.
        Writes the output (c, N, H, Dh) into ``out``; returns the probabilities."""
        scores = (q[:, None] * k[None]).sum(-1)  # (c, L, N, H)
        if mask is not None:
            scores.masked_fill_(~mask[:, :, None, None], float("-inf"))
        p = torch.softmax(scores, dim=1)
        torch.sum(p[..., None] * v[None], dim=1, out=out)
        return p

    @staticmethod
    def attend_backward(p: Tensor, da: Tensor, k: Tensor, v: Tensor, dq: Tensor) -> Tensor:
        """Score gradients from dL/d(output) da (c, N, H, Dh); dL/dq goes into dq."""
        dp = (da[:, None] * v[None]).sum(-1)  # (c, L, N, H)
        ds = p * (dp - (dp * p).sum(1, keepdim=True))
        torch.sum(ds[..., None] * k[None], dim=1, out=dq)
        return ds

    @staticmethod
    def accumulate(acc: Tensor, weights: Tensor, first: int, x: Tensor) -> None:
        """acc (L', N, H, Dh) += sum_c weights[:, first:] (c, L', N, H) * x (c, N, H, Dh)."""
        if weights.shape[0] == 1:
            acc.addcmul_(weights[0, first:, ..., None], x[0])
        else:
            acc += (weights[:, first:, ..., None] * x[:, None]).sum(0)

    @staticmethod
    def own(buffer: Tensor, slots: slice) -> Tensor:
        return buffer[slots]  # (c, N, H, Dh)


class HeadMajor:
    """Attention with heads leading: keys/values (N, H, L, Dh), probabilities (N, H, c, L).

    For large head dims, where N*H BLAS matrix products beat elementwise products.
    """

    @staticmethod
    def kv_buffer(n_layers: int, slots: int, n: int, h: int, dh: int, like: Tensor) -> Tensor:
        return like.new_zeros(n_layers, n, h, slots, dh)

    @staticmethod
    def put(buffer: Tensor, slots: slice, x: Tensor) -> None:
        buffer[:, :, slots] = x.permute(1, 2, 0, 3)

    @staticmethod
    def keys(buffer: Tensor, slots: slice) -> Tensor:
        return buffer[:, :, slots]  # (N, H, L, Dh)

    @staticmethod
    def p2_buffer(n_layers: int, t_len: int, n: int, h: int, like: Tensor) -> Tensor:
        return like.new_zeros(n_layers, n, h, t_len, t_len)

    @staticmethod
    def p2(buffer: Tensor, rows: slice, keys: int) -> Tensor:
        return buffer[:, :, rows, :keys]  # (N, H, c, b)

    @staticmethod
    def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, out: Tensor) -> Tensor:
        scores = q.permute(1, 2, 0, 3) @ k.transpose(-1, -2)  # (N, H, c, L)
        if mask is not None:
            scores.masked_fill_(~mask, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        out.copy_((p @ v).permute(2, 0, 1, 3))
        return p

    @staticmethod
    def attend_backward(p: Tensor, da: Tensor, k: Tensor, v: Tensor, dq: Tensor) -> Tensor:
        dp = da.permute(1, 2, 0, 3) @ v.transpose(-1, -2)  # (N, H, c, L)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dq.copy_((ds @ k).permute(2, 0, 1, 3))
        return ds

    @staticmethod
    def accumulate(acc: Tensor, weights: Tensor, first: int, x: Tensor) -> None:
        """acc (N, H, L', Dh) += weights[..., first:]^T (N, H, L', c) x (N, H, c, Dh)."""
        w = weights[..., first:].transpose(-1, -2)
        x = x.permute(1, 2, 0, 3)
        if w.shape[-1] == 1:
            acc.addcmul_(w, x)
        else:
            acc += w @ x

    @staticmethod
    def own(buffer: Tensor, slots: slice) -> Tensor:
        return buffer[:, :, slots].permute(2, 0, 1, 3)  # (c, N, H, Dh)

    @staticmethod
    def memory_grad(p2: Tensor, x: Tensor) -> Tensor:
        """p2^T x: (N, H, T, T), (T, N, H, Dh) -> (N, H, T, Dh)."""
        return p2.transpose(-1, -2) @ x.permute(1, 2, 0, 3)


# The sliding window uses TimeMajor below this head dim and HeadMajor from it on (measured on
# the bench machine: about 2x either way at Dh=16 and Dh=128). The memory attention always
# uses HeadMajor: over a prefix of up to T keys, BLAS wins even at Dh=16.
MATMUL_HEAD_DIM = 64


def layout_for(head_dim: int) -> type[TimeMajor] | type[HeadMajor]:
    return HeadMajor if head_dim >= MATMUL_HEAD_DIM else TimeMajor
