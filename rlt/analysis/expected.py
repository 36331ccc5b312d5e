"""The cells a set of sweeps expects (what rlt.analysis.collect calls "expected"): each sweep's
grid file (grid.json, written by ``train.py -m``, or sweep.json), else the runs it holds (single
``train.py`` runs ask for nothing more than themselves: no cross product of what they show). A
cell without a usable run is listed as missing.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from rlt.analysis.labels import ModelKey, model_key
from rlt.rundir import UnreadableGrid, read_grid


def expected_cells(
    runs: pd.DataFrame, sweep_dirs: list[Path], warnings: list[str]
) -> tuple[pd.DataFrame, list[ModelKey]]:
    """The grid each sweep directory asks for: its sweep.json/grid.json, else its runs."""
    # Labels of observed runs by (model, split-or-arch), so a grid cell gets the same label.
    observed: dict[tuple[str, str], str] = {}
    for r in runs.itertuples():
        for model in {m for m in (r.model, r.model_dir) if isinstance(m, str)}:
            for tag in (r.split, r.arch):
                if isinstance(tag, str):
                    observed.setdefault((model, tag), r.label)
    cells: list[dict] = []
    grid_models: list[ModelKey] = []
    for sd in sweep_dirs:
        in_sweep = runs[runs["sweep_dir"] == str(sd)]
        try:
            grid = read_grid(sd, keys=("task", "model", "seed"))
        except UnreadableGrid as e:
            warnings.append(str(e))
            print(f"warning: {e}", file=sys.stderr)
            grid = None
        if grid is not None:
            cells += _grid_file_cells(grid, sd, in_sweep, observed, grid_models)
        else:
            cells += _present_cells(in_sweep)
    cols = ["task", "preset", "label", "model", "split", "seed"]
    expected = pd.DataFrame.from_records(cells, columns=cols)
    expected = expected.drop_duplicates(["task", "preset", "label", "seed"], ignore_index=True)
    return expected, grid_models


def _grid_file_cells(
    spec: dict,
    sweep_dir: Path,
    in_sweep: pd.DataFrame,
    observed: dict[tuple[str, str], str],
    grid_models: list[ModelKey],
) -> list[dict]:
    """The cells a grid file lists, labelled as the observed runs of the same model and split
    are; models nobody ran yet get a label of their own (appended to `grid_models`)."""
    presets = in_sweep["preset"].dropna()
    named = spec.get("preset")
    if named and named not in set(presets) and f"{named}, {sweep_dir.name}" in set(presets):
        named = f"{named}, {sweep_dir.name}"  # kept apart from another sweep (_separate_sweeps)
    default = named or (
        Counter(presets).most_common(1)[0][0] if len(presets) else sweep_dir.resolve().name
    )
    cells = []
    for c in spec.get("cells", []):
        # train.py -m writes split null and arch_tag "L8" for the Transformer.
        model = str(c["model"])
        tags = [str(t) for t in (c.get("split"), c.get("arch_tag")) if t is not None]
        split = tags[0] if tags else None
        label = next((observed[model, t] for t in tags if (model, t) in observed), None)
        if label is None:
            key = model_key(
                model=model,
                split=split,
                feedback_interval=c.get("feedback_interval"),
                label=c.get("label"),
            )
            grid_models.append(key)
            label = key.label
        preset = c.get("preset", default)
        cells.append(_cell(c["task"], preset, label, model, split, c["seed"]))
    return cells


def _present_cells(in_sweep: pd.DataFrame) -> list[dict]:
    """Without a grid file (single runs): every run directory there, finished or not. A cross
    product of the tasks, models and seeds seen would report cells nobody asked for."""
    return [
        _cell(r.task, r.preset, r.label, r.model, r.split, r.seed)
        for r in in_sweep.itertuples()
        if isinstance(r.task, str) and isinstance(r.label, str) and pd.notna(r.seed)
    ]


def _cell(task: str, preset: str, label: str, model: str, split: str | None, seed) -> dict:
    return {
        "task": task,
        "preset": preset,
        "label": label,
        "model": model,
        "split": split,
        "seed": int(seed),
    }
