"""The report's figures from a Collection, as PNG and PDF.

Every plotting function returns FigureResult objects holding the exact points it drew
(`data`, in percent for accuracies), so tests and readers can check a figure against the tables
without reading pixels. Colours come from labels.model_style: the same model has the same colour
and marker in every figure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib import ticker  # noqa: E402

plt.rcParams["axes.titlesize"] = 9  # titles carry n, preset and policy: keep them inside

from rlt.analysis.collect import Collection  # noqa: E402
from rlt.analysis.labels import length_unit, metric_words, model_style  # noqa: E402
from rlt.analysis.schedule_view import has_schedules, schedule_table  # noqa: E402
from rlt.analysis.table_core import Lengths, Table, seed_stats  # noqa: E402

S5_METRICS = {"token_acc": "prefix-token", "acc": "final-state", "seq_acc": "whole-sequence"}


@dataclass
class FigureResult:
    """One saved figure: its files and the points drawn (row, label, x, mean, sd, n, ...)."""

    name: str
    paths: list[Path]
    data: pd.DataFrame


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9+._-]+", "_", text).strip("_")


def _finish(
    fig: plt.Figure,
    axes: Sequence[plt.Axes],
    out_dir: Path,
    name: str,
    formats: Sequence[str],
    data: pd.DataFrame,
) -> FigureResult:
    """The tail of every figure: one legend for the figure, saved in each format, closed."""
    _legend(fig, list(axes))
    return FigureResult(name, _save(fig, out_dir, name, formats), data)


def _save(fig: plt.Figure, out_dir: Path, name: str, formats: Sequence[str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, dpi=150)
        paths.append(path)
    plt.close(fig)
    return paths


def _spaced(lengths: Sequence[float], ratio: float = 1.45) -> list[float]:
    """Tick positions on a log axis whose labels do not collide: from the longest length down,
    each kept tick at least ``ratio`` times the next one kept (so "40" and "48" or "192" and
    "256" never print on top of each other); the shortest length is always kept when it fits."""
    kept: list[float] = []
    for x in sorted(lengths, reverse=True):
        if not kept or kept[-1] / x >= ratio:
            kept.append(x)
    return sorted(kept)


def _length_axis(ax: plt.Axes, lengths: Sequence[float], task: str) -> None:
    """Log scale (base 2) when lengths span a decade or more, with plain-number ticks."""
    lengths = sorted(set(lengths))
    if _is_log(lengths):
        ax.set_xscale("log", base=2)
        ticks = _spaced(lengths)
        ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
    unit = length_unit(task)
    ax.set_xlabel(f"test length ({unit})" if unit else "test length")


def _context(
    ax: plt.Axes, c: Collection, row: str, *, chance: bool = True, train_lengths: bool = True
) -> None:
    """Training lengths shaded gray and chance as a dotted line, the report's visual language."""
    info = c.row_info(row)
    if train_lengths and info["train_lengths"]:
        lo, hi = info["train_lengths"]
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.88", zorder=0, lw=0, label="training lengths")
    if chance and info["chance"] is not None:
        ax.axhline(info["chance"] * 100, color="0.35", ls=":", lw=1.2, zorder=1, label="chance")


def _legend(fig: plt.Figure, axes: Sequence[plt.Axes]) -> None:
    handles, labels, seen = [], [], set()
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small", frameon=False)


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


def _is_log(lengths: Sequence[float]) -> bool:
    return bool(len(lengths)) and min(lengths) > 0 and max(lengths) / min(lengths) >= 10


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
        results.append(_finish(fig, [ax], out, f"length_{_slug(row)}", formats, pts))
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
        results.append(_finish(fig, list(axes.flat), out, "length_all", formats, data))
    return results


def _seeds_note(c: Collection, row: str) -> str:
    """ "n=3 seeds, preset laptop" for a figure's title: seeds per model (a range when they
    differ) and the preset(s) of the runs drawn."""
    runs = c.used[c.used["row"] == row]
    counts = sorted(set(runs.groupby("label")["seed"].nunique()))
    n = "?" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    presets = ", ".join(sorted(set(runs["preset"].dropna())))
    return f"n={n} seeds, preset {presets}"


def _draw_row(
    ax: plt.Axes, c: Collection, row: str, pts: pd.DataFrame, metric: str, policy: str
) -> None:
    _context(ax, c, row)
    _draw_lengths(ax, c, pts, log_x=_is_log(pts["length"].tolist()))
    _length_axis(ax, pts["length"].tolist(), c.row_task(row))
    ax.set_ylabel(f"test {metric_words(metric, [c.row_task(row)])} (%)")
    ax.set_ylim(-3, 103)
    ax.set_title(f"{row} ({_seeds_note(c, row)}, {policy} checkpoint)")
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
        ax.set_title(f"{row} ({_seeds_note(c, row)})")
        ax.grid(True, alpha=0.3)
        results.append(_finish(fig, [ax], out, f"{prefix}_{_slug(row)}", formats, pts))
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
            _context(ax, c, row, chance=metric != "seq_acc")  # no chance level for whole seqs
            _draw_lengths(ax, c, pts, log_x=_is_log(pts["length"].tolist()))
            _length_axis(ax, pts["length"].tolist(), c.row_task(row))
            ax.set_title(f"{row}: {title} accuracy")
            ax.set_ylim(-3, 103)
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("test accuracy (%)")
        data = pd.concat(frames, ignore_index=True)
        results.append(_finish(fig, axes, out, f"s5_panel_{_slug(row)}", formats, data))
    return results


