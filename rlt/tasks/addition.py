"""Decimal addition, least-significant digit first, answer generated token by token.

Format: ``<bos> a + b = s <eos>`` where a, b and their sum s are all written least
significant digit first. Why: the carry flows from the low digits to the high ones, so in
this order every answer digit depends only on the operand digits at the same place and on the
carry of the digit just produced; written most-significant first, the first answer digit
would already depend on the whole carry chain. This is the usual choice for length
generalization of addition and costs nothing for the comparison between architectures.

Worked example, 57 + 68 = 125::

    tokens  <bos> 7 5 + 8 6 = 5 2 1 <eos>
    labels    .   . . . . . 5 2 1 <eos> .
    prompt  <bos> 7 5 + 8 6 =          response  5 2 1 <eos>

Labels are teacher-forced next tokens over the response: the ``=`` position predicts the first
answer digit and the last answer digit predicts ``<eos>``; the prompt (and padding) is never
supervised. The sum has no leading zeros (``0 + 0 = 0``), so its length, n or n+1 digits,
is part of what the model must get right, and EOS is scored.

Lengths: training draws each operand's digit count independently and uniformly from
``train_lengths`` (1-8), and the example's length is the longer operand. A test example of
length n has two operands of exactly n digits. A k-digit operand is uniform over the k-digit
numbers (leading digit 1-9; a 1-digit operand is 0-9).

Leakage: each of the 64 operand-length shapes gets ~16,000 of the 1,024,000 training draws,
so the small shapes (100 one-digit pairs, 900 pairs of 1 and 2 digits, ...) are fully covered
and the 256-example in-distribution validation set overlaps the stream there, as any
in-distribution set must: with data seed 1234, 30 examples (12%), all with at most 4 digits
in total (measured). With >= 8 digits in total a repeat is practically impossible (tested on a
stream prefix); test lengths above 8 cannot occur in training at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlt.tasks import vocab
from rlt.tasks.base import IGNORE, Rendered, Task, register

_D0 = vocab.DIGIT_IDS[0]


def _operand(rng: np.random.Generator, n_digits: int) -> list[int]:
    """A uniform n-digit number as its digits, least significant first."""
    digits = rng.integers(0, 10, size=n_digits)
    if n_digits > 1:
        digits[-1] = rng.integers(1, 10)
    return digits.tolist()


def add_lsd(a: list[int], b: list[int]) -> list[int]:
    """Schoolbook addition of two least-significant-first digit lists (no leading zeros)."""
    out, carry = [], 0
    for i in range(max(len(a), len(b))):
        s = (a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) + carry
        out.append(s % 10)
        carry = s // 10
    if carry:
        out.append(carry)
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    return out


@register
class AdditionTask(Task):
    name = "addition"
    default_train_lengths = (1, 8)
    default_test_lengths = (8, 9, 10, 12, 16, 20, 24, 28, 32)
    chance = None
    acc_mode = "tokens"
    default_n_val = 256
    default_n_test = 256

    @property
    def metrics(self) -> tuple[str, ...]:
        return ("acc", "seq_acc", "exact")

    def sample(self, rng: np.random.Generator, length: int) -> tuple[list[int], list[int]]:
        """Two operands of exactly ``length`` digits, as least-significant-first digit lists."""
        return _operand(rng, length), _operand(rng, length)

    def sample_train(self, rng: np.random.Generator) -> tuple[list[int], list[int]]:
        lo, hi = self.train_lengths
        na, nb = (int(n) for n in rng.integers(lo, hi + 1, size=2))
        return _operand(rng, na), _operand(rng, nb)

    def render(self, instance: Any) -> Rendered:
        """``instance`` is (a, b) as least-significant-first digit lists, or two ints."""
        a, b = (self.digits(x) for x in instance)
        answer = add_lsd(a, b)
        prompt = [vocab.BOS, *(_D0 + d for d in a), vocab.PLUS, *(_D0 + d for d in b), vocab.EQ]
        response = [*(_D0 + d for d in answer), vocab.EOS]
        p = len(prompt)
        tokens = prompt + response
        labels = [IGNORE] * (p - 1) + response + [IGNORE]
        return Rendered(tokens, labels, p, max(len(a), len(b)))

    @staticmethod
    def digits(x: int | list[int]) -> list[int]:
        """An operand as least-significant-first digits (ints are converted, lists kept)."""
        if isinstance(x, int | np.integer):
            if x < 0:
                raise ValueError(f"addition operands are non-negative, got {x}")
            return [int(c) for c in reversed(str(int(x)))]
        return [int(d) for d in x]
