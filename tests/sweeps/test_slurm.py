"""The SLURM launcher against a real one-node SLURM (tests/slurm_cluster.py): a grid gives the
same results as the local launcher, a requeued (preempted) job resumes and is never reported
failed, a job over its time limit is requeued by submitit and finishes, and
``python -m rlt.sweep status`` shows the SLURM job states. Skipped where slurm-wlm and munge are
not installed (``.ci/run`` installs them)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlt.sweep import cell_states
from tests.slurm_cluster import SlurmCluster, missing_requirements

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements())),
]
TINY = ["task=parity", "split=1+1", "experiment=tiny"]
SLURM = [
    "hydra/launcher=slurm",
    f"hydra.launcher.partition={SlurmCluster.partition}",
    "hydra.launcher.mem_gb=1",
]
SAME = ("selection", "test_by_policy", "val_curve", "train_curve", "params")


@pytest.fixture(scope="module")
def cluster():
    c = SlurmCluster().start()
    yield c
    c.stop()


def train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def launch():
    """Start a launcher in the background; it is killed if the test ends before it does."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "train.py"), *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def results(root: Path) -> dict[str, dict]:
    return {
        str(p.parent.relative_to(root)): json.loads(p.read_text())
        for p in sorted(root.rglob("results.json"))
    }


def job_logs(sweep: Path) -> str:
    """What the SLURM jobs printed (submitit's per-job .out/.err files)."""
    files = sorted(p for p in (sweep / ".submitit").rglob("*") if p.suffix in (".out", ".err"))
    return "\n".join(p.read_text() for p in files)


def status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def wait_for(condition, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"launcher exited ({proc.returncode}) before {what}:\n{proc.stdout.read()}")
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def finish(proc: subprocess.Popen, cluster: SlurmCluster, timeout: float) -> str:
    """Wait for a launcher, releasing requeued jobs from SLURM's requeue delay meanwhile."""
    deadline = time.time() + timeout
    while proc.poll() is None:
        cluster.release_requeued()
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"launcher still running after {timeout} s:\n{proc.stdout.read()}")
        time.sleep(1)
    return proc.stdout.read()


def test_grid_on_slurm_equals_the_local_grid(cluster, tmp_path):
    grid = ["-m", *TINY, "model=rlt1,rlt0", "seed=42,43"]
    on_slurm = train(*grid, *SLURM, f"root={tmp_path / 'slurm'}")
    out = on_slurm.stdout + on_slurm.stderr
    assert on_slurm.returncode == 0, out
    local = train(*grid, f"root={tmp_path / 'local'}")
    assert local.returncode == 0, local.stdout + local.stderr

    slurm_runs, local_runs = results(tmp_path / "slurm"), results(tmp_path / "local")
    assert len(slurm_runs) == 4 and slurm_runs.keys() == local_runs.keys()
    for cell, res in slurm_runs.items():
        for key in SAME:
            assert res[key] == local_runs[cell][key], (cell, key)
    # Accounting is off on this cluster: polled with squeue, without sacct warnings.
    assert "following jobs with squeue" in out and "sacct" not in out.replace("(sacct)", "")
    # The default trainer=cpu asked for no GPU (this cluster has none: sbatch would refuse).
    records = cell_states(tmp_path / "slurm" / "tiny")
    assert [r["state"] for r in records] == ["done"] * 4
    assert all(r["slurm"] and r["slurm"].split()[1] in ("COMPLETED", "-") for r in records)


def test_requeued_job_resumes_and_is_never_reported_failed(cluster, launch, tmp_path):
    cell = ["model=rlt1", "seed=42", "scale.max_steps=300", "scale.val_every=50"]
    proc = launch("-m", *TINY, *cell, *SLURM, f"root={tmp_path / 'slurm'}")
    sweep = tmp_path / "slurm" / "tiny"
    run_dir = sweep / "parity/rlt1/1+1/seed42"
    first = wait_for(
        lambda: (
            (s := status(run_dir)).get("state") == "running" and (s.get("step") or 0) >= 100 and s
        ),
        240,
        "step 100",
        proc,
    )
    job = first["slurm"]["job_id"]
    subprocess.run(["scontrol", "requeue", job], check=True)  # what a preempting scheduler does
    wait_for(lambda: status(run_dir).get("state") == "requeued", 60, "the requeued state", proc)
    # While SLURM holds it back: the status command shows the run requeued and its job pending.
    record = wait_for(
        lambda: (r := cell_states(sweep)[0])["slurm"].endswith("PENDING") and r, 60, "PENDING"
    )
    assert record["state"] == "requeued", record
    out = finish(proc, cluster, timeout=300)

    assert proc.returncode == 0, out
    assert "failed" not in out, out
    final = status(run_dir)
    assert final["state"] == "done" and final["slurm"]["restart_count"] == 1
    logs = job_logs(sweep)
    assert f"[requeued] parity/rlt1/1+1/seed42: stopped at step {first['step']}" in logs
    assert "[failed]" not in logs
    # Resumed from its checkpoint: the same results as a run nobody interrupted.
    local = train(*TINY, *cell, f"root={tmp_path / 'local'}", "sweep_name=tiny")
    assert local.returncode == 0, local.stdout + local.stderr
    (resumed,) = results(tmp_path / "slurm").values()
    (uninterrupted,) = results(tmp_path / "local").values()
    for key in SAME:
        assert resumed[key] == uninterrupted[key], key


def test_job_over_its_time_limit_is_requeued_and_finishes(cluster, launch, tmp_path):
    # SLURM signals the job between signal_delay_s and signal_delay_s + 60 s before its limit
    # (sbatch --signal: up to 60 s early): with 3 minutes and 60 s, 60-120 s after the job
    # starts. submitit then requeues it, and the run resumes from its last checkpoint, until
    # it finishes (at most max_num_timeout requeues). What a job adds is the time from its
    # training's start to its signal, less what it trained since its last checkpoint: 120 s
    # (60 s where the signal comes a full minute early) less its startup (Python, torch,
    # Lightning, the data). A 60 s delay before a
    # 2-minute limit left 60 s less the startup, which on a CI machine busy with three test
    # workers was too little for 8 requeues to finish 100 s of training.
    proc = launch(
        "-m",
        *TINY,
        "model=rlt1",
        "seed=42",
        "scale.max_steps=500",
        "scale.val_every=25",
        # >= 0.3 s per step: >= 150 s of training, past the first signal (at most 150 s in)
        # however fast the machine; a checkpoint every 25 steps (>= 7.5 s)
        "callbacks.inject_failure={kind: slow, step: 0, seconds: 0.3}",
        *SLURM,
        "hydra.launcher.timeout_min=3",
        "hydra.launcher.signal_delay_s=60",
        "hydra.launcher.max_num_timeout=8",
        f"root={tmp_path}",
    )
    out = finish(proc, cluster, timeout=900)
    assert proc.returncode == 0, out + job_logs(tmp_path / "tiny")
    assert "failed" not in out, out
    final = status(tmp_path / "tiny/parity/rlt1/1+1/seed42")
    assert final["state"] == "done" and final["step"] == 500
    assert final["slurm"]["restart_count"] >= 1, "the run finished before its time limit"
    logs = job_logs(tmp_path / "tiny")
    assert "timed-out" in logs and "[requeued]" in logs and "[failed]" not in logs
