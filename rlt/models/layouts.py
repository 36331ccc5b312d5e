"""Attention layouts of the fused recurrence (rlt/models/recurrence.py): the same operations on
keys, values and probabilities laid out time-major (``TimeMajor``: elementwise products, fast
at small head dims) or with heads leading (``HeadMajor`` / ``SlotMajor``: batched matmuls,
fast from ``MATMUL_HEAD_DIM`` on; ``SlotMajor`` stores keys and values slot-major). The forward
and backward token loops call them without knowing which is in use.
"""

from __future__ import annotations

import torch
from torch import Tensor


class SlotStore:
    """A window cache stored slot-major, (layers, slots, N, H, Dh): one contiguous block per
    window; both window layouts keep it so (``keys`` is each layout's own view of it)."""

    @staticmethod
    def kv_buffer(n_layers: int, slots: int, n: int, h: int, dh: int, like: Tensor) -> Tensor:
        return like.new_zeros(n_layers, slots, n, h, dh)

    @staticmethod
    def put(buffer: Tensor, slots: slice, x: Tensor) -> None:
        buffer[slots] = x  # x (c, N, H, Dh)

    @staticmethod
    def own(buffer: Tensor, slots: slice) -> Tensor:
        return buffer[slots]  # (c, N, H, Dh)


class TimeMajor(SlotStore):
    """Attention with time leading: keys/values (L, N, H, Dh), probabilities (c, L, N, H).

    For small head dims: N*H tiny matrix products would cost more in BLAS call overhead
    than these elementwise products and sums over contiguous rows (and softmax over a short
    last dim is slow on CPU; here it runs over the leading dim).
    """

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


class HeadMajor:
    """Attention with heads leading, keys/values read as (N, H, L, Dh), probabilities
    (N, H, c, L), over the memory stored head-major as the encoder gives it, (N, H, T, Dh), and
    its probabilities as (N, H, T, T). The memory's layout at small head dims (the window's is
    ``TimeMajor`` there): over a prefix of up to T keys, BLAS wins even at Dh=16, and at these
    sizes one fewer copy a step beats a contiguous prefix (``SlotMajor``)."""

    @staticmethod
    def store(memory: Tensor) -> Tensor:
        return memory  # (N, H, T, Dh)

    @staticmethod
    def grad_buffer(stored: Tensor) -> Tensor:
        """Zeros for the gradient of a stored memory, laid out as the caller's (N, H, T, Dh)."""
        return torch.zeros_like(stored)

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
    def memory_grad(p2: Tensor, x: Tensor) -> Tensor:
        """p2^T x: (N, H, T, T), (T, N, H, Dh) -> (N, H, T, Dh)."""
        return p2.transpose(-1, -2) @ x.permute(1, 2, 0, 3)

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


class SlotMajor(SlotStore, HeadMajor):
    """``HeadMajor``'s matmuls (the same products, so the same numbers bit for bit) over keys
    and values stored slot-major, (slots, N, H, Dh), read as (N, H, L, Dh) views, and memory
    probabilities stored query-major, (T, N, H, T): the window and the memory from
    ``MATMUL_HEAD_DIM`` on.

    Why (the window was stored head-major, (N, H, slots, Dh), until issue 42): head-major puts
    each (N, H) row's window in a 2-4 KB piece of its own, N*H pieces a page or more apart,
    which each token's window matmuls and gradient accumulations read after the decoder's
    weights have pushed them out of the cache. At the report's width (N*H = 256, Dh = 128) a
    cold window matmul took 288 us head-major and 101 us slot-major, a cold memory matmul over
    10 keys 215 against 100 us (measured on the bench host). Slot-major, a window or a memory
    prefix is one contiguous block, a token's keys are written with one contiguous copy and
    read back (``own``) without a permute. At small head dims the same change cost the laptop
    shape ~4 % (more, smaller copies), so there the memory stays ``HeadMajor``.
    """

    @staticmethod
    def keys(buffer: Tensor, slots: slice) -> Tensor:
        return buffer[slots].permute(1, 2, 0, 3)  # (N, H, L, Dh)

    @staticmethod
    def store(memory: Tensor) -> Tensor:
        """The encoder's memory keys or values (N, H, T, Dh), stored slot-major (T, N, H, Dh)."""
        return memory.permute(2, 0, 1, 3).contiguous()

    @staticmethod
    def grad_buffer(stored: Tensor) -> Tensor:
        return stored.new_zeros(stored.permute(1, 2, 0, 3).shape)

    @staticmethod
    def p2_buffer(n_layers: int, t_len: int, n: int, h: int, like: Tensor) -> Tensor:
        return like.new_zeros(n_layers, t_len, n, h, t_len)

    @staticmethod
    def p2(buffer: Tensor, rows: slice, keys: int) -> Tensor:
        return buffer[rows, :, :, :keys].permute(1, 2, 0, 3)  # (N, H, c, b)

    @staticmethod
    def memory_grad(p2: Tensor, x: Tensor) -> Tensor:
        """p2^T x: (T, N, H, T) as ``p2_buffer`` stores it, (T, N, H, Dh) -> (N, H, T, Dh)."""
        return p2.permute(1, 2, 3, 0) @ x.permute(1, 2, 0, 3)


# The sliding window uses TimeMajor below this head dim and SlotMajor from it on (measured on
# the bench machine: about 2x either way at Dh=16 and Dh=128); the memory HeadMajor below it
# and SlotMajor from it on (memory_layout_for).
MATMUL_HEAD_DIM = 64


def layout_for(head_dim: int) -> type[TimeMajor] | type[SlotMajor]:
    return SlotMajor if head_dim >= MATMUL_HEAD_DIM else TimeMajor


def memory_layout_for(head_dim: int) -> type[HeadMajor]:
    """The memory's layout: slot-major exactly where the window is (token_loop.cpp relies on
    it: its one flag, ``time_major``, chooses both)."""
    return SlotMajor if layout_for(head_dim) is SlotMajor else HeadMajor
