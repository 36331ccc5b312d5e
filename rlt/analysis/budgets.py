"""Shorter budgets read from longer runs (``callbacks.budgets``; results.json's
``test_by_budget``).

A run that kept each policy's checkpoint at budget step B is read once more as the run it would
have been judged as had it stopped there: preset ``<preset>@<B>`` (its sweep, step-count and
protocol suffixes kept, so views of different configurations never share a tier), curves cut at
B, the test rows of the checkpoints selected within B. Its learning-rate schedule stays the
whole run's (``schedule_steps``), which the verdict table's budget label says. A view is not a
run of its own: it has no training cost (``sec_per_step`` empty) and the run-level tables leave
it out. Each budget tier expects the cells its base preset expects.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from rlt.analysis.rows import test_rows as scored_rows


def add_budget_views(
    runs: pd.DataFrame,
    expected: pd.DataFrame,
    budgets: dict[str, dict[str, Any]],
    rows: tuple[list[dict], list[dict], list[dict]],
    warnings: list[str],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``runs`` and ``expected`` with a view per (run, budget); the views' val, train and test
    rows are appended to ``rows`` (val, train, test lists). A malformed block is a warning."""
    val_rows, train_rows, test_rows = rows
    views, tiers = [], set()
    by_id = runs.set_index("run_id")
    for rid, block in budgets.items():
        if rid not in by_id.index:
            continue
        base = by_id.loc[rid]
        try:
            steps = sorted((int(b), policies) for b, policies in block.items())
            for step, policies in steps:
                view_id = f"{rid}@{step}"
                scored = scored_rows(view_id, {"test_by_policy": policies})
                selected = (policies.get("min_val_loss") or {}).get("step")
                views.append(
                    {
                        **base.to_dict(),
                        "run_id": view_id,
                        "preset": f"{base['preset']}@{step}",
                        "max_steps": step,
                        "step": step,
                        "selection_step": selected,
                        "stopped_early": None,
                        "schedule_steps": base["max_steps"],
                        "sec_per_step": None,
                        "train_seconds": None,
                    }
                )
                tiers.add((base["preset"], step))
                val_rows += [dict(r, run_id=view_id) for r in _upto(val_rows, rid, step)]
                train_rows += [dict(r, run_id=view_id) for r in _upto(train_rows, rid, step)]
                test_rows += scored
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            warnings.append(f"{rid}: test_by_budget unreadable ({type(e).__name__}: {e}); skipped")
    if not views:
        return runs, expected
    out = pd.concat([runs, pd.DataFrame(views, columns=runs.columns)], ignore_index=True)
    more = [
        expected[expected["preset"] == preset].assign(preset=f"{preset}@{step}")
        for preset, step in sorted(tiers)
    ]
    return out, pd.concat([expected, *more], ignore_index=True)


def _upto(rows: list[dict], run_id: str, step: int) -> list[dict]:
    return [r for r in rows if r["run_id"] == run_id and r["step"] <= step]


def budget_of(preset: str) -> tuple[str, int | None]:
    """``"laptop_scout@16000"`` -> ``("laptop_scout", 16000)`` (what follows the step, a
    protocol or sweep suffix, stays with the preset); a plain preset -> ``(preset, None)``."""
    m = re.match(r"^(.*?)@(\d+)(.*)$", preset)
    return (m[1] + m[3], int(m[2])) if m else (preset, None)
