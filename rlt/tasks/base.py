"""The task abstraction: an indexed, seed-shared source of supervised token sequences.

A task turns a problem instance (bits, an expression, permutations, two operands) into one
token sequence: a prompt (``<bos>`` and the input, plus a boundary marker where the format
needs one) followed by a response (the answer tokens, ``<eos>`` where the task has one). Each
position carries a label, the vocabulary id that ``logits[t]`` must predict, or ``IGNORE``.

Why every example is a pure function of ``(task, data seed, split, index[, length])``: the
report gives every architecture and init seed the same training stream, validation set and
test sets. Seeding a fresh generator per example from a ``SeedSequence`` of those integers
makes that hold across processes, machines and resumes, with no state to save: example ``i``
of the training stream is the same whether it is the first thing a process generates or the
millionth, and a resumed run simply asks for index ``i`` again. The three splits use
different seed streams (the split code is part of the seed); test examples also mix in their
length, so the 1,024 examples at length 64 are unrelated to those at length 65, and a smaller
test set (``n_test=128``) is the first 128 examples of the full one.

Options that change the problem a model sees (lengths, supervision, composition) are
constructor keywords, validated up front with a ``ValueError`` that names the option.
"""

from __future__ import annotations

import inspect
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from rlt.tasks import vocab

IGNORE = -100
"""Label of an unsupervised position (``torch.nn.functional.cross_entropy``'s ignore_index)."""

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
"""Part of every example's seed, so the three splits draw from unrelated random streams."""

DEFAULT_DATA_SEED = 1234


@dataclass(frozen=True, slots=True)
class Example:
    """One rendered sequence; see docs/DESIGN.md section 3 for the batch it becomes."""

    tokens: list[int]  # prompt + response, BOS first
    labels: list[int]  # labels[t] is what logits[t] must predict; IGNORE = unsupervised
    score: list[bool]  # positions that count for acc / token_acc / seq_acc
    prompt_len: int  # tokens[:prompt_len] is the prompt (what greedy generation starts from)
    length: int  # the task's length: symbols, operations or digits per operand
    index: int
    split: str

    @property
    def prompt(self) -> list[int]:
        return self.tokens[: self.prompt_len]

    @property
    def response(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def target(self) -> list[int]:
        """The supervised labels in order: what a model must produce, e.g. answer + EOS."""
        return [y for y in self.labels if y != IGNORE]


class Rendered(NamedTuple):
    """What a task's ``render`` returns; ``score`` defaults to the supervised positions."""

    tokens: list[int]
    labels: list[int]
    prompt_len: int
    length: int


TASKS: dict[str, type[Task]] = {}
"""Registry: task name -> Task class. Configs select tasks by these names."""


def register(cls: type[Task]) -> type[Task]:
    """Class decorator adding a task to ``TASKS`` under ``cls.name``."""
    if cls.name in TASKS:
        raise ValueError(f"task name {cls.name!r} registered twice ({TASKS[cls.name]} and {cls})")
    vocab.add_tokens(cls.new_tokens)
    TASKS[cls.name] = cls
    return cls


def get_task(name: str, **options: Any) -> Task:
    """Build the task registered as ``name``; unknown names and options raise ``ValueError``."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name](**options)


def check_int(value: Any, option: str, minimum: int) -> int:
    """Accept ints (and int-valued config scalars), reject bools, floats and small values."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"option {option!r} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"option {option!r} must be >= {minimum}, got {value}")
    return int(value)


