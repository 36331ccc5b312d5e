"""Rewrite the generated parts of docs/results/laptop/README.md from what
`python analysis/tables.py docs/results/laptop/runs/laptop docs/results/laptop/runs/laptop_long`
prints and from the committed result files, so every number on the page is the tables' (issues
20 and 28). Regions, between their markers:

    <!-- verdicts:start --> ... <!-- verdicts:end -->   the verdict and beyond-the-report tables
    <!-- tables:start --> ... <!-- tables:end -->       Table 1, lengths, scaled accuracy, cost
    <!-- early-stop:start --> ... <!-- early-stop:end -->  the 17 early-stopped runs beside their
                                                       fixed-step retrains
    <!-- budget:start --> ... <!-- budget:end -->       steps/s and core-hours per cell and budget

    python docs/results/laptop/update_tables.py            # rewrite
    python docs/results/laptop/update_tables.py --check    # exit 1 if the page is out of date
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import tempfile
from pathlib import Path

from rlt.analysis.cli import tables_main

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs" / "laptop"
LONG = HERE / "runs" / "laptop_long"
EARLY = HERE / "runs" / "laptop_early_stop"
REGIONS = {
    "verdicts": ("Verdicts:", "Beyond the report:"),
    "tables": ("Table 1:", "Test ", "Scaled ", "Training cost:"),
}


def sections(report: str) -> dict[str, str]:
    """The report's level-2 sections by title, demoted to level 3."""
    out = {}
    for part in re.split(r"(?m)^## ", report)[1:]:
        title = part.splitlines()[0]
        out[title] = "### " + part.rstrip() + "\n"
    return out


def rendered() -> tuple[str, str]:
    """(the page as it is, the page with its generated regions rewritten)."""
    buffer = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(buffer):
        dirs = [str(RUNS)] + ([str(LONG)] if LONG.is_dir() else [])
        assert tables_main([*dirs, "--out", tmp, "--no-per-seed"]) == 0
    found = sections(buffer.getvalue())
    page = old = (HERE / "README.md").read_text()
    bodies = {
        region: "\n".join(text for title, text in found.items() if title.startswith(prefixes))
        for region, prefixes in REGIONS.items()
    }
    bodies["early-stop"] = early_stop_table()
    bodies["budget"] = budget_table()
    for region, body in bodies.items():
        start, end = f"<!-- {region}:start -->", f"<!-- {region}:end -->"
        pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
        assert pattern.search(page), f"README.md lacks the {region} markers"
        replacement = f"{start}\n{body}\n{end}"
        page = pattern.sub(lambda _, text=replacement: text, page)
    return old, page


def _results(run_dir: Path) -> dict | None:
    path = run_dir / "results.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _longest_acc(res: dict) -> tuple[int, float]:
    rows = [r for r in res["test"] if r["metric"] == "acc"]
    top = max(rows, key=lambda r: r["length"])
    return top["length"], 100 * top["value"]


def _selected_val(res: dict) -> float:
    return 100 * res["selection"]["val"]["acc"]


def early_stop_table() -> str:
    """The runs sweep=laptop stopped early (before issue 28) beside the same cell and seed
    trained its fixed 3,000 steps: stop step, selected step, validation accuracy at the selected
    checkpoint and test accuracy at the longest length."""
    lines = [
        "| cell | seed | early stop: stopped at | selected step | val % | acc % at longest "
        "| fixed 3,000 steps: selected step | val % | acc % at longest |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for old in sorted(p.parent for p in EARLY.rglob("results.json")):
        cell = old.relative_to(EARLY)
        early, fixed = _results(old), _results(RUNS / cell)
        length, acc = _longest_acc(early)
        row = (
            f"| {cell.parent} | {cell.name[4:]} | {early['stopped_early']} | "
            f"{early['selection']['step']} | {_selected_val(early):.2f} | {acc:.2f} (@{length}) |"
        )
        if fixed is None:
            row += " not retrained yet | | |"
        else:
            length, acc = _longest_acc(fixed)
            row += (
                f" {fixed['selection']['step']} | {_selected_val(fixed):.2f} | "
                f"{acc:.2f} (@{length}) |"
            )
        lines.append(row)
    return "\n".join(lines) + "\n"


def budget_table() -> str:
    """Per cell of each budget: runs done, mean steps/s (1 thread) and the core-hours spent
    (training time of every run, 1 thread each, from results.json timing)."""
    lines = [
        "| budget | cell | runs | steps/s (mean) | core-hours |",
        "|---|---|---:|---:|---:|",
    ]
    total: dict[str, float] = {}
    for name, root in (("3,000 steps", RUNS), ("16,000 steps", LONG)):
        cells: dict[str, list[dict]] = {}
        for path in sorted(root.rglob("results.json")) if root.is_dir() else []:
            cells.setdefault(str(path.parent.parent.relative_to(root)), []).append(
                json.loads(path.read_text())["timing"]
            )
        for cell, timings in cells.items():
            rates = [1 / t["sec_per_step"] for t in timings if t.get("sec_per_step")]
            hours = sum(t.get("train_seconds", 0) for t in timings) / 3600
            total[name] = total.get(name, 0.0) + hours
            rate = f"{sum(rates) / len(rates):.1f}" if rates else "-"
            lines.append(f"| {name} | {cell} | {len(timings)} | {rate} | {hours:.2f} |")
    for name, hours in total.items():
        lines.append(f"| {name} | **all cells** | | | **{hours:.1f}** |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    old, new = rendered()
    if argv and "--check" in argv:
        if old != new:
            print("docs/results/laptop/README.md is out of date: run update_tables.py")
            return 1
        return 0
    (HERE / "README.md").write_text(new)
    print(f"updated {HERE / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
