"""Side by side with the report's numbers (analysis/reference/report.json, from SPEC section 4).

Each reference entry is a query (task, model label, validation step or test length, policy,
optionally max_steps and seeds) plus the report's mean and SD; we answer the same query from our
runs, so the comparison never depends on which table options the user chose.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from rlt.analysis import render
from rlt.analysis.collect import Collection
from rlt.analysis.table_core import Table, seed_stats

# The repository's copy; the CLI's --reference overrides it.
DEFAULT_REFERENCE = Path(__file__).resolve().parents[2] / "analysis" / "reference" / "report.json"

_TABLE_NAMES = {"table1": "Table 1", "table2": "Table 2", "feedback": "feedback", "text": "text"}


def load_reference(path: str | Path | None = None) -> dict:
    path = Path(path) if path else DEFAULT_REFERENCE
    if not path.is_file():
        raise UnreadableReference(f"reference file {path} not found: pass --reference PATH")
    try:
        reference = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UnreadableReference(
            f"reference file {path} is not JSON ({e}): pass the report's numbers, e.g. "
            f"--reference {DEFAULT_REFERENCE.relative_to(DEFAULT_REFERENCE.parents[2])}"
        ) from None
    if not isinstance(reference, dict):
        raise UnreadableReference(
            f"reference file {path} holds no JSON object: pass --reference PATH"
        )
    return reference


class UnreadableReference(ValueError):
    """A --reference file that cannot be read (missing, not JSON)."""


_COMPARE_COLUMNS = [
    "row",
    "column",
    "source",
    "at",
    "mean",
    "sd",
    "n",
    "report_mean",
    "report_sd",
    "diff",
    "n_report",
    "note",
]


REPORT_PRESET = "paper"


def _is_report_preset(preset: str) -> bool:
    """The report's preset, also as the analysis names it apart ("paper, <sweep>", "paper (N
    steps)")."""
    return preset == REPORT_PRESET or preset.startswith(
        (f"{REPORT_PRESET}, ", f"{REPORT_PRESET} (")
    )


def _only_report_preset(c: Collection) -> Collection:
    """The collection restricted to the report preset's runs (rows keep their names)."""
    from dataclasses import replace

    keep = set(c.used.loc[[_is_report_preset(p) for p in c.used["preset"]], "run_id"])
    return replace(
        c,
        runs=c.runs[c.runs["run_id"].isin(keep)],
        test=c.test[c.test["run_id"].isin(keep)],
        val=c.val[c.val["run_id"].isin(keep)],
    )


def compare_table(c: Collection, reference: dict, *, metric: str = "acc") -> Table:
    """Our mean ± SD next to the report's for every reference entry our runs can answer."""
    records = []
    unmatched = 0
    # The report's numbers are its full-scale runs: only runs of the report's preset compare.
    others = sorted(p for p in set(c.used["preset"]) if not _is_report_preset(p))
    c = _only_report_preset(c)
    for e in reference["entries"]:
        found = _entry_records(c, e, metric)
        unmatched += not found
        records += found
    data = pd.DataFrame.from_records(records, columns=_COMPARE_COLUMNS)
    display = pd.DataFrame(
        {
            "task": data["row"].values,
            "model": data["column"].values,
            "at": data["at"].values,
            "ours": [render.fmt_cell(r.mean, r.sd, r.n, r.n_report) for r in data.itertuples()],
            "report": [
                render.fmt_cell(r.report_mean, _nan(r.report_sd), 3) for r in data.itertuples()
            ],
            "Δ mean": [f"{d:+.2f}" for d in data["diff"]],
        },
        index=pd.Index(data["source"].values),
    )
    notes = [
        f"{unmatched} of {len(reference['entries'])} reference entries have no matching "
        "runs here (other tasks, models, steps or lengths) and are not shown"
    ]
    if others:
        notes.insert(
            0,
            f"only runs at the report's preset ({REPORT_PRESET}: width 512, batch 512) are "
            f"compared; runs at {', '.join(others)} are left out (a smaller scale is not the "
            "report's experiment)",
        )
    return Table(
        "compare_report",
        "Ours vs the report (%), Δ = our mean - report mean",
        display,
        data,
        index_header="source",
        notes=notes,
    )


def _entry_records(c: Collection, e: dict, metric: str) -> list[dict]:
    """Our seed statistics for one reference entry (one per collection row); [] if none."""
    runs = c.used[(c.used["task"] == e["task"]) & (c.used["label"] == e["model"])]
    if e.get("max_steps") is not None:
        runs = runs[runs["max_steps"] == e["max_steps"]]
    if e.get("seeds"):
        runs = runs[runs["seed"].isin(e["seeds"])]
    if e["kind"] == "val":
        v = c.val[(c.val["metric"] == metric) & (c.val["step"] == e["step"])]
        at = f"step {e['step']}"
    else:
        v = c.test[
            (c.test["metric"] == metric)
            & (c.test["length"] == e["length"])
            & (c.test["policy"] == e.get("policy", "min_val_loss"))
        ]
        at = f"length {e['length']}"
    v = v[v["run_id"].isin(runs["run_id"])]
    if v.empty:
        return []
    stats = seed_stats(v.assign(value=v["value"] * 100), ["row"])
    return [
        {
            "row": s.row,
            "column": e["model"],
            "source": _TABLE_NAMES.get(e["table"], e["table"]),
            "at": at,
            "mean": s.mean,
            "sd": s.sd,
            "n": int(s.n),
            "report_mean": e["mean"],
            "report_sd": e.get("sd"),
            "diff": s.mean - e["mean"],
            "n_report": len(e.get("seeds") or (42, 43, 44)),
            "note": e.get("note", ""),
        }
        for s in stats.itertuples()
    ]


def _nan(x: object) -> float:
    return float("nan") if x is None else float(x)
