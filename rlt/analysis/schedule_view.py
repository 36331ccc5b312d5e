"""The feedback-schedule view (issue 8): accuracy at the longest length against training time
for RLT-2 schedules beside RLT-1, fixed-B RLT-2 and RLT-0."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from rlt.analysis import render
from rlt.analysis.collect import Collection
from rlt.analysis.labels import metric_words, split_depths_or_none
from rlt.analysis.run_tables import _sec
from rlt.analysis.table_core import (
    Lengths,
    Table,
    _or_dash,
    _per_seed,
    _pick_length,
    cell_table,
)

# --- feedback-schedule view (issue 8) -----------------------------------------------------
#
# A schedule trains RLT-2 with a large chunk size B first (parallel, cheap) and shrinks it to
# B=1 later; the view puts what it buys (accuracy at the longest length) next to what it costs
# (training time), against RLT-1, RLT-2 at a fixed B and RLT-0 trained from scratch.


def feedback_split(c: Collection, split: str | None) -> str | None:
    """The split the feedback table uses: the given one, 4+4, or the one with most variants."""
    if split:
        return split
    variants: dict[str, set] = {}
    for k in c.models.values():
        if k.split and k.variant.startswith("RLT"):
            variants.setdefault(k.split, set()).add(k.variant)
    if "4+4" in variants or not variants:
        return "4+4" if variants else None
    return max(variants, key=lambda s: (len(variants[s]), s == "4+4"))


def has_schedules(c: Collection) -> bool:
    """Whether any run (or grid cell) of the collection trained with a feedback schedule."""
    return any(k.schedule for k in c.models.values())


def schedule_labels(c: Collection, split: str | None = None) -> list[str]:
    """Models of the schedule view, in order: RLT-1, RLT-2 at fixed B (ascending), the
    schedules, RLT-0, then the Transformer of the same depth.

    Every RLT model at a split where a schedule ran (or at `split`; without schedules, the
    feedback table's split), so all rows share one split and differ only in feedback.
    """
    if split:
        splits = [split]
    else:
        splits = sorted({k.split for k in c.models.values() if k.schedule and k.split})
        if not splits:
            fallback = feedback_split(c, None)
            splits = [fallback] if fallback else []
    depths = set()
    for s in splits:
        n_enc, n_dec = split_depths_or_none(s)
        if n_enc is not None:
            depths.add(n_enc + n_dec)
    labels = [
        lab
        for lab, k in c.models.items()
        if (k.variant in ("RLT-1", "RLT-2", "RLT-0") and k.split in splits)
        or (k.variant == "Transformer" and k.n_layers in depths)
    ]

    def key(lab: str) -> tuple:
        k = c.models[lab]
        where = splits.index(k.split) if k.split in splits else len(splits)
        # Fixed-B RLT-2 before the schedules, within the one variant order.
        return (where, k.rank, bool(k.schedule), k.schedule or (), k.feedback_interval or 0, lab)

    return sorted(labels, key=key)


def schedule_values(
    c: Collection,
    row: str,
    *,
    labels: Sequence[str],
    policy: str = "min_val_loss",
    metric: str = "acc",
    lengths: Lengths = None,
) -> tuple[int | None, pd.DataFrame]:
    """Per-seed values of one task row for the schedule view: (test length, frame of label,
    quantity, seed, value).

    Quantities: `acc` (test `metric` in % at the length, checkpoint `policy`), `val_acc`
    (validation `metric` in % at each run's last validation step), `train_min`
    (timing.train_seconds / 60) and `sec_per_step` (timing.sec_per_step).
    """
    t = c.test[
        (c.test["row"] == row)
        & (c.test["policy"] == policy)
        & (c.test["metric"] == metric)
        & c.test["label"].isin(labels)
    ]
    length = _pick_length(sorted(t["length"].unique()), c.row_task(row), row, lengths)
    t = t[t["length"] == length]
    v = c.val[(c.val["row"] == row) & (c.val["metric"] == metric) & c.val["label"].isin(labels)]
    v = v[v["step"] == v.groupby("run_id")["step"].transform("max")]
    runs = c.used[(c.used["row"] == row) & c.used["label"].isin(labels)]
    minutes = runs.dropna(subset=["train_seconds"])
    steps = runs.dropna(subset=["sec_per_step"])
    parts = {
        "acc": t["value"] * 100,
        "val_acc": v["value"] * 100,
        "train_min": minutes["train_seconds"].astype(float) / 60,
        "sec_per_step": steps["sec_per_step"].astype(float),
    }
    frames = [
        pd.DataFrame({"label": src["label"], "quantity": q, "seed": src["seed"], "value": val})
        for (q, val), src in zip(parts.items(), (t, v, minutes, steps))
    ]
    return length, pd.concat(frames, ignore_index=True)


def schedule_table(
    c: Collection,
    *,
    split: str | None = None,
    policy: str = "min_val_loss",
    metric: str = "acc",
    lengths: Lengths = None,
) -> Table:
    """The feedback-schedule view (issue 8) as a table built on :func:`cell_table`: one row per
    model, and per task the test accuracy at the longest tested length (or `lengths`), the
    validation accuracy at the final step, the training time per run in minutes and the
    seconds per step.

    Accuracies and minutes are mean ± sample SD over seeds; data columns: row (model),
    key (task row), column, quantity, length, mean, sd, n, n_expected, min, max, seeds, values.
    """
    labels = schedule_labels(c, split)
    by_grid = c.expected_n()
    values, columns, expected, meta = [], [], {}, {}
    for row in c.rows:
        length, v = schedule_values(
            c, row, labels=labels, policy=policy, metric=metric, lengths=lengths
        )
        if v.empty and not any(by_grid.get((row, lab)) for lab in labels):
            continue
        names = {
            "acc": f"{row}: {metric} ({_or_dash(length)})",
            "val_acc": f"{row}: val {metric}",
            "train_min": f"{row}: train min",
            "sec_per_step": f"{row}: s/step",
        }
        for q, name in names.items():
            columns.append(name)
            meta[name] = (row, q, length if q == "acc" else None)
            expected.update({(lab, name): by_grid.get((row, lab), 0) for lab in labels})
        values.append(v.assign(row=v["label"], column=v["quantity"].map(names)))
    table = cell_table(
        pd.concat(values, ignore_index=True) if values else pd.DataFrame(),
        c=c,
        name=f"schedule_{policy}",
        title=f"Feedback schedule: test {metric_words(metric, [c.row_task(r) for r in c.rows])} "
        f"(%) at the longest tested length vs training time, checkpoint policy {policy}, "
        "mean ± SD over seeds",
        rows=labels,
        columns=columns,
        notes=_schedule_notes(c, labels, policy, metric),
        expected=expected,
    )
    data = table.data
    data["key"] = [meta[col][0] for col in data["column"]]
    data.insert(3, "quantity", [meta[col][1] for col in data["column"]])
    data.insert(4, "length", pd.array([meta[col][2] for col in data["column"]], dtype="Int64"))
    for rec in data[data["quantity"] == "sec_per_step"].itertuples():
        table.display.loc[rec.row, rec.column] = _sec(rec.mean) if rec.n else render.DASH
    table.index_header = "model"
    table.per_seed = _per_seed(data[data["quantity"].isin(["acc", "val_acc"])])
    return table


def _schedule_notes(c: Collection, labels: Sequence[str], policy: str, metric: str) -> list[str]:
    """What the columns mean, and the stages ([start_step, B]) each schedule model ran with,
    as stored in results.json."""
    notes = [
        f"{metric} (L): test {metric} at length L (longest tested unless --length), checkpoint "
        f"policy {policy}; val {metric}: at each run's last validation step, with the chunk "
        "size B in force there (a schedule's last stage); train min: timing.train_seconds / 60 "
        "per run; s/step: timing.sec_per_step (both mean over seeds, same machine assumed)"
    ]
    used = c.used
    for lab in labels:
        if not c.models[lab].schedule:
            continue
        seen = dict.fromkeys(
            str(s) for s in used.loc[used["label"] == lab, "feedback_schedule"] if s is not None
        )
        if seen:
            notes.append(f"{lab}: feedback_schedule ([start_step, B]) " + "; ".join(seen))
    if not has_schedules(c):
        notes.append("no feedback-schedule runs in these sweeps (view requested explicitly)")
    return notes
