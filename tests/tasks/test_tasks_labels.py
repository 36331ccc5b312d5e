"""Acceptance 1-2: every label against an independent computation; length conventions.

Each task is checked over its training stream, its validation set and a slice of every test
length (the longest included): a few thousand examples per task.
"""

from __future__ import annotations

from collections import Counter

import pytest

from rlt.tasks import IGNORE, TASKS, Example, get_task, vocab
from tests.tasks import tasks_reference as ref

N_TRAIN = 600
N_PER_TEST_LENGTH = 48


def names(ids: list[int]) -> list[str]:
    return vocab.decode(ids).split(" ")


def label_names(ex: Example) -> list[str | None]:
    return [None if y == IGNORE else vocab.TOKENS[y] for y in ex.labels]


def check_structure(ex: Example) -> None:
    """Invariants shared by every task and split."""
    assert len(ex.tokens) == len(ex.labels) == len(ex.score)
    assert ex.tokens[0] == vocab.BOS and vocab.PAD not in ex.tokens
    assert all((y != IGNORE) == s for y, s in zip(ex.labels, ex.score))
    assert ex.labels[-1] == IGNORE  # the last token predicts nothing
    assert vocab.TOKENS[ex.tokens[-1]] != "<pad>"


def examples(task, n_train=N_TRAIN, n_test=N_PER_TEST_LENGTH):
    """Train-stream prefix, the whole validation set, and every test length."""
    yield from (task.example("train", i) for i in range(n_train))
    yield from task.val_set()
    for length in task.test_lengths:
        yield from task.test_set(length, n_test)


def reference(task_name: str, options: dict, ex: Example):
    """(length as the reference counts it, expected labels) for one example."""
    tok = names(ex.tokens)
    if task_name == "parity":
        return ref.parity_labels(tok, options.get("supervision", "final"))
    if task_name == "mod5_flat":
        return ref.flat_labels(tok, options.get("supervision", "final"))
    if task_name == "mod5_brackets":
        return ref.brackets_labels(tok, options.get("supervision", "final"))
    if task_name in ("s5", "s5_swaps"):
        return ref.s5_labels(tok, options.get("composition", "right"))
    raise AssertionError(task_name)


VARIANTS = [
    ("parity", {}),
    ("parity", {"supervision": "prefix"}),
    ("mod5_flat", {}),
    ("mod5_flat", {"supervision": "prefix"}),
    ("mod5_brackets", {}),
    ("mod5_brackets", {"supervision": "prefix"}),
    ("s5", {}),
    ("s5", {"composition": "left"}),
    ("s5_swaps", {}),
]


@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=lambda v: str(v))
def test_formal_task_labels_match_reference(name, options):
    task = get_task(name, n_val=300, **options)
    seen_lengths = set()
    count = 0
    for ex in examples(task):
        check_structure(ex)
        length, expected = reference(name, options, ex)
        assert length == ex.length, f"{name}: example says length {ex.length}, holds {length}"
        assert label_names(ex) == expected, (
            f"{name} {ex.split} #{ex.index}: {vocab.decode(ex.tokens)}"
        )
        assert ex.prompt_len == length + 1  # <bos> and the input; the response is the answer
        seen_lengths.add(ex.length)
        count += 1
    assert max(task.test_lengths) in seen_lengths
    assert count >= 1_000


def test_addition_labels_match_python_integers():
    task = get_task("addition")
    count = 0
    for ex in examples(task, n_train=1500):
        check_structure(ex)
        (na, nb), expected, prompt_len = ref.addition_labels(names(ex.tokens))
        assert label_names(ex) == expected
        assert ex.prompt_len == prompt_len
        assert not any(ex.score[: prompt_len - 1])  # the prompt is never supervised
        assert ex.length == max(na, nb)
        if ex.split == "test":
            assert na == nb == ex.length  # both operands have exactly n digits at test time
        else:
            lo, hi = task.train_lengths
            assert lo <= na <= hi and lo <= nb <= hi
        count += 1
    assert count >= 2_000


