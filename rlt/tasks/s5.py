"""State tracking in the symmetric group S5: the running product of n permutations.

The input is n permutations of {1..5}; the state after operation t is the product of the first
t inputs. Composition convention (``composition="right"``, the default, SPEC section 3)::

    state_0 = identity,   state_t = state_{t-1} o x_t,   i.e.  state_t(i) = state_{t-1}(x_t(i))

so the newest permutation acts first. ``composition="left"`` uses ``state_t = x_t o
state_{t-1}`` instead. Every operation is labelled with the state after it, so ``acc`` is
final-state accuracy, ``token_acc`` prefix-state accuracy and ``seq_acc`` whole-sequence
accuracy. The prompt is ``<bos>`` and the operations; the response is the final state, so the
label of the last operation is also the next token.

Worked example, length 2 (permutations in one-line notation, ``p21345`` swaps 1 and 2)::

    x_1 = p21345, x_2 = p13245
    state_1 = id o p21345 = p21345
    state_2 = p21345 o p13245:  1 -> x_2 -> 1 -> state_1 -> 2;  2 -> 3 -> 3;  3 -> 2 -> 1
            = p23145                      (with composition="left": p13245 o p21345 = p31245)
    tokens  <bos> p21345 p13245 p23145
    labels    .   p21345 p23145   .

**s5** draws each operation uniformly from all 120 permutations. **s5_swaps** draws from the
identity and the 10 transpositions only (11 input tokens); products of transpositions still
reach all 120 states, so the state space is the same while each step is a small change.

Leakage: the training stream, validation and test sets are disjoint in practice: at length
32 there are 120^32 (s5) and 11^32 ~ 2e33 (s5_swaps) sequences, so a repeat among a few
million draws has probability below 1e-20 (tested on a prefix of the stream).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from rlt.tasks import vocab
from rlt.tasks.base import IGNORE, Rendered, Task, check_choice, register

COMPOSITIONS = ("right", "left")

_INDEX = {p: i for i, p in enumerate(vocab.PERMUTATIONS)}
COMPOSE: list[list[int]] = [
    [_INDEX[tuple(a[b[i]] for i in range(5))] for b in vocab.PERMUTATIONS]
    for a in vocab.PERMUTATIONS
]
"""``COMPOSE[a][b]`` is the index (in ``vocab.PERMUTATIONS``) of ``a o b``: i -> a(b(i))."""

IDENTITY = _INDEX[tuple(range(5))]
TRANSPOSITIONS: list[int] = [
    _INDEX[tuple(j if k == i else i if k == j else k for k in range(5))]
    for i, j in itertools.combinations(range(5), 2)
]
"""The 10 transpositions (i j), i < j, in lexicographic order of (i, j)."""

SWAPS_INPUTS: tuple[int, ...] = (IDENTITY, *TRANSPOSITIONS)
"""s5_swaps' 11 input permutations (indices): the identity, then the transpositions."""


@register
class S5Task(Task):
    name = "s5"
    default_train_lengths = (32, 32)
    default_test_lengths = (32, 48, 64, 128, 256, 512)
    chance = 1 / 120

    def __init__(self, *, composition: str = "right", **options: Any) -> None:
        self.composition = check_choice(composition, "composition", COMPOSITIONS)
        super().__init__(**options)

    def task_options(self) -> dict[str, Any]:
        return {"composition": self.composition}

    def sample(self, rng: np.random.Generator, length: int) -> list[int]:
        """Operations as indices into ``vocab.PERMUTATIONS``."""
        return rng.integers(0, 120, size=length).tolist()

    def states(self, ops: list[int]) -> list[int]:
        """State index after each operation."""
        s, out = IDENTITY, []
        if self.composition == "right":
            for x in ops:
                s = COMPOSE[s][x]
                out.append(s)
        else:
            for x in ops:
                s = COMPOSE[x][s]
                out.append(s)
        return out

    def render(self, instance: Any) -> Rendered:
        ops = [int(x) for x in instance]
        n = len(ops)
        off = vocab.PERM_OFFSET
        states = [off + s for s in self.states(ops)]
        tokens = [vocab.BOS, *(off + x for x in ops), states[-1]]
        return Rendered(tokens, [IGNORE, *states, IGNORE], n + 1, n)


@register
class S5SwapsTask(S5Task):
    name = "s5_swaps"

    def sample(self, rng: np.random.Generator, length: int) -> list[int]:
        choice = rng.integers(0, len(SWAPS_INPUTS), size=length)
        return np.asarray(SWAPS_INPUTS)[choice].tolist()
