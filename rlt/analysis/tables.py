"""The report's tables (and a few it lacks) from a Collection: Table 1 (validation), Table 2
and the length tables (test accuracy by length), scaled accuracy, the feedback-interval table
and the checkpoint policies. Built on :mod:`rlt.analysis.table_core`; the run tables (params,
cost, incomplete) are in :mod:`rlt.analysis.run_tables`, the schedule view in
:mod:`rlt.analysis.schedule_view`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from rlt.analysis.collect import Collection
from rlt.analysis.labels import DEPTH_VARIANTS, metric_words, split_depths_or_none
from rlt.analysis.table_core import (
    Lengths,
    Table,
    _or_dash,
    _pick_length,
    cell_table,
)
from rlt.rundir import POLICIES

# Lengths of the report's feedback-interval table (SPEC section 4); other tasks use their
# longest tested length.
FEEDBACK_LENGTHS = {"parity": 64, "s5_swaps": 48, "s5": 32, "mod5_flat": 63, "mod5_brackets": 64}


def _words(c: Collection, metric: str) -> str:
    """The metric as its tables' rows measure it (final-label vs teacher-forced token acc)."""
    return metric_words(metric, [c.row_task(row) for row in c.rows])


def val_table(c: Collection, *, step: int | None = None, metric: str = "acc") -> Table:
    """Table 1: in-distribution validation accuracy at one step (default: each run's last)."""
    v = c.val[c.val["metric"] == metric]
    if step is None:
        v = v[v["step"] == v.groupby("run_id")["step"].transform("max")]
        at = "the final step"
    else:
        v = v[v["step"] == step]
        at = f"step {step}"
    notes = []
    if step is None and len(v):
        notes.append(
            "final = last validation step of each run: step(s) "
            + ", ".join(str(s) for s in sorted(v["step"].unique()))
        )
    lacking = c.used[~c.used["run_id"].isin(v["run_id"])]
    if len(lacking):
        notes.append(
            f"{len(lacking)} completed run(s) have no validation {metric} at {at}: "
            + ", ".join(f"{r.row}/{r.label}/seed{r.seed}" for r in lacking.itertuples())
        )
    values = v.assign(column=v["label"], value=v["value"] * 100)
    return cell_table(
        values,
        c=c,
        name="table1_val" if step is None else f"table1_val_step{step}",
        title=f"Table 1: validation {_words(c, metric)} (%) at {at}, mean ± SD over seeds",
        rows=c.rows,
        columns=c.labels,
        notes=notes,
    )


def generalization_table(
    c: Collection,
    *,
    policy: str = "min_val_loss",
    lengths: Lengths = None,
    metric: str = "acc",
    columns: Sequence[str] | None = None,
    name: str | None = None,
    title: str | None = None,
    row_format: str = "{row} ({length})",
    default_lengths: Mapping[str, int] | None = None,
    best: bool = False,
) -> Table:
    """Table 2: test accuracy at one length per task (default: the longest tested).

    `lengths` is one length for every task or a mapping task (or row) -> length.
    """
    t = c.test[(c.test["policy"] == policy) & (c.test["metric"] == metric)]
    columns = list(columns) if columns is not None else c.labels
    rows, display, parts, notes = [], {}, [], []
    for row in c.rows:
        task = c.row_task(row)
        here = t[t["row"] == row]
        # The default length is one every run was tested at, never one eval.py added later.
        own = sorted(here.loc[~here["scored_later"], "length"].unique())
        available = sorted(here["length"].unique())
        length = _pick_length(own or available, task, row, lengths, default_lengths)
        if length is not None and available and length not in available:
            notes.append(
                f"{row}: no {metric} at length {length} under policy {policy} "
                f"(tested: {', '.join(map(str, available))})"
            )
        rows.append(row)
        display[row] = row_format.format(row=row, length=_or_dash(length))
        parts.append(here[here["length"] == length])
    sel = pd.concat(parts) if parts else t.iloc[:0]
    values = sel.assign(column=sel["label"], value=sel["value"] * 100)
    values = values[values["column"].isin(columns)]
    return cell_table(
        values,
        c=c,
        name=name or f"table2_test_{policy}",
        title=title
        or f"Table 2: test {_words(c, metric)} (%) at the longest tested length, checkpoint "
        f"policy {policy}, mean ± SD over seeds",
        rows=rows,
        columns=columns,
        row_display=display,
        best=best,
        notes=notes,
    )


