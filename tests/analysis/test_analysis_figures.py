"""Figures: one per task and kind, files on disk, and the drawn points equal the tables' values."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlt.analysis import collect
from rlt.analysis.figures import make_figures
from rlt.analysis.tables import generalization_table, length_table, val_table
from tests.analysis.analysis_synthetic import TASKS


@pytest.fixture(scope="module")
def figs(sweep: Path, tmp_path_factory: pytest.TempPathFactory):
    c = collect([sweep])
    out = tmp_path_factory.mktemp("figs")
    return c, {f.name: f for f in make_figures(c, out)}


def test_every_task_gets_every_figure_as_png_and_pdf(figs) -> None:
    _, results = figs
    for task in TASKS:
        for prefix in ("length", "val_acc", "train_loss"):
            fig = results[f"{prefix}_{task}"]
            assert [p.suffix for p in fig.paths] == [".png", ".pdf"]
            assert all(p.is_file() and p.stat().st_size > 1000 for p in fig.paths)
    assert "length_all" in results
    assert "s5_panel_s5_swaps" in results and "s5_panel_parity" not in results


def test_length_curves_plot_the_table_values(figs) -> None:
    c, results = figs
    t2 = generalization_table(c)
    lengths = length_table(c)
    for task, spec in TASKS.items():
        pts = results[f"length_{task}"].data
        for label in c.labels:
            p = pts[(pts["label"] == label) & (pts["length"] == max(spec["lengths"]))].iloc[0]
            cell = t2.cell(f"{task} ({max(spec['lengths'])})", label)
            assert p["mean"] == pytest.approx(cell["mean"])
            assert p["sd"] == pytest.approx(cell["sd"])
            assert p["n"] == cell["n"]
        for p in pts.itertuples():
            assert p.mean == pytest.approx(lengths.cell(f"{task} / {p.length}", p.label)["mean"])
    overview = results["length_all"].data
    assert len(overview) == sum(len(results[f"length_{t}"].data) for t in TASKS)


def test_validation_curves_plot_the_table1_values(figs) -> None:
    c, results = figs
    for step in (300, 500):
        t1 = val_table(c, step=step)
        for task in TASKS:
            pts = results[f"val_acc_{task}"].data
            for label in c.labels:
                p = pts[(pts["label"] == label) & (pts["step"] == step)].iloc[0]
                assert p["mean"] == pytest.approx(t1.cell(task, label)["mean"])
                assert p["sd"] == pytest.approx(t1.cell(task, label)["sd"])


def test_s5_panel_has_all_three_metrics(figs) -> None:
    c, results = figs
    pts = results["s5_panel_s5_swaps"].data
    assert set(pts["metric"]) == {"token_acc", "acc", "seq_acc"}
    seq = generalization_table(c, metric="seq_acc")
    p = pts[(pts["metric"] == "seq_acc") & (pts["length"] == 512) & (pts["label"] == "RLT-1 4+4")]
    assert p.iloc[0]["mean"] == pytest.approx(seq.cell("s5_swaps (512)", "RLT-1 4+4")["mean"])


def test_training_loss_is_the_seed_mean(figs) -> None:
    c, results = figs
    pts = results["train_loss_parity"].data
    raw = c.train[(c.train["task"] == "parity") & (c.train["label"] == "RLT-0 4+4")]
    expect = raw[raw["step"] == 100]["value"].mean()
    got = pts[(pts["label"] == "RLT-0 4+4") & (pts["step"] == 100)]["mean"].iloc[0]
    assert got == pytest.approx(expect)
    assert isinstance(pts, pd.DataFrame)


def test_an_early_stopped_seed_does_not_pull_a_curve_down(tmp_path) -> None:
    """Issue 31: a seed that stopped early (at 100%) left the later steps averaged over the
    other seeds only, so the curve fell; its last value now carries forward, and n_ran says
    how many seeds ran there."""
    import json

    from rlt.analysis.figures import curve_points
    from tests.analysis.analysis_synthetic import make_sweep

    sweep = make_sweep(tmp_path / "s", holes=False)
    path = sweep / "parity" / "rlt1" / "4+4" / "seed42" / "results.json"
    res = json.loads(path.read_text())
    res["val_curve"] = [dict(r, acc=1.0) for r in res["val_curve"] if r["step"] <= 200]
    path.write_text(json.dumps(res))
    c = collect([sweep])
    pts = curve_points(c, c.val, "parity", "acc", 100).set_index(["label", "step"])
    late = pts.loc[("RLT-1 4+4", 500)]
    assert late["n"] == 3 and late["n_ran"] == 2
    others = c.val[(c.val["label"] == "RLT-1 4+4") & (c.val["step"] == 500)]
    others = others[(others["metric"] == "acc") & (others["row"] == "parity")]["value"]
    assert late["mean"] == pytest.approx((100 + 100 * others.sum()) / 3)


def test_task_variants_sort_and_label_as_their_task() -> None:
    """Issue 31: parity_prefix (the default task) had no place in the task order and no axis
    unit; a variant now takes its task's (parity_3to16 -> parity), unknown tasks come last."""
    from rlt.analysis.labels import length_unit, task_sort_key

    tasks = ["s5", "parity_prefix", "zzz", "s5_swaps", "parity", "addition", "mod5_flat_3to15"]
    assert sorted(tasks, key=task_sort_key) == [
        "addition", "parity", "parity_prefix", "mod5_flat_3to15", "s5_swaps", "s5", "zzz",
    ]  # fmt: skip
    assert [length_unit(t) for t in ("parity_prefix", "s5_swaps", "zzz")] == [
        "bits", "operations", None,
    ]  # fmt: skip


