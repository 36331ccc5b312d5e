"""The contract between training and analysis: what ``train.py -m`` writes is what ``collect``
reads. A real tiny grid (two seeds, one model) goes through the command line; its Table 1 and
Table 2 cells must be the mean and sample SD over exactly those runs' results.json values."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from rlt.analysis.collect import collect
from rlt.analysis.tables import generalization_table, val_table

REPO = Path(__file__).resolve().parents[2]
SEEDS = (42, 43)


@pytest.mark.slow
def test_a_real_grid_reaches_table_cells_unchanged(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "-m",
            "experiment=tiny",
            "task=parity",
            "model=rlt1",
            "split=1+1",
            f"seed={','.join(map(str, SEEDS))}",
            f"root={tmp_path}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [
        json.loads((tmp_path / f"tiny/parity/rlt1/1+1/seed{s}/results.json").read_text())
        for s in SEEDS
    ]
    c = collect([tmp_path / "tiny"])

    # Table 1: validation acc at each run's last validation step.
    val = [100 * r["val_curve"][-1]["acc"] for r in runs]
    cell = val_table(c).cell("parity", "RLT-1 1+1")
    assert cell["n"] == len(SEEDS)
    assert cell["mean"] == pytest.approx(statistics.mean(val))
    assert cell["sd"] == pytest.approx(statistics.stdev(val), nan_ok=True)

    # Table 2: test acc of the selected checkpoint at the longest tested length.
    longest = max(r["test_lengths"][-1] for r in runs)
    test = [
        100 * next(x["value"] for x in r["test"] if x["length"] == longest and x["metric"] == "acc")
        for r in runs
    ]
    cell = generalization_table(c).cell(f"parity ({longest})", "RLT-1 1+1")
    assert cell["n"] == len(SEEDS)
    assert cell["mean"] == pytest.approx(statistics.mean(test))
    assert cell["sd"] == pytest.approx(statistics.stdev(test), nan_ok=True)
