"""State interventions at evaluation time: which part of the state carries the computation?

A model streams a sequence through its own transition (prefill, then the same transition token
by token); at chosen positions one or more parts of its state are put back to what the model
starts a sequence with, and the sequence goes on. Positions keep counting (RoPE and RLT-2's
chunk boundaries stay anchored at position 0): only the dropped part forgets.

Parts, per family:

    RLT (RLT-1, RLT-2, RLT-0)  feedback  s_t back to the learned initial s* (RLT-0 has no fed-back
                                         s_t, so dropping it changes nothing: a built-in control)
                               window    every decoder block's sliding-window cache emptied
                               memory    the encoder caches and the global memory of the tokens
                                         so far
    Transformer                memory    its KV caches
    LSTM                       memory    its (h, c)
    DeltaNet, DeltaProduct     memory    its short-convolution buffers and matrix state
    PD-SSM                     memory    its complex state, back to h_0 = e_1 in every head

``all`` is every part of the family; ``none`` drops nothing (the streamed control: the same
path, no cut). Where: ``boundary`` (before the first response token, the prompt/response
boundary), ``P`` (before input position P, 0-based), ``every:K`` (before positions K, 2K, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlt.models.base import greedy_continuation


class InterventionError(ValueError):
    """A drop or a position that does not apply (one line naming the valid ones)."""


def parts_of(model) -> tuple[str, ...]:
    """The parts of the model's state (its state class's ``PARTS``), as a state knows them."""
    parts = getattr(type(model.init_state(1)), "PARTS", None)
    if not parts:
        raise InterventionError(
            f"state interventions do not know the family {type(model).__name__}: its state "
            "class declares no PARTS and no dropped(parts, fresh) (rlt/models/state.py)"
        )
    return tuple(parts)


@dataclass(frozen=True)
class Intervention:
    parts: tuple[str, ...]  # what is dropped
    where: str  # "boundary" | "position" | "every" | "never" (drop none)
    k: int = 0  # the position P, or the period K

    @property
    def name(self) -> str:
        if self.where == "never":
            return "drop-none"
        return f"drop-{'+'.join(self.parts)}_at-{self.at.replace(':', '')}"

    @property
    def at(self) -> str:
        """``state.at`` as given: boundary, P, every:K (``none`` for the control)."""
        names = {"boundary": "boundary", "position": str(self.k), "every": f"every:{self.k}"}
        return names.get(self.where, "none")

    def drops_in(self, tokens: int) -> bool:
        """Whether a sequence of ``tokens`` tokens gets a cut: a position or period at or past
        its end cuts nothing (the boundary falls inside every sequence; none cuts nowhere)."""
        if self.where in ("position", "every"):
            return self.k < tokens
        return self.where == "boundary"

    def cuts(self, length: int, prompt_len: int) -> list[int]:
        """The positions in (0, length) before which the state is dropped."""
        if self.where == "never":
            return []
        if self.where == "boundary":
            points = [prompt_len]
        elif self.where == "position":
            points = [self.k]
        else:
            points = list(range(self.k, length, self.k))
        return [p for p in points if 0 < p < length]


def parse(model, drop, at) -> Intervention:
    """``state.drop`` (a part, a comma list or a list, ``all`` or ``none``) and ``state.at``
    (``boundary``, ``P`` or ``every:K``; not read for ``none``), checked against the model's
    family."""
    have = parts_of(model)
    asked = drop.split(",") if isinstance(drop, str) else list(drop or [])
    asked = [str(p).strip() for p in asked if str(p).strip()]
    if not asked:
        raise InterventionError(f"state.drop is empty; name one of {', '.join(have)}, all or none")
    if "none" in asked:
        if len(asked) > 1:
            raise InterventionError(
                f"state.drop={','.join(asked)}: none drops nothing; give it alone"
            )
        return Intervention((), "never")
    parts = have if "all" in asked else tuple(dict.fromkeys(asked))
    unknown = [p for p in parts if p not in have]
    if unknown:
        raise InterventionError(
            f"state.drop={','.join(unknown)}: {type(model).__name__} has no such part; its "
            f"parts are {', '.join(have)} (or all, or none)"
        )
    text = str(at).strip()
    if text == "boundary":
        return Intervention(parts, "boundary")
    try:
        if text.startswith("every:"):
            k = int(text[len("every:") :])
            if k >= 1:
                return Intervention(parts, "every", k)
        else:
            k = int(text)
            if k >= 1:
                return Intervention(parts, "position", k)
    except ValueError:
        pass
    raise InterventionError(
        f"state.at={at!r}: give boundary, a position P >= 1 or every:K with K >= 1"
    )


def drop(model, state, parts: tuple[str, ...], batch: int):
    """A copy of ``state`` with ``parts`` back to the model's initial state (same position)."""
    return state.dropped(parts, model.init_state(batch))


@torch.no_grad()
def stream(model, tokens: Tensor, cuts: list[int], parts: tuple[str, ...]):
    """Logits (N, T, V) of ``tokens`` streamed through the model, the state's ``parts`` dropped
    before each position in ``cuts``; and the state after the last token."""
    n, t = tokens.shape
    state = model.init_state(n)
    outs, start = [], 0
    for end in [*sorted({c for c in cuts if 0 < c < t}), t]:
        logits, state = model.prefill(tokens[:, start:end], state)
        outs.append(logits)
        start = end
        if end < t:
            state = drop(model, state, parts, n)
    return torch.cat(outs, dim=1), state


@torch.no_grad()
def generate(
    model, prompt: Tensor, max_new_tokens: int, how: Intervention, eos_id: int | None = None
) -> Tensor:
    """Greedy continuation as ``SequenceModel.generate``, with the intervention applied: the
    prompt is streamed with its cuts, and the state is dropped before each generated position
    that is a cut (the boundary is the prompt's end)."""
    n, p = prompt.shape
    cuts = set(how.cuts(p + max_new_tokens, p))
    logits, state = stream(model, prompt, sorted(cuts), how.parts)

    def drop_at_cuts(position: int, state):  # before the model consumes that position
        return drop(model, state, how.parts, n) if position in cuts else state

    return greedy_continuation(
        model, prompt, logits, state, max_new_tokens, eos_id, before_step=drop_at_cuts
    )