class Task(ABC):
    """Base class: subclasses define ``sample`` (draw an instance) and ``render`` (tokens).

    Class attributes every task sets: ``name``, ``default_train_lengths`` (inclusive range),
    ``default_test_lengths``, ``chance`` (primary-metric chance level, None where undefined),
    ``acc_mode`` ("last": ``acc`` is correctness at the last scored position; "tokens": the
    fraction of scored positions correct, used by addition).
    """

    name: ClassVar[str]
    default_train_lengths: ClassVar[tuple[int, int]]
    default_test_lengths: ClassVar[tuple[int, ...]]
    chance: ClassVar[float | None]
    acc_mode: ClassVar[str] = "last"
    # Symbols beyond the shared 140-token vocabulary (rlt.tasks.vocab); registering the task
    # appends them, and its models get vocab_size outputs.
    new_tokens: ClassVar[tuple[str, ...]] = ()
    default_n_val: ClassVar[int] = 768
    default_n_test: ClassVar[int] = 1024

    def __init__(
        self,
        *,
        data_seed: int = DEFAULT_DATA_SEED,
        train_lengths: Sequence[int] | None = None,
        test_lengths: Sequence[int] | None = None,
        n_val: int | None = None,
        n_test: int | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(map(repr, sorted(unknown)))} for task {self.name!r}; "
                f"valid options: {', '.join(self.option_names())}"
            )
        self.data_seed = check_int(data_seed, "data_seed", 0)
        self.n_val = check_int(self.default_n_val if n_val is None else n_val, "n_val", 1)
        self.n_test = check_int(self.default_n_test if n_test is None else n_test, "n_test", 1)

        lo_hi = self.default_train_lengths if train_lengths is None else tuple(train_lengths)
        if len(lo_hi) != 2:
            raise ValueError(
                f"option 'train_lengths' must be [min, max] (inclusive), got {train_lengths!r}"
            )
        lo, hi = (check_int(v, "train_lengths", 1) for v in lo_hi)
        if lo > hi:
            raise ValueError(f"option 'train_lengths' must have min <= max, got [{lo}, {hi}]")
        for n in (lo, hi):
            self.check_length(n, option="train_lengths")
        self.train_lengths: tuple[int, int] = (lo, hi)

        lengths = self.default_test_lengths if test_lengths is None else tuple(test_lengths)
        if not lengths:
            raise ValueError("option 'test_lengths' must list at least one length")
        self.test_lengths: tuple[int, ...] = tuple(check_int(n, "test_lengths", 1) for n in lengths)
        for n in self.test_lengths:
            self.check_length(n, option="test_lengths")
        self._task_code = zlib.crc32(self.name.encode())

    # ----------------------------------------------------------------- what subclasses define
    @abstractmethod
    def sample(self, rng: np.random.Generator, length: int) -> Any:
        """Draw one problem instance of the given length (already validated)."""

    @abstractmethod
    def render(self, instance: Any) -> Rendered:
        """Instance -> tokens, labels, prompt length and task length. Deterministic."""

    def check_length(self, length: int, option: str = "length") -> None:
        """Raise ``ValueError`` naming ``option`` if this task cannot produce ``length``."""
        check_int(length, option, 1)

    def sample_train(self, rng: np.random.Generator) -> Any:
        """Draw an instance from the training distribution (lengths uniform over the range)."""
        return self.sample(rng, int(rng.integers(self.train_lengths[0], self.train_lengths[1] + 1)))

    def task_options(self) -> dict[str, Any]:
        """The task-specific options (e.g. supervision); base options are in ``config``."""
        return {}

    @property
    def vocab_size(self) -> int:
        """Outputs a model of this task needs: the shared 140, plus the task's own tokens."""
        return vocab.size_for(self.new_tokens)

    @property
    def metrics(self) -> tuple[str, ...]:
        """Names of the metrics worth reporting for this task (keys of ``rlt.tasks.metrics``)."""
        return ("acc", "token_acc", "seq_acc")

    # ------------------------------------------------------------------------ the data protocol
    @classmethod
    def option_names(cls) -> list[str]:
        """Every keyword the constructor accepts, for error messages and configs."""
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            for p in inspect.signature(init).parameters.values():
                if p.kind is p.KEYWORD_ONLY and p.name not in names:
                    names.append(p.name)
        return names

    def config(self) -> dict[str, Any]:
        """Everything that determines the data, as plain values (for logs and results.json)."""
        return {
            "name": self.name,
            "data_seed": self.data_seed,
            "train_lengths": list(self.train_lengths),
            "test_lengths": list(self.test_lengths),
            "n_val": self.n_val,
            "n_test": self.n_test,
            **self.task_options(),
        }

    def rng(self, split: str, index: int, length: int = 0) -> np.random.Generator:
        """The generator for one example: seeded by (data seed, task, split, length, index)."""
        key = [self.data_seed, self._task_code, SPLIT_CODES[split], length, index]
        return np.random.default_rng(np.random.SeedSequence(key))

    def example(self, split: str, index: int, length: int | None = None) -> Example:
        """Example ``index`` of ``split``; ``length`` is required for, and only for, test."""
        if split not in SPLIT_CODES:
            raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLIT_CODES)}")
        index = check_int(index, "index", 0)
        if split == "test":
            if length is None:
                raise ValueError(
                    "split 'test' needs a length (one of task.test_lengths or any valid length)"
                )
            self.check_length(length)
            instance = self.sample(self.rng(split, index, int(length)), int(length))
        else:
            if length is not None:
                raise ValueError(
                    f"split {split!r} draws its lengths from train_lengths={list(self.train_lengths)}; "
                    "pass length only with split='test'"
                )
            instance = self.sample_train(self.rng(split, index))
        return self.make_example(instance, split=split, index=index)

    def make_example(self, instance: Any, split: str = "test", index: int = 0) -> Example:
        """Render an explicit instance (used by worked examples and tests)."""
        r = self.render(instance)
        score = [y != IGNORE for y in r.labels]
        return Example(r.tokens, r.labels, score, r.prompt_len, r.length, index, split)

    def val_set(self) -> list[Example]:
        """The fixed in-distribution validation set (``n_val`` examples)."""
        return [self.example("val", i) for i in range(self.n_val)]

    def test_set(self, length: int, n: int | None = None) -> list[Example]:
        """The first ``n`` (default ``n_test``) test examples at ``length``."""
        n = self.n_test if n is None else n
        return [self.example("test", i, length) for i in range(n)]

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "name")
        return f"{type(self).__name__}({opts})"


