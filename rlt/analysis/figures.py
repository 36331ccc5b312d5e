"""The report's figures from a Collection, as PNG and PDF.

Every plotting function returns FigureResult objects holding the exact points it drew
(`data`, in percent for accuracies), so tests and readers can check a figure against the tables
without reading pixels. Colours come from labels.model_style: the same model has the same colour
and marker in every figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

plt.rcParams["axes.titlesize"] = 9  # titles carry n, preset and policy: keep them inside

from rlt.analysis.collect import Collection  # noqa: E402
from rlt.analysis.figure_kit import (  # noqa: E402
    FigureResult,
    context,
    finish,
    is_log,
    length_axis,
    seeds_note,
    slug,
)
from rlt.analysis.labels import metric_words, model_style  # noqa: E402
from rlt.analysis.schedule_figures import schedule_figures  # noqa: E402, F401 - also figures.<name>
from rlt.analysis.schedule_view import has_schedules  # noqa: E402
from rlt.analysis.table_core import Lengths, seed_stats  # noqa: E402

S5_METRICS = {"token_acc": "prefix-token", "acc": "final-state", "seq_acc": "whole-sequence"}


def length_points(
    c: Collection, row: str, *, policy: str = "min_val_loss", metric: str = "acc"
) -> pd.DataFrame:
    """Accuracy (%) per model and test length: the points of a length-generalization curve.
    A length eval.py scored later is drawn only where every seed of the model has it (a
    single-seed point would stand under a mean over all seeds)."""
    t = c.test[(c.test["row"] == row) & (c.test["policy"] == policy) & (c.test["metric"] == metric)]
    seeds = t[~t["scored_later"]].groupby("label")["run_id"].nunique()
    have = t.groupby(["label", "length"])["run_id"].transform("nunique")
    t = t[~t["scored_later"] | (have == t["label"].map(seeds))]
    stats = seed_stats(t.assign(value=t["value"] * 100), ["label", "length"])
    stats.insert(0, "row", row)
    order = {lab: i for i, lab in enumerate(c.labels)}
    stats["_o"] = stats["label"].map(order)
    return stats.sort_values(["_o", "length"]).drop(columns="_o").reset_index(drop=True)


def _draw_lengths(ax: plt.Axes, c: Collection, pts: pd.DataFrame, *, log_x: bool) -> None:
    """Error bars = sample SD; models are dodged by a few percent of x so bars do not overlap
    (the dodge is drawing only: `pts` keeps the true lengths)."""
    groups = list(pts.groupby("label", sort=False))
    for i, (label, grp) in enumerate(groups):
        style = model_style(c.models[label])
        shift = 0.025 * (i - (len(groups) - 1) / 2)
        x = grp["length"] * (2**shift) if log_x else grp["length"] + shift * 4
        sd = grp["sd"].fillna(0)
        low, high = (grp["mean"] - sd).clip(lower=0), (grp["mean"] + sd).clip(upper=100)
        ax.errorbar(
            x,
            grp["mean"],
            yerr=[grp["mean"] - low, high - grp["mean"]],
            label=label,
            capsize=2.5,
            lw=1.4,
            ms=4,
            **style,
        )
        # every seed as a small hollow marker: a bimodal outcome (100 / 53 / 100) shows its
        # failed seed instead of hiding behind a mean and a wide bar
        xs = [xi for xi, vals in zip(x, grp["values"]) for _ in vals]
        ys = [v for vals in grp["values"] for v in vals]
        ax.scatter(xs, ys, s=12, facecolors="none", edgecolors=style["color"], lw=0.8, alpha=0.7)


def length_curves(
    c: Collection,
    out_dir: str | Path,
    *,
    policy: str = "min_val_loss",
    metric: str = "acc",
    formats: Sequence[str] = ("png", "pdf"),
) -> list[FigureResult]:
    """Accuracy vs test length, one figure per task plus an overview of all tasks."""
    out = Path(out_dir)
    results, panels = [], []
    for row in c.rows:
        pts = length_points(c, row, policy=policy, metric=metric)
        if pts.empty:
            continue
        panels.append((row, pts))
        fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
        _draw_row(ax, c, row, pts, metric, policy)
        results.append(finish(fig, [ax], out, f"length_{slug(row)}", formats, pts))
    if len(panels) > 1:
        ncol = min(3, len(panels))
        nrow = -(-len(panels) // ncol)
        fig, axes = plt.subplots(
            nrow, ncol, figsize=(4.2 * ncol, 3.3 * nrow), layout="constrained", squeeze=False
        )
        for ax, (row, pts) in zip(axes.flat, panels):
            _draw_row(ax, c, row, pts, metric, policy)
        for ax in list(axes.flat)[len(panels) :]:
            ax.set_visible(False)
        data = pd.concat([p for _, p in panels], ignore_index=True)
        results.append(finish(fig, list(axes.flat), out, "length_all", formats, data))
    return results


def _draw_row(
    ax: plt.Axes, c: Collection, row: str, pts: pd.DataFrame, metric: str, policy: str
) -> None:
    context(ax, c, row)
    _draw_lengths(ax, c, pts, log_x=is_log(pts["length"].tolist()))
    length_axis(ax, pts["length"].tolist(), c.row_task(row))
    ax.set_ylabel(f"test {metric_words(metric, [c.row_task(row)])} (%)")
    ax.set_ylim(-3, 103)
    ax.set_title(f"{row} ({seeds_note(c, row)}, {policy} checkpoint)")
    ax.grid(True, alpha=0.3)


def curve_points(
    c: Collection, frame: pd.DataFrame, row: str, metric: str, scale: float = 1.0
) -> pd.DataFrame:
    """Mean and SD over seeds per model and step (validation or training curves). A run that
    stopped before the others of its model (early stopping) keeps its last value at the later
    steps, so the mean never jumps when a seed stops; ``n`` counts the seeds that ran there."""
    f = frame[(frame["row"] == row) & (frame["metric"] == metric)]
    ran = f.groupby(["label", "step"])["run_id"].nunique().rename("n_ran")
    f = _carry_forward(f)
    stats = seed_stats(f.assign(value=f["value"] * scale), ["label", "step"])
    stats = stats.merge(ran.reset_index(), on=["label", "step"], how="left")
    stats.insert(0, "row", row)
    order = {lab: i for i, lab in enumerate(c.labels)}
    stats["_o"] = stats["label"].map(order)
    return stats.sort_values(["_o", "step"]).drop(columns="_o").reset_index(drop=True)


def _carry_forward(f: pd.DataFrame) -> pd.DataFrame:
    """Each run's last value repeated at its model's later steps (the run had stopped)."""
    if f.empty:
        return f
    last_step = f.groupby("label")["step"].max()
    extra = []
    for _, run in f.groupby("run_id"):
        end = run.loc[run["step"].idxmax()]
        steps = sorted(
            s for s in f.loc[f["label"] == end["label"], "step"].unique() if s > end["step"]
        )
        if steps and end["step"] < last_step[end["label"]]:
            extra.append(pd.DataFrame([{**end.to_dict(), "step": s} for s in steps]))
    return pd.concat([f, *extra], ignore_index=True) if extra else f


def _curves(
    c: Collection,
    frame: pd.DataFrame,
    out: Path,
    *,
    metric: str,
    scale: float,
    prefix: str,
    ylabel: str,
    log_y: bool,
    formats: Sequence[str],
    chance: bool,
) -> list[FigureResult]:
    results = []
    for row in c.rows:
        pts = curve_points(c, frame, row, metric, scale)
        if pts.empty:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
        if chance:
            info = c.row_info(row)
            if info["chance"] is not None:
                ax.axhline(info["chance"] * scale, color="0.35", ls=":", lw=1.2, label="chance")
        use_log = log_y and bool((pts["min"] > 0).all())
        for label, grp in pts.groupby("label", sort=False):
            style = model_style(c.models[label])
            ax.plot(grp["step"], grp["mean"], label=label, color=style["color"], lw=1.4)
            sd = grp["sd"].fillna(0)
            top = 100.0 if scale == 100 else float("inf")
            low, high = (grp["mean"] - sd).clip(lower=0), (grp["mean"] + sd).clip(upper=top)
            if use_log:  # mean - SD can be <= 0, off a log axis: band = the seeds' min-max
                low, high = grp["min"], grp["max"]
            ax.fill_between(grp["step"], low, high, color=style["color"], alpha=0.18, lw=0)
        if use_log:
            ax.set_yscale("log")
        if scale == 100:
            ax.set_ylim(-3, 103)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel.format(words=metric_words(metric, [c.row_task(row)])))
        ax.set_title(f"{row} ({seeds_note(c, row)})")
        ax.grid(True, alpha=0.3)
        results.append(finish(fig, [ax], out, f"{prefix}_{slug(row)}", formats, pts))
    return results


def val_curves(
    c: Collection,
    out_dir: str | Path,
    *,
    metric: str = "acc",
    formats: Sequence[str] = ("png", "pdf"),
) -> list[FigureResult]:
    """Validation accuracy vs step per task, mean with a ± SD band over seeds."""
    return _curves(
        c,
        c.val,
        Path(out_dir),
        metric=metric,
        scale=100,
        prefix=f"val_{metric}",
        ylabel="validation {words} (%)",
        log_y=False,
        formats=formats,
        chance=True,
    )


def train_loss_curves(
    c: Collection, out_dir: str | Path, *, formats: Sequence[str] = ("png", "pdf")
) -> list[FigureResult]:
    """Training loss vs step per task, the mean over seeds with the seeds' min-max as band
    (log y: mean - SD may be <= 0)."""
    return _curves(
        c,
        c.train,
        Path(out_dir),
        metric="loss",
        scale=1.0,
        prefix="train_loss",
        ylabel="training loss",
        log_y=True,
        formats=formats,
        chance=False,
    )


def s5_panels(
    c: Collection,
    out_dir: str | Path,
    *,
    policy: str = "min_val_loss",
    formats: Sequence[str] = ("png", "pdf"),
) -> list[FigureResult]:
    """Prefix-token, final-state and whole-sequence accuracy vs length for the S5 tasks.

    Drawn for every S5 task (name starting with "s5") whose test rows carry all three metrics;
    other tasks report them too, but only for S5 does the report read them as one panel.
    """
    out = Path(out_dir)
    results = []
    for row in c.rows:
        here = c.test[(c.test["row"] == row) & (c.test["policy"] == policy)]
        if not c.row_task(row).startswith("s5") or not set(S5_METRICS) <= set(here["metric"]):
            continue
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True, layout="constrained")
        frames = []
        for ax, (metric, title) in zip(axes, S5_METRICS.items()):
            pts = length_points(c, row, policy=policy, metric=metric).assign(metric=metric)
            frames.append(pts)
            context(ax, c, row, chance=metric != "seq_acc")  # no chance level for whole seqs
            _draw_lengths(ax, c, pts, log_x=is_log(pts["length"].tolist()))
            length_axis(ax, pts["length"].tolist(), c.row_task(row))
            ax.set_title(f"{row}: {title} accuracy")
            ax.set_ylim(-3, 103)
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("test accuracy (%)")
        data = pd.concat(frames, ignore_index=True)
        results.append(finish(fig, axes, out, f"s5_panel_{slug(row)}", formats, data))
    return results


def probe_points(c: Collection, row: str, target: str) -> pd.DataFrame:
    """Probe accuracy (%) per model and position bucket (x = the bucket's upper end)."""
    p = c.probe[(c.probe["row"] == row) & (c.probe["target"] == target)]
    x = p["bucket"].str.split("-").str[1].astype(int)
    stats = seed_stats(p.assign(value=p["value"] * 100, length=x), ["label", "length"])
    stats.insert(0, "row", row)
    order = {lab: i for i, lab in enumerate(c.labels)}
    stats["_o"] = stats["label"].map(order)
    return stats.sort_values(["_o", "length"]).drop(columns="_o").reset_index(drop=True)


def probe_curves(
    c: Collection, out_dir: str | Path, *, formats: Sequence[str] = ("png", "pdf")
) -> list[FigureResult]:
    """Per task: the state probe's accuracy vs position (one panel per probe target), one line
    per model, mean ± SD over seeds and every seed's value (the length curve is its own figure,
    length_<task>)."""
    if c.probe.empty:
        return []
    out, results = Path(out_dir), []
    for row in c.rows:
        targets = [t for t in c.probe.loc[c.probe["row"] == row, "target"].unique() if t != "rms"]
        if not targets:
            continue
        fig, axes = plt.subplots(
            1, len(targets), figsize=(4.6 * len(targets), 3.6), layout="constrained", squeeze=False
        )
        axes = list(axes[0])
        frames = []
        for ax, target in zip(axes, targets):
            probe_pts = probe_points(c, row, target)
            context(ax, c, row, chance=False)
            _draw_lengths(ax, c, probe_pts, log_x=is_log(probe_pts["length"].tolist()))
            length_axis(ax, probe_pts["length"].tolist(), c.row_task(row))
            ax.set_xlabel("position (end of bucket)")
            ax.set_ylabel(f"probe acc (%): {target}")
            ax.set_ylim(-3, 103)
            ax.set_title(f"{row}: state probe ({target})")
            ax.grid(True, alpha=0.3)
            frames.append(probe_pts.assign(panel=target))
        data = pd.concat(frames, ignore_index=True)
        results.append(finish(fig, list(axes), out, f"probe_{slug(row)}", formats, data))
    return results


def make_figures(
    c: Collection,
    out_dir: str | Path,
    *,
    policy: str = "min_val_loss",
    metric: str = "acc",
    formats: Sequence[str] = ("png", "pdf"),
    schedule_view: bool = False,
    split: str | None = None,
    lengths: Lengths = None,
) -> list[FigureResult]:
    """Every figure: length curves, validation curves, training loss, S5 panels, and the
    schedule view when a run trained with a feedback schedule (or with schedule_view; `split`
    and `lengths` steer only that view, `split` only without schedule runs). Raises
    MixedDefinitions when the runs compute `metric` with different code."""
    c.check_metric(metric)
    results = [
        *length_curves(c, out_dir, policy=policy, metric=metric, formats=formats),
        *val_curves(c, out_dir, metric=metric, formats=formats),
        *train_loss_curves(c, out_dir, formats=formats),
        *s5_panels(c, out_dir, policy=policy, formats=formats),
        *probe_curves(c, out_dir, formats=formats),
    ]
    if schedule_view or has_schedules(c):
        results += schedule_figures(
            c,
            out_dir,
            split=None if has_schedules(c) else split,
            policy=policy,
            metric=metric,
            lengths=lengths,
            formats=formats,
        )
    return results