def scaled_accuracy_table(
    c: Collection,
    *,
    policy: str = "min_val_loss",
    metric: str = "acc",
    lo: int = 40,
    hi: int = 256,
) -> Table:
    """Scaled accuracy as the state-tracking literature reports it (Grazzi et al., ICLR 2025):
    per run, (acc - chance) / (1 - chance) averaged over the tested lengths in [lo, hi] that are
    strictly beyond the run's longest training length; then mean ± SD over seeds, with the best
    seed (the literature reports the best of 3) in brackets. Shown x 100 (0.971 in a paper is
    97.10 here). Runs without a chance level are left out."""
    longest = c.runs.set_index("run_id")["train_len_max"]
    t = c.test[
        (c.test["policy"] == policy)
        & (c.test["metric"] == metric)
        & c.test["length"].between(lo, hi)
        & ~c.test["scored_later"]  # the same lengths for every run
    ]
    t = t[t["length"] > t["run_id"].map(longest).fillna(0)]
    chance = c.runs.set_index("run_id")["chance"]
    t = t.assign(chance=t["run_id"].map(chance)).dropna(subset=["chance"])
    t = t[t["chance"] < 1]
    scaled = (t["value"] - t["chance"]) / (1 - t["chance"])
    per_run = (
        t.assign(value=scaled * 100)
        .groupby(["run_id", "row", "label", "seed"], as_index=False)["value"]
        .mean()
    )
    lengths = {row: sorted(t.loc[t["row"] == row, "length"].unique()) for row in c.rows}
    display = {
        row: f"{row} ({', '.join(map(str, ls))})" if ls else row for row, ls in lengths.items()
    }
    return cell_table(
        per_run.assign(column=per_run["label"]),
        c=c,
        name=f"scaled_{metric}_{policy}",
        title=f"Scaled {_words(c, metric)} x 100, (acc - chance) / (1 - chance) averaged over "
        f"the test lengths in {lo}-{hi} beyond training, checkpoint policy {policy}: mean ± SD "
        "over seeds [best seed]",
        rows=[row for row in c.rows if lengths[row]],
        columns=c.labels,
        row_display=display,
        best=True,
        notes=["lengths averaged per task in brackets; chance = 0, exact = 100"],
    )


def length_table(
    c: Collection,
    *,
    policy: str = "min_val_loss",
    metric: str = "acc",
    columns: Sequence[str] | None = None,
) -> Table:
    """Test accuracy at every tested length: the length curves as numbers. Lengths only
    eval.py scored (after training, maybe for some seeds only) are rows of their own, marked
    "(eval.py)", each cell with its own n."""
    t = c.test[(c.test["policy"] == policy) & (c.test["metric"] == metric)]
    columns = list(columns) if columns is not None else c.labels
    later = {
        (row, n) for row, n in t.loc[t["scored_later"], ["row", "length"]].itertuples(index=False)
    }

    def key_of(row: str, length: int) -> str:
        return f"{row} / {length}" + (" (eval.py)" if (row, length) in later else "")

    keys, row_of = [], {}
    for row in c.rows:
        for length in sorted(t.loc[t["row"] == row, "length"].unique()):
            key = key_of(row, length)
            keys.append(key)
            row_of[key] = row
    values = t.assign(
        row=[key_of(r, n) for r, n in zip(t["row"], t["length"])],
        column=t["label"],
        value=t["value"] * 100,
    )
    values = values[values["column"].isin(columns)]
    table = cell_table(
        values,
        c=c,
        name=f"lengths_{policy}",
        rows=keys,
        columns=columns,
        row_of=row_of,
        title=f"Test {_words(c, metric)} (%) at every tested length, checkpoint policy {policy}, "
        "mean ± SD over seeds",
    )
    table.index_header = "task / length"
    if later:
        table.notes.append(
            "(eval.py): a length scored after training by eval.py, not one of the runs' own "
            "test lengths; n in each cell says how many seeds have it"
        )
    return table


def feedback_columns(c: Collection, split: str) -> list[str]:
    """RLT-1, RLT-2 (every B), RLT-0 at `split`, and the depth-only baselines of the same depth,
    in the one variant order of labels.py."""
    n_enc, n_dec = split_depths_or_none(split)
    total = (n_enc or 0) + (n_dec or 0)
    cols = [
        lab
        for lab, k in c.models.items()
        if (k.variant in ("RLT-1", "RLT-2", "RLT-0") and k.split == split)
        or (k.variant in DEPTH_VARIANTS and k.n_layers == total)
    ]
    return sorted(cols, key=lambda lab: c.models[lab].sort_key)


def feedback_table(
    c: Collection,
    *,
    split: str = "4+4",
    policy: str = "min_val_loss",
    lengths: Lengths = None,
    metric: str = "acc",
) -> Table:
    """The report's feedback-interval table: one split, every feedback interval, best checkpoint.

    Default lengths are the report's (parity 64, s5_swaps 48, s5 32, mod5_flat 63,
    mod5_brackets 64) where tested, else the longest tested length.
    """
    cols = feedback_columns(c, split)
    table = generalization_table(
        c,
        policy=policy,
        lengths=lengths,
        metric=metric,
        columns=cols,
        name=f"feedback_{split}_{policy}",
        title=f"Feedback interval at split {split}: test {_words(c, metric)} (%), checkpoint policy "
        f"{policy}, mean ± SD over seeds",
        row_format="{row} / {length}",
        default_lengths=FEEDBACK_LENGTHS,
    )
    table.index_header = "task / length"
    variants = {c.models[lab].variant for lab in cols}
    for v in ("RLT-1", "RLT-0", "RLT-2", "Transformer"):
        if v not in variants:
            table.notes.append(f"no {v} runs at split {split} in these sweeps")
    return table


