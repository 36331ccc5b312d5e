"""The feedback-schedule view of issue 8: table cells and figure points against hand-computed
mean ± SD on a synthetic sweep with round numbers (analysis_synthetic.SCHEDULE_*)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from rlt.analysis import ReportOptions, build_tables, collect
from rlt.analysis.cli import figures_main, tables_main
from rlt.analysis.figures import schedule_figures
from rlt.analysis.labels import model_key, model_style
from rlt.analysis.render import fmt_cell
from rlt.analysis.schedule_view import schedule_labels, schedule_table
from tests.analysis.analysis_synthetic import (
    MAX_STEPS,
    SCHEDULE_HOLES,
    SCHEDULE_LABELS,
    SCHEDULE_MODELS,
    SEEDS,
    TASKS,
    make_schedule_sweep,
    ood_value,
    train_seconds,
    val_value,
    write_run,
)

ORDER = ["RLT-1 2+2", "RLT-2 B=4 2+2", "RLT-2 B=4→1 2+2", "RLT-2 B=8→4→1 2+2", "RLT-0 2+2"]
# parity at length 256: (accuracy mean, SD) in % and (minutes mean, SD), by hand from the
# planted SCHEDULE_ACC and SCHEDULE_SECONDS.
PARITY = {
    "RLT-1 2+2": ((95.0, 5.0), (21.0, 1.0)),
    "RLT-2 B=4 2+2": ((55.0, 5.0), (10.0, 0.0)),
    "RLT-2 B=4→1 2+2": ((80.0, 20.0), (15.0, 2.0)),
    "RLT-2 B=8→4→1 2+2": ((80.0, 10.0), (13.0, 1.0)),
    "RLT-0 2+2": ((50.0, 0.0), (9.0, 1.0)),
}


@pytest.fixture(scope="module")
def sched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_schedule_sweep(tmp_path_factory.mktemp("sched") / "schedule")


@pytest.fixture(scope="module")
def c(sched: Path):
    return collect([sched])


@pytest.fixture(scope="module")
def table(c):
    return schedule_table(c)


def seeds_of(task: str, model: str, split: str) -> list[int]:
    return [s for s in SEEDS if (task, model, split, s) not in SCHEDULE_HOLES]


def test_rows_are_the_models_of_the_schedule_split_in_order(c, table) -> None:
    assert schedule_labels(c) == ORDER
    assert list(table.display.index) == ORDER
    assert list(table.display.columns) == [
        "parity: acc (256)",
        "parity: val acc",
        "parity: train min",
        "parity: s/step",
        "s5_swaps: acc (512)",
        "s5_swaps: val acc",
        "s5_swaps: train min",
        "s5_swaps: s/step",
    ]
    assert table.name == "schedule_min_val_loss"
    assert any("[[0, 8], [250, 4], [375, 1]]" in n for n in table.notes)


def test_round_number_cells(table) -> None:
    for label, ((acc, acc_sd), (minutes, min_sd)) in PARITY.items():
        assert table.display.loc[label, "parity: acc (256)"] == f"{acc:.2f} ± {acc_sd:.2f}"
        assert table.display.loc[label, "parity: train min"] == f"{minutes:.2f} ± {min_sd:.2f}"
        cell = table.cell(label, "parity: acc (256)")
        assert (cell["mean"], cell["sd"], cell["n"]) == pytest.approx((acc, acc_sd, 3))
        assert cell["length"] == 256
    assert table.display.loc["RLT-2 B=8→4→1 2+2", "parity: acc (256)"] == "80.00 ± 10.00"
    assert table.display.loc["RLT-2 B=8→4→1 2+2", "parity: s/step"] == "1.56"  # 780 s / 500


def test_every_cell_equals_the_hand_computation(table) -> None:
    def check(column: str, values: list[float], n_expected: int) -> None:
        cell = table.cell(label, column)
        mean, sd = statistics.mean(values), statistics.stdev(values)
        assert (cell["n"], cell["n_expected"]) == (len(values), n_expected)
        assert cell["mean"] == pytest.approx(mean, abs=1e-9)
        assert cell["sd"] == pytest.approx(sd, abs=1e-9)
        if not column.endswith("s/step"):
            assert table.display.loc[label, column] == fmt_cell(mean, sd, len(values), n_expected)

    for task, spec in TASKS.items():
        longest = max(spec["lengths"])
        for model, split in SCHEDULE_MODELS:
            label = SCHEDULE_LABELS[(model, split)]
            seeds = seeds_of(task, model, split)
            acc = [
                100 * ood_value(task, model, split, s, "min_val_loss", longest, "acc")
                for s in seeds
            ]
            val = [100 * val_value(task, model, split, s, MAX_STEPS, "acc") for s in seeds]
            minutes = [train_seconds(task, model, split, s) / 60 for s in seeds]
            per_step = [train_seconds(task, model, split, s) / MAX_STEPS for s in seeds]
            check(f"{task}: acc ({longest})", acc, 3)
            check(f"{task}: val acc", val, 3)
            check(f"{task}: train min", minutes, 3)
            check(f"{task}: s/step", per_step, 3)


def test_failed_schedule_run_keeps_its_label_and_shows_n(c, table) -> None:
    cell = table.display.loc["RLT-2 B=8→4→1 2+2", "s5_swaps: acc (512)"]
    assert cell.endswith("(n=2/3)")
    failed = c.incomplete.iloc[0]
    assert (failed["label"], failed["seed"], failed["state"]) == ("RLT-2 B=8→4→1 2+2", 44, "failed")
    assert len(c.incomplete) == len(SCHEDULE_HOLES)
    assert not any("None" in lab for lab in c.labels)


def test_policy_and_length_are_selectable(c) -> None:
    t = schedule_table(c, policy="final", lengths={"parity": 64})
    assert t.name == "schedule_final"
    vals = [100 * ood_value("parity", "rlt0", "2+2", s, "final", 64, "acc") for s in SEEDS]
    cell = t.cell("RLT-0 2+2", "parity: acc (64)")
    assert cell["mean"] == pytest.approx(statistics.mean(vals))
    assert cell["sd"] == pytest.approx(statistics.stdev(vals))


def test_figure_points_equal_the_table(c, table, tmp_path: Path) -> None:
    results = {r.name: r for r in schedule_figures(c, tmp_path, formats=("png",))}
    assert set(results) == {"schedule_parity", "schedule_s5_swaps"}
    for r in results.values():
        assert [p.suffix for p in r.paths] == [".png"] and r.paths[0].stat().st_size > 1000
    pts = results["schedule_parity"].data.set_index("label")
    assert list(pts.index) == ORDER
    for label, ((acc, acc_sd), (minutes, min_sd)) in PARITY.items():
        p = pts.loc[label]
        assert (p["x_mean"], p["x_sd"], p["y_mean"], p["y_sd"]) == pytest.approx(
            (minutes, min_sd, acc, acc_sd)
        )
        assert p["length"] == 256
    s5 = results["schedule_s5_swaps"].data.set_index("label")
    for label in ORDER:
        acc = table.cell(label, "s5_swaps: acc (512)")
        minutes = table.cell(label, "s5_swaps: train min")
        got = s5.loc[label]
        assert (got["y_mean"], got["y_sd"], got["y_n"]) == pytest.approx(
            (acc["mean"], acc["sd"], acc["n"])
        )
        assert (got["x_mean"], got["x_n"]) == pytest.approx((minutes["mean"], minutes["n"]))


def test_colours_tell_every_model_apart(c) -> None:
    colours = {tuple(model_style(c.models[lab])["color"]) for lab in ORDER}
    assert len(colours) == len(ORDER)
    tinted = model_style(model_key(model="rlt2", split="2+2", feedback_schedule=[[0, 8], [9, 1]]))
    assert tuple(tinted["color"]) not in colours  # B=8→1 is a lighter B=8→4→1


def test_grid_label_names_a_schedule_nobody_ran_yet() -> None:
    key = model_key(model="rlt2_sched_8to1", split="2+2", label="RLT-2 B=8→4→1")
    assert key.label == "RLT-2 B=8→4→1 2+2" and key.schedule == (8, 4, 1)
    assert model_key(model="rlt2", split="4+4", label="RLT-2 B=4").label == "RLT-2 B=4 4+4"


def test_schedule_model_missing_everywhere_is_a_row_of_zero_of_n(tmp_path: Path) -> None:
    root = tmp_path / "s"
    for model, split in SCHEDULE_MODELS[:1]:
        for seed in SEEDS[:2]:
            write_run(root, "parity", model, split, seed)
    cells = [
        {"task": "parity", "model": m, "split": "2+2", "seed": s, "label": lab}
        for m, lab in (("rlt1", "RLT-1"), ("rlt2_sched_8to1", "RLT-2 B=8→4→1"))
        for s in SEEDS[:2]
    ]
    (root / "grid.json").write_text(json.dumps({"cells": cells}))
    c = collect([root])
    t = schedule_table(c)
    assert list(t.display.index) == ["RLT-1 2+2", "RLT-2 B=8→4→1 2+2"]
    assert t.display.loc["RLT-2 B=8→4→1 2+2", "parity: acc (256)"] == "– (n=0/2)"


def test_report_adds_the_view_only_for_schedules_or_on_request(c, sweep: Path) -> None:
    assert "schedule" in build_tables(c)
    plain = collect([sweep])
    assert "schedule" not in build_tables(plain)
    forced = build_tables(plain, ReportOptions(schedule_view=True))["schedule"]
    assert list(forced.display.index) == [
        "RLT-1 4+4",
        "RLT-2 B=4 4+4",
        "RLT-0 4+4",
        "Transformer 8",
    ]
    assert any("no feedback-schedule runs" in n for n in forced.notes)


def test_cli_prints_the_table_and_writes_csv_latex_and_figures(
    sched: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "tables"
    assert tables_main([str(sched), "--out", str(out), "--no-per-seed"]) == 0
    text = capsys.readouterr().out
    assert "## Feedback schedule: test final-label accuracy (%)" in text
    assert "| RLT-2 B=8→4→1 2+2 | 80.00 ± 10.00 |" in text
    for suffix in (".csv", ".tex", "_per_seed.csv"):
        assert (out / f"schedule_min_val_loss{suffix}").is_file()
    tex = (out / "schedule_min_val_loss.tex").read_text()
    assert r"RLT-2 B=8$\to$4$\to$1 2+2 & 80.00 $\pm$ 10.00" in tex
    data = pd.read_csv(out / "schedule_min_val_loss.csv")
    row = data[(data["row"] == "RLT-2 B=4→1 2+2") & (data["column"] == "parity: train min")]
    assert row.iloc[0]["values"] == "13 15 17"

    small = tmp_path / "small"  # one task, two models: few figures, fast
    for model in ("rlt1", "rlt2_sched_4to1"):
        for seed in SEEDS[:2]:
            write_run(small, "parity", model, "2+2", seed)
    figs = tmp_path / "figs"
    assert figures_main([str(small), "--out", str(figs), "--format", "png"]) == 0
    assert (figs / "schedule_parity.png").is_file()
