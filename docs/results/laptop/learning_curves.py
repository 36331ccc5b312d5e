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

from rlt.analysis.findings import learned_threshold

HERE = Path(__file__).resolve().parent
TIERS = (
    ("16,000 steps", HERE / "runs" / "laptop_long"),
    ("48,000 steps", HERE / "runs" / "laptop_scout"),
)
EXAMPLES_PER_STEP = 64  # the laptop presets' global batch
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


def curves(root: Path, task: str, cell: str) -> dict[int, list[tuple[int, float]]]:
    """seed -> [(step, validation accuracy %)] of the cell's finished runs under ``root``."""
    out = {}
    for path in sorted((root / task / cell).glob("seed*/results.json")):
        res = json.loads(path.read_text())
        curve = [(r["step"], 100 * r["acc"]) for r in res.get("val_curve") or []]
        if curve:  # a run that never validated has no curve to show
            out[int(path.parent.name[4:])] = curve
    return out


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
    thread; timing.train_seconds, validation and testing excluded), and three times that for a
    48,000-step scout, per run and for its three seeds."""
    lines = [
        "| cell | 16,000 steps: core-hours per run (measured, mean of n) | 48,000-step scout: "
        "per run | 3 seeds |",
        "|---|---:|---:|---:|",
    ]
    total = 0.0
    for finding, task, cell, column in SCOUTED:
        hours = [
            json.loads(p.read_text())["timing"]["train_seconds"] / 3600
            for p in sorted((TIERS[0][1] / task / cell).glob("seed*/results.json"))
        ]
        if not hours:
            continue
        mean = sum(hours) / len(hours)
        total += 9 * mean
        lines.append(
            f"| {finding}: {task} {column} | {mean:.2f} (n={len(hours)}) | {3 * mean:.1f} | "
            f"{9 * mean:.1f} |"
        )
    lines.append(f"| all 24 scouts | | | {total:.0f} |")
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
