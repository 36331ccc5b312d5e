"""Collect run directories into pandas frames (each run read by :mod:`rlt.analysis.run_record`,
the only module that reads results.json).

Analysis works from the run directories alone (docs/DESIGN.md section 4). A run directory is
`<sweep>/<task>/<model>/<arch>/seed<N>`; it is recognised by a `results.json` or `status.json`
(or a `config.yaml` in a `seed<N>` directory), so runs that are still going, crashed or never
wrote results are found too: they are listed as incomplete, never dropped without a word.

The expected grid of a sweep comes from `grid.json` (what `train.py -m` writes) or `sweep.json`
at the sweep root:

    {"preset": "paper",                       # optional, default for every cell
     "cells": [{"task": "parity", "model": "rlt1", "split": "4+4", "seed": 42}, ...]}

(cells may also carry "arch_tag" (used when split is null, e.g. "L8" for the Transformer),
"preset" and "feedback_interval"; other keys are ignored). Without such a file (single
``train.py`` runs) the expected cells are the run directories there, finished or not.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rlt.analysis import definitions as defs
from rlt.analysis.budgets import add_budget_views
from rlt.analysis.expected import expected_cells
from rlt.analysis.labels import ModelKey, model_key, task_sort_key
from rlt.analysis.protocol import separate_protocols
from rlt.analysis.run_record import RUN_COLUMNS, SCHEMA_VERSION, read_run  # noqa: F401
from rlt.rundir import (
    GRID_FILES,
    RESULTS,
    find_runs,
)

# Columns that identify a run in every long frame, so any frame can be grouped on its own.
KEYS = ["run_id", "row", "task", "preset", "label", "seed"]


class NoResultsError(FileNotFoundError):
    """The given paths hold no run to read (a path does not exist, one lies inside another, or
    no run under them has results); the message says what to do about it."""


@dataclass
class Collection:
    """Everything analysis knows about a set of sweeps, as pandas frames.

    runs:       one row per run directory found (complete or not), with `used` marking the
                runs whose results enter tables and `state` saying why the others do not.
    val:        KEYS + step, metric, value: the in-distribution validation curve.
    train:      KEYS + step, metric, value: the training curve (loss).
    test:       KEYS + policy, policy_step, length, metric, value, scored_later: length
                generalization per checkpoint policy (min_val_loss is the report's);
                scored_later marks the lengths eval.py scored after training (its own rows in
                the tables, never the headline length).
    expected:   row, task, preset, label, model, split, seed: the cells the grid asks for.
    incomplete: one row per expected cell without usable results and per unusable run dir.
    probe:      KEYS + target, bucket, value: the state probe of the selected checkpoint
                (rlt/state_probe.py), probe accuracy per position bucket; target "rms" holds the
                representation's RMS norm (not a fraction).
    definitions: run_id, metric, function, source_sha1: which plugin code computed a
                registered metric in each run (results.json "metric_definitions"; for runs
                that predate it, the one of two clashing plugins the run lists).
    Values are fractions in [0, 1] as stored; tables convert to percent.
    """

    sweep_dirs: list[Path]
    runs: pd.DataFrame
    val: pd.DataFrame
    train: pd.DataFrame
    test: pd.DataFrame
    expected: pd.DataFrame
    incomplete: pd.DataFrame
    models: dict[str, ModelKey]
    warnings: list[str] = field(default_factory=list)
    probe: pd.DataFrame = field(default_factory=pd.DataFrame)
    definitions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=defs.COLUMNS))

    @property
    def used(self) -> pd.DataFrame:
        return self.runs[self.runs["used"]]

    @property
    def rows(self) -> list[str]:
        """Table rows (tasks, or task [preset] when presets differ), in the report's order."""
        frames = [self.runs[["row", "task", "preset"]], self.expected[["row", "task", "preset"]]]
        df = pd.concat(frames).drop_duplicates("row")
        df = df.assign(_k=[(task_sort_key(t), str(p)) for t, p in zip(df["task"], df["preset"])])
        return list(df.sort_values("_k")["row"])

    @property
    def labels(self) -> list[str]:
        """Model labels in the report's column order (RLT-1 splits, RLT-2, RLT-0, Transformer)."""
        return sorted(self.models, key=lambda lab: self.models[lab].sort_key)

    def row_task(self, row: str) -> str:
        tasks = pd.concat([self.runs, self.expected])
        return str(tasks.loc[tasks["row"] == row, "task"].iloc[0])

    def check_metric(self, metric: str) -> None:
        """Raise :class:`~rlt.analysis.definitions.MixedDefinitions` naming the metric, each
        definition and its runs when the runs computed ``metric`` with different code; tables
        and figures call it first, so two definitions are never averaged into one cell."""
        defs.check_metric(self.definitions, self.val, self.test, metric)

    def expected_n(self) -> dict[tuple[str, str], int]:
        """(row, label) -> number of seeds the grid asks for."""
        if self.expected.empty:
            return {}
        grouped = self.expected.groupby(["row", "label"], dropna=False)["seed"].nunique()
        return {k: int(v) for k, v in grouped.items()}

    def row_info(self, row: str) -> dict[str, Any]:
        """Chance level and training-length range of a row, from its first completed run."""
        runs = self.used[self.used["row"] == row]
        if runs.empty:
            return {"chance": None, "train_lengths": None}
        r = runs.iloc[0]
        lo, hi = r["train_len_min"], r["train_len_max"]
        return {
            "chance": None if pd.isna(r["chance"]) else float(r["chance"]),
            "train_lengths": None if pd.isna(lo) else (float(lo), float(hi)),
        }


def collect(paths: Sequence[str | Path], *, require_results: bool = True) -> Collection:
    """Load every run under the given sweep directories.

    Raises NoResultsError naming the fix when a path does not exist or, with
    require_results, when no run under the paths has a results.json.
    """
    sweep_dirs = [Path(p) for p in paths]
    if not sweep_dirs:
        raise NoResultsError("no sweep directory given")
    for d in sweep_dirs:
        if not d.exists():
            raise NoResultsError(f"{d} does not exist: check the path")
        if not d.is_dir():
            raise NoResultsError(
                f"{d} is a file: give the directory of a sweep or of one run (the directory "
                f"that holds {RESULTS})"
            )
    _check_apart(sweep_dirs)

    sweep_dirs = _sweeps_of(sweep_dirs)
    records, val_rows, train_rows, test_rows, probe_rows, def_rows, warnings = _read_runs(
        sweep_dirs
    )
    # callbacks.budgets: each such run is read again per budget once its preset is final
    budgets = {r["run_id"]: r.pop("test_by_budget") for r in records if "test_by_budget" in r}
    runs = pd.DataFrame.from_records(records, columns=RUN_COLUMNS)
    # Integers with gaps: a run found without a known seed (a damaged results.json outside a
    # seed<N> directory) must not turn every seed into a float ("seed 42.0").
    runs["seed"] = runs["seed"].astype("Int64")
    if require_results and not runs["has_results"].any():
        raise NoResultsError(_no_results_message(runs, sweep_dirs))

    _fill_presets(runs, sweep_dirs)
    models = _assign_labels(runs)
    _separate_sweeps(runs, warnings)
    runs = _mark_duplicates(runs)
    expected, grid_models = expected_cells(runs, sweep_dirs, warnings)
    for key in grid_models:
        models.setdefault(key.label, key)
    _separate_step_counts(runs, expected, warnings)
    separate_protocols(runs, expected, warnings)
    runs, expected = add_budget_views(
        runs, expected, budgets, (val_rows, train_rows, test_rows), warnings
    )
    presets = set(runs["preset"]) | set(expected["preset"])
    multi = len(presets) > 1

    def row_of(task: str, preset: str) -> str:
        return f"{task} [{preset}]" if multi else task

    runs["row"] = [row_of(t, p) for t, p in zip(runs["task"], runs["preset"])]
    expected["row"] = [row_of(t, p) for t, p in zip(expected["task"], expected["preset"])]
    incomplete = _incomplete(runs, expected)

    keys = runs.loc[runs["used"], KEYS]
    val = _long(val_rows, ["run_id", "step", "metric", "value"], keys)
    train = _long(train_rows, ["run_id", "step", "metric", "value"], keys)
    test = _long(
        test_rows,
        ["run_id", "policy", "policy_step", "length", "metric", "value", "scored_later"],
        keys,
    )
    test["scored_later"] = test["scored_later"].astype(bool)
    probe = _long(probe_rows, ["run_id", "target", "bucket", "value"], keys)
    definitions = defs.definitions(runs, def_rows, val, test)
    return Collection(
        sweep_dirs=sweep_dirs,
        runs=runs,
        val=val,
        train=train,
        test=test,
        probe=probe,
        expected=expected,
        incomplete=incomplete,
        models=models,
        warnings=warnings,
        definitions=definitions,
    )


def _check_apart(paths: list[Path]) -> None:
    """Raise :class:`NoResultsError` when a given path lies inside another (a sweep and one of
    its runs, a root and one of its sweeps): its runs would be read, and counted, twice."""
    resolved = [p.resolve() for p in paths]
    for inner, r_inner in zip(paths, resolved):
        for outer, r_outer in zip(paths, resolved):
            if r_inner != r_outer and r_inner.is_relative_to(r_outer):
                raise NoResultsError(
                    f"{inner} lies inside {outer}, so its runs would be read twice: give "
                    "only one of the two"
                )


def _sweeps_of(paths: list[Path]) -> list[Path]:
    """The sweep directories the given paths name: a path whose runs all sit one level deeper
    than a sweep's (root/<sweep>/<task>/<model>/<arch>/seed<n>) and that has no grid file of
    its own is a root, read as its sweeps, so each sweep's grid.json says what it expects."""
    out: list[Path] = []
    for path in paths:
        has_grid = any((path / g).is_file() for g in GRID_FILES)
        parts = [r.relative_to(path).parts for r in find_runs(path)]
        if not has_grid and parts and all(len(p) == 5 for p in parts):
            out += sorted({path / p[0] for p in parts})
        else:
            out.append(path)
    return out


def _read_runs(sweep_dirs: list[Path]) -> tuple[list, list, list, list, list, list, list[str]]:
    """Every run of the sweeps: (run records, val rows, train rows, test rows, probe rows,
    metric definition rows, warnings)."""
    records: list[dict] = []
    val_rows: list[dict] = []
    train_rows: list[dict] = []
    test_rows: list[dict] = []
    probe_rows: list[dict] = []
    def_rows: list[dict] = []
    warnings: list[str] = []
    for i, sweep_dir in enumerate(sweep_dirs):
        for run_dir in find_runs(sweep_dir):
            rec, val, train, test, probe, recorded, warn = read_run(run_dir, sweep_dir)
            rec["sweep_index"] = i
            records.append(rec)
            val_rows += val
            train_rows += train
            test_rows += test
            probe_rows += probe
            def_rows += recorded
            warnings += warn
    return records, val_rows, train_rows, test_rows, probe_rows, def_rows, warnings


def _no_results_message(runs: pd.DataFrame, sweep_dirs: list[Path]) -> str:
    where = ", ".join(str(d) for d in sweep_dirs)
    found = ""
    if len(runs):
        states = Counter(runs["state"])
        found = " (found {} run directories without results: {})".format(
            len(runs), ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        )
    return f"no {RESULTS} under {where}{found}: run the sweep first / check the path"


def _fill_presets(runs: pd.DataFrame, sweep_dirs: list[Path]) -> None:
    """Runs without results.json take the preset of their sweep directory's completed runs."""
    for sd in map(str, sweep_dirs):
        mask = runs["sweep_dir"] == sd
        known = runs.loc[mask, "preset"].dropna()
        default = Counter(known).most_common(1)[0][0] if len(known) else Path(sd).resolve().name
        runs.loc[mask & runs["preset"].isna(), "preset"] = default
    runs["task"] = runs["task"].fillna("unknown")
    runs["model"] = runs["model"].fillna("unknown")


def _separate_step_counts(runs: pd.DataFrame, expected: pd.DataFrame, warnings: list[str]) -> None:
    """Runs of one preset that trained for different step counts (``scale.max_steps`` changed
    between launches into one sweep) are different configurations: each count becomes its own
    preset, "tiny (20 steps)", so no table averages them, and the grid's cells follow their
    runs."""
    has = runs["max_steps"].notna()
    for preset in sorted(runs.loc[has, "preset"].dropna().unique()):
        mine = has & (runs["preset"] == preset)
        counts = sorted(int(n) for n in runs.loc[mine, "max_steps"].unique())
        if len(counts) < 2:
            continue
        renamed = [f"{preset} ({int(n):,} steps)" for n in runs.loc[mine, "max_steps"]]
        moved = dict(zip(map(tuple, runs.loc[mine, ["task", "label", "seed"]].values), renamed))
        runs.loc[mine, "preset"] = renamed
        cells = expected["preset"] == preset
        expected.loc[cells, "preset"] = [
            moved.get((t, lab, seed), preset)
            for t, lab, seed in expected.loc[cells, ["task", "label", "seed"]].values
        ]
        warnings.append(
            f"preset {preset}: runs of {', '.join(f'{n:,}' for n in counts)} steps, tabulated "
            "apart as different configurations"
        )


def _assign_labels(runs: pd.DataFrame) -> dict[str, ModelKey]:
    """Label every run; a run without results.json takes the label of a completed run in the
    same sweep, model and arch directory, since its path alone cannot tell, e.g., the chunk
    sizes of a feedback schedule (`rlt2_sched_8to1`)."""
    keys = [
        model_key(
            model=r.model,
            family=_none(r.family),
            split=_none(r.split),
            n_enc=_int(r.n_enc),
            n_dec=_int(r.n_dec),
            n_layers=_int(r.n_layers),
            feedback_interval=_int(r.feedback_interval),
            feedback_schedule=_none(r.feedback_schedule),
            label=_none(r.config_label),
        )
        for r in runs.itertuples()
    ]
    done: dict[tuple, ModelKey] = {}
    for r, key in zip(runs.itertuples(), keys):
        if r.has_results and r.model_dir is not None:
            done.setdefault((r.sweep_dir, r.model_dir, r.arch), key)
    models: dict[str, ModelKey] = {}
    labels = []
    for r, key in zip(runs.itertuples(), keys):
        if not r.has_results:
            key = done.get((r.sweep_dir, r.model_dir, r.arch), key)
        models.setdefault(key.label, key)
        labels.append(key.label)
    runs["label"] = labels
    return models


def _separate_sweeps(runs: pd.DataFrame, warnings: list[str]) -> None:
    """Sweeps given together that hold the same task, preset, model and seed (two sweeps that
    differ in a value the labels do not show, e.g. scale.lr) are kept apart: the preset of each
    such sweep's runs is suffixed with the sweep's directory name, so each gets its own rows
    instead of one being dropped as a duplicate."""
    used = runs[runs["used"]]
    spread = used.groupby(["task", "preset", "label", "seed"])["sweep_dir"].unique()
    sweeps = sorted({d for dirs in spread for d in dirs if len(dirs) > 1})
    if not sweeps:
        return
    names = {d: Path(d).name for d in runs["sweep_dir"].unique()}
    if len(set(names.values())) < len(names):
        names = {d: d for d in names}  # same folder names: the full paths tell them apart
    mine = runs["sweep_dir"].isin(sweeps)
    runs.loc[mine, "preset"] = [
        f"{p}, {names[d]}" for p, d in zip(runs.loc[mine, "preset"], runs.loc[mine, "sweep_dir"])
    ]
    warnings.append(
        "the same task, preset, model and seed in several sweeps: each sweep kept apart ("
        + ", ".join(names[d] for d in sweeps)
        + ")"
    )


def _mark_duplicates(runs: pd.DataFrame) -> pd.DataFrame:
    """Two completed runs of the same task, preset, model and seed: keep the first, list the rest.

    Happens when sweeps overlap or when one Transformer was trained under several split names.
    """
    runs = runs.sort_values(["sweep_index", "path"], ignore_index=True)
    used = runs[runs["used"]]
    dup = used.duplicated(["task", "preset", "label", "seed"], keep="first")
    first = used[~dup].set_index(["task", "preset", "label", "seed"])["path"]
    for idx in used.index[dup]:
        r = runs.loc[idx]
        runs.loc[idx, ["used", "state"]] = [False, "duplicate"]
        runs.loc[idx, "detail"] = (
            f"same task, preset, model and seed as {first[(r.task, r.preset, r.label, r.seed)]}"
        )
    return runs


def _incomplete(runs: pd.DataFrame, expected: pd.DataFrame) -> pd.DataFrame:
    """Unusable run directories plus expected cells with no run directory at all."""
    cols = [
        "row",
        "task",
        "preset",
        "label",
        "seed",
        "state",
        "step",
        "max_steps",
        "detail",
        "path",
    ]
    bad = runs.loc[~runs["used"], cols]
    have = set(zip(runs["task"], runs["preset"], runs["label"], runs["seed"]))
    missing = expected[
        [
            k not in have
            for k in zip(expected["task"], expected["preset"], expected["label"], expected["seed"])
        ]
    ]
    missing = missing.assign(
        state="missing", step=None, max_steps=None, detail="no run directory", path=None
    )[cols]
    frames = [f for f in (bad, missing) if len(f)]
    if not frames:
        return pd.DataFrame(columns=cols)
    out = pd.concat(frames, ignore_index=True)
    out["_k"] = [task_sort_key(t) for t in out["task"]]
    return out.sort_values(["_k", "label", "seed"]).drop(columns="_k").reset_index(drop=True)


def _long(rows: list[dict], cols: list[str], keys: pd.DataFrame) -> pd.DataFrame:
    df = pd.DataFrame.from_records(rows, columns=cols)
    out = keys.merge(df, on="run_id", how="inner")
    return out.reset_index(drop=True)


def _none(x: Any) -> Any:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return x


def _int(x: Any) -> int | None:
    x = _none(x)
    return None if x is None else int(x)
