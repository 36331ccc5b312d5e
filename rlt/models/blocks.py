"""Building blocks shared by the RLT family and the Transformer baseline.

Pre-norm blocks with RMSNorm, bias-free linears, SwiGLU FFN and RoPE (shared/SPEC.md section 1).
Attention runs on explicit key/value tensors and boolean masks (True = may attend), so one
block serves the parallel training path, chunked RLT-2 and one-token streaming alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from rlt.models.config import _CommonConfig
from rlt.models.state import KVCache, WindowKV

Rope = Tensor | None  # complex rotations (T, Dh/2) for a run of positions


class RotaryEmbedding(nn.Module):
    """RoPE rotations for absolute positions, grown on demand.

    Dimensions (2i, 2i+1) form a pair rotated by angle pos * base^(-2i/Dh), applied as one
    complex multiplication. Training and streaming read the same table rows, so both see
    bit-identical rotations.
    """

    def __init__(self, head_dim: int, base: float) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.base = base
        self._tables: dict[tuple[torch.dtype, torch.device], Tensor] = {}

    def forward(
        self, start: int, length: int, device: torch.device, dtype: torch.dtype = torch.complex64
    ) -> Tensor:
        end = start + length
        table = self._tables.get((dtype, device))
        if table is None or table.shape[0] < end:
            size = max(64, 1 << (end - 1).bit_length())
            # Normal tensors even when first called under inference_mode: training reuses them.
            with torch.inference_mode(False), torch.no_grad():
                # Computed in float64 on the CPU (explicitly: never the process's default
                # device), then moved once to where the activations live.
                f64 = dict(dtype=torch.float64, device="cpu")
                exponent = torch.arange(0, self.head_dim, 2, **f64) / self.head_dim
                angles = torch.outer(torch.arange(size, **f64), self.base**-exponent)
                table = torch.polar(torch.ones_like(angles), angles).to(device=device, dtype=dtype)
            self._tables[(dtype, device)] = table  # (size, Dh/2)
        return table[start:end]


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    """The complex dtype RoPE computes in for activations of ``dtype`` (at least complex64)."""
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def apply_rope(x: Tensor, rope: Rope) -> Tensor:
    """Rotate (N, H, T, Dh) queries or keys by their positions' rotations (T, Dh/2)."""
    if rope is None:
        return x
    pairs = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    pairs = torch.view_as_complex(pairs.reshape(*x.shape[:-1], -1, 2))  # (N, H, T, Dh/2)
    return torch.view_as_real(pairs * rope).flatten(-2).to(x.dtype)


def causal_mask(queries: int, keys: int, device: torch.device) -> Tensor | None:
    """The last ``queries`` of ``keys`` positions, each seeing itself and everything before.

    None when one query sees every key (the common streaming case: no mask needed).
    """
    if queries == 1:
        return None
    q_pos = torch.arange(keys - queries, keys, device=device)  # (c,)
    return torch.arange(keys, device=device)[None, :] <= q_pos[:, None]  # (c, L)


def window_mask(
    start: int, queries: int, window: int, device: torch.device, origin: int = 0
) -> Tensor | None:
    """SWA mask over [W-1 cached slots ; the chunk's own keys] for positions start..start+c-1.

    Slot j holds position start-(W-1)+j; a query sees keys at most W-1 back, never before
    ``origin`` (0, or where a state intervention emptied the window: rlt.models.intervene).
    None when the single query sees all W slots (every step after the first W-1 tokens).
    """
    if queries == 1 and start - origin >= window - 1:
        return None
    k_pos = torch.arange(start - window + 1, start + queries, device=device)  # (W-1+c,)
    q_pos = torch.arange(start, start + queries, device=device)  # (c,)
    back = q_pos[:, None] - k_pos[None, :]  # (c, W-1+c)
    return (k_pos[None, :] >= origin) & (back >= 0) & (back < window)