def test_log_axis_tick_labels_do_not_collide() -> None:
    """Issue 31: "192256" printed where two tick labels met; kept ticks are now at least 1.45x
    apart, the longest length always labelled."""
    from rlt.analysis.figure_kit import spaced as _spaced

    ticks = _spaced([20, 40, 48, 64, 96, 128, 192, 256])
    assert ticks[-1] == 256 and all(b / a >= 1.45 for a, b in zip(ticks, ticks[1:]))
    assert _spaced([1, 2, 4, 8]) == [1, 2, 4, 8]


def test_length_curves_mark_every_seed(sweep: Path) -> None:
    """Issue 41: a bimodal outcome shows its seeds; the markers sit at the per-seed test values
    of the run files (c.test), one per seed and length."""
    import matplotlib.pyplot as plt

    from rlt.analysis.figures import _draw_lengths, length_points

    c = collect([sweep])
    row, label = "parity", "RLT-1 4+4"
    pts = length_points(c, row)
    pts = pts[pts["label"] == label]
    fig, ax = plt.subplots()
    _draw_lengths(ax, c, pts, log_x=False)
    from matplotlib.collections import PathCollection  # the markers (error bars are lines)

    markers = [coll for coll in ax.collections if isinstance(coll, PathCollection)]
    drawn = sorted(round(float(y), 6) for coll in markers for _, y in coll.get_offsets())
    plt.close(fig)
    t = c.test[
        (c.test["row"] == row)
        & (c.test["label"] == label)
        & (c.test["policy"] == "min_val_loss")
        & (c.test["metric"] == "acc")
    ]
    assert drawn == sorted(round(100 * v, 6) for v in t["value"])


def test_log_loss_band_stays_on_the_axis(sweep: Path, tmp_path: Path, monkeypatch) -> None:
    """Issue 41: on the log-scaled training-loss figure the band is the seeds' min-max (all
    positive), not mean - SD clipped to 0 (off a log axis)."""
    import matplotlib.axes

    from rlt.analysis.figures import train_loss_curves

    bands = []
    real = matplotlib.axes.Axes.fill_between

    def spy(self, x, y1, y2=0, **kwargs):
        bands.append((list(y1), list(y2)))
        return real(self, x, y1, y2, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "fill_between", spy)
    c = collect([sweep])
    results = train_loss_curves(c, tmp_path, formats=("png",))
    assert results and bands
    pts = pd.concat([r.data for r in results])
    assert all(v > 0 for low, high in bands for v in low + high)
    assert sorted(v for low, _ in bands for v in low) == sorted(pts["min"])


def test_the_same_figure_saved_twice_is_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    """A committed PDF changed at every rebuild (its creation date) though nothing it shows
    did; PNG and PDF are now the same bytes for the same drawing, whenever it is saved."""
    import matplotlib.pyplot as plt

    from rlt.analysis.figure_kit import save

    def draw(out: Path, epoch: str) -> list[bytes]:
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)  # what a PDF's date is taken from
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [0.5, 0.9, 1.0])
        return [p.read_bytes() for p in save(fig, out, "f", ("png", "pdf"))]

    assert draw(tmp_path / "a", "1000000000") == draw(tmp_path / "b", "1900000000")
