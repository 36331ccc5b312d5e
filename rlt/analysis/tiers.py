"""A collection split into its budgets (tiers): one per scale preset and per budget view of
longer runs (rlt.analysis.budgets), in order of their steps, each named by its step count
("16,000 steps", "16,000 of 48,000 steps"). The verdict table and the beyond-baselines view
judge each budget on its own runs only.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from rlt.analysis.budgets import budget_of
from rlt.analysis.collect import Collection

# Training examples per step of the presets whose verdicts the page shows (batch 64).
_BATCH = {"laptop": 64, "laptop_long": 64, "laptop_scout": 64}
# their step counts, before any run finished
_STEPS = {"laptop": 3000, "laptop_long": 16000, "laptop_scout": 48000}


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
