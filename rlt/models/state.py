"""The streaming state: everything the next token needs, as named dataclasses of tensors.

All rows of a batch share one position (prompts of a batch are the same length).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values of every past position of one causal attention layer.

    Grows with the sequence (a causal layer attends to all of it). Without autograd, new
    entries are written in place into a buffer whose capacity doubles, so streaming T tokens
    copies O(T) entries, not O(T^2). Appending returns a new KVCache over the same buffer, and
    the old one stays valid: caches over one buffer share ``tip`` (how far it is written), so a
    second append to an older cache (a prompt's state reused for another continuation) finds
    the buffer written past it and copies its entries into a buffer of its own first (copy on
    write), never overwriting the other continuation's. Under autograd, appends concatenate
    instead, because in-place writes would invalidate the slices attention saved for backward.
    """

    k: Tensor  # (N, H, capacity, Dh)
    v: Tensor  # (N, H, capacity, Dh)
    length: int = 0
    # How far the buffer is written, shared by every cache over it (None: only this one).
    tip: list[int] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def empty(cls, batch: int, heads: int, head_dim: int, like: Tensor) -> KVCache:
        shape = (batch, heads, 0, head_dim)
        return cls(like.new_zeros(shape), like.new_zeros(shape), 0)

    def append(self, k: Tensor, v: Tensor) -> KVCache:
        """Add (N, H, c, Dh) keys and values after the current ``length`` entries."""
        end = self.length + k.shape[2]
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad or self.k.requires_grad):
            keys = torch.cat([self.k[:, :, : self.length], k], dim=2)  # (N, H, end, Dh)
            values = torch.cat([self.v[:, :, : self.length], v], dim=2)
            return KVCache(keys, values, end)
        if self.tip is None:  # the first append over this buffer: the caches it makes share it
            self.tip = [self.length]
        keys, values, tip = self.k, self.v, self.tip
        if end > keys.shape[2] or tip[0] != self.length:  # full, or written past this cache
            # Another continuation's entries stay; the copy keeps the capacity (and so the
            # buffer layout) a cache that was never branched would have.
            capacity = max(end, 2 * keys.shape[2], 16) if end > keys.shape[2] else keys.shape[2]
            n, h, _, dh = keys.shape
            keys, values = keys.new_zeros(n, h, capacity, dh), values.new_zeros(n, h, capacity, dh)
            keys[:, :, : self.length] = self.k[:, :, : self.length]
            values[:, :, : self.length] = self.v[:, :, : self.length]
            tip = [self.length]
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        tip[0] = end
        return KVCache(keys, values, end, tip)

    def keys_values(self) -> tuple[Tensor, Tensor]:
        return self.k[:, :, : self.length], self.v[:, :, : self.length]  # (N, H, L, Dh) each

    def nbytes(self) -> int:
        """Bytes of the filled entries (the buffer may hold up to twice as many)."""
        n, h, _, dh = self.k.shape
        return 2 * n * h * self.length * dh * self.k.element_size()

    def clone(self) -> KVCache:
        """An independent copy with the same spare capacity (appends stay in place)."""
        return KVCache(self.k.clone(), self.v.clone(), self.length)


@dataclass
class WindowKV:
    """One decoder layer's SWA cache: keys (RoPE applied) and values of the last W-1 positions,
    oldest first. Fixed size: zeros stand in for positions before 0 and are masked out."""

    k: Tensor  # (N, H, W-1, Dh)
    v: Tensor  # (N, H, W-1, Dh)

    def detach(self) -> WindowKV:
        return WindowKV(self.k.detach(), self.v.detach())

    def compact(self) -> WindowKV:
        """Own storage of exactly W-1 entries (a slice of a longer prefill would pin it)."""
        return WindowKV(self.k.clone(), self.v.clone())

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()


