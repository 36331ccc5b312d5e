"""python -m rlt.sweep export: the small result files of a sweep's finished runs, copied into a
folder to commit, from which the analysis reads the same runs and a relaunch skips them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlt.sweep import ExportConflict, export, main

DONE = "parity/rlt1/2+2/seed42"
DONE_2 = "parity/rlt1/2+2/seed43"
RUNNING = "parity/rlt1/2+2/seed44"
# What a finished run holds: the files a commit wants, and what it must never carry.
KEPT = [
    "results.json",
    "config.yaml",
    "status.json",
    "diagnostics.json",
    "csv/metrics.csv",
    "eval_min_val_loss.json",
    "probe.json",
    "state_min_val_loss_drop-none.json",
]
LEFT = [
    "checkpoints/last.ckpt",
    "checkpoints/min_val_loss.pt",
    "train.log",
    "results.replaced.json",
    "eval_final.replaced.json",
    "wandb/run.txt",
]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _done_run(d: Path, acc: float) -> None:
    for name in KEPT + LEFT:
        _write(d / name, f"{name} of {d.name}\n")
    _write(d / "status.json", json.dumps({"state": "done", "step": 8, "max_steps": 8}))
    _write(d / "results.json", json.dumps({"val_curve": [{"step": 8, "acc": acc}]}))
    (d / "csv" / "metrics.csv").write_bytes(b"step,train/loss\r\n8,0.5\r\n")  # Lightning's CRLF


@pytest.fixture
def sweep(tmp_path) -> Path:
    s = tmp_path / "runs" / "grid"
    _done_run(s / DONE, 1.0)
    _done_run(s / DONE_2, 0.5)
    _write(s / RUNNING / "status.json", json.dumps({"state": "running", "step": 3}))
    _write(s / RUNNING / "checkpoints" / "last.ckpt", "weights")
    cells = [{"cell": c, "seed": int(c[-2:])} for c in (DONE, DONE_2, RUNNING)]
    _write(s / "grid.json", json.dumps({"n_jobs": 2, "cells": cells}))
    return s


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}


def test_export_copies_the_result_files_of_finished_runs_only(sweep, tmp_path, capsys):
    dest = tmp_path / "docs" / "grid"
    assert main(["export", str(sweep), str(dest)]) == 0
    out = capsys.readouterr().out
    expected = {f"{c}/{f}" for c in (DONE, DONE_2) for f in KEPT} | {"grid.json"}
    assert _files(dest) == expected
    for f in KEPT:
        assert (dest / DONE / f).read_bytes() == (sweep / DONE / f).read_bytes()
    grid = json.loads((dest / "grid.json").read_text())
    assert [c["cell"] for c in grid["cells"]] == [DONE, DONE_2]  # not the unfinished one
    assert grid["n_jobs"] == 2
    assert f"{RUNNING}  (stopped part-way: rerun the sweep's train.py command" in out  # gone
    assert "2 run(s) copied, 0 already in" in out and "1 left out" in out


def test_exporting_again_copies_nothing_and_adds_what_finished_since(sweep, tmp_path):
    dest = tmp_path / "out"
    export(sweep, dest)
    before = {f: (dest / f).stat().st_mtime_ns for f in _files(dest)}
    assert export(sweep, dest)["unchanged"] == [DONE, DONE_2]
    assert {f: (dest / f).stat().st_mtime_ns for f in _files(dest)} == before
    _done_run(sweep / RUNNING, 0.75)
    done = export(sweep, dest)
    assert done["copied"] == [RUNNING] and not done["skipped"]
    grid = json.loads((dest / "grid.json").read_text())
    assert [c["cell"] for c in grid["cells"]] == [DONE, DONE_2, RUNNING]


def test_a_run_dest_holds_with_other_results_stops_the_export_before_any_copy(
    sweep, tmp_path, capsys
):
    dest = tmp_path / "out"
    _write(dest / DONE / "results.json", json.dumps({"val_curve": [{"step": 8, "acc": 0.1}]}))
    theirs = (dest / DONE / "results.json").read_bytes()
    with pytest.raises(ExportConflict, match=re.escape(DONE)):
        export(sweep, dest)
    assert main(["export", str(sweep), str(dest)]) == 2
    assert "nothing was copied" in capsys.readouterr().err
    assert _files(dest) == {f"{DONE}/results.json"}
    assert (dest / DONE / "results.json").read_bytes() == theirs


def test_dry_run_and_bad_input(sweep, tmp_path, capsys):
    dest = tmp_path / "out"
    assert main(["export", str(sweep), str(dest), "--dry-run"]) == 0
    assert "would copy" in capsys.readouterr().out and not dest.exists()
    assert main(["export", str(sweep), str(sweep)]) == 2
    assert "name another folder" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nope"), str(dest)]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_an_exported_run_is_read_as_the_original_and_a_relaunch_skips_it(tmp_path):
    """A real run: the tables read the exported copy as they read the original, and the same
    command pointed at the exported folder finds it done."""
    from rlt.analysis.collect import collect
    from rlt.training.run import run
    from tests.training.helpers import compose_cfg

    tiny = ["experiment=tiny", "print_table=false", "evaluate.probe=false"]
    trained = Path(run(compose_cfg([*tiny, f"root={tmp_path / 'runs'}"]))["run_dir"])
    assert (trained / "checkpoints").is_dir()
    sweep = trained.parents[3]
    dest_root = tmp_path / "committed"
    export(sweep, dest_root / sweep.name)
    copy = dest_root / sweep.name / trained.relative_to(sweep)
    assert not (copy / "checkpoints").exists()

    def table(d: Path):
        c = collect([d])
        return c.test.drop(columns=["run_id"]).reset_index(drop=True)

    assert table(sweep).equals(table(dest_root / sweep.name))
    again = run(compose_cfg([*tiny, f"root={dest_root}"]))
    assert again["state"] == "skipped" and Path(again["run_dir"]) == copy


def test_a_dest_inside_the_sweep_or_that_is_a_file_is_refused_before_any_copy(
    sweep, tmp_path, capsys
):
    before = {f: (sweep / f).read_bytes() for f in _files(sweep)}
    for inside in (sweep / "exported", sweep / "parity"):
        assert main(["export", str(sweep), str(inside)]) == 2
        assert "is inside the sweep directory" in capsys.readouterr().err
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep")
    for dest in (a_file, a_file / "sub"):
        assert main(["export", str(sweep), str(dest)]) == 2
        assert f"{a_file} is a file, not a folder" in capsys.readouterr().err
    assert a_file.read_text() == "keep"
    assert {f: (sweep / f).read_bytes() for f in _files(sweep)} == before


def test_each_run_left_out_says_what_makes_it_exportable(sweep, tmp_path, capsys):
    """Every left-out run was told to 'export again when it is done', a failed or never
    started one too; an empty sweep exited 0 with '0 run(s) copied'."""
    _write(sweep / "parity/rlt1/4+4/seed50/status.json", json.dumps({"state": "failed"}))
    _write(sweep / "parity/rlt1/4+4/seed51/status.json", "{ cut")
    grid = json.loads((sweep / "grid.json").read_text())
    grid["cells"].append({"cell": "parity/rlt1/4+4/seed52"})
    _write(sweep / "grid.json", json.dumps(grid))
    assert main(["export", str(sweep), str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for cell, says in (
        ("seed50", "(failed: rerun the sweep's train.py command (it retries the cell)"),
        ("seed51", "(a file of it does not parse: rerun the sweep's train.py command"),
        ("seed52", "(not started: rerun the sweep's train.py command"),
    ):
        (line,) = [x for x in out.splitlines() if cell in x]
        assert line.startswith("left out") and says in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(empty), str(tmp_path / "out2")]) == 1
    assert "no runs under" in capsys.readouterr().out and not (tmp_path / "out2").exists()
