"""The Recurrent Looped Transformer: RLT-1 (B=1), RLT-2 (chunks of B) and RLT-0 (B=infinity).

    tokens -> causal encoder (parallel) -> e_t -> memory K/V (parallel, shared by every layer)
    e_t + state -> gated merge -> u_t -> L_D decoder blocks (SWA + memory) -> s_t -> head

Everything that does not depend on the recurrent state (the encoder, memory K/V, the e_t half
of the gate, the head) runs once over all positions. Only the merge and the decoder blocks
follow the chunk schedule: chunk k covers positions [kB, (k+1)B) (anchored at position 0) and
merges with the last decoder output of chunk k-1; RLT-0 runs the decoder over everything at
once. Streaming (``prefill``/``step``) and inference share ``decode``, so where a prompt ends
never changes the computation. Training RLT-1/RLT-2 runs the same recurrence through
``fused_decode`` (rlt/models/recurrence.py: no autograd graph per token, batched weight
gradients), which the tests hold equal to ``decode`` in outputs and gradients.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import replace

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from rlt.models.base import SequenceModel, check_batch
from rlt.models.blocks import (
    DecoderBlock,
    EncoderBlock,
    Rope,
    RotaryEmbedding,
    causal_mask,
    encoder_stack,
    init_weights,
    rope_for,
    window_mask,
)
from rlt.models.compiled import compiled_decode, padded_length
from rlt.models.config import RLTConfig, _feedback_interval
from rlt.models.merge import GatedMerge
from rlt.models.recurrence import DecodeInputs, RecurrenceSpec, fused_decode
from rlt.models.state import KVCache, RLTState, WindowKV

Memory = tuple[Tensor, Tensor] | None  # memory keys, values: (N, H, T, Dh) each


class RecurrentLoopedTransformer(SequenceModel):
    """RLT of shared/SPEC.md section 1; ``config.feedback_interval`` selects the variant."""

    # Run the eager fused recurrence's two token loops in C++ (rlt/models/native.py): the same
    # numbers, bit for bit; set by the trainer's native option (rlt.training.trainer_setup).
    native_step = False

    def __init__(self, config: RLTConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.encoder = nn.ModuleList(EncoderBlock(config) for _ in range(config.n_enc))
        # No decoder block reads the memory at L_D = 0, so split 8+0 has no projection.
        has_memory = config.n_dec > 0
        self.memory_norm = (
            nn.RMSNorm(d, eps=config.norm_eps) if has_memory and config.enc_final_norm else None
        )
        self.memory = nn.Linear(d, 2 * d, bias=False) if has_memory else None  # [W_k ; W_v], G=1
        has_feedback = config.feedback_interval is not None
        self.merge = GatedMerge(d, config.alpha, config.norm_eps) if has_feedback else None
        self.decoder = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_dec))
        self.norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.head = nn.Linear(d, config.vocab_size, bias=False)  # untied from the embedding
        self.rope = (
            RotaryEmbedding(config.head_dim, config.rope_base)
            if config.pos_encoding == "rope"
            else None
        )
        # Train through the compiled chunk step (rlt/models/compiled.py) instead of the eager
        # fused recurrence; set by the trainer's compile option (rlt.training.compile).
        self.compiled_step = False
        init_weights(self, config.init_std, config.n_enc + config.n_dec)
        if self.merge is not None:
            self.merge.reset_parameters(config.init_std)

    # -- the variant ----------------------------------------------------------------------
    @property
    def feedback_interval(self) -> int | None:
        """B: 1 = RLT-1, k = RLT-2, None = RLT-0. Settable between any B >= 1 (same parameters)."""
        return self.config.feedback_interval

    @feedback_interval.setter
    def feedback_interval(self, value: int | str | None) -> None:
        value = _feedback_interval(value)
        if (value is None) != (self.merge is None):
            built = "RLT-0 (no feedback parameters)" if self.merge is None else "RLT-1/RLT-2"
            raise ValueError(
                f"feedback_interval={value!r} needs a model built for it; this one is {built}"
            )
        self.config = replace(self.config, feedback_interval=value)

    # -- training path --------------------------------------------------------------------
    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (N, T) long -> logits (N, T, V); position t predicts the label at t."""
        e = self.encode(tokens)  # (N, T, d)
        memory = self.memory_kv(e)
        if self._use_fused():
            s = self.fused_decode(e, memory)
        else:
            s, _, _ = self.decode(e, memory, tbptt=self.config.tbptt)  # (N, T, d)
        return self.readout(s)

    def _use_fused(self) -> bool:
        """The fused recurrence pays off when there is a backward to run (training)."""
        c = self.config
        return (
            c.fused
            and self.merge is not None
            and not c.checkpoint_activations
            and torch.is_grad_enabled()
            and any(p.requires_grad for p in self.parameters())
        )

    def fused_decode(self, e: Tensor, memory: Memory) -> Tensor:
        """``decode(e, memory, tbptt=config.tbptt)[0]`` from the initial state, computed by the
        fused recurrence with its hand-written backward (rlt/models/recurrence.py), or with
        ``compiled_step`` set, by the compiled chunk step (rlt/models/compiled.py)."""
        c = self.config
        spec = RecurrenceSpec(
            n_heads=c.n_heads,
            window=c.window,
            interval=c.feedback_interval,
            alpha=c.alpha,
            eps=c.norm_eps,
            tbptt=c.tbptt,
        )
        n, t, _ = e.shape
        if self.compiled_step:
            rope = self._rope(0, padded_length(t, spec.interval), e)
            decode = compiled_decode
        else:
            rope = self._rope(0, t, e)
            decode = functools.partial(fused_decode, native=self.native_step)
        return decode(
            DecodeInputs(
                spec,
                rope,
                e,
                self.merge.gate_input(e),
                memory,
                self.merge.initial_state(n),
                self.merge.fused_weights(),
                [block.fused_weights() for block in self.decoder],
            )
        )

    def encode(self, tokens: Tensor) -> Tensor:
        """The causal encoder over a whole sequence: tokens (N, T) -> e (N, T, d)."""
        rope = self._rope(0, tokens.shape[1], self.embed.weight)
        checkpointed = self.config.checkpoint_activations
        return encoder_stack(self.encoder, self.embed(tokens), rope, checkpointed=checkpointed)

    def memory_kv(self, e: Tensor) -> Memory:
        """Memory keys and values of e (N, T, d), each (N, H, T, Dh); None at L_D = 0."""
        if self.memory is None:
            return None
        n, t, d = e.shape
        h = self.memory_norm(e) if self.memory_norm is not None else e
        kv = self.memory(h).view(n, t, 2, self.config.n_heads, d // self.config.n_heads)
        k, v = kv.permute(2, 0, 3, 1, 4)  # (N, H, T, Dh) each
        return k.contiguous(), v.contiguous()

    def readout(self, s: Tensor) -> Tensor:
        return self.head(self.norm(s))  # (N, T, V)

    def decode(
        self,
        e: Tensor,
        memory: Memory,
        *,
        start: int = 0,
        s: Tensor | None = None,
        window: list[WindowKV] | None = None,
        tbptt: int | None = None,
        window_from: int = 0,
        memory_from: int = 0,
    ) -> tuple[Tensor, Tensor | None, list[WindowKV]]:
        """Merge and decoder over positions [start, start+T) of e (N, T, d).

        ``memory`` covers at least positions 0..start+T-1; ``s`` and ``window`` are the state
        after ``start`` tokens (None = the initial state). With ``tbptt`` the state is detached
        every tbptt tokens. Returns the decoder outputs s_t (N, T, d), the state entering the
        next merge and the SWA caches. ``window_from``/``memory_from``: the positions the window
        and the memory start at (0; later after a state intervention emptied them), so the
        memory holds positions memory_from..start+T-1.
        """
        n, t, _ = e.shape
        window = self.empty_window(n, e) if window is None else window
        if self.merge is not None and s is None:
            s = self.merge.initial_state(n)
        ge = None if self.merge is None else self.merge.gate_input(e)  # (N, T, d), hoisted
        interval = self.feedback_interval
        outputs, last_cut = [], start
        for a, b in self._pieces(start, t):
            if tbptt is not None and a // tbptt > last_cut // tbptt:
                s = None if s is None else s.detach()
                window = [w.detach() for w in window]
                last_cut = a
            lo, hi = a - start, b - start
            u = e[:, lo:hi] if self.merge is None else self.merge(e[:, lo:hi], ge[:, lo:hi], s)
            # The decoder blocks over positions a..b-1, which share one merge state.
            if not self.decoder:
                x = u
            elif self.config.checkpoint_activations and torch.is_grad_enabled():
                x, window = checkpoint(
                    self._decode_blocks,
                    *(u, a, window, memory, window_from, memory_from),
                    use_reentrant=False,
                )
            else:
                x, window = self._decode_blocks(u, a, window, memory, window_from, memory_from)
            if interval is not None and b % interval == 0:
                s = x[:, -1]  # a complete chunk: its last output is the next boundary state
            outputs.append(x)
        return torch.cat(outputs, dim=1), s, window

    def _pieces(self, start: int, length: int) -> Iterator[tuple[int, int]]:
        """[a, b) runs that go through the decoder together: cut at multiples of B."""
        end, interval = start + length, self.feedback_interval
        if interval is None:
            yield start, end
            return
        a = start
        while a < end:
            b = min(end, (a // interval + 1) * interval)
            yield a, b
            a = b

    def _decode_blocks(
        self,
        u: Tensor,
        start: int,
        window: list[WindowKV],
        memory: Memory,
        window_from: int = 0,
        memory_from: int = 0,
    ) -> tuple[Tensor, list[WindowKV]]:
        """The decoder blocks over c positions start..start+c-1 that share one merge state."""
        c, end = u.shape[1], start + u.shape[1]
        rope = self._rope(start, c, u)
        swa_mask = window_mask(start, c, self.config.window, u.device, window_from)
        held = end - memory_from  # memory entries up to this piece's end
        mem_k, mem_v = memory[0][:, :, :held], memory[1][:, :, :held]  # the prefix only
        mem_mask = causal_mask(c, held, u.device)  # (c, held) or None
        x, new_window = u, []
        for block, win in zip(self.decoder, window):
            x, win = block(x, rope, win, mem_k, mem_v, swa_mask, mem_mask)
            new_window.append(win)
        return x, new_window

    def empty_window(self, batch_size: int, like: Tensor) -> list[WindowKV]:
        """W-1 zero slots per decoder layer; masks keep positions before 0 out of attention."""
        c = self.config
        shape = (batch_size, c.n_heads, c.window - 1, c.head_dim)
        return [WindowKV(like.new_zeros(shape), like.new_zeros(shape)) for _ in self.decoder]

    def _rope(self, start: int, length: int, like: Tensor) -> Rope:
        return rope_for(self.rope, start, length, like)

    # -- streaming path -------------------------------------------------------------------
    def init_state(self, batch_size: int) -> RLTState:
        """H_0 = (s*, empty caches) for ``batch_size`` independent sequences."""
        c, like = self.config, self.head.weight
        empty = KVCache.empty(batch_size, c.n_heads, c.head_dim, like)
        return RLTState(
            position=0,
            encoder=[empty for _ in self.encoder],
            memory=empty if self.memory is not None else None,
            window=self.empty_window(batch_size, like),
            s=None if self.merge is None else self.merge.initial_state(batch_size),
        )

    def prefill(self, tokens: Tensor, state: RLTState) -> tuple[Tensor, RLTState]:
        """Consume known tokens (N, t) after ``state``: logits (N, t, V) and the new state.

        The same transition as ``forward``: prefill(x[:, :p]) then step over the rest gives
        forward(x)'s logits, for every p.
        """
        check_batch(tokens, state)
        n, t = tokens.shape
        if t == 0:
            return self.head.weight.new_zeros(n, 0, self.config.vocab_size), state
        p = state.position
        x = self.embed(tokens)  # (N, t, d)
        rope = self._rope(p, t, self.embed.weight)
        encoder = []
        for block, cache in zip(self.encoder, state.encoder):
            x, cache = block(x, rope, cache)
            encoder.append(cache)
        memory, memory_kv = state.memory, None
        if memory is not None:
            memory = memory.append(*self.memory_kv(x))
            memory_kv = memory.keys_values()  # (N, H, p+t, Dh) each
        out, s, window = self.decode(
            x,
            memory_kv,
            start=p,
            s=state.s,
            window=state.window,
            window_from=state.window_from,
            memory_from=state.memory_from,
        )
        if t > 1:  # views into this call's outputs would pin all t positions
            window = [w.compact() for w in window]
            s = None if s is None else s.clone()
        state = replace(state, position=p + t, encoder=encoder, memory=memory, window=window, s=s)
        return self.readout(out), state

    def step(self, token: Tensor, state: RLTState) -> tuple[Tensor, RLTState]:
        """One token per row: token (N,) -> next-token logits (N, V) and the new state."""
        logits, state = self.prefill(token[:, None], state)
        return logits[:, 0], state
