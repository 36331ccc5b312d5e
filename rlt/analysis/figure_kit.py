"""What every figure of rlt.analysis shares: the matplotlib setup (headless), the saved-figure
record (:class:`FigureResult`), the length axis, the training-length shading and chance line,
one legend per figure, and saving in each format."""

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
from rlt.analysis.labels import length_unit  # noqa: E402


@dataclass
class FigureResult:
    """One saved figure: its files and the points drawn (row, label, x, mean, sd, n, ...)."""

    name: str
    paths: list[Path]
    data: pd.DataFrame


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9+._-]+", "_", text).strip("_")


def finish(
    fig: plt.Figure,
    axes: Sequence[plt.Axes],
    out_dir: Path,
    name: str,
    formats: Sequence[str],
    data: pd.DataFrame,
) -> FigureResult:
    """The tail of every figure: one legend for the figure, saved in each format, closed."""
    legend(fig, list(axes))
    return FigureResult(name, save(fig, out_dir, name, formats), data)


# No creation date in a PDF or SVG: the same runs draw the same bytes, so a committed figure
# changes only when its data or drawing does (PNG carries none).
_NO_DATE = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}


def save(fig: plt.Figure, out_dir: Path, name: str, formats: Sequence[str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, dpi=150, metadata=_NO_DATE.get(fmt))
        paths.append(path)
    plt.close(fig)
    return paths


def spaced(lengths: Sequence[float], ratio: float = 1.45) -> list[float]:
    """Tick positions on a log axis whose labels do not collide: from the longest length down,
    each kept tick at least ``ratio`` times the next one kept (so "40" and "48" or "192" and
    "256" never print on top of each other); the shortest length is always kept when it fits."""
    kept: list[float] = []
    for x in sorted(lengths, reverse=True):
        if not kept or kept[-1] / x >= ratio:
            kept.append(x)
    return sorted(kept)


def length_axis(ax: plt.Axes, lengths: Sequence[float], task: str) -> None:
    """Log scale (base 2) when lengths span a decade or more, with plain-number ticks."""
    lengths = sorted(set(lengths))
    if is_log(lengths):
        ax.set_xscale("log", base=2)
        ticks = spaced(lengths)
        ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
    unit = length_unit(task)
    ax.set_xlabel(f"test length ({unit})" if unit else "test length")


def context(
    ax: plt.Axes, c: Collection, row: str, *, chance: bool = True, train_lengths: bool = True
) -> None:
    """Training lengths shaded gray and chance as a dotted line, the report's visual language."""
    info = c.row_info(row)
    if train_lengths and info["train_lengths"]:
        lo, hi = info["train_lengths"]
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.88", zorder=0, lw=0, label="training lengths")
    if chance and info["chance"] is not None:
        ax.axhline(info["chance"] * 100, color="0.35", ls=":", lw=1.2, zorder=1, label="chance")


def legend(fig: plt.Figure, axes: Sequence[plt.Axes]) -> None:
    handles, labels, seen = [], [], set()
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small", frameon=False)


def is_log(lengths: Sequence[float]) -> bool:
    return bool(len(lengths)) and min(lengths) > 0 and max(lengths) / min(lengths) >= 10


def seeds_note(c: Collection, row: str) -> str:
    """ "n=3 seeds, preset laptop" for a figure's title: seeds per model (a range when they
    differ) and the preset(s) of the runs drawn."""
    runs = c.used[c.used["row"] == row]
    counts = sorted(set(runs.groupby("label")["seed"].nunique()))
    n = "?" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    presets = ", ".join(sorted(set(runs["preset"].dropna())))
    return f"n={n} seeds, preset {presets}"
