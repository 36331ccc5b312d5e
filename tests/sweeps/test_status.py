"""python -m rlt.sweep status: the grid's state from the files on disk alone."""

import json

import pytest

from rlt.sweep import cell_states, format_status, main


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_status_lists_done_failed_interrupted_and_missing(tmp_path, capsys):
    cells = [
        "parity/rlt1/4+4/seed42",
        "parity/rlt1/4+4/seed43",
        "parity/rlt1/5+3/seed42",
        "parity/transformer/L8/seed42",
    ]
    write(tmp_path / "grid.json", {"cells": [{"cell": c} for c in cells]})
    write(
        tmp_path / cells[0] / "status.json",
        {"state": "done", "step": 10, "max_steps": 10, "best_val_acc": 0.5},
    )
    write(tmp_path / cells[0] / "results.json", {})
    write(
        tmp_path / cells[1] / "status.json",
        {"state": "failed", "step": 3, "max_steps": 10, "error": "boom"},
    )
    write(tmp_path / cells[2] / "status.json", {"state": "running", "step": 4, "max_steps": 10})
    states = {r["cell"]: r["state"] for r in cell_states(tmp_path)}
    assert states == {
        cells[0]: "done",
        cells[1]: "failed",
        cells[2]: "interrupted",
        cells[3]: "missing",
    }

    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 cells: 1 done, 1 failed, 1 interrupted, 1 missing" in out
    assert "50.00%" in out and "(boom)" in out and "4/10" in out

    assert main(["status", str(tmp_path), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4


def test_a_failure_of_several_lines_is_one_line_with_its_type(tmp_path, capsys):
    """An error whose message runs over lines broke the one-line-per-cell listing, and the
    analysis' Incomplete table kept its last line, dropping the exception's type."""
    from rlt.analysis import collect
    from rlt.analysis.run_tables import incomplete_table

    cell = "parity/rlt1/4+4/seed42"
    write(tmp_path / "done" / "results.json", {})  # collect needs one run with results
    error = "RuntimeError: boom\n  while stepping 3\nsecond line"
    write(tmp_path / cell / "status.json", {"state": "failed", "step": 3, "error": error})
    assert main(["status", str(tmp_path)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if cell in x]
    assert line.endswith(f"{cell}  (RuntimeError: boom…)")
    table = incomplete_table(collect([tmp_path], require_results=False)).markdown()
    (row,) = [x for x in table.splitlines() if "seed" in x and "42" in x]
    assert "RuntimeError: boom…" in row and "second line" not in row


def test_status_of_a_missing_directory_names_the_fix(tmp_path, capsys):
    assert main(["status", str(tmp_path / "nope")]) == 2
    assert "pass a sweep's directory (runs/<sweep name>)" in capsys.readouterr().err


def test_killed_run_and_unreadable_results_are_told_apart(tmp_path):
    import platform
    import subprocess
    import sys

    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()  # a pid that no longer runs: the process holding the lock was killed
    live = "parity/rlt1/1+1/seed42"
    dead = "parity/rlt1/1+1/seed43"
    broken = "parity/rlt1/1+1/seed44"
    import os

    write(tmp_path / live / "status.json", {"state": "running", "step": 12, "max_steps": 40})
    (tmp_path / live / ".lock").write_text(f"{os.getpid()} {platform.node()}")
    write(tmp_path / dead / "status.json", {"state": "running", "step": 12, "max_steps": 40})
    (tmp_path / dead / ".lock").write_text(f"{killed.pid} {platform.node()}")
    write(tmp_path / broken / "status.json", {"state": "done", "step": 40, "max_steps": 40})
    (tmp_path / broken / "results.json").write_text('{"schema_version": 1, "run": {')
    records = cell_states(tmp_path)
    states = {r["cell"]: r["state"] for r in records}
    assert states == {live: "running", dead: "interrupted", broken: "unreadable"}
    # which file, and what repairs it: in --json and in the table
    why = next(r["error"] for r in records if r["cell"] == broken)
    assert why.startswith("results.json does not parse; the same command evaluates")
    assert f"{broken}  ({why})" in format_status(records)


def test_concurrent_launches_keep_separate_job_reports(tmp_path, monkeypatch):
    from rlt.training.hydra_support import LAUNCH_ENV, _jobs_dir

    monkeypatch.setenv(LAUNCH_ENV, "launch-a")
    a = _jobs_dir(tmp_path)
    monkeypatch.setenv(LAUNCH_ENV, "launch-b")
    b = _jobs_dir(tmp_path)
    assert a != b and a.parent == b.parent == tmp_path / ".jobs"


def test_a_damaged_grid_file_is_reported_and_the_runs_on_disk_still_read(tmp_path, capsys):
    """Issue 29 item 6: a zero-byte or truncated grid.json (a crash or a full disk while it was
    written) made status, tables and figures raise JSONDecodeError; now each says the file is
    unreadable and how to rewrite it, and goes on with the runs on disk."""
    import pytest

    from rlt.analysis.collect import collect
    from tests.analysis.analysis_synthetic import make_sweep

    sweep = make_sweep(tmp_path / "s", holes=False, grid=False)
    for damage in ("", '{"cells": [{"cell": "parity/rl'):
        (sweep / "grid.json").write_text(damage)
        assert main(["status", str(sweep)]) == 0
        out = capsys.readouterr()
        assert "grid.json is unreadable" in out.err and "relaunch the grid" in out.err
        assert "done" in out.out
        c = collect([sweep])
        assert any("relaunch the grid" in w for w in c.warnings)
        assert len(c.used) == len(list(sweep.rglob("results.json")))
        with pytest.raises(json.JSONDecodeError):
            json.loads((sweep / "grid.json").read_text())  # the file itself left as found


def test_a_missing_sweep_directory_names_the_sweeps_that_exist(tmp_path):
    """Issue 41: the error once suggested the very path that was given."""
    (tmp_path / "demo").mkdir()
    (tmp_path / "laptop").mkdir()
    with pytest.raises(FileNotFoundError) as e:
        cell_states(tmp_path / "demp")
    assert str(e.value).endswith(f"{tmp_path} holds: demo, laptop")
