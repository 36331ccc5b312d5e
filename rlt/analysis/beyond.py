"""Beyond the report: where a recurrent baseline (the LSTM, DeltaNet, DeltaProduct, PD-SSM)
matches or beats RLT-1 on the scaled accuracy beyond the training lengths, per task and
budget (the laptop tier's "beyond the report" table)."""

from __future__ import annotations

import pandas as pd

from rlt.analysis.collect import Collection
from rlt.analysis.table_core import Table
from rlt.analysis.tables import scaled_accuracy_table
from rlt.analysis.tiers import budget_label, by_preset


def beyond_table(
    c: Collection, rlt1: dict[str, str], baselines: tuple[str, ...], *, policy="min_val_loss"
) -> Table:
    """Where a recurrent baseline (the LSTM, DeltaNet [-1,1], DeltaProduct, PD-SSM) matches or
    beats RLT-1: scaled accuracy over the lengths beyond training (the scaled table), per task;
    "beats" = its mean - SD above RLT-1's mean + SD, "matches" = the two mean +- SD ranges
    overlap."""
    rows = []
    for preset, sub in by_preset(c):
        scaled = scaled_accuracy_table(sub, policy=policy).data
        rows += _beyond_rows(scaled, rlt1, baselines, budget_label(preset, sub)[0])
    display = pd.DataFrame(rows).set_index("task") if rows else pd.DataFrame()
    return Table(
        name="beyond",
        title="Beyond the report: the recurrent baselines against RLT-1 (scaled accuracy x 100 "
        "over the lengths beyond training), per budget",
        display=display,
        data=pd.DataFrame(rows),
        notes=[
            "beats = the baseline's mean - SD above RLT-1's mean + SD; below = the reverse; "
            "matches = the ranges overlap; a cell of one seed is not judged"
        ],
    )


def _mean_sd(row) -> str:
    """``mean ± SD (n=k)``; one seed has no SD: ``mean (n=1)``."""
    if row["n"] < 2:
        return f"{row['mean']:.2f} (n={int(row['n'])})"
    return f"{row['mean']:.2f} ± {row['sd']:.2f} (n={int(row['n'])})"


def _beyond_rows(scaled: pd.DataFrame, rlt1: dict, baselines: tuple[str, ...], budget: str):
    rows = []
    for task, column in rlt1.items():
        here = scaled[scaled["key"] == task]
        ref = here[here["column"] == column]
        if ref.empty:
            continue
        r = ref.iloc[0]
        for base in baselines:
            hit = here[here["column"] == base]
            if hit.empty:
                continue
            b = hit.iloc[0]
            if b["n"] < 2 or r["n"] < 2:  # one seed has no spread to compare
                relation = "not judged (one seed)"
            elif b["mean"] - b["sd"] > r["mean"] + r["sd"]:
                relation = "beats"
            elif b["mean"] + b["sd"] < r["mean"] - r["sd"]:
                relation = "below"
            else:
                relation = "matches"
            rows.append(
                {
                    "task": task,
                    "budget": budget,
                    "baseline": base,
                    "baseline scaled acc": _mean_sd(b),
                    "vs": column,
                    "RLT-1 scaled acc": _mean_sd(r),
                    "relation": relation,
                }
            )
    return rows
