"""The compiled decoder recurrence: RLT-1/RLT-2 training, a few chunks per compiled call.

The eager fused recurrence (rlt/models/recurrence.py) pays per-op dispatch for every token:
dozens of small kernels per decoder block, microseconds each on 64-wide data, and on a GPU
one launch each. Here a group of chunks of the recurrence (about UNROLL positions: the gated
merge and every decoder block, chunk after chunk) is a pure function of fixed-shape tensors, compiled once by
``torch.compile`` (inductor: generated C++ on the CPU, Triton and CUDA graphs on a GPU);
autograd chains the groups and runs each group's compiled backward. The eager fused path
stays the reference for speed and the fallback (no compiler); ``trainer.compile`` chooses
(rlt.training.trainer_setup.resolve_compile). Semantics are those of
``RecurrentLoopedTransformer.decode`` from the initial state (chunks of B anchored at 0, TBPTT
cuts, the SWA caches); tests/models/test_model_compiled.py holds outputs and every gradient
equal to it.

Fixed shapes, so that one compiled graph serves every chunk of every step:

- RoPE as real-valued rotations (cos, sin tables: complex tensors do not lower);
- the SWA cache as a (W-1)-slot tensor per layer, updated functionally;
- the memory attention over all of the (padded) memory with an additive mask, instead of
  the growing prefix 0..b-1 (more arithmetic over masked keys: at most the training length);
- TBPTT cuts as flags: ``where(cut, x.detach(), x)`` passes the same values and no gradient;
- the sequence padded to a multiple of ``BUCKET`` positions (and of a group): the padded
  positions come after every real one, so causality keeps them out of every real output, and
  their outputs are dropped. A new bucket or batch size compiles one more graph.
"""

from __future__ import annotations

import functools
import math
import os
import shutil

import torch
import torch.nn.functional as F
from torch import Tensor

from rlt.models.blocks import BlockWeights
from rlt.models.recurrence import DecodeInputs, blocks_from_flat

# Sequence lengths are padded up to a multiple of this (and of a group): one graph per bucket.
BUCKET = 16

# Positions per compiled call (UNROLL // B chunks, at least one): the call's fixed cost
# (guards, autograd node, wrapper: a few hundred microseconds on the CPU) is shared by them;
# compile time grows with it. Measured at the laptop shape (BENCHMARKS.md): RLT-1 with 4
# chunks per call 25 ms/step, with 1 chunk 30+; RLT-2 B=4 with 4 chunks (16 positions) per
# call was slower than eager (padding to whole groups).
UNROLL = 4


