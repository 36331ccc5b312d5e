"""The report's tables (and a few it lacks) from a Collection.

Every accuracy cell is mean ± sample SD (ddof=1) over seeds, in percent, as in the report; the
raw per-seed values travel with every table (`Table.per_seed`) because three seeds can diverge
wildly (the report's flat mod-5 4+4: 17.58, 19.53, 98.96). A cell with fewer seeds than the
grid expects shows n; cells the grid expects but nobody ran show "– (n=0/3)".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rlt.analysis import render
from rlt.analysis.collect import Collection
from rlt.analysis.labels import DEPTH_VARIANTS, split_depths_or_none
from rlt.rundir import POLICIES

# Lengths of the report's feedback-interval table (SPEC section 4); other tasks use their
# longest tested length.
FEEDBACK_LENGTHS = {"parity": 64, "s5_swaps": 48, "s5": 32, "mod5_flat": 63, "mod5_brackets": 64}

Lengths = int | Mapping[str, int] | None


@dataclass
class Table:
    """One table: formatted for reading (`display`) and numeric for checking (`data`).

    data columns for accuracy tables: row (display row), key (collection row), column, mean,
    sd, n, n_expected, min, max, seeds, values (percent); other tables carry their own columns.
    """

    name: str
    title: str
    display: pd.DataFrame
    data: pd.DataFrame
    index_header: str = "task"
    per_seed: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    def cell(self, row: str, column: str) -> pd.Series:
        """The numeric record of one cell (row as displayed), for tests and scripts."""
        hit = self.data[(self.data["row"] == row) & (self.data["column"] == column)]
        if hit.empty:
            raise KeyError(f"{self.name}: no cell ({row!r}, {column!r})")
        return hit.iloc[0]

    def markdown(self, *, per_seed: bool = False, level: int = 3) -> str:
        parts = [f"{'#' * level} {self.title}", ""]
        if self.display.empty:
            parts.append("(no data)")
        else:
            parts.append(render.markdown(self.display, self.index_header))
        if self.notes:
            parts += [""] + [f"- {n}" for n in self.notes]
        if per_seed and self.per_seed is not None and not self.per_seed.empty:
            parts += ["", f"Per-seed values (%), {self.title.split(':')[0]}:", ""]
            parts.append(render.markdown(self.per_seed, "cell"))
        return "\n".join(parts) + "\n"

    def latex(self) -> str:
        return render.latex(
            self.display, caption=self.title, label=self.name, index_header=self.index_header
        )

    def write(self, out_dir: str | Path) -> list[Path]:
        """CSV of the numbers, LaTeX of the display, CSV of the per-seed values."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / f"{self.name}.csv", out / f"{self.name}.tex"]
        data = self.data.copy()
        for col in ("seeds", "values"):
            if col in data:
                data[col] = [" ".join(map(_num, v)) for v in data[col]]
        data.to_csv(paths[0], index=False)
        paths[1].write_text(self.latex())
        if self.per_seed is not None and not self.per_seed.empty:
            paths.append(out / f"{self.name}_per_seed.csv")
            self.per_seed.to_csv(paths[-1])
        return paths


