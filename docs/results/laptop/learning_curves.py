"""Issue 54's learning curves: are the cells that never learned in distribution slow, or stuck?

For each cell a finding could not be tested on (its prerequisite: validation accuracy >= the
report's figure - 10, rlt/analysis/findings.py), every seed's validation curve in each tier that
has the cell (the 16,000-step tier now; sweep=laptop_scout's 48,000 steps once run), against the
training examples seen, with the prerequisite as a line; and a table of the first step at which
each seed met it ("not by N" where it never did). update_tables.py puts both on the page.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlt.analysis.findings import MIN_SEEDS, learned_threshold
from rlt.training.checkpoints import select_step

HERE = Path(__file__).resolve().parent
TIERS = (
    ("16,000 steps", HERE / "runs" / "laptop_long"),
    ("48,000 steps", HERE / "runs" / "laptop_scout"),
)
EXAMPLES_PER_STEP = 64  # the laptop presets' global batch
# BENCHMARKS.md, "K seeds in one step": K=3 seeds in one step against 3 single steps, measured at
# the laptop shape on this project's Intel host (stack_vs_k_singles where the family stacks,
# otherwise batch_vs_k_singles, the floor no stacked step can beat)
STACK_BENCH = HERE.parents[1] / "results" / "bench" / "2026-12-06" / "stack3_native.json"
# (finding, task, the run directory's model/arch, the column the verdict table names), in the
# order the report leans on them (issue 54)
SCOUTED = (
    ("F4", "s5_swaps", "transformer/L4", "Transformer 4"),
    ("F5", "s5_swaps", "rlt2_b4/2+2", "RLT-2 B=4 2+2"),
    ("F2", "parity_3to16", "rlt0/1+1", "RLT-0 1+1"),
    ("F8", "mod5_brackets_3to16", "rlt1/2+2", "RLT-1 2+2"),
    ("F8", "mod5_brackets_3to16", "transformer/L4", "Transformer 4"),
    ("F3 at 3-40", "parity", "rlt2_b4/2+2", "RLT-2 B=4 2+2"),
    ("F3 at 3-40", "parity", "rlt1/2+2", "RLT-1 2+2"),
    ("F3 at 3-40", "parity", "rlt0/1+1", "RLT-0 1+1"),
)


def finished(root: Path, task: str, cell: str) -> dict[int, dict]:
    """seed -> results.json of the cell's finished runs under ``root`` that validated."""
    out = {}
    for path in sorted((root / task / cell).glob("seed*/results.json")):
        res = json.loads(path.read_text())
        if res.get("val_curve"):  # a run that never validated has no curve to show
            out[int(path.parent.name[4:])] = res
    return out


def curves(root: Path, task: str, cell: str) -> dict[int, list[tuple[int, float]]]:
    """seed -> [(step, validation accuracy %)] of the cell's finished runs under ``root``."""
    return {
        seed: [(r["step"], 100 * r["acc"]) for r in res["val_curve"]]
        for seed, res in finished(root, task, cell).items()
    }


def testable_from(runs: list[list[dict]], threshold: float) -> tuple[int | None, float]:
    """(the first validation step B at which the seeds' mean validation accuracy (%) at the
    checkpoint the report's rule selects within B (lowest validation loss, earliest on ties) is
    at or above ``threshold``, or None; that mean at the last step all seeds validated).

    This is the cell's prerequisite as rlt/analysis/findings.py applies it, read from the
    curves of longer runs: a run of B steps would have decayed its learning rate by B."""
    steps = sorted(set.intersection(*({r["step"] for r in curve} for curve in runs)))
    mean = float("nan")
    for budget in steps:
        selected = [
            select_step([r for r in c if r["step"] <= budget], "min_val_loss") for c in runs
        ]
        mean = sum(100 * r["acc"] for r in selected) / len(selected)
        if mean >= threshold:
            return budget, mean
    return None, mean


def stacking_ratios() -> dict[str, tuple[float, bool]]:
    """family -> (3 seeds' step in one against 3 single steps, whether the family stacks)."""
    rows = json.loads(STACK_BENCH.read_text())["stack"]["rows"]
    return {
        family: (row["stack_vs_k_singles"], True)
        if row.get("stack_vs_k_singles") is not None
        else (row["batch_vs_k_singles"], False)
        for family, row in rows.items()
    }


def _stacked(hours: float, ratio: float | None, stacks: bool) -> str:
    if ratio is None:
        return "-"
    return f"{hours * ratio:.2f}" if stacks else f">= {hours * ratio:.2f} (does not stack yet)"


