"""The one vocabulary shared by all six tasks (140 tokens, as the report's parameter counts imply),
and the tokens a new task adds after them.

Layout (ids are stable; changing them invalidates every checkpoint):

    0 <pad>   1 <bos>   2 <eos>   3 =   4 <sep>
    5..14     digits 0-9
    15 +  16 -  17 *  18 (  19 )
    20..139   the 120 elements of S5 in lexicographic order of their one-line notation,
              so id 20 is the identity p12345 and id 139 is p54321.

An S5 token name is the permutation in one-line notation prefixed by ``p``: ``p21345`` maps
1->2, 2->1 and fixes 3, 4, 5. As a 0-based tuple it is ``(1, 0, 2, 3, 4)``.

A task that needs symbols of its own lists them in ``Task.new_tokens``; registering the task
appends the ones the vocabulary lacks after id 139 (:func:`add_tokens`), in registration order,
so the 140 shared ids never move and the report's six tasks keep a 140-token model. A model
trained on such a task gets ``Task.vocab_size`` outputs (140 + what it adds).
"""

from __future__ import annotations

import itertools

SPECIALS = ["<pad>", "<bos>", "<eos>", "=", "<sep>"]
DIGITS = [str(d) for d in range(10)]
OPERATORS = ["+", "-", "*", "(", ")"]
# 0-based tuples in lexicographic order
PERMUTATIONS: list[tuple[int, ...]] = list(itertools.permutations(range(5)))


def perm_name(perm: tuple[int, ...]) -> str:
    """0-based permutation tuple -> readable one-line token name (``(1,0,2,3,4)`` -> ``p21345``)."""
    return "p" + "".join(str(i + 1) for i in perm)


TOKENS: list[str] = SPECIALS + DIGITS + OPERATORS + [perm_name(p) for p in PERMUTATIONS]
# The shared vocabulary's size: every built-in task's model has this many outputs. TOKENS grows
# past it when a task adds tokens (add_tokens).
VOCAB_SIZE = len(TOKENS)

TOKEN_TO_ID: dict[str, int] = {name: i for i, name in enumerate(TOKENS)}
PAD, BOS, EOS, EQ, SEP = (TOKEN_TO_ID[s] for s in SPECIALS)
DIGIT_IDS = [TOKEN_TO_ID[d] for d in DIGITS]
PLUS, MINUS, TIMES, LPAREN, RPAREN = (TOKEN_TO_ID[s] for s in OPERATORS)
PERM_OFFSET = len(SPECIALS) + len(DIGITS) + len(OPERATORS)
PERM_TO_ID: dict[tuple[int, ...], int] = {p: PERM_OFFSET + i for i, p in enumerate(PERMUTATIONS)}
IDENTITY_ID = PERM_TO_ID[tuple(range(5))]


def add_tokens(names) -> list[int]:
    """The ids of ``names``, appending each name the vocabulary lacks after the last id (a name
    it has, e.g. a digit, keeps its id). A name must be one whitespace-free word, as
    :func:`encode` splits on spaces."""
    ids = []
    for name in names:
        if not isinstance(name, str) or not name or name != name.strip() or " " in name:
            raise ValueError(f"token name {name!r} must be one non-empty word without spaces")
        if name not in TOKEN_TO_ID:
            TOKEN_TO_ID[name] = len(TOKENS)
            TOKENS.append(name)
        ids.append(TOKEN_TO_ID[name])
    return ids


def added(size: int) -> list[str]:
    """The tokens past the shared 140 that a model of ``size`` outputs reads, in id order: what
    a checkpoint's rows beyond id 139 stand for. A plugin imported before a task's adds its own
    tokens first and moves the task's, so a stopped run resumes only with the table it started
    with (status.json ``added_tokens``: ``started_with`` and ``check_resumable`` in
    rlt/training/identity.py)."""
    return TOKENS[VOCAB_SIZE:size]


def size_for(names) -> int:
    """The vocabulary a model needs for a task that uses ``names`` beyond the shared tokens."""
    return max([VOCAB_SIZE] + [TOKEN_TO_ID[n] + 1 for n in names])


def decode(ids: list[int]) -> str:
    """Token ids -> readable string, tokens separated by single spaces."""
    return " ".join(TOKENS[i] for i in ids)


def encode(text: str) -> list[int]:
    """Inverse of :func:`decode`; unknown token names raise ``KeyError`` naming the token."""
    out = []
    for name in text.split():
        if name not in TOKEN_TO_ID:
            raise KeyError(
                f"unknown token {name!r}; valid names are listed in rlt.tasks.vocab.TOKENS"
            )
        out.append(TOKEN_TO_ID[name])
    return out