def policy_table(c: Collection, *, lengths: Lengths = None, metric: str = "acc") -> Table:
    """Table 2 under every checkpoint policy present, with max over seeds beside mean ± SD.

    Selection by lowest validation loss (the report's) can stop before out-of-distribution
    accuracy peaks; final-step and best-validation-accuracy checkpoints, and the best seed,
    make our numbers comparable with other length-generalization benchmarks.
    """
    present = [p for p in POLICIES if p in set(c.test["policy"])]
    present += sorted(set(c.test["policy"]) - set(POLICIES))
    if not present:
        return Table("policies", "Checkpoint policies", pd.DataFrame(), pd.DataFrame())
    tables = [
        generalization_table(
            c,
            policy=p,
            lengths=lengths,
            metric=metric,
            best=True,
            row_format="{row} (" + "{length}" + f") · {p}",
        )
        for p in present
    ]
    data = pd.concat([t.data.assign(policy=p) for t, p in zip(tables, present)])
    # Policy-major after concat; a stable sort on the task order groups each task's policies.
    order = {row: i for i, row in enumerate(c.rows)}
    key_of = dict(zip(data["row"], data["key"]))
    shown = sorted(dict.fromkeys(data["row"]), key=lambda r: order[key_of[r]])
    display = pd.concat([t.display for t in tables]).loc[shown].fillna("")
    return Table(
        "policies",
        f"Checkpoint policies: test {_words(c, metric)} (%) at the longest tested length, "
        "mean ± SD [max over seeds]",
        display,
        data,
        index_header="task (length) · policy",
        per_seed=pd.concat([t.per_seed for t in tables]),
        notes=[
            "policies: min_val_loss = lowest validation loss (the report's), final = last "
            "step, max_val_acc = highest validation accuracy"
        ],
    )


def _bucket_bounds(bucket: str) -> tuple[int, int]:
    lo, hi = bucket.split("-")
    return int(lo), int(hi)


def probe_table(c: Collection, *, metric: str = "acc") -> Table:
    """The state probe (rlt/state_probe.py): per task, target and position bucket, how well a linear
    probe reads the running state from each model's representation (%), next to the task's
    test accuracy at the lengths that end in that bucket (the final-label accuracy there), and
    the representation's RMS norm (drift). Mean ± SD over seeds."""
    p = c.probe
    if p.empty:
        return Table("probe", "State probe: no run carries one", pd.DataFrame(), pd.DataFrame())
    t = c.test[
        (c.test["policy"] == "min_val_loss")
        & (c.test["metric"] == metric)
        & ~c.test["scored_later"]
    ]
    frames, keys, row_of = [], [], {}
    for row in c.rows:
        here = p[p["row"] == row]
        targets = [x for x in here["target"].unique() if x != "rms"]
        for b in sorted(here["bucket"].unique(), key=_bucket_bounds):
            lo, hi = _bucket_bounds(b)
            acc = t[(t["row"] == row) & t["length"].between(lo, hi)]
            acc = acc.groupby(["run_id", "label", "seed"], as_index=False)["value"].mean()
            parts = [
                *((x, here[(here["target"] == x) & (here["bucket"] == b)], 100) for x in targets),
                (f"task {metric}", acc, 100),  # at the test lengths inside the bucket
                ("rms", here[(here["target"] == "rms") & (here["bucket"] == b)], 1),
            ]
            for name, hit, scale in parts:
                key = f"{row} / {b} / {name}"
                frames.append(hit.assign(row=key, column=hit["label"], value=hit["value"] * scale))
                keys.append(key)
                row_of[key] = row
    values = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    columns = [lab for lab in c.labels if lab in set(p["label"])]
    table = cell_table(
        values,
        c=c,
        name="probe",
        title="State probe: linear-probe accuracy (%) of the running state by position bucket, "
        "mean ± SD over seeds (min_val_loss checkpoint)",
        rows=[k for k in keys if k in set(values["row"])],
        columns=columns,
        row_of=row_of,
        notes=[
            "probe: multinomial logistic regression fitted on positions of training-length "
            "sequences only, evaluated on the test sets (rlt/state_probe.py); representation = the "
            "last block's output before the final norm (RLT-1/RLT-2: the fed-back s_t)",
            "parity: the running parity (chance 50); state: the S5 permutation so far (chance "
            "0.83); where: the position of each of the 5 elements (chance 20); rms: RMS norm of "
            "the representation (not %)",
            f"task {metric} at lengths in a bucket: test accuracy at the test lengths that fall in "
            "it (the final label sits at the bucket's positions)",
        ],
    )
    table.index_header = "task / positions / what"
    return table