def rendering_problem(task: Task, split: str, index: int, length: int | None = None) -> str | None:
    """What is wrong with one example as ``task.render`` makes it, or None: the contract a
    model and the batches rely on (``Rendered``: lists of ints as long as each other, a prompt
    inside the sequence, ids inside the task's vocabulary, at least one scored position). A
    task that breaks it would train to "done" on nothing, or fail mid-run; the config check
    renders a few examples first (rlt/training/spec.py)."""
    try:
        instance = (
            task.sample(task.rng(split, index, length or 0), length)
            if length
            else (task.sample_train(task.rng(split, index)))
        )
        r = task.render(instance)
    except Exception as e:  # noqa: BLE001 - the task's own code: named, not a traceback
        return f"render raised {type(e).__name__}: {e}"
    where = f"its {split} example {index}" + (f" at length {length}" if length else "")
    if not isinstance(r, Rendered):
        return f"render returned a {type(r).__name__} for {where}, not a Rendered(...)"
    for name in ("tokens", "labels"):
        seq = getattr(r, name)
        if not isinstance(seq, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in seq
        ):
            return f"{where}: {name} must be a list of int token ids, got {type(seq).__name__}"
    tokens, labels, v = r.tokens, r.labels, task.vocab_size
    if len(labels) != len(tokens):
        return f"{where}: {len(labels)} labels for {len(tokens)} tokens (one label per position)"
    if not isinstance(r.prompt_len, int) or not 1 <= r.prompt_len <= len(tokens):
        return f"{where}: prompt_len {r.prompt_len!r} is not within its {len(tokens)} tokens"
    if bad := sorted({x for x in tokens if not 0 <= x < v}):
        return f"{where}: token ids {bad[:5]} outside the vocabulary's 0-{v - 1}"
    scored = [y for y in labels if y != IGNORE]
    if not scored:
        return f"{where}: no position is scored (every label is IGNORE)"
    if bad := sorted({y for y in scored if not 2 <= y < v}):
        return (
            f"{where}: labels {bad[:5]} are no token a model predicts (ids 2-{v - 1}: <pad> 0 "
            f"and <bos> 1 never are; IGNORE={IGNORE} marks an unscored position)"
        )
    return None


def check_rendering(task: Task) -> None:
    """Raise ``ValueError`` naming what is wrong with the first training and validation example
    and the first test example at the shortest and the longest test length."""
    probes = [("train", 0, None), ("val", 0, None)]
    probes += [("test", 0, n) for n in sorted({min(task.test_lengths), max(task.test_lengths)})]
    for split, index, length in probes:
        if (problem := rendering_problem(task, split, index, length)) is not None:
            raise ValueError(f"{type(task).__name__}.render: {problem}")


def check_choice(value: Any, option: str, choices: Sequence[str]) -> str:
    """Validate a string option against its allowed values."""
    if value not in choices:
        raise ValueError(
            f"option {option!r} must be one of {', '.join(map(repr, choices))}, got {value!r}"
        )
    return str(value)


SUPERVISIONS = ("final", "prefix")


class FinalOrPrefixSupervision(Task):
    """The ``supervision`` option of parity and the mod-5 tasks: ``final`` labels only the
    answer (the report's protocol, metric ``acc``), ``prefix`` also labels every prefix with its
    running answer (adds ``token_acc`` and ``seq_acc``)."""

    def __init__(self, *, supervision: str = "final", **options: Any) -> None:
        self.supervision = check_choice(supervision, "supervision", SUPERVISIONS)
        super().__init__(**options)

    def task_options(self) -> dict[str, Any]:
        return {"supervision": self.supervision}

    @property
    def metrics(self) -> tuple[str, ...]:
        return ("acc",) if self.supervision == "final" else ("acc", "token_acc", "seq_acc")
