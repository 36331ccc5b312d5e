"""The state-intervention study (issue 39): which part of the state carries the computation.

    python docs/results/state/study.py run RUN_DIR [RUN_DIR ...]   # score each run's kept
        # checkpoint with every intervention of INTERVENTIONS (eval.py, one thread), then copy
        # the small result files (state_*.json, results.json, config.yaml, status.json) into
        # runs/ here
    python docs/results/state/study.py                             # print the study's table

Every number of the page is read from runs/ by the second command; checkpoints are not
committed, so the first needs the training roots.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
RUNS = HERE / "runs"
FILES = ("results.json", "config.yaml", "status.json")
# (state.drop, state.at) pairs; the parts a family lacks are skipped for it.
INTERVENTIONS = (
    ("feedback", "8"),
    ("window", "8"),
    ("memory", "8"),
    ("all", "8"),
    ("feedback", "64"),
    ("memory", "64"),
    ("feedback", "every:1"),
    ("feedback", "every:4"),
    ("feedback", "every:16"),
    ("feedback", "every:64"),
)
PARTS = {"rlt": ("feedback", "window", "memory")}  # other families: memory only


def _family(run: Path) -> str:
    return json.loads((run / "results.json").read_text())["run"]["family"]


def score(runs: list[Path]) -> None:
    for run in runs:
        have = PARTS.get(_family(run), ("memory",))
        cell = Path(*run.resolve().parts[-5:])  # sweep/task/model/arch/seed
        out = RUNS / cell
        out.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copy2(run / name, out / name)
        for drop, at in INTERVENTIONS:
            if drop != "all" and drop not in have:
                continue
            argv = [sys.executable, "eval.py", str(run), f"state.drop={drop}", f"state.at={at}"]
            proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{cell} {drop}@{at}: {proc.stderr.strip()}", file=sys.stderr)
                continue
            for f in run.glob("state_*.json"):
                shutil.copy2(f, out / f.name)
            print(f"{cell}: drop {drop} at {at}")


def _acc(rows: list[dict]) -> dict[int, float]:
    return {r["length"]: 100 * r["value"] for r in rows if r["metric"] == "acc"}


def table() -> str:
    """One row per cell (task/model/arch over its seeds) and intervention: accuracy (%) at
    each test length, mean over seeds, the seeds' values at the longest length."""
    groups: dict[tuple[str, str], dict[int, list[float]]] = {}
    lengths: dict[str, list[int]] = {}
    for res in sorted(RUNS.rglob("results.json")):
        run = res.parent
        cell = "/".join(run.relative_to(RUNS).parts[:4])  # sweep/task/model/arch: budgets apart
        results = json.loads(res.read_text())
        blocks = [("none", results["test"])] + [
            (
                f"{b['intervention']['drop'][0] if len(b['intervention']['drop']) == 1 else 'all'}"
                f" @ {b['intervention']['at']}",
                b["rows"],
            )
            for b in (json.loads(p.read_text()) for p in sorted(run.glob("state_*.json")))
        ]
        for name, rows in blocks:
            acc = _acc(rows)
            lengths.setdefault(cell, sorted(acc))
            for length, value in acc.items():
                groups.setdefault((cell, name), {}).setdefault(length, []).append(value)
    lines = []
    for cell in sorted(lengths):
        ls = lengths[cell]
        lines += [
            f"\n**{cell}** (test accuracy %, mean over seeds; per seed at {ls[-1]})\n",
            "| state dropped | " + " | ".join(str(n) for n in ls) + f" | seeds at {ls[-1]} |",
            "|---|" + "---:|" * (len(ls) + 1),
        ]
        names = [n for (c, n) in groups if c == cell]
        for name in sorted(names, key=lambda n: (n != "none", n)):
            by_len = groups[(cell, name)]
            means = " | ".join(
                f"{statistics.mean(by_len[n]):.2f}" if n in by_len else "-" for n in ls
            )
            seeds = ", ".join(f"{v:.2f}" for v in by_len.get(ls[-1], []))
            lines.append(f"| {name} | {means} | {seeds} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "run":
        if len(argv) < 2:
            print("usage: study.py run RUN_DIR [RUN_DIR ...]", file=sys.stderr)
            return 2
        score([Path(a) for a in argv[1:]])
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
