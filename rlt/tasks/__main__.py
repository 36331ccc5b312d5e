"""Inspect the tasks from the command line.

    python -m rlt.tasks list
    python -m rlt.tasks dump TASK --split {train,val,test} [--length L] [--n N] [--index I]
                        [--data-seed S] [--option KEY=VALUE ...]

``dump`` prints one JSON object per line: ``input`` (the prompt, readable token names
separated by spaces), ``target`` (the supervised labels in order, e.g. answer + EOS),
``response``, ``length``, ``index``, ``prompt_len`` and the raw ``tokens`` / ``labels`` ids.
``vocab.encode(input)`` gives back the prompt ids and ``vocab.encode(target)`` the labels.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from rlt.tasks import TASKS, get_task, vocab
from rlt.tasks.base import Example


def example_record(task_name: str, ex: Example) -> dict[str, Any]:
    """The JSON record ``dump`` prints for one example."""
    return {
        "task": task_name,
        "split": ex.split,
        "index": ex.index,
        "length": ex.length,
        "input": vocab.decode(ex.prompt),
        "target": vocab.decode(ex.target),
        "response": vocab.decode(ex.response),
        "prompt_len": ex.prompt_len,
        "tokens": ex.tokens,
        "labels": ex.labels,
    }


def _parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``; VALUE is read as JSON when it parses (``[3,40]``, ``7``), else a string."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--option expects KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlt.tasks", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="tasks with their training and test lengths")
    dump = sub.add_parser("dump", help="print examples as JSON lines")
    dump.add_argument("task", choices=sorted(TASKS))
    dump.add_argument("--split", choices=("train", "val", "test"), default="train")
    dump.add_argument("--length", type=int, help="test only; default: the task's first test length")
    dump.add_argument("--n", type=int, default=5, help="number of examples (default 5)")
    dump.add_argument("--index", type=int, default=0, help="first example index (default 0)")
    dump.add_argument("--data-seed", type=int, help="data seed (default: the task's)")
    dump.add_argument(
        "--option", type=_parse_option, action="append", default=[], metavar="KEY=VALUE"
    )
    args = parser.parse_args(argv)

    if args.command == "list":
        for name in sorted(TASKS):
            t = get_task(name)
            chance = "-" if t.chance is None else f"{t.chance:.4g}"
            print(
                f"{name:14s} train {t.train_lengths[0]}-{t.train_lengths[1]:<4d} "
                f"test {','.join(map(str, t.test_lengths)):34s} chance {chance:7s} "
                f"n_val {t.n_val:<4d} n_test {t.n_test:<5d} metrics {','.join(t.metrics)}"
            )
        return 0

    options = dict(args.option)
    if args.data_seed is not None:
        options["data_seed"] = args.data_seed
    try:
        task = get_task(args.task, **options)
        if args.split != "test" and args.length is not None:
            raise ValueError(
                f"--length applies to --split test only (split {args.split!r} samples its lengths)"
            )
        length = (args.length or task.test_lengths[0]) if args.split == "test" else None
        for i in range(args.index, args.index + args.n):
            print(json.dumps(example_record(task.name, task.example(args.split, i, length))))
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
