"""The command lines as a user runs them (subprocess), and their error messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rlt.analysis.cli import figures_main, tables_main
from tests.analysis.analysis_synthetic import (
    MODELS,
    SEEDS,
    TASKS,
    make_sweep,
    results_json,
    write_run,
)

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_tables_cli_prints_markdown_and_writes_files(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "tables"
    p = run(
        "analysis/tables.py", str(sweep), "--out", str(out), "--step", "300",
        "--length", "parity=64", "--length", "s5_swaps=48", "--compare-report",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "## Table 1: validation final-label accuracy (%) at step 300" in p.stdout
    assert "| parity (64) |" in p.stdout
    assert "## Ours vs the report" in p.stdout
    assert "## Incomplete" in p.stdout and "NaN loss at step 212" in p.stdout
    assert "## Per-seed detail" in p.stdout
    for name in ("table1_val_step300", "table2_test_min_val_loss", "feedback_4+4_min_val_loss",
                 "policies", "params", "cost", "compare_report", "incomplete"):  # fmt: skip
        assert (out / f"{name}.csv").is_file() and (out / f"{name}.tex").is_file(), name
    assert (out / "report.md").read_text().strip() == p.stdout.strip()


def test_tables_cli_default_out_is_inside_the_sweep(full_sweep: Path) -> None:
    assert tables_main([str(full_sweep), "--quiet", "--policy", "final"]) == 0
    assert (full_sweep / "analysis" / "table2_test_final.csv").is_file()


def test_missing_results_error(tmp_path: Path, capsys) -> None:
    p = run("analysis/tables.py", str(tmp_path))
    assert p.returncode == 2
    assert f"no results.json under {tmp_path}: run the sweep first / check the path" in p.stderr
    assert figures_main([str(tmp_path / "typo")]) == 2
    assert "does not exist: check the path" in capsys.readouterr().err


def test_figures_cli(tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "small"
    for seed in (42, 43):
        write_run(sweep, "s5_swaps", "rlt1", "4+4", seed)
    write_run(sweep, "s5_swaps", "rlt1", "4+4", 44, state="failed")
    out = tmp_path / "figs"
    assert figures_main([str(sweep), "--out", str(out), "--format", "png"]) == 0
    assert (out / "length_s5_swaps.png").is_file() and (out / "s5_panel_s5_swaps.png").is_file()
    assert not list(out.glob("*.pdf"))
    assert "1 incomplete" in capsys.readouterr().err


def test_a_misnamed_metric_or_reference_is_one_line_and_a_sweep_named_twice_is_read_once(
    sweep: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "t"
    assert tables_main([str(sweep), "--metric", "accuracy", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--metric 'accuracy': these runs record" in err and "acc" in err
    not_json = tmp_path / "ref.txt"
    not_json.write_text("mean 98.4")
    for ref, says in ((not_json, "is not JSON"), (tmp_path / "none.json", "not found")):
        assert tables_main([str(sweep), "--compare-report", "--reference", str(ref)]) == 2
        err = capsys.readouterr().err
        assert f"reference file {ref} {says}" in err and "cannot write" not in err
    assert not out.exists()
    once = tables_main([str(sweep), "--quiet", "--out", str(tmp_path / "once")])
    twice = tables_main([str(sweep), f"{sweep}/../{sweep.name}", "--quiet", "--out", str(out)])
    assert once == twice == 0
    table = "table2_test_min_val_loss.csv"
    assert (out / table).read_text() == (tmp_path / "once" / table).read_text()


def test_a_path_inside_another_and_the_loss_as_a_percentage_are_refused(
    sweep: Path, tmp_path: Path, capsys
) -> None:
    """A sweep given with one of its runs (or a root with one of its sweeps) crashed in pandas
    (its runs were read twice, under one index); ``--metric loss`` printed the loss times 100
    as a percentage. Each is one line, before anything is written."""
    run_dir = next(sweep.rglob("seed42"))
    out = tmp_path / "t"
    for paths in ([sweep, run_dir], [run_dir, sweep], [sweep.parent, sweep]):
        for main in (tables_main, figures_main):
            assert main([*map(str, paths), "--out", str(out)]) == 2
            (line,) = capsys.readouterr().err.strip().splitlines()
            assert "lies inside" in line and "read twice" in line
    assert tables_main([str(sweep), "--metric", "loss", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--metric loss" in line and "percent" in line and "acc" in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--split", "banana"], "--split: no run has split 'banana'; the runs' splits: "),
        (["--length", "parity=999"], "--length: parity was not tested at length 999"),
        (["--length", "banana=20"], "--length: no run of task 'banana'"),
    ],
)
def test_figures_refuse_a_split_or_length_no_run_has_as_tables_do(
    sweep: Path, tmp_path: Path, capsys, args, says
) -> None:
    """figures.py drew nothing for them (or left the task's schedule view out) and said so
    nowhere."""
    out = tmp_path / "f"
    assert figures_main([str(sweep), "--schedule-view", *args, "--out", str(out)]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--step", "7"], "--step: no run was validated at step 7; validations run from"),
        (["--split", "banana"], "--split: no run has split 'banana'; the runs' splits: "),
        (["--fb-length", "999"], "--fb-length: "),
    ],
)
def test_a_step_split_or_length_no_run_has_is_refused_not_an_empty_table(
    sweep: Path, tmp_path: Path, capsys, args, says
) -> None:
    assert tables_main([str(sweep), *args, "--out", str(tmp_path / "t")]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_bad_length_argument_names_the_expected_form(sweep: Path, capsys) -> None:
    """One line and exit status 2, as every other bad option (it exited with 1)."""
    for args, says in (
        (["--length", "parity=abc"], "expected N or TASK=N"),
        (["--length", "20", "--length", "256"], "give one N for all tasks or TASK=N each"),
    ):
        with pytest.raises(SystemExit) as exc:
            tables_main([str(sweep), *args])
        assert exc.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert says in line


def test_a_file_given_for_a_directory_is_named_as_a_file(sweep: Path, capsys) -> None:
    """It said 'no results.json under .../results.json'."""
    results = next(sweep.rglob("results.json"))
    assert tables_main([str(results)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{results} is a file: give the directory of a sweep or of one run" in line


@pytest.mark.slow
def test_tables_wandb_logs_tables_and_figures_offline(tmp_path, monkeypatch):
    """`analysis/tables.py DIR --wandb`: one offline W&B run holding the tables and figures."""
    import json
    import os

    from tests.training.helpers import REPO

    env_root = tmp_path / "runs"
    subprocess.run(
        [sys.executable, str(REPO / "train.py"), "-m", "experiment=tiny", "task=parity",
         "split=1+1", "seed=42,43", f"root={env_root}"],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    sweep = env_root / "tiny"
    out = tmp_path / "analysis"
    proc = subprocess.run(
        [sys.executable, str(REPO / "analysis" / "tables.py"), str(sweep), "--out", str(out),
         "--wandb", "--quiet"],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "WANDB_MODE": "offline"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    log = next(runs[0].glob("run-*.wandb")).read_bytes()
    assert b"figures/length_" in log  # the length-curve figure
    tables = sorted(p.stem for p in out.glob("*.csv"))
    assert any(f"tables/{name}".encode() in log for name in tables)
    assert json.loads((sweep / "parity/rlt1/1+1/seed42/results.json").read_text())["run"]


def test_unwritable_output_gets_one_line_naming_out(tmp_path, capsys):
    write_run(tmp_path / "sweep", task="parity", model="rlt1", split="2+2", seed=42)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    assert tables_main([str(tmp_path / "sweep"), "--out", str(blocker / "x"), "--quiet"]) == 2
    assert "pass --out DIR" in capsys.readouterr().err
    assert figures_main([str(tmp_path / "sweep"), "--out", str(blocker / "y")]) == 2
    assert "pass --out DIR" in capsys.readouterr().err


# Issue 55 ---------------------------------------------------------------------------------


def _with_metric(run_dir: Path, plugin: str, metric: str, value: float) -> None:
    """A finished run of the synthetic sweep that trained with `plugin`, whose `metric` scored
    `value` at every validation step and test length (as results.json records a plugin's
    metric beside acc)."""
    path = run_dir / "results.json"
    res = json.loads(path.read_text())
    res["run"]["plugins"] = [plugin]
    for point in res["val_curve"]:
        point[metric] = value
    for block in res["test_by_policy"].values():
        lengths = sorted({r["length"] for r in block["rows"]})
        block["rows"] += [{"length": n, "metric": metric, "value": value} for n in lengths]
    res["test"] = res["test_by_policy"]["min_val_loss"]["rows"]
    path.write_text(json.dumps(res))


def test_a_metric_two_plugins_define_differently_is_refused_not_averaged(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Issue 55 item 2: two runs whose plugins each register `issue55_first` (always wrong,
    always right) were averaged into one cell (37.50 ± 53.03 from 0.0 and 0.75), and the only
    warning blamed PYTHONPATH for a plugin that imports fine. Now tables of that metric are
    refused in one line naming it, both definitions and their runs; other metrics still
    tabulate, and no warning sends the user to PYTHONPATH."""
    from rlt.tasks import metrics

    monkeypatch.setattr(metrics, "EXTRA", {})  # the plugins register into this test's registry
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    (tmp_path / "lab").mkdir()
    modules = {"issue55_lab_a": "logits[:, 0, 0] * 0", "issue55_lab_b": "logits[:, 0, 0] * 0 + 1"}
    for module, body in modules.items():
        (tmp_path / "lab" / f"{module}.py").write_text(
            "from rlt.tasks.metrics import register_metric\n\n\n"
            '@register_metric("issue55_first")\n'
            f"def first(logits, batch):\n    return {body}\n"
        )
    root = tmp_path / "sweep"
    a = write_run(root, "parity", "rlt1", "4+4", 42)
    b = write_run(root, "parity", "rlt1", "4+4", 43)
    _with_metric(a, "issue55_lab_a", "issue55_first", 0.0)
    _with_metric(b, "issue55_lab_b", "issue55_first", 0.75)
    out = str(tmp_path / "out")
    try:
        assert tables_main([str(root), "--out", out, "--metric", "acc"]) == 0
        cap = capsys.readouterr()
        assert "| parity (256) |" in cap.out  # both seeds' acc are one table, as before
        (warning,) = [w for w in cap.out.splitlines() if "warning" in w]
        assert "issue55_lab_b" in warning and "issue55_first" in warning
        assert "PYTHONPATH" not in cap.out + cap.err  # it imports: the name is the trouble
        assert tables_main([str(root), "--out", out, "--metric", "issue55_first"]) == 2
        cap = capsys.readouterr()
        (line,) = cap.err.strip().splitlines()
        assert "issue55_first" in line
        assert "issue55_lab_a" in line and "issue55_lab_b" in line
        assert str(a) in line and str(b) in line
        assert "37.50" not in cap.out
    finally:
        for module in modules:
            sys.modules.pop(module, None)


@pytest.mark.parametrize(
    "damage, says",
    [
        ("seed '5.0'", 'run.seed is "5.0", not an integer'),
        ("no seed", "run.seed"),
        ("bad JSON", "results.json unreadable"),
    ],
)
def test_a_damaged_results_json_beside_a_good_run_is_listed_not_a_traceback(
    tmp_path: Path, capsys, damage: str, says: str
) -> None:
    """Issue 55 item 3: runs made with hydra.run.dir=... (no task/model/split/seed<N> path to
    fall back on) next to a damaged results.json raised ValueError (int('5.0') while reading
    it, or a seed column of floats in the per-seed table). The damaged run is now listed as
    incomplete with what is wrong with which file, and the good run is tabulated."""
    root = tmp_path / "mine"
    good, bad = root / "good", root / "bad"
    for run_dir, seed in ((good, 42), (bad, 43)):
        run_dir.mkdir(parents=True)
        res = results_json("parity", "rlt1", "4+4", seed, run_dir)
        if run_dir == bad and damage == "seed '5.0'":
            res["run"]["seed"] = "5.0"
        if run_dir == bad and damage == "no seed":
            del res["run"]["seed"]
        text = json.dumps(res)
        (run_dir / "results.json").write_text(text[:50] if run_dir == bad and damage == "bad JSON" else text)  # fmt: skip
    out = tmp_path / "out"
    assert tables_main([str(root), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    incomplete = text[text.index("## Incomplete") :].split("\n## ")[0]
    (row,) = [r for r in incomplete.splitlines() if str(bad) in r]
    assert says in row and str(good) not in incomplete
    per_seed = pd.read_csv(out / "table2_test_min_val_loss_per_seed.csv", index_col="cell")
    assert list(per_seed.columns[:1]) == ["seed 42"] and per_seed["n"].tolist() == [1]


@pytest.mark.parametrize("seed", ["x", None], ids=["seed x", "seed null"])
def test_a_grid_cell_without_an_integer_seed_is_a_warning_not_a_traceback(
    tmp_path: Path, capsys, seed: object
) -> None:
    """Issue 55 item 3: a grid.json cell whose seed is "x" or null raised ValueError/TypeError
    (int(seed)). The grid is reported in one line naming the file, the cell and its seed, as a
    grid file that does not parse is, and the runs on disk are tabulated."""
    root = make_sweep(tmp_path / "s", holes=False, grid=False)
    cells = [
        {"task": t, "model": m, "split": s, "seed": n}
        for t in TASKS for m, s in MODELS for n in SEEDS
    ]  # fmt: skip
    cells[1]["seed"] = seed
    (root / "grid.json").write_text(json.dumps({"cells": cells}))
    assert tables_main([str(root), "--out", str(tmp_path / "out")]) == 0
    cap = capsys.readouterr()
    (line,) = [w for w in cap.err.splitlines() if "grid.json" in w]
    assert str(root / "grid.json") in line and f"cell 1 has seed {json.dumps(seed)}" in line
    table = pd.read_csv(tmp_path / "out" / "table2_test_min_val_loss.csv")
    assert len(table) == len(TASKS) * len(MODELS) and set(table["n"]) == {len(SEEDS)}


def test_a_reused_out_keeps_no_table_of_the_earlier_report(sweep: Path, tmp_path: Path, capsys):
    """A report into an --out an earlier report of other runs wrote left that report's tables
    (a probe table, say) beside the new report.md, as if they were its own. Only files a report
    wrote are removed: a file of the user's stays."""
    out = tmp_path / "out"
    assert tables_main([str(sweep), "--quiet", "--out", str(out)]) == 0
    (out / "probe.csv").write_text("an earlier report's table\n")  # as if it had written it
    manifest = out / ".report_files"
    manifest.write_text(manifest.read_text() + "probe.csv\n")
    (out / "notes.txt").write_text("mine")
    first = sorted(p.name for p in out.iterdir())
    assert tables_main([str(sweep), "--quiet", "--out", str(out)]) == 0
    assert "removed 1 file(s) an earlier report wrote" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [n for n in first if n != "probe.csv"]
    assert (out / "notes.txt").read_text() == "mine"
