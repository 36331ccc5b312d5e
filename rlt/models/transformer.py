"""The decoder-only Transformer baseline: N causal blocks, final RMSNorm, untied head."""

from __future__ import annotations

from torch import Tensor, nn

from rlt.models.base import SequenceModel, check_batch
from rlt.models.blocks import (
    EncoderBlock,
    Rope,
    RotaryEmbedding,
    encoder_stack,
    init_weights,
    rope_for,
)
from rlt.models.config import TransformerConfig
from rlt.models.state import KVCache, TransformerState


class DecoderOnlyTransformer(SequenceModel):
    """Transformer N of the report: the same blocks as the RLT encoder, width, FFN and heads."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.blocks = nn.ModuleList(EncoderBlock(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.head = nn.Linear(d, config.vocab_size, bias=False)
        self.rope = (
            RotaryEmbedding(config.head_dim, config.rope_base)
            if config.pos_encoding == "rope"
            else None
        )
        init_weights(self, config.init_std, config.n_layers)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (N, T) long -> logits (N, T, V)."""
        rope = self._rope(0, tokens.shape[1], self.embed.weight)
        checkpointed = self.config.checkpoint_activations
        x = encoder_stack(self.blocks, self.embed(tokens), rope, checkpointed=checkpointed)
        return self.head(self.norm(x))  # (N, T, V)

    def _rope(self, start: int, length: int, like: Tensor) -> Rope:
        return rope_for(self.rope, start, length, like)

    def init_state(self, batch_size: int) -> TransformerState:
        c = self.config
        empty = KVCache.empty(batch_size, c.n_heads, c.head_dim, self.head.weight)
        return TransformerState(position=0, layers=[empty for _ in self.blocks])

    def prefill(self, tokens: Tensor, state: TransformerState) -> tuple[Tensor, TransformerState]:
        """Consume known tokens (N, t): logits (N, t, V) and the state after them."""
        check_batch(tokens, state)
        n, t = tokens.shape
        if t == 0:
            return self.head.weight.new_zeros(n, 0, self.config.vocab_size), state
        x = self.embed(tokens)  # (N, t, d)
        rope = self._rope(state.position, t, self.embed.weight)
        layers = []
        for block, cache in zip(self.blocks, state.layers):
            x, cache = block(x, rope, cache)
            layers.append(cache)
        return self.head(self.norm(x)), TransformerState(state.position + t, layers)

    def step(self, token: Tensor, state: TransformerState) -> tuple[Tensor, TransformerState]:
        """token (N,) -> logits (N, V) and the new state."""
        logits, state = self.prefill(token[:, None], state)
        return logits[:, 0], state