def chunks_per_call(interval: int) -> int:
    """Chunks of B positions that one compiled call runs: about UNROLL positions."""
    return max(1, UNROLL // interval)


# Compiles whose guards dynamo may keep per step function before it falls back to eager
# (its default is 8): buckets x batch sizes x devices of one process.
_RECOMPILE_LIMIT = 32


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (2i, 2i+1) of x (N, H, c, Dh) by angles with cos, sin (c, Dh/2)."""
    x0, x1 = x.unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(Dh) + bias) v for q (N, H, c, Dh), k, v (N, H, L, Dh), bias (c, L)."""
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + bias
    return torch.softmax(scores, dim=-1) @ v


def _chunk(
    x: Tensor,
    caches: tuple[Tensor, Tensor],
    memory: tuple[Tensor, Tensor],
    biases: tuple[Tensor, Tensor],
    rotation: tuple[Tensor, Tensor],
    layers: list[BlockWeights],
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Every decoder block over one chunk's merged input x (N, c, d), with the window caches
    K/V, the memory K/V, the SWA and memory biases and the RoPE cos/sin of the chunk; returns
    the output and the caches for the next chunk."""
    (cache_k, cache_v), (mem_k, mem_v), (swa_bias, mem_bias), (cos, sin) = (
        caches,
        memory,
        biases,
        rotation,
    )
    n, c, d = x.shape
    h, dh = mem_k.shape[1], mem_k.shape[3]
    keep = cache_k.shape[3]
    new_k, new_v = [], []
    for li, lw in enumerate(layers):
        qkv = (_rms(x, lw.attn_norm, eps) @ lw.qkv.T).view(n, c, 3, h, dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # (N, H, c, Dh) each
        keys = torch.cat([cache_k[li], _rotate(k, cos, sin)], dim=2)  # (N, H, W-1+c, Dh)
        values = torch.cat([cache_v[li], v], dim=2)
        a = _attend(_rotate(q, cos, sin), keys, values, swa_bias)
        x = x + a.transpose(1, 2).reshape(n, c, d) @ lw.attn_out.T
        qc = (_rms(x, lw.cross_norm, eps) @ lw.cross_q.T).view(n, c, h, dh).transpose(1, 2)
        a = _attend(qc, mem_k, mem_v, mem_bias)
        x = x + a.transpose(1, 2).reshape(n, c, d) @ lw.cross_out.T
        z1, z3 = (_rms(x, lw.ffn_norm, eps) @ lw.w13.T).chunk(2, dim=-1)
        x = x + (F.silu(z1) * z3) @ lw.w2.T
        new_k.append(keys[:, :, keys.shape[2] - keep :])
        new_v.append(values[:, :, values.shape[2] - keep :])
    if not new_k:
        return x, cache_k, cache_v
    return x, torch.stack(new_k), torch.stack(new_v)


def chunk_group(
    e: Tensor,
    ge: Tensor,
    s: Tensor,
    cache_k: Tensor,
    cache_v: Tensor,
    mem_k: Tensor,
    mem_v: Tensor,
    swa_bias: Tensor,
    mem_bias: Tensor,
    cos: Tensor,
    sin: Tensor,
    cut: Tensor | None,
    w_sn: Tensor,
    w_sp: Tensor,
    *layer_weights: Tensor,
    alpha: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """U consecutive chunks of c positions each: merge with the state, every decoder block,
    the next state; one compiled call (its per-call overhead shared by U chunks).

    e, ge (N, U*c, d); s (N, d); cache_k/v (L, N, H, W-1, Dh): the W-1 positions before the
    group; mem_k/v (N, H, Tp, Dh); swa_bias (U, c, W-1+c) and mem_bias (U, c, Tp): 0 where a
    query may attend, -inf elsewhere; cos, sin (U*c, Dh/2); cut (U,) bool: a TBPTT cut at the
    chunk's start (the state and caches entering it pass no gradient back), None for a group
    without cuts (the common case: a second graph, without the per-chunk selects). Returns the
    outputs (N, U*c, d), the caches and the state after the group.
    """
    n_chunks, c = swa_bias.shape[0], swa_bias.shape[1]
    layers = blocks_from_flat(layer_weights)
    outputs = []
    for u in range(n_chunks):
        if cut is not None:  # detach where cut: same values, no gradient into what came before
            s = torch.where(cut[u], s.detach(), s)
            cache_k = torch.where(cut[u], cache_k.detach(), cache_k)
            cache_v = torch.where(cut[u], cache_v.detach(), cache_v)
        part = slice(u * c, (u + 1) * c)
        gs, ws = (_rms(s, w_sn, eps) @ w_sp.T).chunk(2, dim=-1)  # (N, d) each
        x = e[:, part] + alpha * torch.sigmoid(ge[:, part] + gs[:, None]) * ws[:, None]
        x, cache_k, cache_v = _chunk(
            x,
            (cache_k, cache_v),
            (mem_k, mem_v),
            (swa_bias[u], mem_bias[u]),
            (cos[part], sin[part]),
            layers,
            eps,
        )
        outputs.append(x)
        s = x[:, -1]  # chunks are all complete here (padded to a multiple of B)
    return torch.cat(outputs, dim=1), cache_k, cache_v, s


def compiler_available(device: torch.device | str) -> tuple[bool, str]:
    """Whether torch.compile can generate code here, and why not: a C++ compiler on the CPU,
    Triton on CUDA, neither elsewhere (MPS, Windows)."""
    kind = torch.device(device).type
    if not hasattr(torch, "compile"):
        return False, "this PyTorch has no torch.compile"
    if kind == "cpu":
        if not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
            return False, "no C++ compiler (g++, c++ or clang++) on PATH"
        return True, "C++ compiler found"
    if kind == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return False, "Triton is not installed"
        return True, "Triton found"
    return False, f"no compiled step for device type {kind!r}"


def host_vector_width_for_inductor() -> None:
    """Let inductor's C++ code use the host's widest vector ISA even where portable arithmetic
    (rlt/portable/) sets ``ATEN_CPU_CAPABILITY=avx2``: inductor reads that variable too, and
    its AVX2 code for this model gives NaN with torch 2.13 on an AVX-512 host
    (tests/models/test_model_compiled.py). So compiled CPU code (``trainer.compile=on``, not the
    default on CPU) keeps the host's own arithmetic; portable arithmetic covers the eager path
    and the C++ token loop (docs/REPRODUCIBILITY.md)."""
    if not os.environ.get("ATEN_CPU_CAPABILITY"):
        return
    from torch._inductor import config, cpu_vec_isa

    widths = [isa.bit_width() for isa in cpu_vec_isa.valid_vec_isa_list()]
    if widths and config.cpp.simdlen is None:
        config.cpp.simdlen = max(widths)


@functools.cache
def compiled_step(device_type: str):
    """The compiled chunk step for one device type (made once per process).

    CUDA uses inductor's reduce-overhead mode: each chunk replays a CUDA graph (one launch
    instead of one per op)."""
    torch._dynamo.config.cache_size_limit = max(
        torch._dynamo.config.cache_size_limit, _RECOMPILE_LIMIT
    )
    if device_type == "cuda":
        return torch.compile(chunk_group, fullgraph=True, dynamic=False, mode="reduce-overhead")
    host_vector_width_for_inductor()
    return torch.compile(chunk_group, fullgraph=True, dynamic=False)


@functools.lru_cache(maxsize=64)
def _constants(
    b_len: int,
    w: int,
    tbptt: int | None,
    padded: int,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], tuple[Tensor | None, ...]]:
    """Per group of ``chunks_per_call(b_len)`` chunks of ``b_len``: the additive SWA masks over [W-1 cache slots ;
    own keys] (U, c, W-1+c), the memory masks over all ``padded`` positions (U, c, Tp) (0 =
    may attend, -inf = may not; positions before 0 masked) and the TBPTT cut flags (U,) or None
    where a group has none, as
    in ``RecurrentLoopedTransformer.decode``: a cut where a chunk start a crosses a multiple
    of tbptt. Made once per shape: they never change and nothing writes to them."""
    q = torch.arange(padded, device=device)
    inf = torch.tensor(float("-inf"), dtype=dtype, device=device)
    zero = torch.zeros((), dtype=dtype, device=device)
    mem = torch.where(q[None, :] <= q[:, None], zero, inf)  # (Tp, Tp)
    swa, memory, cuts, last_cut = [], [], [], 0
    for a in range(0, padded, b_len):
        qa = q[a : a + b_len]
        k_pos = torch.arange(a - w + 1, a + b_len, device=device)  # (W-1+c,)
        back = qa[:, None] - k_pos[None, :]
        ok = (k_pos[None, :] >= 0) & (back >= 0) & (back < w)
        swa.append(torch.where(ok, zero, inf))
        memory.append(mem[a : a + b_len])
        cut = tbptt is not None and a // tbptt > last_cut // tbptt
        last_cut = a if cut else last_cut
        cuts.append(cut)
    u = chunks_per_call(b_len)
    per_group = range(0, len(swa), u)
    return (
        tuple(torch.stack(swa[i : i + u]) for i in per_group),
        tuple(torch.stack(memory[i : i + u]) for i in per_group),
        tuple(
            torch.tensor(cuts[i : i + u], device=device) if any(cuts[i : i + u]) else None
            for i in per_group
        ),
    )


def padded_length(length: int, interval: int) -> int:
    """The compiled length for a sequence of ``length``: a multiple of BUCKET and of a group
    (``chunks_per_call(B)`` chunks of B)."""
    quantum = math.lcm(BUCKET, interval * chunks_per_call(interval))
    return -(-length // quantum) * quantum


@torch.compiler.disable  # a whole-model torch.compile leaves the chunk loop to this module
def compiled_decode(inputs: DecodeInputs) -> Tensor:
    """Decoder outputs (N, T, d), as ``fused_decode`` computes them; ``inputs.rope`` holds the
    complex rotations of at least ``padded_length(T, B)`` positions (None: no RoPE)."""
    spec, rope, e, ge, memory, s0, merge_weights, layer_weights = inputs
    n, t_len, d = e.shape
    b_len, n_layers = spec.interval, len(layer_weights)
    h = spec.n_heads
    dh = d // h
    padded = padded_length(t_len, b_len)
    group = b_len * chunks_per_call(b_len)  # positions per compiled call
    pad = padded - t_len
    if pad:
        e, ge = F.pad(e, (0, 0, 0, pad)), F.pad(ge, (0, 0, 0, pad))
    if memory is None:  # no decoder blocks: the memory is never read
        mem_k = mem_v = e.new_zeros(n, h, padded, dh)
    else:
        mem_k, mem_v = (F.pad(m, (0, 0, 0, pad)) for m in memory)
    if rope is None:
        cos, sin = e.new_ones(padded, dh // 2), e.new_zeros(padded, dh // 2)
    else:
        cos, sin = rope[:padded].real.to(e.dtype), rope[:padded].imag.to(e.dtype)
    swa_bias, mem_bias, cuts = _constants(b_len, spec.window, spec.tbptt, padded, e.dtype, e.device)
    # contiguous per-group inputs: views at growing offsets would make the compiled call
    # copy (or guard on) misaligned inputs
    e_g = [x.contiguous() for x in e.split(group, dim=1)]
    ge_g = [x.contiguous() for x in ge.split(group, dim=1)]
    cos_g = [x.contiguous() for x in cos.split(group)]
    sin_g = [x.contiguous() for x in sin.split(group)]
    weights = [w for block in layer_weights for w in block]
    cache_k = cache_v = e.new_zeros(max(n_layers, 1), n, h, spec.window - 1, dh)
    step = compiled_step(e.device.type)
    if e.device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()
    # contiguous: the first state (s* expanded) would otherwise compile a second graph
    s, outputs = s0.contiguous(), []
    for gi in range(-(-t_len // group)):  # groups of padding only are skipped
        x, cache_k, cache_v, s = step(
            e_g[gi],
            ge_g[gi],
            s,
            cache_k,
            cache_v,
            mem_k,
            mem_v,
            swa_bias[gi],
            mem_bias[gi],
            cos_g[gi],
            sin_g[gi],
            cuts[gi],
            *merge_weights,
            *weights,
            alpha=spec.alpha,
            eps=spec.eps,
        )
        outputs.append(x)
        s = s.contiguous()  # whatever layout the graph returned it in: one graph per shape
    return torch.cat(outputs, dim=1)[:, :t_len]
