"""Acceptance 5: ``python -m rlt.tasks dump`` for every task and split round-trips to the ids."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlt.tasks import IGNORE, TASKS, vocab
from rlt.tasks.__main__ import main


def dump(capsys, *args: str) -> list[dict]:
    assert main(["dump", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_dump_round_trips(capsys, name, split):
    records = dump(capsys, name, "--split", split, "--n", "3", "--index", "5")
    assert [r["index"] for r in records] == [5, 6, 7]
    for r in records:
        assert {"input", "target", "length", "index", "tokens", "labels"} <= set(r)
        assert vocab.encode(r["input"]) == r["tokens"][: r["prompt_len"]]
        assert vocab.encode(r["target"]) == [y for y in r["labels"] if y != IGNORE]
        assert vocab.encode(r["response"]) == r["tokens"][r["prompt_len"] :]
        assert r["input"].startswith("<bos> ") and "  " not in r["input"]


def test_dump_test_length_options_and_errors(capsys):
    (r,) = dump(capsys, "s5_swaps", "--split", "test", "--length", "48", "--n", "1")
    assert r["length"] == 48 and len(r["input"].split()) == 49
    (r,) = dump(capsys, "parity", "--n", "1", "--option", "supervision=prefix", "--data-seed", "7")
    assert len(r["target"].split()) == r["length"]
    (r,) = dump(capsys, "parity", "--n", "1", "--option", "train_lengths=[5,5]")
    assert r["length"] == 5
    with pytest.raises(SystemExit):
        main(["dump", "mod5_flat", "--split", "test", "--length", "64"])
    assert "odd" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["dump", "parity", "--split", "train", "--length", "64"])


def test_readable_names_follow_the_issue():
    """Digits, operators, brackets, '=', specials in angle brackets, S5 as p + one-line."""
    assert vocab.decode(vocab.encode("<bos> ( 1 + 2 ) - 3 * 4 = <eos> <pad> p21345")) == (
        "<bos> ( 1 + 2 ) - 3 * 4 = <eos> <pad> p21345"
    )
    assert vocab.TOKENS[vocab.PERM_TO_ID[(1, 0, 2, 3, 4)]] == "p21345"


def test_module_entry_point_runs():
    """The README-style commands, in a real subprocess."""
    out = subprocess.run(
        [sys.executable, "-m", "rlt.tasks", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert sorted(line.split()[0] for line in out.splitlines()) == sorted(TASKS)
    assert "255" in out and "512" in out
    out = subprocess.run(
        [sys.executable, "-m", "rlt.tasks", "dump", "addition", "--split", "test", "--n", "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 2 and records[0]["target"].endswith("<eos>")


def test_a_task_with_tokens_of_its_own_grows_the_vocabulary_past_the_shared_140():
    """In a fresh process (the registry is global): registering a task appends the names the
    vocabulary lacks after id 139, reuses the ids of names it has, moves no shared id, and
    gives the task's models 140 + (new names) outputs; the report's tasks keep 140."""
    script = """
import json
from rlt.tasks import get_task, vocab
from rlt.tasks.base import Task, register
before = list(vocab.TOKENS)
@register
class Probe(Task):
    name = "vocab_probe"
    new_tokens = ("x", "7", "y", "x")
    default_train_lengths = (1, 2)
    default_test_lengths = (2,)
    chance = None
    def sample(self, rng, length): return None
    def render(self, instance): raise NotImplementedError
print(json.dumps({
    "unchanged": vocab.TOKENS[:140] == before[:140] and len(before) == 140,
    "ids": [vocab.TOKEN_TO_ID[n] for n in ("x", "7", "y")],
    "decoded": vocab.decode(vocab.encode("x 7 y")),
    "size": get_task("vocab_probe").vocab_size,
    "parity": get_task("parity").vocab_size,
}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    got = json.loads(out.stdout)
    assert got["unchanged"] and got["parity"] == 140
    assert got["ids"] == [140, 5 + 7, 141]  # "7" is the shared digit (ids 5-14 are 0-9)
    assert got["decoded"] == "x 7 y" and got["size"] == 142
