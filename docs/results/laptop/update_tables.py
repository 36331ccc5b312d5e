"""Rewrite the generated parts of docs/results/laptop/README.md from what
`python analysis/tables.py docs/results/laptop/runs/laptop docs/results/laptop/runs/laptop_long
docs/results/laptop/runs/laptop_scout` prints and from the committed result files, so every number on the page is the tables' (issues
20 and 28). Regions, between their markers:

    <!-- verdicts:start --> ... <!-- verdicts:end -->   the verdict and beyond-the-report tables
    <!-- tables:start --> ... <!-- tables:end -->       Table 1, lengths, scaled accuracy, cost
    <!-- early-stop:start --> ... <!-- early-stop:end -->  the 17 early-stopped runs beside their
                                                       fixed-step retrains
    <!-- budget:start --> ... <!-- budget:end -->       steps/s and core-hours per cell and budget
    <!-- schedule:start --> ... <!-- schedule:end -->   issue 38 item 4: the chunk-size schedule
                                                       at 16,000 steps beside RLT-1 and RLT-2 B=4
    <!-- curves:start --> ... <!-- curves:end -->       issue 54: the untestable cells' learning
                                                       curves, first step at the prerequisite

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_curves  # noqa: E402 - the study view beside this page

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs" / "laptop"
LONG = HERE / "runs" / "laptop_long"
SCOUT = HERE / "runs" / "laptop_scout"
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
        dirs = [str(RUNS)] + [str(d) for d in (LONG, SCOUT) if d.is_dir()]
        assert tables_main([*dirs, "--out", tmp, "--no-per-seed"]) == 0
    found = sections(buffer.getvalue())
    page = old = (HERE / "README.md").read_text()
    bodies = {
        region: "\n".join(text for title, text in found.items() if title.startswith(prefixes))
        for region, prefixes in REGIONS.items()
    }
    bodies["early-stop"] = early_stop_table()
    bodies["budget"] = budget_table()
    bodies["schedule"] = schedule_section()
    bodies["curves"] = "\n".join(
        (learning_curves.table(), learning_curves.readiness(), learning_curves.cost())
    )
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


# Issue 38, item 4: per task, the schedule cells beside the fixed-B cells they sit between.
SCHEDULE_CELLS = {
    "parity_3to16": [
        ("RLT-1 2+2", "rlt1/2+2"),
        ("RLT-2 B=4 2+2", "rlt2_b4/2+2"),
        ("RLT-2 B=4→1 at 50 % 2+2", "rlt2_sched_4to1/2+2"),
        ("RLT-2 B=4→1 at 75 % 2+2", "rlt2_sched_4to1_late/2+2"),
    ],
    "s5_swaps": [
        ("RLT-1 2+2", "rlt1/2+2"),
        ("RLT-2 B=4 2+2", "rlt2_b4/2+2"),
        ("RLT-2 B=4→1 at 50 % 2+2", "rlt2_sched_4to1/2+2"),
    ],
}
# Runs whose training was paused (SIGSTOP while a benchmark had the machine): their wall time
# is not a cost, and they predate timing.cpu_seconds.
PAUSED = {("parity_3to16", "rlt2_sched_4to1/2+2", 42)}


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{mean:.2f} ± {sd:.2f}"


def _stage_costs(task: str, cell: str, seed: int, res: dict) -> list[tuple[str, int, float, str]]:
    """(B, steps, core-seconds, source) per stage of one run: timing.by_interval (process CPU
    time) where recorded; else, for a run without a schedule, its whole training at wall time
    (1-thread runs, one per core: wall ~ core-seconds); else nothing."""
    timing = res.get("timing") or {}
    if (task, cell, seed) in PAUSED:
        return []
    if timing.get("by_interval"):
        return [
            (b, int(c["steps"]), float(c["cpu_seconds"]), "cpu")
            for b, c in sorted(timing["by_interval"].items(), key=lambda kv: -int(kv[0]))
        ]
    if res.get("feedback_schedule") is None and timing.get("train_seconds"):
        b = str((res.get("run") or {}).get("feedback_interval"))
        return [(b, int(timing["timed_steps"]), float(timing["train_seconds"]), "wall")]
    return []


def schedule_section() -> str:
    """Issue 38 item 4: test accuracy at every length (mean ± SD, then per seed), validation
    accuracy at the selected step, and training cost per stage, for the schedule cells and the
    fixed-B cells beside them, all at 16,000 steps (seeds 42-44)."""
    out = []
    for task, cells in SCHEDULE_CELLS.items():
        runs = {
            label: {
                int(p.parent.name[4:]): json.loads(p.read_text())
                for p in sorted((LONG / task / cell).glob("seed*/results.json"))
            }
            for label, cell in cells
        }
        lengths = sorted(
            {
                r["length"]
                for by_seed in runs.values()
                for res in by_seed.values()
                for r in res["test"]
                if r["metric"] == "acc"
            }
        )
        out.append(f"**{task}**, test accuracy (%) by length, checkpoint min_val_loss:\n")
        out.append("| model | n | " + " | ".join(str(n) for n in lengths) + " | val % (selected) |")
        out.append("|---|---:|" + "---:|" * (len(lengths) + 1))
        seeds_lines, cost_lines = [], []
        for (label, cell), by_seed in zip(cells, runs.values()):
            acc = {
                n: [
                    100 * r["value"]
                    for res in by_seed.values()
                    for r in res["test"]
                    if r["metric"] == "acc" and r["length"] == n
                ]
                for n in lengths
            }
            val = [100 * res["selection"]["val"]["acc"] for res in by_seed.values()]
            out.append(
                f"| {label} | {len(by_seed)} | "
                + " | ".join(_mean_sd(acc[n]) for n in lengths)
                + f" | {_mean_sd(val)} |"
            )
            for seed, res in by_seed.items():
                top = [
                    r for r in res["test"] if r["metric"] == "acc" and r["length"] == lengths[-1]
                ]
                seeds_lines.append(
                    f"{label} seed {seed}: {100 * top[0]['value']:.2f} at {lengths[-1]}, "
                    f"val {100 * res['selection']['val']['acc']:.2f}"
                    if top
                    else ""
                )
                stages = _stage_costs(task, cell, seed, res)
                if stages:
                    total = sum(c for _, _, c, _ in stages)
                    parts = ", ".join(
                        f"B={b}: {n:,} steps, {c:,.0f} core-s ({n / c:.1f} steps/s)"
                        for b, n, c, _ in stages
                    )
                    src = "wall time, 1 thread" if stages[0][3] == "wall" else "process CPU time"
                    cost_lines.append(
                        f"{label} seed {seed}: {total:,.0f} core-s in all; {parts} ({src})"
                    )
                else:
                    why = (
                        "paused during a benchmark; wall time is not its cost"
                        if (task, cell, seed) in PAUSED
                        else "not recorded"
                    )
                    cost_lines.append(f"{label} seed {seed}: cost {why}")
        if not any(runs[label] for label, _ in cells[2:]):
            out.append("\nNo schedule run of this task has finished yet.")
        out.append("\nPer seed: " + "; ".join(line for line in seeds_lines if line) + ".")
        out.append("\nTraining cost per stage:\n")
        out.extend(f"- {line}" for line in cost_lines)
        out.append("")
    return "\n".join(out) + "\n"


def _core_seconds_at(task: str, cell: str, seed: int, res: dict) -> dict[int, float] | None:
    """Core-seconds spent by each validation step of one run, from its stage costs (each
    stage's steps at that stage's mean seconds per step); None where the cost is unknown."""
    stages = _stage_costs(task, cell, seed, res)
    if not stages:
        return None
    rate = {b: c / n for b, n, c, _ in stages}
    schedule = res.get("feedback_schedule") or [
        [0, int(stages[0][0]) if stages[0][0].isdigit() else None]
    ]
    out, spent, last = {}, 0.0, 0
    for row in res["val_curve"]:
        for step in range(last, row["step"]):
            b = max((s for s in schedule if s[0] <= step), key=lambda s: s[0])[1]
            spent += rate.get(str(b), rate[stages[0][0]])
        last = row["step"]
        out[row["step"]] = spent
    return out


def schedule_figure(path: Path) -> None:
    """Validation accuracy against core-seconds, mean over the seeds whose cost is known, one
    panel per task: RLT-1 2+2, RLT-2 B=4 2+2 and the schedules (issue 38, item 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SCHEDULE_CELLS), figsize=(6 * len(SCHEDULE_CELLS), 4))
    for ax, (task, cells) in zip(axes, SCHEDULE_CELLS.items()):
        for label, cell in cells:
            curves = []
            for p in sorted((LONG / task / cell).glob("seed*/results.json")):
                res = json.loads(p.read_text())
                spent = _core_seconds_at(task, cell, int(p.parent.name[4:]), res)
                if spent:
                    curves.append(
                        {r["step"]: (spent[r["step"]], r["acc"]) for r in res["val_curve"]}
                    )
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            x = [sum(c[s][0] for c in curves) / len(curves) for s in steps]
            y = [100 * sum(c[s][1] for c in curves) / len(curves) for s in steps]
            ax.plot(x, y, label=f"{label} (n={len(curves)})", lw=1.2)
        ax.set_title(f"{task}, 16,000 steps")
        ax.set_xlabel("core-seconds of training (mean over seeds)")
        ax.set_ylabel("validation accuracy (%)")
        ax.set_ylim(0, 101)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    old, new = rendered()
    if argv and "--check" in argv:
        if old != new:
            print("docs/results/laptop/README.md is out of date: run update_tables.py")
            return 1
        return 0
    (HERE / "README.md").write_text(new)
    print(f"updated {HERE / 'README.md'}")
    schedule_figure(HERE / "figures" / "schedule_val_vs_core_seconds.png")
    learning_curves.figure(HERE / "figures" / "learning_curves.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
