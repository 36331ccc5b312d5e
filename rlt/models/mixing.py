"""The linear-RNN baselines' model: ``embed -> n_layers MixingBlocks -> RMSNorm -> untied
head``, where each block's token mixing carries a state (DeltaNet, DeltaProduct, PD-SSM). A
family names its mixing layer (``layer_class``) and its initial state (``init_state``); the
state holds one entry per block in ``layers``."""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor, nn

from rlt.models.base import SequenceModel, check_batch
from rlt.models.blocks import MixingBlock, init_weights


class MixingModel(SequenceModel):
    """``embed -> n_layers MixingBlock(config, layer_class) -> RMSNorm -> untied head``."""

    layer_class: type[nn.Module]  # the token mixing: layer_class(config)

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(
            MixingBlock(config, self.layer_class) for _ in range(config.n_layers)
        )
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Linears and the embedding N(0, init_std) as in the other models; what init_weights
        # leaves alone keeps its layer's own init (DeltaNet's short convolutions: PyTorch's
        # uniform, bound 1/sqrt(kernel); PD-SSM's dictionary, D biases and skip).
        init_weights(self, config.init_std, config.n_layers)

    def prefill(self, tokens: Tensor, state):
        check_batch(tokens, state)
        n, t = tokens.shape
        if t == 0:
            return self.head.weight.new_zeros(n, 0, self.config.vocab_size), state
        x = self.embed(tokens)
        layers = []
        for block, layer_state in zip(self.blocks, state.layers):
            x, layer_state = block(x, layer_state)
            layers.append(layer_state)
        return self.head(self.norm(x)), replace(state, position=state.position + t, layers=layers)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (N, T) -> logits (N, T, V) from the initial state (the chunked form)."""
        logits, _ = self.prefill(tokens, self.init_state(tokens.shape[0]))
        return logits

    def step(self, token: Tensor, state):
        logits, state = self.prefill(token[:, None], state)
        return logits[:, 0], state
