"""The feedback-schedule view (issue 8): accuracy at the longest length against training time
for RLT-2 schedules beside RLT-1, fixed-B RLT-2 and RLT-0."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from rlt.analysis import render
from rlt.analysis.collect import Collection
from rlt.analysis.labels import split_depths_or_none
from rlt.analysis.run_tables import _sec
from rlt.analysis.table_core import (
    Lengths,
    Table,
    _cell_record,
    _or_dash,
    _per_seed,
    _pick_length,
    seed_stats,
)

# --- feedback-schedule view (issue 8) -----------------------------------------------------
#
# A schedule trains RLT-2 with a large chunk size B first (parallel, cheap) and shrinks it to
# B=1 later; the view puts what it buys (accuracy at the longest length) next to what it costs
# (training time), against RLT-1, RLT-2 at a fixed B and RLT-0 trained from scratch.

# Quantities of the schedule view, in column order: (key, column suffix, unit).
SCHEDULE_QUANTITIES = ("acc", "val_acc", "train_min", "sec_per_step")


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


def schedule_points(
    c: Collection,
    row: str,
    *,
    labels: Sequence[str] | None = None,
    policy: str = "min_val_loss",
    metric: str = "acc",
    lengths: Lengths = None,
) -> tuple[int | None, pd.DataFrame]:
    """Per model, the seed statistics of one task row: (test length, long frame).

    The frame has one record per (label, quantity) with data: label, quantity, mean, sd, n,
    min, max, seeds, values. Quantities: `acc` (test `metric` in % at the length, checkpoint
    `policy`), `val_acc` (validation `metric` in % at each run's last validation step),
    `train_min` (timing.train_seconds / 60) and `sec_per_step` (timing.sec_per_step).
    """
    labels = list(labels) if labels is not None else schedule_labels(c)
    t = c.test[
        (c.test["row"] == row)
        & (c.test["policy"] == policy)
        & (c.test["metric"] == metric)
        & c.test["label"].isin(labels)
    ]
    available = sorted(t["length"].unique())
    length = _pick_length(available, c.row_task(row), row, lengths)
    t = t[t["length"] == length]
    v = c.val[(c.val["row"] == row) & (c.val["metric"] == metric) & c.val["label"].isin(labels)]
    v = v[v["step"] == v.groupby("run_id")["step"].transform("max")]
    runs = c.used[(c.used["row"] == row) & c.used["label"].isin(labels)]
    minutes = runs.dropna(subset=["train_seconds"])
    steps = runs.dropna(subset=["sec_per_step"])
    parts = {
        "acc": t.assign(value=t["value"] * 100),
        "val_acc": v.assign(value=v["value"] * 100),
        "train_min": minutes.assign(value=minutes["train_seconds"].astype(float) / 60),
        "sec_per_step": steps.assign(value=steps["sec_per_step"].astype(float)),
    }
    frames = [
        seed_stats(df[["label", "seed", "value"]], ["label"]).assign(quantity=q)
        for q, df in parts.items()
        if len(df)
    ]
    cols = ["label", "quantity", "mean", "sd", "n", "min", "max", "seeds", "values"]
    if not frames:
        return length, pd.DataFrame(columns=cols)
    return length, pd.concat(frames, ignore_index=True)[cols]


def schedule_table(
    c: Collection,
    *,
    split: str | None = None,
    policy: str = "min_val_loss",
    metric: str = "acc",
    lengths: Lengths = None,
) -> Table:
    """The feedback-schedule view (issue 8) as a table: one row per model, and per task the
    test accuracy at the longest tested length (or `lengths`), the validation accuracy at the
    final step, the training time per run in minutes and the seconds per step.

    Accuracies and minutes are mean ± sample SD over seeds; data columns: row (model),
    key (task row), column, quantity, length, mean, sd, n, n_expected, min, max, seeds, values.
    """
    labels = schedule_labels(c, split)
    expected = c.expected_n()
    records, columns = [], []
    for row in c.rows:
        length, stats = schedule_points(
            c, row, labels=labels, policy=policy, metric=metric, lengths=lengths
        )
        if stats.empty and not any(expected.get((row, lab)) for lab in labels):
            continue
        names = {
            "acc": f"{row}: {metric} ({_or_dash(length)})",
            "val_acc": f"{row}: val {metric}",
            "train_min": f"{row}: train min",
            "sec_per_step": f"{row}: s/step",
        }
        columns += list(names.values())
        stats = stats.set_index(["label", "quantity"])
        for lab in labels:
            n_exp = expected.get((row, lab), 0)
            for q in SCHEDULE_QUANTITIES:
                rec = _cell_record(stats, (lab, q), n_exp)
                if rec is None:
                    continue
                rec.update(
                    row=lab,
                    key=row,
                    column=names[q],
                    quantity=q,
                    length=length if q == "acc" else None,
                    n=int(rec["n"]),
                    n_expected=n_exp,
                )
                records.append(rec)
    cols = ["row", "key", "column", "quantity", "length", "mean", "sd", "n", "n_expected"]
    cols += ["min", "max", "seeds", "values"]
    data = pd.DataFrame.from_records(records, columns=cols)
    data["length"] = data["length"].astype("Int64")  # 256, not 256.0, beside empty cells
    shown_rows = [lab for lab in labels if lab in set(data["row"])]
    shown_cols = [col for col in columns if col in set(data["column"])]
    display = pd.DataFrame("", index=pd.Index(shown_rows), columns=shown_cols, dtype=object)
    for rec in data.itertuples():
        if rec.quantity == "sec_per_step":
            text = _sec(rec.mean) if rec.n else render.DASH
        else:
            text = render.fmt_cell(rec.mean, rec.sd, rec.n, rec.n_expected)
        display.loc[rec.row, rec.column] = text
    notes = [
        f"{metric} (L): test {metric} at length L (longest tested unless --length), checkpoint "
        f"policy {policy}; val {metric}: at each run's last validation step, with the chunk "
        "size B in force there (a schedule's last stage); train min: timing.train_seconds / 60 "
        "per run; s/step: timing.sec_per_step (both mean over seeds, same machine assumed)"
    ]
    notes += _schedule_notes(c, shown_rows)
    if not has_schedules(c):
        notes.append("no feedback-schedule runs in these sweeps (view requested explicitly)")
    short = data[data["n"] < data["n_expected"]]
    if len(short):
        notes.append(
            f"{len(short)} cell(s) have fewer seeds than the grid expects, shown as "
            "(n=have/expected); see the incomplete section"
        )
    acc = data[data["quantity"].isin(["acc", "val_acc"])]
    return Table(
        f"schedule_{policy}",
        f"Feedback schedule: test {metric} (%) at the longest tested length vs training "
        f"time, checkpoint policy {policy}, mean ± SD over seeds",
        display,
        data,
        index_header="model",
        per_seed=_per_seed(acc.reset_index(drop=True)),
        notes=notes,
    )


def _schedule_notes(c: Collection, labels: Sequence[str]) -> list[str]:
    """The stages ([start_step, B]) each schedule model ran with, as stored in results.json."""
    notes = []
    used = c.used
    for lab in labels:
        if not c.models[lab].schedule:
            continue
        seen = dict.fromkeys(
            str(s) for s in used.loc[used["label"] == lab, "feedback_schedule"] if s is not None
        )
        if seen:
            notes.append(f"{lab}: feedback_schedule ([start_step, B]) " + "; ".join(seen))
    return notes