def _num(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def seed_stats(values: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """mean, sample SD (ddof=1; NaN for one seed), n, min, max, seeds and values per group."""
    cols = [*by, "mean", "sd", "n", "min", "max", "seeds", "values"]
    if values.empty:
        return pd.DataFrame(columns=cols)
    values = values.sort_values("seed")
    g = values.groupby(list(by), dropna=False, sort=False)
    out = g["value"].agg(["mean", "count", "min", "max"]).rename(columns={"count": "n"})
    out["sd"] = g["value"].std(ddof=1)
    out["seeds"] = g["seed"].agg(tuple)
    out["values"] = g["value"].agg(tuple)
    return out.reset_index()[cols]


def cell_table(
    values: pd.DataFrame,
    *,
    c: Collection,
    name: str,
    title: str,
    rows: Sequence[str],
    columns: Sequence[str],
    row_display: Mapping[str, str] | None = None,
    row_of: Mapping[str, str] | None = None,
    best: bool = False,
    notes: list[str] | None = None,
) -> Table:
    """Aggregate `values` (row, column, seed, value in %) into a rows x columns accuracy table.

    `rows` are the keys of `values["row"]`; `row_of` maps a key to its collection row where
    they differ (one task per length), so the grid's expected seed count still applies. A cell
    appears when it has values or the grid expects it; everything else stays blank.
    """
    row_display = dict(row_display or {})
    row_of = dict(row_of or {})
    expected = c.expected_n()
    stats = seed_stats(values, ["row", "column"]).set_index(["row", "column"])
    records = []
    for r in rows:
        for col in columns:
            n_exp = expected.get((row_of.get(r, r), col), 0)
            rec = _cell_record(stats, (r, col), n_exp)
            if rec is None:
                continue
            rec.update(
                row=row_display.get(r, r), key=row_of.get(r, r), column=col, n_expected=n_exp
            )
            rec["n"] = int(rec["n"])
            records.append(rec)
    cols = [
        "row",
        "key",
        "column",
        "mean",
        "sd",
        "n",
        "n_expected",
        "min",
        "max",
        "seeds",
        "values",
    ]
    data = pd.DataFrame.from_records(records, columns=cols)
    shown_rows = list(dict.fromkeys(data["row"]))
    shown_cols = [col for col in columns if col in set(data["column"])]
    display = pd.DataFrame("", index=pd.Index(shown_rows), columns=shown_cols, dtype=object)
    for rec in data.itertuples():
        display.loc[rec.row, rec.column] = render.fmt_cell(
            rec.mean, rec.sd, rec.n, rec.n_expected, rec.max if best else None
        )
    notes = list(notes or [])
    short = data[data["n"] < data["n_expected"]]
    if len(short):
        notes.append(
            f"{len(short)} cell(s) have fewer seeds than the grid expects, shown as (n=have/expected);"
            " see the incomplete section"
        )
    return Table(name, title, display, data, per_seed=_per_seed(data), notes=notes)


def _per_seed(data: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for rec in data.itertuples():
        if rec.n == 0:
            continue
        row = {"cell": f"{rec.row} · {rec.column}"}
        row.update({f"seed {s}": round(v, 2) for s, v in zip(rec.seeds, rec.values)})
        row.update(mean=round(rec.mean, 2), sd=round(rec.sd, 2), n=rec.n)
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows).set_index("cell")
    seed_cols = sorted((c for c in df.columns if c.startswith("seed ")), key=lambda s: int(s[5:]))
    return df[seed_cols + ["mean", "sd", "n"]]


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
        title=f"Table 1: validation {metric} (%) at {at}, mean ± SD over seeds",
        rows=c.rows,
        columns=c.labels,
        notes=notes,
    )


def _pick_length(
    available: Sequence[int],
    task: str,
    row: str,
    lengths: Lengths,
    default: Mapping[str, int] | None = None,
) -> int | None:
    if isinstance(lengths, Mapping):
        want = lengths.get(row, lengths.get(task))
    else:
        want = lengths
    if want is None and default and default.get(task) in available:
        want = default[task]
    if want is None:
        return max(available) if len(available) else None
    return int(want)


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
        available = sorted(here["length"].unique())
        length = _pick_length(available, task, row, lengths, default_lengths)
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
        or f"Table 2: test {metric} (%) at the longest tested length, checkpoint "
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
    per run, (acc - chance) / (1 - chance) averaged over the tested lengths in [lo, hi]; then
    mean ± SD over seeds, with the best seed (the literature reports the best of 3) in brackets.
    Shown x 100 (0.971 in a paper is 97.10 here). Runs without a chance level are left out."""
    t = c.test[
        (c.test["policy"] == policy)
        & (c.test["metric"] == metric)
        & c.test["length"].between(lo, hi)
    ]
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
        title=f"Scaled {metric} x 100, (acc - chance) / (1 - chance) averaged over test lengths "
        f"{lo}-{hi}, checkpoint policy {policy}: mean ± SD over seeds [best seed]",
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
    """Test accuracy at every tested length: the length curves as numbers."""
    t = c.test[(c.test["policy"] == policy) & (c.test["metric"] == metric)]
    columns = list(columns) if columns is not None else c.labels
    keys, row_of = [], {}
    for row in c.rows:
        for length in sorted(t.loc[t["row"] == row, "length"].unique()):
            key = f"{row} / {length}"
            keys.append(key)
            row_of[key] = row
    values = t.assign(
        row=[f"{r} / {n}" for r, n in zip(t["row"], t["length"])],
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
        title=f"Test {metric} (%) at every tested length, checkpoint policy {policy}, "
        "mean ± SD over seeds",
    )
    table.index_header = "task / length"
    return table


def _or_dash(x: object) -> str:
    return render.DASH if x is None else str(x)


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
        title=f"Feedback interval at split {split}: test {metric} (%), checkpoint policy "
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
        f"Checkpoint policies: test {metric} (%) at the longest tested length, mean ± SD "
        "[max over seeds]",
        display,
        data,
        index_header="task (length) · policy",
        per_seed=pd.concat([t.per_seed for t in tables]),
        notes=[
            "policies: min_val_loss = lowest validation loss (the report's), final = last "
            "step, max_val_acc = highest validation accuracy"
        ],
    )


def params_table(c: Collection) -> Table:
    """Parameter count per model, with the difference to RLT-1 at the same split.

    The report's Table 4 pins these down (Transformer 8 25.31M, RLT-1 8+0 26.10M and 4+4
    28.73M, RLT-0 = RLT-1 - 787,968), so a mismatch here means a model is not the report's.
    """
    used = c.used.dropna(subset=["params"])
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
                notes.append(
                    f"{row}: parameter count differs between runs ({p.min():,}–{p.max():,}); "
                    "check the config of each run"
                )
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
        rec.update({f"sec_per_step[{r}]": per_task.loc[lab, r] for r in rows})
        records.append(rec)
    data = pd.DataFrame.from_records(records)
    display = pd.DataFrame(index=pd.Index(data["row"]))
    for r in rows:
        display[r] = [_sec(v) for v in data[f"sec_per_step[{r}]"]]
    display["all tasks"] = [_sec(v) for v in data["sec_per_step"]]
    display["runs"] = data["n_runs"].astype(str).values
    display["× RLT-0"] = [_ratio(v) for v in data["ratio_rlt0"]]
    display["× Transformer"] = [_ratio(v) for v in data["ratio_transformer"]]
    display["train h"] = [_ratio(v) for v in data["train_hours"]]
    return Table(
        "cost",
        "Training cost: mean seconds per optimizer step (excluding validation)",
        display,
        data,
        index_header="model",
        notes=[
            "ratios: per task against RLT-0 at the same split / the Transformer of the same "
            "depth, averaged over the tasks both ran; machines must match for ratios to mean "
            "anything"
        ],
    )


def _sec(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.4g}"


def _ratio(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.2f}"


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


_EMPTY_CELL = {
    "mean": float("nan"),
    "sd": float("nan"),
    "n": 0,
    "min": float("nan"),
    "max": float("nan"),
    "seeds": (),
    "values": (),
}


def _cell_record(stats: pd.DataFrame, key: tuple, n_expected: int) -> dict | None:
    """Seed statistics of one table cell; an empty record when the grid expects runs there but
    none finished; None when the cell is not part of the grid at all."""
    if key in stats.index:
        s = stats.loc[key]
        return {k: s[k] for k in _EMPTY_CELL}
    if n_expected:
        return dict(_EMPTY_CELL)
    return None


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
    text = str(text).strip().splitlines()[-1] if str(text).strip() else ""
    return text if len(text) <= n else text[: n - 1] + "…"
