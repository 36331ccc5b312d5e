"""The plugins a run names, as the analysis loads them, and which code defined each run's
plugin metrics.

The analysis imports the plugins a run's results.json lists (their families' labels and colours
live in them, rlt/families.py). A plugin metric is only a name: two plugins may each register
it, or its function may change between runs. results.json records which function computed it
(``metric_definitions``: its dotted path and a hash of its code, rlt/tasks/metrics.py), and
:func:`check_metric` refuses to let one table average two definitions. For runs made before
that record, a clash here (two plugins registering the name) gives each run the claimant among
its own plugins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

# Columns of Collection.definitions.
COLUMNS = ["run_id", "metric", "function", "source_sha1"]


class MixedDefinitions(ValueError):
    """Runs that report one metric name computed it with different code (two plugins register
    it, or one plugin's function changed between runs): their values are not one quantity."""


def load_plugins(names: Any, run_dir: Path) -> list[str]:
    """Import the plugins a run was trained with; one that does not load here leaves a warning
    saying why, and the run is labelled by its config's model.label. A plugin refused because
    another one already registered its metric's name is remembered (`_CLASHES`): the runs of
    each then hold a different definition of that metric."""
    from rlt import plugins

    todo = (
        [str(n) for n in names if str(n) not in _PLUGINS_TRIED] if isinstance(names, list) else []
    )
    _PLUGINS_TRIED.update(todo)
    warnings = []
    for name, e in plugins.load(todo):
        if isinstance(e, plugins.NameClash):
            _CLASHES.setdefault((e.kind, e.name), set()).update((e.first, e.second))
            why = (
                f"its {e.kind} {e.name!r} ({e.second}) has the name of {e.first}, another "
                f"run's; tables of {e.name} refuse to average the two"
            )
        elif _not_found(name, e):
            why = "not found here; run from its directory or put it on PYTHONPATH for its labels"
        else:
            why = f"importing it raised {type(e).__name__}: {e}"
        warnings.append(f"{run_dir}: plugin {name!r} not loaded: {why}")
    return warnings


def _not_found(module: str, e: Exception) -> bool:
    """Whether `e` says the module itself (or its package) is missing, not something it imports."""
    return isinstance(e, ModuleNotFoundError) and f"{module}.".startswith(f"{e.name}.")


_PLUGINS_TRIED: set[str] = set()
# (kind, name) -> the dotted paths of the plugin definitions that claimed it, as far as this
# process has imported (plugins are imported once per process).
_CLASHES: dict[tuple[str, str], set[str]] = {}


def recorded(rid: str, block: Any) -> list[dict]:
    """Rows of Collection.definitions from results.json "metric_definitions" (absent in runs
    that predate it; an entry without a function is skipped)."""
    if not isinstance(block, dict):
        return []
    return [
        {
            "run_id": rid,
            "metric": str(metric),
            "function": d["function"],
            "source_sha1": d.get("source_sha1"),
        }
        for metric, d in block.items()
        if isinstance(d, dict) and isinstance(d.get("function"), str)
    ]


def definitions(
    runs: pd.DataFrame, rows: list[dict], val: pd.DataFrame, test: pd.DataFrame
) -> pd.DataFrame:
    """Collection.definitions: the recorded `rows`, and for a run that records nothing
    (trained before the record existed) but reports a metric two plugins claimed here, the
    claimant among the run's own plugins (a module at or under one it lists)."""
    rows = list(rows)
    have = {(r["run_id"], r["metric"]) for r in rows}
    reported = set(zip(val["run_id"], val["metric"])) | set(zip(test["run_id"], test["metric"]))
    plugins_of = {
        r.run_id: r.plugins.split() for r in runs.itertuples() if isinstance(r.plugins, str)
    }
    for (kind, metric), functions in _CLASHES.items():
        if kind != "metric":
            continue
        for rid in sorted({rid for rid, m in reported - have if m == metric}):
            mine = [
                fn
                for fn in functions
                if any(fn.startswith(p + ".") for p in plugins_of.get(rid, []))
            ]
            if len(mine) == 1:
                rows.append(
                    {"run_id": rid, "metric": metric, "function": mine[0], "source_sha1": None}
                )
    return pd.DataFrame.from_records(rows, columns=COLUMNS)


def check_metric(
    definitions: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame, metric: str
) -> None:
    """Raise :class:`MixedDefinitions` naming the metric, each definition and its runs when
    the runs that report ``metric`` (in `val` or `test`) computed it with different code."""
    reporting = set(val.loc[val["metric"] == metric, "run_id"])
    reporting |= set(test.loc[test["metric"] == metric, "run_id"])
    d = definitions[(definitions["metric"] == metric) & definitions["run_id"].isin(reporting)]
    if d["function"].nunique() > 1:
        groups = d.groupby("function")["run_id"].agg(list)
    else:  # one function: its code, where recorded
        groups = d.dropna(subset=["source_sha1"]).groupby("source_sha1")["run_id"].agg(list)
        fn = d["function"].iloc[0] if len(d) else ""
        groups.index = [f"{fn} with source sha1 {sha}" for sha in groups.index]
    if len(groups) < 2:
        return
    ways = ", ".join(f"{name} ({_some(runs)})" for name, runs in groups.items())
    raise MixedDefinitions(
        f"metric {metric!r} has {len(groups)} definitions in these runs: {ways}; their values "
        "are not one quantity: table them separately (one tables.py call each) or give one of "
        "them another name (register_metric)"
    )


def _some(runs: list[str], n: int = 2) -> str:
    """ "runs a, b and 3 more": the runs of one definition, briefly."""
    more = f" and {len(runs) - n} more" if len(runs) > n else ""
    return ("run " if len(runs) == 1 else "runs ") + ", ".join(runs[:n]) + more
