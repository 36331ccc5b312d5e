"""The command lines as a user runs them (subprocess), and their error messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlt.analysis.cli import figures_main, tables_main
from tests.analysis.analysis_synthetic import write_run

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


def test_bad_length_argument_names_the_expected_form(sweep: Path) -> None:
    with pytest.raises(SystemExit, match="expected N or TASK=N"):
        tables_main([str(sweep), "--length", "parity=abc"])


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
