"""What both model families share: parameter count and greedy generation on prefill + step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn


class SequenceModel(nn.Module):
    """A causal token model with an explicit streaming state.

    Subclasses provide ``forward(tokens) -> logits``, ``init_state(batch_size)``,
    ``prefill(tokens, state) -> (logits, state)`` and ``step(token, state) -> (logits, state)``.
    """

    # The chunk size B of a family with feedback (the RLT's, from its config); None: none.
    feedback_interval: int | None = None

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def generate(
        self, prompt: Tensor, max_new_tokens: int, eos_id: int | None = None, pad_id: int = 0
    ) -> Tensor:
        """Greedy continuation of (N, T) prompts (T >= 1, all rows the same length).

        Returns (N, T + n) with n <= max_new_tokens: generation stops once every row has
        emitted ``eos_id``; a row that finished earlier is filled with ``pad_id`` after its EOS.
        The state runs straight from the prompt into the response, never reset.
        """
        n, t = prompt.shape
        if t < 1:
            raise ValueError(
                f"generate needs a prompt of at least one token, got shape {tuple(prompt.shape)}"
            )
        logits, state = self.prefill(prompt, self.init_state(n))  # (N, T, V)
        return greedy_continuation(self, prompt, logits, state, max_new_tokens, eos_id, pad_id)


def check_batch(tokens: Tensor, state: Any) -> None:
    """Refuse tokens (N, t) for a state of another batch size: row i of the tokens continues
    row i of the state, and a state of batch 1 would otherwise broadcast where it can."""
    if tokens.shape[0] != state.batch_size:
        raise ValueError(
            f"tokens of batch size {tokens.shape[0]} for a state of batch size "
            f"{state.batch_size}: continue a state with one row of tokens per sequence it holds "
            "(init_state(batch_size) sets the batch size)"
        )


def greedy_continuation(
    model: SequenceModel,
    prompt: Tensor,
    logits: Tensor,
    state,
    max_new_tokens: int,
    eos_id: int | None = None,
    pad_id: int = 0,
    before_step: Callable[[int, Any], Any] | None = None,
) -> Tensor:
    """The greedy continuation of ``prompt`` (N, T) from its logits (N, T, V) and the state
    after it: (N, T + n), n <= max_new_tokens, stopping once every row has emitted ``eos_id``
    (``pad_id`` after a row's EOS). ``before_step(position, state)``, where given, returns the
    state the model consumes position T + i with (an intervention on the state)."""
    n, t = prompt.shape
    next_token = logits[:, -1].argmax(dim=-1)  # (N,)
    finished = torch.zeros(n, dtype=torch.bool, device=prompt.device)
    out = [prompt]
    for i in range(max_new_tokens):
        token = torch.where(finished, torch.full_like(next_token, pad_id), next_token)
        out.append(token[:, None])
        if eos_id is not None:
            finished |= token == eos_id
            if bool(finished.all()):
                break
        if i + 1 < max_new_tokens:
            if before_step is not None:
                state = before_step(t + i, state)
            step_logits, state = model.step(token, state)  # (N, V)
            next_token = step_logits.argmax(dim=-1)
    return torch.cat(out, dim=1)
