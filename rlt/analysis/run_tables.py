"""Tables about the runs rather than the science: parameters per model, training cost, and
every expected cell that did not contribute a result."""

from __future__ import annotations

import pandas as pd

from rlt.analysis import render
from rlt.analysis.collect import Collection
from rlt.analysis.labels import DEPTH_VARIANTS
from rlt.analysis.table_core import (
    Table,
)
from rlt.rundir import error_line


def _params_note(row: str, runs: pd.DataFrame) -> str:
    """Why one model's runs have different parameter counts: vocabularies of different sizes
    (a plugin task adds tokens, so its embedding and output layer are larger) when the count is
    one per vocabulary size; otherwise something in the configs, which the reader must check."""
    p = runs["params"].astype(int)
    span = f"{p.min():,}–{p.max():,}"
    vocab = runs["vocab_size"]
    if vocab.notna().all() and vocab.nunique() > 1:
        per_vocab = runs.groupby("vocab_size")["params"].nunique()
        if (per_vocab == 1).all():
            sizes = " / ".join(f"{int(v)}" for v in sorted(vocab.unique()))
            return (
                f"{row}: parameter count differs between runs ({span}) only because their "
                f"tasks' vocabularies differ ({sizes} tokens: a task that adds tokens has a "
                "larger embedding and output layer)"
            )
    return f"{row}: parameter count differs between runs ({span}); check the config of each run"


def params_table(c: Collection) -> Table:
    """Parameter count per model, with the difference to RLT-1 at the same split.

    The report's Table 4 pins these down (Transformer 8 25.31M, RLT-1 8+0 26.10M and 4+4
    28.73M, RLT-0 = RLT-1 - 787,968), so a mismatch here means a model is not the report's.
    """
    used = c.used.dropna(subset=["params"])
    used = used[used["schedule_steps"].isna()]  # a budget view is its run again, not a model
    multi = used["preset"].nunique() > 1  # same label, different width across presets
    records, notes = [], []
    for preset in sorted(used["preset"].unique()):
        here = used[used["preset"] == preset]
        for lab in c.labels:
            p = here.loc[here["label"] == lab, "params"].astype(int)
            if p.empty:
                continue
            k = c.models[lab]
            row = f"{lab} [{preset}]" if multi else lab
            rec = {
                "row": row,
                "column": lab,
                "preset": preset,
                "params_min": int(p.min()),
                "params_max": int(p.max()),
                "n_runs": len(p),
                "delta_vs_rlt1": None,
            }
            ref = here.loc[here["label"] == f"RLT-1 {k.split}", "params"]
            if k.variant not in ("Transformer", "RLT-1") and len(ref):
                rec["delta_vs_rlt1"] = int(p.min()) - int(ref.min())
            if p.nunique() > 1:
                notes.append(_params_note(row, here.loc[here["label"] == lab]))
            records.append(rec)
    data = pd.DataFrame.from_records(
        records,
        columns=["row", "column", "preset", "params_min", "params_max", "n_runs", "delta_vs_rlt1"],
    )
    display = pd.DataFrame(
        {
            "parameters": [_params(r.params_min, r.params_max) for r in data.itertuples()],
            "M": [f"{r.params_min / 1e6:.2f}" for r in data.itertuples()],
            "Δ vs RLT-1 same split": [
                "" if pd.isna(r.delta_vs_rlt1) else f"{int(r.delta_vs_rlt1):+,}"
                for r in data.itertuples()
            ],
        },
        index=pd.Index(data["row"]),
    )
    return Table("params", "Parameters per model", display, data, index_header="model", notes=notes)


