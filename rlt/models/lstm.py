"""The recurrent control: a stack of ``torch.nn.LSTM`` layers (not in the report).

Same vocabulary, embedding, untied head and task interface as the other models; its depth is
the split total, like the Transformer's. It is the classic model that learns final-label
parity, so it tells a plateau of the RLT (or its init) from a fault of the framework.

Initialisation is PyTorch's own (the "plain torch.nn.LSTM" of the probes that motivated it):
LSTM weights and biases uniform(-1/sqrt(d), 1/sqrt(d)), embedding N(0, 1), head Kaiming-
uniform. ``init_std`` is not used by this model.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rlt.models.base import SequenceModel, check_batch
from rlt.models.config import LSTMConfig
from rlt.models.state import LSTMState


class LSTMModel(SequenceModel):
    """``embed -> nn.LSTM(d, d, num_layers=n_layers) -> head``; the state is (h, c) per layer."""

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.lstm = nn.LSTM(d, d, num_layers=config.n_layers, batch_first=True)
        self.head = nn.Linear(d, config.vocab_size, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (N, T) long -> logits (N, T, V), from the zero state."""
        h, _ = self._lstm(self.embed(tokens))  # (N, T, d)
        return self.head(h)

    def _lstm(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None):
        """``self.lstm``; under CPU autocast (bf16-mixed) in float32: oneDNN's bfloat16 LSTM
        needs AVX-512 BF16 or AMX, which many CPUs lack ("could not create a primitive
        descriptor"), and the recurrence is where low precision would hurt most."""
        if x.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
            return self.lstm(x, hc)
        with torch.autocast(device_type="cpu", enabled=False):
            wide = None if hc is None else (hc[0].float(), hc[1].float())
            return self.lstm(x.float(), wide)

    def init_state(self, batch_size: int) -> LSTMState:
        c = self.config
        zeros = self.head.weight.new_zeros(c.n_layers, batch_size, c.d_model)
        return LSTMState(position=0, h=zeros, c=zeros.clone())

    def prefill(self, tokens: Tensor, state: LSTMState) -> tuple[Tensor, LSTMState]:
        """Consume known tokens (N, t): logits (N, t, V) and the state after them."""
        check_batch(tokens, state)
        n, t = tokens.shape
        if t == 0:
            return self.head.weight.new_zeros(n, 0, self.config.vocab_size), state
        out, (h, c) = self._lstm(self.embed(tokens), (state.h, state.c))
        return self.head(out), LSTMState(position=state.position + t, h=h, c=c)

    def step(self, token: Tensor, state: LSTMState) -> tuple[Tensor, LSTMState]:
        """token (N,) -> logits (N, V) and the new state."""
        logits, state = self.prefill(token[:, None], state)
        return logits[:, 0], state