def readiness() -> str:
    """Issue 54 item 4, per scouted cell and tier: whether its seeds meet the prerequisite, from
    which budget they would (the seeds' mean at the selected checkpoint), and what training its
    seeds to that budget costs, as measured (1 thread) and with the seeds stacked."""
    ratios = stacking_ratios()
    lines = [
        "| finding | cell | tier | seeds | val % at the selected checkpoint, mean (seeds at or "
        "above) | testable from (mean at or above the prerequisite) | core-hours to that "
        "budget, all seeds: measured | stacked (K=3) |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for finding, task, cell, column in SCOUTED:
        threshold, _ = learned_threshold(task, column)
        family = cell.split("/")[0].split("_")[0]
        for budget, root in TIERS:
            runs = finished(root, task, cell)
            if not runs:
                continue
            curves_ = [res["val_curve"] for res in runs.values()]
            step, _ = testable_from(curves_, threshold)
            last = [100 * res["selection"]["val"]["acc"] for res in runs.values()]
            above = sum(a >= threshold for a in last)
            mean = sum(last) / len(last)
            if len(runs) < MIN_SEEDS:
                when, measured, stacked = f"{len(runs)} of {MIN_SEEDS} seeds run", "", ""
            elif step is None:
                when, measured, stacked = f"not by {budget.split()[0]}", "", ""
            else:
                per_step = [
                    r["timing"]["train_seconds"] / r["timing"]["timed_steps"] for r in runs.values()
                ]
                hours = len(runs) * step * (sum(per_step) / len(per_step)) / 3600
                when, measured = f"{step:,}", f"{hours:.2f}"
                stacked = _stacked(hours, *ratios.get(family, (None, False)))
            lines.append(
                f"| {finding} | {task} {column} | {budget} | {len(runs)} | {mean:.2f} "
                f"({above} of {len(runs)}) | {when} | {measured} | {stacked} |"
            )
    return "\n".join(lines) + "\n"


def first_meeting(curve: list[tuple[int, float]], threshold: float) -> int | None:
    return next((step for step, acc in curve if acc >= threshold), None)


def table() -> str:
    lines = [
        "| finding | cell | budget | seed | prerequisite | first step at or above it | "
        "best val % (step) | last val % |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for finding, task, cell, column in SCOUTED:
        threshold, what = learned_threshold(task, column)
        for budget, root in TIERS:
            for seed, curve in curves(root, task, cell).items():
                step = first_meeting(curve, threshold)
                met = f"{step:,}" if step is not None else f"not by {curve[-1][0]:,}"
                best = max(curve, key=lambda r: r[1])
                lines.append(
                    f"| {finding} | {task} {column} | {budget} | {seed} | val >= {threshold:.2f} "
                    f"({what}) | {met} | {best[1]:.2f} ({best[0]:,}) | {curve[-1][1]:.2f} |"
                )
    return "\n".join(lines) + "\n"


def cost() -> str:
    """What the scouts cost: each cell's measured training core-hours per 16,000-step run (one
    thread; timing.train_seconds, validation and testing excluded), three times that as the
    estimate of a 48,000-step scout, per run and for its three seeds, and what the scouts that
    ran took, measured the same way."""
    lines = [
        "| cell | 16,000 steps: core-hours per run (measured as training wall time, mean of n) "
        "| 48,000-step scout: per run, estimated | 3 seeds, estimated | per run, measured (the "
        "same, mean of n) |",
        "|---|---:|---:|---:|---:|",
    ]
    total = 0.0
    for finding, task, cell, column in SCOUTED:
        hours, scouts = (
            [r["timing"]["train_seconds"] / 3600 for r in finished(root, task, cell).values()]
            for _, root in TIERS
        )
        if not hours:
            continue
        mean = sum(hours) / len(hours)
        total += 9 * mean
        measured = f"{sum(scouts) / len(scouts):.1f} (n={len(scouts)})" if scouts else "not run"
        lines.append(
            f"| {finding}: {task} {column} | {mean:.2f} (n={len(hours)}) | {3 * mean:.1f} | "
            f"{9 * mean:.1f} | {measured} |"
        )
    lines.append(f"| all 24 scouts | | | {total:.0f} | |")
    return "\n".join(lines) + "\n"


def figure(path: Path) -> None:
    """One panel per scouted cell: each seed's validation accuracy against the examples seen
    (every tier that has the cell; dashed: the prerequisite)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharey=True)
    for ax, (finding, task, cell, column) in zip(axes.flat, SCOUTED, strict=True):
        threshold, what = learned_threshold(task, column)
        for (budget, root), style in zip(TIERS, ("-", ":"), strict=True):
            for seed, curve in curves(root, task, cell).items():
                steps, acc = zip(*curve, strict=True)
                ax.plot(
                    [s * EXAMPLES_PER_STEP / 1e6 for s in steps],
                    acc,
                    style,
                    color=f"C{seed % 10}",  # a seed keeps its colour across tiers
                    lw=0.9,
                    label=f"seed {seed}, {budget}",
                )
        ax.axhline(threshold, color="k", ls="--", lw=0.8, label=f"prerequisite ({what})")
        ax.set_title(f"{finding}: {task} {column}", fontsize=9)
        ax.set_xlabel("training examples seen (millions)", fontsize=8)
        ax.set_ylim(0, 101)
        ax.legend(fontsize=6, loc="lower right")
    for ax in axes[:, 0]:
        ax.set_ylabel("validation accuracy (%)")
    fig.suptitle(
        "Cells that had not learned in distribution at 16,000 steps: validation accuracy per seed "
        "(the report's protocol at width 64)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