def _params(lo: int, hi: int) -> str:
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def cost_table(c: Collection) -> Table:
    """Mean seconds per training step per model and task, and ratios to RLT-0 and Transformer.

    Ratios are per task (same task, same split for RLT-0, same depth for the Transformer),
    then averaged over the tasks both models ran, so a model that only ran cheap tasks does
    not look fast.
    """
    used = c.used.dropna(subset=["sec_per_step"])
    if used.empty:
        return Table(
            "cost",
            "Training cost (seconds per step)",
            pd.DataFrame(),
            pd.DataFrame(),
            index_header="model",
            notes=["no run recorded timing.sec_per_step"],
        )
    per_task = used.groupby(["label", "row"])["sec_per_step"].mean().unstack("row")
    rows = [r for r in c.rows if r in per_task.columns]
    per_task = per_task.reindex(
        index=[lab for lab in c.labels if lab in per_task.index], columns=rows
    )

    data = pd.DataFrame.from_records(_cost_records(c, used, per_task))
    return Table(
        "cost",
        "Training cost: mean seconds per optimizer step (excluding validation)",
        _cost_display(data, rows),
        data,
        index_header="model",
        notes=[
            "ratios: per task against RLT-0 at the same split / the Transformer of the same "
            "depth, averaged over the tasks both ran; machines must match for ratios to mean "
            "anything"
        ],
    )


def _cost_records(c: Collection, used: pd.DataFrame, per_task: pd.DataFrame) -> list[dict]:
    """One record per model: mean s/step overall and per task, runs, ratios, train hours."""

    def ratio(lab: str, ref: str | None) -> float:
        if ref is None or ref not in per_task.index:
            return float("nan")
        r = (per_task.loc[lab] / per_task.loc[ref]).dropna()
        return float(r.mean()) if len(r) else float("nan")

    records = []
    for lab in per_task.index:
        k = c.models[lab]
        rlt0 = f"RLT-0 {k.split}" if k.variant not in DEPTH_VARIANTS else None
        tf = f"Transformer {k.n_layers}" if k.n_layers else None
        runs = used[used["label"] == lab]
        rec = {
            "row": lab,
            "column": "all",
            "sec_per_step": float(runs["sec_per_step"].mean()),
            "n_runs": len(runs),
            "ratio_rlt0": ratio(lab, rlt0),
            "ratio_transformer": ratio(lab, tf),
            "train_hours": float(runs["train_seconds"].mean() / 3600)
            if runs["train_seconds"].notna().any()
            else float("nan"),
        }
        rec.update({f"sec_per_step[{r}]": per_task.loc[lab, r] for r in per_task.columns})
        records.append(rec)
    return records


def _cost_display(data: pd.DataFrame, rows: list[str]) -> pd.DataFrame:
    display = pd.DataFrame(index=pd.Index(data["row"]))
    for r in rows:
        display[r] = [_sec(v) for v in data[f"sec_per_step[{r}]"]]
    display["all tasks"] = [_sec(v) for v in data["sec_per_step"]]
    display["runs"] = data["n_runs"].astype(str).values
    display["× RLT-0"] = [_ratio(v) for v in data["ratio_rlt0"]]
    display["× Transformer"] = [_ratio(v) for v in data["ratio_transformer"]]
    display["train h"] = [_ratio(v) for v in data["train_hours"]]
    return display


def _sec(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.4g}"


def _ratio(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.2f}"


def incomplete_table(c: Collection) -> Table:
    """Every expected cell and run directory that does not contribute a result, with why."""
    inc = c.incomplete
    display = pd.DataFrame(
        {
            "model": inc["label"].values,
            "seed": [render.DASH if pd.isna(s) else str(int(s)) for s in inc["seed"]],
            "state": inc["state"].values,
            "step": [_step(r.step, r.max_steps) for r in inc.itertuples()],
            "detail": [_short(d) for d in inc["detail"]],
            "path": ["" if pd.isna(p) else str(p) for p in inc["path"]],
        },
        index=pd.Index(inc["row"].values),
    )
    data = inc.rename(columns={"label": "column"})
    title = f"Incomplete: {len(inc)} cell(s) or run(s) without usable results"
    return Table("incomplete", title, display, data, index_header="task")


def _step(step: object, max_steps: object) -> str:
    if step is None or pd.isna(step):
        return ""
    return (
        f"{int(step)}/{int(max_steps)}"
        if max_steps is not None and not pd.isna(max_steps)
        else str(int(step))
    )


def _short(text: object, n: int = 100) -> str:
    if text is None or (isinstance(text, float) and pd.isna(text)):
        return ""
    return error_line(str(text), n)
