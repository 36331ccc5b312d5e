"""Arithmetic modulo 5: a flat expression with precedence, and a recursive bracketed one.

Both use the digits 0-4 and the operators ``+ - *``; the answer is the value modulo 5 taken
non-negative (``1 - 4 = -3 -> 2``). Like parity, the prompt is ``<bos>`` and the expression,
the response is the answer digit, and with the default ``supervision="final"`` only the last
input symbol is labelled (with the answer, which is also the next token). The length counts
the characters of the expression.

**mod5_flat** (odd lengths only: ``d op d op ... d``), worked example, length 7::

    3 + 4 * 2 - 1  =  3 + 8 - 1  =  10  ->  0 (mod 5)
    tokens  <bos> 3 + 4 * 2 - 1 0
    labels    .   . . . . . . 0 .                     supervision="final"
    labels    .   3 . 2 . 1 . 0 .                     supervision="prefix"

``prefix`` labels every digit with the value of the expression ending there (``3``,
``3+4``, ``3+4*2``, ...); an operator ends no expression, so it stays unlabelled. An even
length is rejected: the report trains and tests on odd lengths only.

**mod5_brackets** (exactly n characters): n=1 ``d``, 2 ``-d``, 3 ``(d)``, 4 ``(-d)``; n>=5
``( left op right )`` with the left length uniform in 1..n-4 and right = n-3-left. Worked
example, length 9 (left length 5 = ``(2*3)``, right ``4``)::

    ( ( 2 * 3 ) - 4 )  =  (6 - 4)  =  2
    tokens  <bos> ( ( 2 * 3 ) - 4 ) 2
    labels    .   . . . . . . . . 2 .                 supervision="final"
    labels    .   . . 2 . 3 1 . 4 2 .                 supervision="prefix"

A bracketed prefix is generally not an expression, so ``prefix`` labels each position where a
sub-expression ends (a digit or a ``)``) with the value of the largest sub-expression ending
there (``-d`` rather than ``d``); the last position is the whole expression.

Leakage: short expressions are few (flat length 3: 75 strings; brackets length 3: 5), and
the 2,560,000-example training stream (5,000 steps) contains them all, so the in-distribution
validation set overlaps it there, as any in-distribution set must: with data seed 1234, about
16% of the flat set (lengths <= 11) and 29% of the bracket set (lengths <= 17, nearly all
<= 12) occur in the stream (measured). From ~length 25 (5^13 * 3^12 flat strings) a repeat is
practically impossible (tested on a stream prefix); test lengths above the training range
cannot occur in training at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlt.tasks import vocab
from rlt.tasks.base import IGNORE, FinalOrPrefixSupervision, Rendered, register

_OPS = (vocab.PLUS, vocab.MINUS, vocab.TIMES)
_D0 = vocab.DIGIT_IDS[0]


def _combine(op: int, left: int, right: int) -> int:
    if op == vocab.PLUS:
        return (left + right) % 5
    if op == vocab.MINUS:
        return (left - right) % 5
    return (left * right) % 5


class _Mod5Task(FinalOrPrefixSupervision):
    """Shared by both mod-5 tasks: the supervision option and the rendering of labels."""

    chance = 0.2

    def prefix_values(self, expr: list[int]) -> list[int | None]:
        """Per position of the expression: the label value under ``prefix`` (None = none)."""
        raise NotImplementedError

    def render(self, instance: Any) -> Rendered:
        expr = list(instance)
        n = len(expr)
        values = self.prefix_values(expr)
        answer = values[-1]
        assert answer is not None, "the last symbol of an expression must complete it"
        labels = [IGNORE] * (n + 2)
        if self.supervision == "prefix":
            for i, v in enumerate(values):
                if v is not None:
                    labels[i + 1] = _D0 + v
        else:
            labels[n] = _D0 + answer
        return Rendered([vocab.BOS, *expr, _D0 + answer], labels, n + 1, n)


@register
class Mod5FlatTask(_Mod5Task):
    name = "mod5_flat"
    default_train_lengths = (3, 39)
    default_test_lengths = (39, 47, 63, 95, 127, 191, 255)

    def check_length(self, length: int, option: str = "length") -> None:
        super().check_length(length, option)
        if length % 2 == 0:
            raise ValueError(
                f"option {option!r}: mod5_flat lengths count the symbols of 'd op d ... d' and must be odd, got {length}"
            )

    def sample_train(self, rng: np.random.Generator) -> list[int]:
        lo, hi = self.train_lengths  # both odd (checked in __init__)
        return self.sample(rng, lo + 2 * int(rng.integers(0, (hi - lo) // 2 + 1)))

    def sample(self, rng: np.random.Generator, length: int) -> list[int]:
        k = (length + 1) // 2
        digits = (rng.integers(0, 5, size=k) + _D0).tolist()
        ops = rng.integers(0, 3, size=k - 1).tolist()
        expr = [0] * length
        expr[0::2] = digits
        expr[1::2] = [_OPS[o] for o in ops]
        return expr

    def prefix_values(self, expr: list[int]) -> list[int | None]:
        """Left to right with precedence: ``total`` of finished terms, ``term`` the open one."""
        total, term, op = 0, 0, vocab.PLUS
        out: list[int | None] = []
        for tok in expr:
            if tok in _OPS:
                op = tok
                out.append(None)
                continue
            d = tok - _D0
            if op == vocab.TIMES:
                term = term * d % 5
            else:
                total = (total + term) % 5
                term = d if op == vocab.PLUS else -d % 5
            out.append((total + term) % 5)
        return out


@register
class Mod5BracketsTask(_Mod5Task):
    name = "mod5_brackets"
    default_train_lengths = (3, 40)
    default_test_lengths = (40, 48, 64, 96, 128, 192, 256)

    def sample(self, rng: np.random.Generator, length: int) -> list[int]:
        """Expand iteratively (no recursion limit at long lengths).

        Every draw consumes one uniform from a pre-drawn array: a leaf draws its digit, an
        inner node its split and its operator, so there are at most ``length`` draws.
        """
        draw = iter(rng.random(length).tolist()).__next__
        out: list[int] = []
        todo: list[int] = [length]  # positive: an expression of that length; negative: a token
        while todo:
            item = todo.pop()
            if item < 0:
                out.append(-item)
                continue
            n = item
            if n <= 4:
                d = _D0 + int(draw() * 5)
                atom = [vocab.MINUS, d] if n % 2 == 0 else [d]  # -d or d
                out.extend([vocab.LPAREN, *atom, vocab.RPAREN] if n >= 3 else atom)
                continue
            left = 1 + int(draw() * (n - 4))
            op = _OPS[int(draw() * 3)]
            out.append(vocab.LPAREN)
            todo.extend((-vocab.RPAREN, n - 3 - left, -op, left))
        return out

    def prefix_values(self, expr: list[int]) -> list[int | None]:
        """Shift-reduce over the grammar above; a ``-`` is unary unless it follows a value."""
        stack: list[tuple[str, int]] = []  # ("(", 0), ("op", id), ("neg", 0), ("val", v)
        out: list[int | None] = []
        for tok in expr:
            if tok == vocab.LPAREN:
                stack.append(("(", 0))
                out.append(None)
            elif tok in _OPS:
                binary = bool(stack) and stack[-1][0] == "val"
                stack.append(("op", tok) if binary else ("neg", 0))
                out.append(None)
            elif tok == vocab.RPAREN:
                _, v = stack.pop()
                if stack[-1][0] == "op":
                    _, op = stack.pop()
                    _, left = stack.pop()
                    v = _combine(op, left, v)
                stack.pop()  # the matching "("
                stack.append(("val", v))
                out.append(v)
            else:
                v = tok - _D0
                if stack and stack[-1][0] == "neg":
                    stack.pop()
                    v = -v % 5
                stack.append(("val", v))
                out.append(v)
        return out
