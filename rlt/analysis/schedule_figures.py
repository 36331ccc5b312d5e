"""The feedback-schedule figures: each schedule's accuracy against its cost, beside the fixed
chunk sizes (the table is rlt.analysis.schedule_view's; the figure draws its numbers)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rlt.analysis.collect import Collection
from rlt.analysis.figure_kit import FigureResult, context, finish, plt, seeds_note, slug
from rlt.analysis.labels import metric_words, model_style
from rlt.analysis.schedule_view import schedule_table
from rlt.analysis.table_core import Lengths, Table


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
        context(ax, c, row, train_lengths=False)
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
        ax.set_title(f"{row} ({seeds_note(c, row)}, {policy} checkpoint)")
        ax.grid(True, alpha=0.3)
        results.append(finish(fig, [ax], out, f"schedule_{slug(row)}", formats, pts))
    return results