class SwiGLU(nn.Module):
    """``W2(silu(W1 x) * W3 x)``, with W1 and W3 fused into one projection."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w13 = nn.Linear(d_model, 2 * d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.w2.is_residual = True

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.w13(x).chunk(2, dim=-1)  # (..., d_ff) each
        return self.w2(F.silu(a) * b)


class MixingBlock(nn.Module):
    """Pre-norm: x + mix(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)), where ``layer(config)`` is
    the token mixing and carries a state (the linear-RNN baselines: DeltaNet, DeltaProduct,
    PD-SSM)."""

    def __init__(self, config, layer: type[nn.Module]) -> None:
        super().__init__()
        self.mix_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mix = layer(config)
        self.ffn_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.ffn = SwiGLU(config.d_model, config.d_ff)

    def forward(self, x: Tensor, state):
        y, state = self.mix(self.mix_norm(x), state)
        x = x + y
        return x + self.ffn(self.ffn_norm(x)), state


class SelfAttention(nn.Module):
    """Fused QKV projection and output projection; the attention itself is up to the block."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.out.is_residual = True

    def project(self, x: Tensor, rope: Rope) -> tuple[Tensor, Tensor, Tensor]:
        n, t, d = x.shape
        qkv = self.qkv(x).view(n, t, 3, self.n_heads, d // self.n_heads)  # (N, T, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # (N, H, T, Dh) each
        return apply_rope(q, rope), apply_rope(k, rope), v


class CrossAttention(nn.Module):
    """A decoder layer's own query and output projections over the shared memory K/V."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.out.is_residual = True

    def forward(self, x: Tensor, mem_k: Tensor, mem_v: Tensor, mask: Tensor | None) -> Tensor:
        n, t, d = x.shape
        q = self.q(x).view(n, t, self.n_heads, d // self.n_heads).transpose(1, 2)  # (N, H, T, Dh)
        a = F.scaled_dot_product_attention(q, mem_k, mem_v, attn_mask=mask)  # (N, H, T, Dh)
        return self.out(merge_heads(a))


def merge_heads(a: Tensor) -> Tensor:
    n, h, t, dh = a.shape
    return a.transpose(1, 2).reshape(n, t, h * dh)  # (N, T, d)


class EncoderBlock(nn.Module):
    """Causal pre-norm block: the RLT encoder's and the Transformer baseline's."""

    def __init__(self, config: _CommonConfig) -> None:
        super().__init__()
        d = config.d_model
        self.attn_norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.attn = SelfAttention(d, config.n_heads)
        self.ffn_norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.ffn = SwiGLU(d, config.d_ff)

    def forward(
        self, x: Tensor, rope: Rope, cache: KVCache | None = None
    ) -> tuple[Tensor, KVCache | None]:
        """x (N, T, d). Without a cache x is the whole sequence; with one, x continues it."""
        q, k, v = self.attn.project(self.attn_norm(x), rope)  # (N, H, T, Dh)
        if cache is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (N, H, T, Dh)
        else:
            cache = cache.append(k, v)
            keys, values = cache.keys_values()  # (N, H, L, Dh)
            mask = causal_mask(x.shape[1], keys.shape[2], x.device)
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        x = x + self.attn.out(merge_heads(a))
        x = x + self.ffn(self.ffn_norm(x))
        return x, cache


def encoder_stack(
    blocks: Iterable[nn.Module], x: Tensor, rope: Rope, *, checkpointed: bool = False
) -> Tensor:
    """x (N, T, d) through a stack of EncoderBlocks over a whole sequence (no cache): the RLT
    encoder and the Transformer. ``checkpointed`` recomputes each block's activations in the
    backward (only while gradients are on)."""
    for block in blocks:
        if checkpointed and torch.is_grad_enabled():
            x, _ = checkpoint(block, x, rope, use_reentrant=False)
        else:
            x, _ = block(x, rope)
    return x


def rope_for(rope: RotaryEmbedding | None, start: int, length: int, like: Tensor) -> Rope:
    """The rotary tables of positions start .. start+length-1 (None without RoPE), on the
    device and in the complex dtype matching ``like``."""
    if rope is None:
        return None
    return rope(start, length, like.device, complex_dtype(like.dtype))


class BlockWeights(NamedTuple):
    """One decoder block's weights as the fused recurrence takes them (rlt/models/recurrence.py),
    in (out, in) layout: norm weights, then projections."""

    attn_norm: Tensor  # (d,)
    qkv: Tensor  # (3d, d)
    attn_out: Tensor  # (d, d)
    cross_norm: Tensor  # (d,)
    cross_q: Tensor  # (d, d)
    cross_out: Tensor  # (d, d)
    ffn_norm: Tensor  # (d,)
    w13: Tensor  # (2f, d): W1 and W3 of SwiGLU stacked
    w2: Tensor  # (d, f)


class DecoderBlock(nn.Module):
    """RLT decoder block: SWA over its own window cache, memory cross-attention, FFN.

    Mirrored by hand: RLT-1/RLT-2 train through the fused recurrence in
    rlt/models/recurrence.py (its own forward and hand-written backward of this block, fed by
    :meth:`fused_weights`) or the compiled step in rlt/models/compiled.py. A change here (a
    new sublayer, norm, bias or activation) must be made there too;
    tests/models/test_model_fused.py and test_model_compiled.py hold them equal (outputs and
    every gradient) and fail when they diverge.
    """

    def __init__(self, config: _CommonConfig) -> None:
        super().__init__()
        d = config.d_model
        self.attn_norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.attn = SelfAttention(d, config.n_heads)
        self.cross_norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.cross = CrossAttention(d, config.n_heads)
        self.ffn_norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.ffn = SwiGLU(d, config.d_ff)

    def fused_weights(self) -> BlockWeights:
        """This block's weights for the fused recurrence (see the class docstring)."""
        return BlockWeights(
            attn_norm=self.attn_norm.weight,
            qkv=self.attn.qkv.weight,
            attn_out=self.attn.out.weight,
            cross_norm=self.cross_norm.weight,
            cross_q=self.cross.q.weight,
            cross_out=self.cross.out.weight,
            ffn_norm=self.ffn_norm.weight,
            w13=self.ffn.w13.weight,
            w2=self.ffn.w2.weight,
        )

    def forward(
        self,
        x: Tensor,
        rope: Rope,
        window: WindowKV,
        mem_k: Tensor,
        mem_v: Tensor,
        swa_mask: Tensor | None,
        mem_mask: Tensor | None,
    ) -> tuple[Tensor, WindowKV]:
        """x (N, c, d): c consecutive positions; window holds the W-1 positions before them.

        mem_k/mem_v (N, H, p+c, Dh) are the memory up to the chunk's last position; the masks
        restrict each position to its own window and memory prefix. Returns the output and
        the window for the next chunk (the last W-1 keys/values, chunk included).
        """
        q, k, v = self.attn.project(self.attn_norm(x), rope)  # (N, H, c, Dh)
        keys = torch.cat([window.k, k], dim=2)  # (N, H, W-1+c, Dh)
        values = torch.cat([window.v, v], dim=2)
        a = F.scaled_dot_product_attention(q, keys, values, attn_mask=swa_mask)
        x = x + self.attn.out(merge_heads(a))
        x = x + self.cross(self.cross_norm(x), mem_k, mem_v, mem_mask)
        x = x + self.ffn(self.ffn_norm(x))
        keep = window.k.shape[2]
        return x, WindowKV(
            keys[:, :, keys.shape[2] - keep :], values[:, :, values.shape[2] - keep :]
        )


def init_weights(model: nn.Module, std: float, n_blocks: int) -> None:
    """Normal(0, std) for linears and embeddings; residual output projections (marked
    ``is_residual``) get std / sqrt(2 * n_blocks) so the residual stream starts near unit scale.
    Biases start at zero, norms at one."""
    residual_std = std / math.sqrt(2 * max(1, n_blocks))
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(
                module.weight, std=residual_std if getattr(module, "is_residual", False) else std
            )
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)