def schedule_data(table: Table, row: str) -> pd.DataFrame:
    """The points of one task row of the schedule view, read from its table (so the figure
    shows the table's numbers): row, label, length, x_mean, x_sd, x_n (training minutes per
    run), y_mean, y_sd, y_n (test accuracy in % at the table's length). Models lacking either
    coordinate are left out."""
    cols = ["row", "label", "length", "x_mean", "x_sd", "x_n", "y_mean", "y_sd", "y_n"]
    d = table.data[(table.data["key"] == row) & (table.data["n"] > 0)]
    x = d[d["quantity"] == "train_min"].set_index("row")
    y = d[d["quantity"] == "acc"].set_index("row")
    records = [
        {
            "row": row,
            "label": lab,
            "length": int(y.loc[lab, "length"]),
            "x_mean": float(x.loc[lab, "mean"]),
            "x_sd": float(x.loc[lab, "sd"]),
            "x_n": int(x.loc[lab, "n"]),
            "y_mean": float(y.loc[lab, "mean"]),
            "y_sd": float(y.loc[lab, "sd"]),
            "y_n": int(y.loc[lab, "n"]),
        }
        for lab in table.display.index
        if lab in x.index and lab in y.index
    ]
    return pd.DataFrame.from_records(records, columns=cols)


def _label_points(ax: plt.Axes, c: Collection, pts: pd.DataFrame) -> None:
    """Name each point beside it, trying the four corners around it in turn so that labels of
    nearby points (same accuracy, similar time) do not print over each other."""
    x0, x1 = ax.get_xlim()
    w, h = (
        ax.get_window_extent().width / ax.figure.dpi,
        ax.get_window_extent().height / ax.figure.dpi,
    )
    # Text box sizes in axes fractions: x-small (about 7 pt) characters are ~0.06 in wide.
    char_w, text_h, pad_x, pad_y = 0.06 / w, 0.13 / h, 0.07 / w, 0.07 / h
    corners = [(1, 1), (1, -1), (-1, 1), (-1, -1)]
    placed: list[tuple[float, float, float, float]] = []
    for p in pts.itertuples():
        fx, fy = (p.x_mean - x0) / (x1 - x0), (p.y_mean + 3) / 106
        width = char_w * len(p.label)
        best = None
        for sx, sy in corners:
            left = fx + pad_x if sx > 0 else fx - pad_x - width
            bottom = fy + pad_y if sy > 0 else fy - pad_y - text_h
            box = (left, bottom, left + width, bottom + text_h)
            clash = sum(_overlap(box, q) for q in placed) + (box[2] > 1 or box[0] < 0)
            if best is None or clash < best[0]:
                best = (clash, sx, sy, box)
            if clash == 0:
                break
        _, sx, sy, box = best
        placed.append(box)
        ax.annotate(
            p.label,
            (p.x_mean, p.y_mean),
            xytext=(5 * sx, 5 * sy),
            textcoords="offset points",
            ha="left" if sx > 0 else "right",
            va="bottom" if sy > 0 else "top",
            fontsize="x-small",
            color=model_style(c.models[p.label])["color"],
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75},
        )


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def schedule_figures(
    c: Collection,
    out_dir: str | Path,
    *,
    split: str | None = None,
    policy: str = "min_val_loss",
    metric: str = "acc",
    lengths: Lengths = None,
    formats: Sequence[str] = ("png", "pdf"),
) -> list[FigureResult]:
    """The feedback-schedule view (issue 8), one figure per task: accuracy at the longest
    tested length (y) against mean training time per run in minutes (x), one labelled point
    per model, error bars = sample SD over seeds on both axes (none for a single seed)."""
    out = Path(out_dir)
    table = schedule_table(c, split=split, policy=policy, metric=metric, lengths=lengths)
    results = []
    for row in c.rows:
        pts = schedule_data(table, row)
        if pts.empty:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
        _context(ax, c, row, train_lengths=False)
        for p in pts.itertuples():
            ax.errorbar(
                p.x_mean,
                p.y_mean,
                xerr=0 if pd.isna(p.x_sd) else p.x_sd,
                yerr=0 if pd.isna(p.y_sd) else p.y_sd,
                label=p.label,
                capsize=3,
                ms=6,
                lw=1.2,
                ls="none",
                **model_style(c.models[p.label]),
            )
        right = float((pts["x_mean"] + pts["x_sd"].fillna(0)).max())
        ax.set_xlim(0, right * 1.25 if right > 0 else 1.0)  # room for the point labels
        _label_points(ax, c, pts)
        ax.set_ylim(-3, 103)
        ax.set_xlabel("training time per run (minutes, mean over seeds)")
        length = pts["length"].iloc[0]
        ax.set_ylabel(f"test {metric_words(metric, [c.row_task(row)])} (%) at length {length}")
        ax.set_title(f"{row} ({_seeds_note(c, row)}, {policy} checkpoint)")
        ax.grid(True, alpha=0.3)
        results.append(_finish(fig, [ax], out, f"schedule_{_slug(row)}", formats, pts))
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
            _context(ax, c, row, chance=False)
            _draw_lengths(ax, c, probe_pts, log_x=_is_log(probe_pts["length"].tolist()))
            _length_axis(ax, probe_pts["length"].tolist(), c.row_task(row))
            ax.set_xlabel("position (end of bucket)")
            ax.set_ylabel(f"probe acc (%): {target}")
            ax.set_ylim(-3, 103)
            ax.set_title(f"{row}: state probe ({target})")
            ax.grid(True, alpha=0.3)
            frames.append(probe_pts.assign(panel=target))
        data = pd.concat(frames, ignore_index=True)
        results.append(_finish(fig, list(axes), out, f"probe_{_slug(row)}", formats, data))
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