@dataclass
class RLTState:
    """H_t of an RLT plus the encoder's streaming caches, after ``position`` tokens.

    ``s`` is the decoder output the next position merges with: s_{t-1} for RLT-1, the last
    output of the last complete chunk for RLT-2 (a partial chunk keeps it), s* before any
    token; None for RLT-0, which has no feedback. It is never reset at a prompt/response
    boundary: prompt and response tokens follow the same transition.
    """

    position: int  # tokens consumed so far; chunks of RLT-2 are anchored at position 0
    encoder: list[KVCache]  # one per encoder block (grows: the encoder is causal, not windowed)
    memory: KVCache | None  # the shared memory K/V of e_1..e_t; None without decoder blocks
    window: list[WindowKV]  # one per decoder block, at most W-1 entries each (bounded)
    s: Tensor | None = None  # (N, d) recurrent state entering the next merge
    # The positions the window and the memory start at: 0, or where a state intervention
    # (rlt.models.intervene) emptied them; the model never sets them itself.
    window_from: int = 0
    memory_from: int = 0

    # The parts a state intervention (rlt.models.intervene) can put back to the initial state.
    PARTS: ClassVar[tuple[str, ...]] = ("feedback", "window", "memory")

    @property
    def batch_size(self) -> int:
        return (self.encoder[0] if self.encoder else self.window[0]).k.shape[0]

    def dropped(self, parts: tuple[str, ...], fresh: RLTState) -> RLTState:
        """A copy with ``parts`` taken from ``fresh`` (the initial state), at the same position:
        the fed-back s_t back to s* (RLT-0 has none: no change), the windows emptied and the
        encoder caches and memory restarted from here."""
        changes: dict = {}
        if "feedback" in parts and self.s is not None:
            changes["s"] = fresh.s
        if "window" in parts:  # empty from here: its zero slots are masked, as before position 0
            changes["window"], changes["window_from"] = fresh.window, self.position
        if "memory" in parts:  # the memory then holds the positions from here on
            changes["encoder"], changes["memory"] = fresh.encoder, fresh.memory
            changes["memory_from"] = self.position
        return replace(self, **changes)

    def clone(self) -> RLTState:
        return RLTState(
            position=self.position,
            encoder=[c.clone() for c in self.encoder],
            memory=None if self.memory is None else self.memory.clone(),
            window=[w.compact() for w in self.window],
            s=None if self.s is None else self.s.clone(),
            window_from=self.window_from,
            memory_from=self.memory_from,
        )

    def nbytes(self) -> int:
        """Bytes held for the whole batch (divide by the batch size for one sequence)."""
        return self.encoder_nbytes() + self.recurrent_nbytes()

    def encoder_nbytes(self) -> int:
        """Encoder caches and memory: grow linearly with the position."""
        total = sum(c.nbytes() for c in self.encoder)
        return total + (0 if self.memory is None else self.memory.nbytes())

    def recurrent_nbytes(self) -> int:
        """s and the SWA caches: the decoder state H_t, constant in the position."""
        total = sum(w.nbytes() for w in self.window)
        return total + (0 if self.s is None else self.s.numel() * self.s.element_size())


class LayersMemory:
    """A state whose one part, ``memory``, is its ``layers`` (KV caches, matrix states, ...):
    a state intervention puts them all back to the initial state."""

    PARTS: ClassVar[tuple[str, ...]] = ("memory",)

    def dropped(self, parts: tuple[str, ...], fresh):
        return replace(self, layers=fresh.layers) if "memory" in parts else self


@dataclass
class TransformerState(LayersMemory):
    """The baseline's KV caches after ``position`` tokens."""

    position: int
    layers: list[KVCache] = field(default_factory=list)  # one per block

    @property
    def batch_size(self) -> int:
        return self.layers[0].k.shape[0]

    def clone(self) -> TransformerState:
        return TransformerState(self.position, [c.clone() for c in self.layers])

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.layers)


@dataclass
class LSTMState:
    """The LSTM control's state after ``position`` tokens: h and c, (n_layers, N, d) each."""

    position: int
    h: Tensor
    c: Tensor

    PARTS: ClassVar[tuple[str, ...]] = ("memory",)

    def dropped(self, parts: tuple[str, ...], fresh: LSTMState) -> LSTMState:
        return replace(self, h=fresh.h, c=fresh.c) if "memory" in parts else self

    @property
    def batch_size(self) -> int:
        return self.h.shape[1]

    def clone(self) -> LSTMState:
        return LSTMState(self.position, self.h.clone(), self.c.clone())

    def nbytes(self) -> int:
        return (self.h.numel() + self.c.numel()) * self.h.element_size()