def test_addition_covers_carries_and_long_answers():
    task = get_task("addition")
    xs = task.test_set(32, 256)
    assert max(len(ex.tokens) for ex in xs) == 1 + 32 + 1 + 32 + 1 + 33 + 1
    assert {len(ex.response) for ex in xs} == {33, 34}  # n or n+1 digits, plus EOS


@pytest.mark.parametrize("name", sorted(TASKS))
def test_training_lengths_cover_the_range_uniformly(name):
    task = get_task(name)
    lengths = Counter(task.example("train", i).length for i in range(3000))
    lo, hi = task.train_lengths
    step = 2 if name == "mod5_flat" else 1  # flat mod-5: odd lengths only
    expected = set(range(lo, hi + 1, step))
    assert set(lengths) == expected
    if name == "addition":
        # The length is the longer of two uniform digit counts: P(k) = (2k - 1) / n^2, so the
        # longest is 2n - 1 = 15 times as frequent as the shortest (n = 8).
        assert lengths[hi] > 8 * lengths[lo]
    elif len(expected) > 1:
        mean = 3000 / len(expected)
        assert min(lengths.values()) > 0.5 * mean and max(lengths.values()) < 1.6 * mean


def test_addition_operand_lengths_are_independent_and_uniform():
    task = get_task("addition")
    counts = Counter()
    for i in range(3000):
        (na, nb), _, _ = ref.addition_labels(names(task.example("train", i).tokens))
        counts[na] += 1
        counts[nb] += 1
    assert set(counts) == set(range(1, 9))
    assert min(counts.values()) > 0.7 * 750 and max(counts.values()) < 1.3 * 750


@pytest.mark.parametrize(
    ("name", "length"),
    [("parity", 1), ("parity", 300), ("mod5_flat", 1), ("mod5_flat", 301), ("mod5_brackets", 1),
     ("mod5_brackets", 2), ("mod5_brackets", 3), ("mod5_brackets", 4), ("mod5_brackets", 5),
     ("mod5_brackets", 301), ("s5", 1), ("s5_swaps", 700), ("addition", 1), ("addition", 40)],
)  # fmt: skip
def test_any_valid_length_has_exactly_that_length(name, length):
    task = get_task(name)
    for i in range(30):
        ex = task.example("test", i, length)
        assert ex.length == length
        if name == "addition":
            (na, nb), _, _ = ref.addition_labels(names(ex.tokens))
            assert na == nb == length
        else:
            got, expected = reference(name, {}, ex)
            assert got == length and len(ex.tokens) == length + 2
            assert label_names(ex) == expected


def test_mod5_flat_rejects_even_lengths():
    task = get_task("mod5_flat")
    with pytest.raises(ValueError, match="odd"):
        task.example("test", 0, 64)
    with pytest.raises(ValueError, match="'test_lengths'.*odd"):
        get_task("mod5_flat", test_lengths=[63, 64])
    with pytest.raises(ValueError, match="'train_lengths'.*odd"):
        get_task("mod5_flat", train_lengths=[3, 40])


def test_brackets_split_is_uniform():
    """n >= 5: the left operand's length is uniform over 1..n-4 (SPEC section 3)."""
    task = get_task("mod5_brackets")
    left_lengths = Counter()
    for i in range(2000):
        expr = names(task.example("test", i, 9).tokens)[1:-1]
        _, spans = ref.parse_brackets(expr)
        whole = [s for s in spans if s[0] == 0][0]
        left = max((s for s in spans if s[0] == 1), key=lambda s: s[1])  # largest at position 1
        assert whole[1] == 8
        left_lengths[left[1] - left[0] + 1] += 1
    assert set(left_lengths) == {1, 2, 3, 4, 5}
    assert min(left_lengths.values()) > 300 and max(left_lengths.values()) < 500


@pytest.mark.parametrize("name", ["parity", "mod5_flat", "mod5_brackets"])
def test_answers_are_balanced(name):
    task = get_task(name)
    answers = Counter(
        task.example("test", i, task.test_lengths[-1]).tokens[-1] for i in range(1000)
    )
    k = len(answers)
    assert k == (2 if name == "parity" else 5)
    assert min(answers.values()) > 0.6 * 1000 / k
