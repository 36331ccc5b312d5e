"""Independent reference computations for every task's labels.

Written separately from the generators and working on the readable token names only (never
on the generators' tables or helpers): Python integers for addition, ``eval`` of the rendered
string for flat mod 5, a recursive-descent evaluator for brackets, explicit permutation tuples
for S5 and ``sum % 2`` for parity. Each function returns the full expected label list
(``None`` = unsupervised) for one example's token names, so a test can compare all of it.
"""

from __future__ import annotations

Labels = list[str | None]


def parity_labels(names: list[str], supervision: str) -> tuple[int, Labels]:
    """``<bos> b1 .. bn answer``; returns (n, labels)."""
    assert names[0] == "<bos>"
    bits = [int(c) for c in names[1:-1]]
    assert all(c in (0, 1) for c in bits)
    n = len(bits)
    labels: Labels = [None] * len(names)
    if supervision == "prefix":
        for t in range(1, n + 1):
            labels[t] = str(sum(bits[:t]) % 2)
    else:
        labels[n] = str(sum(bits) % 2)
    assert names[-1] == str(sum(bits) % 2), "the response token is the answer"
    return n, labels


def flat_labels(names: list[str], supervision: str) -> tuple[int, Labels]:
    """``<bos> d op d ... d answer``: Python ``eval`` of each prefix, mod 5 (``%`` of Python is
    non-negative for a positive modulus)."""
    expr = names[1:-1]
    n = len(expr)
    assert n % 2 == 1
    assert all(c in "01234" for c in expr[0::2]) and all(c in "+-*" for c in expr[1::2])
    labels: Labels = [None] * len(names)
    value = eval("".join(expr)) % 5  # noqa: S307 - digits and + - * only, checked above
    if supervision == "prefix":
        for i in range(0, n, 2):
            labels[i + 1] = str(eval("".join(expr[: i + 1])) % 5)  # noqa: S307
    else:
        labels[n] = str(value)
    assert names[-1] == str(value)
    return n, labels


def parse_brackets(expr: list[str]) -> tuple[int, list[tuple[int, int, int]]]:
    """Recursive-descent evaluator of the bracket grammar of SPEC section 3.

    E := d | -d | ( d ) | ( -d ) | ( E op E ). Returns the value mod 5 and every
    sub-expression as (start, end, value) with ``expr[start:end+1]`` the sub-expression.
    Raises AssertionError if ``expr`` is not exactly one expression of the grammar.
    """
    spans: list[tuple[int, int, int]] = []

    def atom(i: int) -> tuple[int, int]:  # d or -d, returns (value, next index)
        if expr[i] == "-":
            assert expr[i + 1] in "01234", f"'-' must precede a digit at {i}"
            spans.append((i + 1, i + 1, int(expr[i + 1])))
            v = -int(expr[i + 1]) % 5
            spans.append((i, i + 1, v))
            return v, i + 2
        assert expr[i] in "01234", f"expected a digit at {i}, got {expr[i]!r}"
        v = int(expr[i])
        spans.append((i, i, v))
        return v, i + 1

    def parse(i: int) -> tuple[int, int]:
        if expr[i] != "(":
            return atom(i)
        start = i
        left, i = parse(i + 1)
        if expr[i] == ")":  # ( d ) or ( -d ): only an atom may stand alone in brackets
            assert spans[-1][0] == start + 1 and spans[-1][1] == i - 1
            assert i - start in (2, 3), "a bracketed single operand must be d or -d"
            spans.append((start, i, left))
            return left, i + 1
        op = expr[i]
        assert op in "+-*", f"expected an operator at {i}, got {op!r}"
        right, i = parse(i + 1)
        assert expr[i] == ")", f"expected ')' at {i}"
        v = {"+": left + right, "-": left - right, "*": left * right}[op] % 5
        spans.append((start, i, v))
        return v, i + 1

    value, end = parse(0)
    assert end == len(expr), f"trailing symbols after position {end}"
    return value, spans


def brackets_labels(names: list[str], supervision: str) -> tuple[int, Labels]:
    expr = names[1:-1]
    n = len(expr)
    value, spans = parse_brackets(expr)
    assert names[-1] == str(value)
    labels: Labels = [None] * len(names)
    if supervision == "prefix":
        largest: dict[int, tuple[int, int]] = {}
        for start, end, v in spans:
            if end not in largest or start < largest[end][0]:
                largest[end] = (start, v)
        for end, (_, v) in largest.items():
            labels[end + 1] = str(v)
    else:
        labels[n] = str(value)
    return n, labels


def perm_from_name(name: str) -> tuple[int, ...]:
    """``p21345`` -> (1, 0, 2, 3, 4): one-line notation, 1-based digits, to a 0-based tuple."""
    assert name[0] == "p" and sorted(name[1:]) == list("12345"), name
    return tuple(int(c) - 1 for c in name[1:])


def perm_name(p: tuple[int, ...]) -> str:
    return "p" + "".join(str(i + 1) for i in p)


def s5_labels(names: list[str], composition: str = "right") -> tuple[int, Labels]:
    """``<bos> x1 .. xn s_n``: state_t(i) = state_{t-1}(x_t(i)) ("right") or x_t(state(i))."""
    ops = [perm_from_name(c) for c in names[1:-1]]
    state = (0, 1, 2, 3, 4)
    labels: Labels = [None]
    for x in ops:
        if composition == "right":
            state = tuple(state[x[i]] for i in range(5))
        else:
            state = tuple(x[state[i]] for i in range(5))
        labels.append(perm_name(state))
    labels.append(None)
    assert names[-1] == perm_name(state)
    return len(ops), labels


def addition_labels(names: list[str]) -> tuple[tuple[int, int], Labels, int]:
    """``<bos> a + b = s <eos>``, least significant digit first; Python ints for the sum.

    Returns ((digits of a, digits of b), labels, prompt length).
    """
    assert names[0] == "<bos>" and names[-1] == "<eos>"
    plus, eq = names.index("+"), names.index("=")
    a_digits, b_digits = names[1:plus], names[plus + 1 : eq]
    for digits in (a_digits, b_digits):
        assert digits and all(c.isdigit() for c in digits)
        assert len(digits) == 1 or digits[-1] != "0", "no leading zeros"
    a, b = int("".join(reversed(a_digits))), int("".join(reversed(b_digits)))
    answer = list(reversed(str(a + b))) + ["<eos>"]
    assert names[eq + 1 :] == answer
    labels: Labels = [None] * eq + answer + [None]
    return (len(a_digits), len(b_digits)), labels, eq + 1
