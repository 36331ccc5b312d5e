"""The worked examples of the task docstrings, the S5 group tables (acceptance 4), options."""

from __future__ import annotations

import itertools

import pytest

from rlt.tasks import IGNORE, TASKS, get_task, vocab
from rlt.tasks.s5 import COMPOSE, IDENTITY, SWAPS_INPUTS, TRANSPOSITIONS
from tests.tasks import tasks_reference as ref


def shown(labels: list[int]) -> str:
    """Labels as the docstrings draw them: '.' for unsupervised."""
    return " ".join("." if y == IGNORE else vocab.TOKENS[y] for y in labels)


def test_parity_worked_example():
    ex = get_task("parity").make_example([1, 0, 1, 1, 0])
    assert vocab.decode(ex.tokens) == "<bos> 1 0 1 1 0 1"
    assert shown(ex.labels) == ". . . . . 1 ."
    assert vocab.decode(ex.prompt) == "<bos> 1 0 1 1 0" and vocab.decode(ex.response) == "1"
    prefix = get_task("parity", supervision="prefix").make_example([1, 0, 1, 1, 0])
    assert shown(prefix.labels) == ". 1 1 0 1 1 ."


def test_mod5_flat_worked_example():
    expr = vocab.encode("3 + 4 * 2 - 1")
    ex = get_task("mod5_flat").make_example(expr)
    assert vocab.decode(ex.tokens) == "<bos> 3 + 4 * 2 - 1 0"
    assert shown(ex.labels) == ". . . . . . . 0 ."
    prefix = get_task("mod5_flat", supervision="prefix").make_example(expr)
    assert shown(prefix.labels) == ". 3 . 2 . 1 . 0 ."
    assert get_task("mod5_flat").make_example(vocab.encode("1 - 4")).target == vocab.encode("2")


def test_mod5_brackets_worked_example():
    expr = vocab.encode("( ( 2 * 3 ) - 4 )")
    ex = get_task("mod5_brackets").make_example(expr)
    assert vocab.decode(ex.tokens) == "<bos> ( ( 2 * 3 ) - 4 ) 2"
    assert shown(ex.labels) == ". . . . . . . . . 2 ."
    prefix = get_task("mod5_brackets", supervision="prefix").make_example(expr)
    assert shown(prefix.labels) == ". . . 2 . 3 1 . 4 2 ."
    neg = get_task("mod5_brackets", supervision="prefix").make_example(vocab.encode("( - 3 )"))
    assert shown(neg.labels) == ". . . 2 2 ."  # -3 = 2 (mod 5) at the digit and at ')'


def test_s5_worked_example():
    x1, x2 = vocab.PERMUTATIONS.index((1, 0, 2, 3, 4)), vocab.PERMUTATIONS.index((0, 2, 1, 3, 4))
    ex = get_task("s5").make_example([x1, x2])
    assert vocab.decode(ex.tokens) == "<bos> p21345 p13245 p23145"
    assert shown(ex.labels) == ". p21345 p23145 ."
    left = get_task("s5", composition="left").make_example([x1, x2])
    assert vocab.decode(left.response) == "p31245"


def test_addition_worked_example():
    ex = get_task("addition").make_example((57, 68))
    assert vocab.decode(ex.tokens) == "<bos> 7 5 + 8 6 = 5 2 1 <eos>"
    assert shown(ex.labels) == ". . . . . . 5 2 1 <eos> ."
    assert vocab.decode(ex.prompt) == "<bos> 7 5 + 8 6 ="
    assert vocab.decode(ex.response) == "5 2 1 <eos>"
    assert vocab.decode(get_task("addition").make_example((0, 0)).response) == "0 <eos>"


def test_compose_table_is_the_group_s5():
    perms = vocab.PERMUTATIONS
    assert (
        perms[IDENTITY] == (0, 1, 2, 3, 4)
        and vocab.PERM_TO_ID[perms[IDENTITY]] == vocab.IDENTITY_ID
    )
    for a, b in itertools.product(range(120), repeat=2):
        assert perms[COMPOSE[a][b]] == tuple(perms[a][perms[b][i]] for i in range(5))
    for a in range(120):
        assert COMPOSE[a][IDENTITY] == COMPOSE[IDENTITY][a] == a
        assert sorted(COMPOSE[a]) == list(range(120))  # a Latin square: every row a bijection


