"""Shorter budgets read from longer runs (``callbacks.budgets``; results.json's
``test_by_budget``).

A run that kept each policy's checkpoint at budget step B is read once more as the run it would
have been judged as had it stopped there: preset ``<preset>@<B>`` (its sweep, step-count and
protocol suffixes kept, so views of different configurations never share a tier), curves cut at
B, the test rows of the checkpoints selected within B. Its learning-rate schedule stays the
whole run's (``schedule_steps``), which the verdict table's budget label says. A view is not a
run of its own: it has no training cost (``sec_per_step`` empty) and the run-level tables leave
it out. Each budget tier expects the cells its base preset expects.

A collection holds one budget per preset (and view); :func:`by_preset` splits it into one
collection per budget, in order of their steps, and :func:`budget_label` names each ("16,000
of 48,000 steps").
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from rlt.analysis.rows import test_rows as scored_rows

if TYPE_CHECKING:  # collect imports this module
    from rlt.analysis.collect import Collection

# Training examples per step of the presets whose verdicts the page shows (batch 64).
_BATCH = {"laptop": 64, "laptop_long": 64, "laptop_scout": 64}
# their step counts, before any run finished
_STEPS = {"laptop": 3000, "laptop_long": 16000, "laptop_scout": 48000}


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


def budget_label(preset: str, c: Collection) -> tuple[str, str]:
    """(short label, what it means) of a budget: ("3,000 steps", "3,000 steps x 64 = 192,000
    training examples (preset laptop)"), from its runs' step count. A budget read from longer
    runs (``<preset>@<step>``: callbacks.budgets) says whose schedule it kept: ("16,000 of
    48,000 steps", "... the checkpoints selected within the first 16,000 steps of 48,000-step
    runs ...")."""
    base, within = budget_of(preset)
    steps = c.used["max_steps"].dropna()
    if steps.empty and base not in _STEPS:
        return preset, f"preset {preset}: no finished run yet"
    n = within if within else int(steps.max()) if not steps.empty else _STEPS[base]
    batch = _BATCH.get(base)
    examples = f" x {batch} = {n * batch:,} training examples" if batch else ""
    if within:
        total = c.used["schedule_steps"].dropna() if "schedule_steps" in c.used else steps[:0]
        of = int(total.max()) if not total.empty else _STEPS.get(base)
        named = "" if base in _BATCH else f" ({preset})"  # a suffixed preset keeps its tier
        return f"{n:,} of {of:,} steps{named}", (
            f"the checkpoints selected within the first {n:,} steps{examples} of {of:,}-step "
            f"runs (preset {base}, callbacks.budgets; the learning rate on the {of:,}-step "
            "schedule)"
        )
    short = f"{n:,} steps" if batch else f"{n:,} steps ({preset})"
    return short, f"{n:,} steps{examples} (preset {preset})"


def _preset_steps(preset: str, c: Collection) -> int:
    """A preset's step count: ``@<step>``'s, else its runs' longest, else the known one."""
    base, within = budget_of(preset)
    if within:
        return within
    steps = c.runs.loc[c.runs["preset"] == preset, "max_steps"].dropna()
    return int(steps.max()) if not steps.empty else _STEPS.get(base, 0)


def by_preset(c: Collection) -> list[tuple[str, Collection]]:
    """The collection split into one per scale preset (a budget), rows named by task alone;
    one preset gives the collection itself."""
    presets = sorted(set(c.runs["preset"].dropna()) | set(c.expected["preset"].dropna()))
    if len(presets) <= 1:
        return [(presets[0] if presets else "", c)]
    presets.sort(key=lambda p: (_preset_steps(p, c), p))  # budgets in order of their steps

    def keep(df: pd.DataFrame, preset: str) -> pd.DataFrame:
        if df.empty or "preset" not in df:
            return df
        out = df[df["preset"] == preset].copy()
        if "row" in out and "task" in out:
            out["row"] = out["task"]
        return out

    frames = ("runs", "val", "train", "test", "expected", "incomplete", "probe")
    return [(p, replace(c, **{f: keep(getattr(c, f), p) for f in frames})) for p in presets]
