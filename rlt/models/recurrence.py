"""The fused decoder recurrence: the training path of RLT-1 and RLT-2, with a hand-written backward.

Why: with autograd, every token adds ~45 small graph nodes per decoder block, and every weight
gets T separate (d x 64)-deep gradient matmuls that autograd then sums one by one. Here the
token loop writes into preallocated buffers with no graph at all, and the backward loop
carries only what is truly sequential (the gradient chain through the blocks, the SWA caches
and the state); the rest is done once over all positions, batched, after the loop: every
weight gradient as one (T*N)-deep matmul, the memory K/V gradients as one batched matmul per
layer, the norm-weight gradients as one reduction.

Semantics are exactly ``RecurrentLoopedTransformer.decode`` from the initial state (chunks of
B anchored at 0, TBPTT cuts of s and the SWA caches); tests/models/test_model_fused.py checks
outputs and every gradient against that plain autograd path.

Layouts: per-position activations are time-major ``(T, N, ...)``, so a chunk is one
contiguous slice; attention operands follow ``TimeMajor`` or ``SlotMajor`` for the window and
``HeadMajor`` or ``SlotMajor`` for the memory, both chosen by head dim (the window cache is
slot-major in both, the memory slot-major with ``SlotMajor``), see rlt/models/layouts.py.

The loops themselves, forward and backward, are in rlt/models/recurrence_loops.py; this
module is the autograd Function around them and ``fused_decode``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rlt.models.blocks import BlockWeights
from rlt.models.layouts import layout_for, memory_layout_for
from rlt.models.merge import MergeWeights
from rlt.models.recurrence_loops import (
    LAYER_WEIGHTS,
    RecurrenceSpec,
    backward_pass,
    forward_pass,
    rope_tables,
)

__all__ = ["LAYER_WEIGHTS", "DecodeInputs", "RecurrenceSpec", "blocks_from_flat", "fused_decode"]


class DecodeInputs(NamedTuple):
    """What a decoder recurrence reads, for every path that computes it (``fused_decode``, the
    C++ token loop through it, ``compiled_decode``): e, ge (N, T, d); memory K/V (N, H, T, Dh)
    or None (no decoder blocks); s0 (N, d); ``merge_weights`` is ``GatedMerge.fused_weights()``
    and ``layer_weights`` one ``DecoderBlock.fused_weights()`` per decoder block."""

    spec: RecurrenceSpec
    rope: Tensor | None
    e: Tensor
    ge: Tensor
    memory: tuple[Tensor, Tensor] | None
    s0: Tensor
    merge_weights: MergeWeights
    layer_weights: list[BlockWeights]


def blocks_from_flat(flat: tuple[Tensor, ...]) -> list[BlockWeights]:
    """The per-block weights from the flat tuple autograd.Function needs (fields in order)."""
    return [BlockWeights(*flat[i : i + LAYER_WEIGHTS]) for i in range(0, len(flat), LAYER_WEIGHTS)]


class _FusedRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, spec, native, freqs, e, ge, mem_k, mem_v, s0, w_sn, w_sp, *layer_weights):
        t_len, _, d = e.shape
        layers = blocks_from_flat(layer_weights)
        tables = rope_tables(freqs, t_len, d // spec.n_heads, e)
        ops, mops = layout_for(d // spec.n_heads), memory_layout_for(d // spec.n_heads)
        mem_k, mem_v = (None if m is None else mops.store(m) for m in (mem_k, mem_v))
        sv = forward_pass(
            spec, ops, mops, tables, e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers, native
        )
        ctx.ops, ctx.mops, ctx.native = ops, mops, native
        ctx.spec, ctx.sv = spec, sv
        ctx.save_for_backward(e, ge, mem_k, mem_v, s0, w_sn, w_sp, *layer_weights)
        return sv.out.transpose(0, 1)  # (N, T, d)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        e, ge, mem_k, mem_v, s0, w_sn, w_sp, *flat = ctx.saved_tensors
        layers = blocks_from_flat(flat)
        grads = backward_pass(
            ctx.spec,
            ctx.ops,
            ctx.mops,
            ctx.sv,
            grad_out,
            (e, ge, mem_k, mem_v, s0, w_sn, w_sp, layers),
            ctx.native,
        )
        ctx.sv = None
        return (None, None, None, *grads)


def fused_decode(inputs: DecodeInputs, native: bool = False) -> Tensor:
    """Decoder outputs (N, T, d) (see :class:`DecodeInputs`). Under autocast everything runs
    in the autocast dtype (weights cast once, outside the loop). ``native``: run the two token
    loops in C++ (rlt/models/native.py), the same operations without the interpreter.
    """
    spec, rope, e, ge, memory, s0, merge_weights, layer_weights = inputs
    device = e.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
        with torch.autocast(device, enabled=False):
            return fused_decode(
                inputs._replace(
                    e=cast(e),
                    ge=cast(ge),
                    memory=None if memory is None else (cast(memory[0]), cast(memory[1])),
                    s0=cast(s0),
                    merge_weights=MergeWeights(*(cast(w) for w in merge_weights)),
                    layer_weights=[BlockWeights(*(cast(w) for w in b)) for b in layer_weights],
                ),
                native,
            )
    mem_k, mem_v = (None, None) if memory is None else memory
    if native and memory is not None:
        from rlt.models.native import token_loop  # built on first use

        module = token_loop()
    else:  # no memory: the Python loop (the C++ one always attends to a memory)
        module = None
    out = _FusedRecurrence.apply(
        spec,
        module,
        rope,
        e.transpose(0, 1).contiguous(),  # (T, N, d)
        ge.transpose(0, 1).contiguous(),
        mem_k,  # (N, H, T, Dh); stored as memory_layout_for says inside
        mem_v,
        s0.contiguous(),
        *merge_weights,
        *(w for block in layer_weights for w in block),
    )
    return out