def test_swaps_inputs_are_the_identity_and_the_ten_transpositions():
    perms = vocab.PERMUTATIONS
    assert len(TRANSPOSITIONS) == 10 and SWAPS_INPUTS[0] == IDENTITY
    for t in TRANSPOSITIONS:
        moved = [i for i in range(5) if perms[t][i] != i]
        assert len(moved) == 2 and COMPOSE[t][t] == IDENTITY


def test_s5_swaps_inputs_and_state_coverage_at_32():
    """Acceptance 4: only the 11 inputs appear; the states still cover (nearly) all of S5."""
    task = get_task("s5_swaps")
    allowed = {vocab.PERM_OFFSET + p for p in SWAPS_INPUTS}
    inputs, finals, prefix_states = set(), set(), set()
    for ex in task.test_set(32):
        inputs.update(ex.tokens[1 : ex.prompt_len])
        finals.add(ex.target[-1])
        prefix_states.update(ex.target)
    assert inputs == allowed  # all 11 occur, nothing else
    assert len(finals) >= 110 and len(prefix_states) == 120
    s5_inputs = {t for ex in get_task("s5").test_set(32, 64) for t in ex.tokens[1:-1]}
    assert len(s5_inputs) == 120


def test_s5_reference_agrees_with_name_parsing():
    p = ref.perm_from_name("p21345")
    assert p == (1, 0, 2, 3, 4) and ref.perm_name(p) == "p21345"


def test_unknown_task_lists_valid_names():
    with pytest.raises(
        ValueError, match="valid tasks: addition, mod5_brackets, mod5_flat, parity, s5, s5_swaps"
    ):
        get_task("parity2")


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("parity", {"supervison": "final"}, "'supervison'.*valid options"),
        ("addition", {"supervision": "prefix"}, "'supervision'"),
        ("parity", {"supervision": "all"}, "'supervision' must be one of"),
        ("s5", {"composition": "middle"}, "'composition'"),
        ("parity", {"train_lengths": [10, 3]}, "'train_lengths'"),
        ("parity", {"train_lengths": [3]}, "'train_lengths'"),
        ("parity", {"train_lengths": [0, 3]}, "'train_lengths'"),
        ("parity", {"test_lengths": []}, "'test_lengths'"),
        ("parity", {"test_lengths": [64.0]}, "'test_lengths'"),
        ("parity", {"data_seed": -1}, "'data_seed'"),
        ("parity", {"n_test": 0}, "'n_test'"),
        ("parity", {"n_val": True}, "'n_val'"),
    ],
)
def test_bad_options_are_value_errors_naming_the_option(name, options, match):
    with pytest.raises(ValueError, match=match):
        get_task(name, **options)


def test_split_and_length_errors():
    task = get_task("parity")
    with pytest.raises(ValueError, match="needs a length"):
        task.example("test", 0)
    with pytest.raises(ValueError, match="pass length only with split='test'"):
        task.example("train", 0, 10)
    with pytest.raises(ValueError, match="unknown split"):
        task.example("dev", 0)


def test_every_task_declares_its_protocol():
    for name, cls in TASKS.items():
        t = get_task(name)
        assert t.name == name and cls.name == name
        assert t.metrics[0] == "acc" and t.acc_mode in ("last", "tokens")
        assert t.n_val == (256 if name == "addition" else 768)
        assert t.n_test == (256 if name == "addition" else 1024)
        assert t.config()["name"] == name
        assert t.train_lengths[1] <= max(t.test_lengths)
    expected_longest = {"parity": 256, "mod5_flat": 255, "mod5_brackets": 256, "s5": 512,
                        "s5_swaps": 512, "addition": 32}  # fmt: skip
    for name, longest in expected_longest.items():
        assert max(get_task(name).test_lengths) == longest
    assert {63, 255} <= set(get_task("mod5_flat").test_lengths)
    assert {64, 256} <= set(get_task("mod5_brackets").test_lengths)
    assert {32, 48, 64, 256, 512} <= set(get_task("s5").test_lengths)
    assert {64, 256} <= set(get_task("parity").test_lengths)
