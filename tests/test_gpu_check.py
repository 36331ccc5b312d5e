"""scripts/gpu_check.sh --cpu (issue 22): the device check's every step, on the CPU at tiny
sizes, so the script a lent GPU runs in one call is known to work before it gets there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _check_on_the_cpu(out: Path, timeout: int, **env: str) -> subprocess.CompletedProcess:
    """``bash scripts/gpu_check.sh --cpu OUT`` with this interpreter and ``env`` added."""
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--cpu", str(out)],
        env=dict(os.environ, PYTHON=sys.executable, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_gpu_check_on_the_cpu_writes_its_files(tmp_path):
    out = tmp_path / "out"
    proc = _check_on_the_cpu(out, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(
        [
            "gpu_check.log",
            "pytest.xml",
            "bench_fp32.json",
            "bench_bf16.json",
            "bench_graph.json",
            "bench_compile.json",
            "bench_native.json",
            "bench_stack.json",
            "run_rlt1.json",
            "run_transformer.json",
            "summary.json",
        ]
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu"
    tests = summary["tests"]
    assert tests["tests"] > 0 and tests["failures"] == 0 and tests["errors"] == 0
    for name in ("fp32", "bf16"):
        bench = summary[f"bench_{name}"]
        assert set(bench["sec_per_step"]) == {"transformer", "rlt0", "rlt1", "rlt2"}
        assert all(v > 0 for v in bench["sec_per_step"].values())
        assert bench["ratios"]["rlt1/rlt0"] > 0
    stack = summary["bench_stack"]
    assert stack["k"] == 2 and stack["rows"]["transformer"]["stack_vs_k_singles"] > 0
    assert "fused token loop" in stack["rows"]["rlt1"]["why_not"]
    runs = summary["runs"]
    assert runs["rlt1"]["label"] == "RLT-1" and runs["rlt1"]["arch"] == "6+2"
    assert runs["transformer"]["label"] == "Transformer 8"
    assert all(0 <= r["val_acc_pct"] <= 100 and r["sec_per_step"] > 0 for r in runs.values())
    estimate = summary["sweep_main_estimate"]
    assert estimate["distinct_runs"] == 108
    # A lower bound: every cell of sweep=main runs at least 2,000 steps, each at no less than
    # the faster of the two measured s/step.
    floor = 108 * 2000 * min(r["sec_per_step"] for r in runs.values()) / 3600
    assert estimate["hours"] >= floor


def test_a_check_out_of_time_skips_its_steps_and_still_writes_the_summary(tmp_path):
    """Each step's limit is cut to what is left of GPU_CHECK_BUDGET (the device call's own
    timeout would kill the script before summary.json): with 25 s, nothing has 10 s left."""
    out = tmp_path / "out"
    proc = _check_on_the_cpu(out, timeout=120, GPU_CHECK_BUDGET="25")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (out / "gpu_check.log").read_text()
    assert log.count("skipped, the check's 25 s are spent") >= 5
    summary = json.loads((out / "summary.json").read_text())
    assert "did not run" in summary["tests"]["error"]
    assert set(summary["runs"]) == {"rlt1", "transformer"}
    assert all("error" in r for r in summary["runs"].values())
