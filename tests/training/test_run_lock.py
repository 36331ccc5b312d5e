"""The run lock (rlt.rundir.run_lock, issue 29 item 4): exclusive between processes, free again
when its holder dies, and a second launch of a run that is being trained exits non-zero without
touching the first one's files."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys

from rlt import rundir
from tests.training.helpers import REPO
from tests.training.lock_race import race


def test_two_processes_never_hold_the_lock_at_once(tmp_path):
    """20,000 tries per process: no double holder, and the writability check (one probe file
    per process) never refuses the writable directory. The code before the fix refused it
    81 times in 5,000 tries per process (a shared probe file deleted under the other)."""
    assert race(tmp_path, 20_000) == (0, 0)


def lock_holder(run_dir) -> subprocess.Popen:
    """Another process that takes ``run_dir``'s lock, prints whether it got it, and holds it."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from rlt import rundir\n"
            "with rundir.run_lock(sys.argv[1]) as got:\n"
            "    print(got, flush=True); time.sleep(60)",
            str(run_dir),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_held_lock_is_refused_and_a_dead_holders_lock_is_free(tmp_path):
    holder = lock_holder(tmp_path)
    try:
        assert holder.stdout.readline().strip() == "True"
        with rundir.run_lock(tmp_path) as got:
            assert got is False
        owner = (tmp_path / rundir.LOCK).read_text().split()
        assert int(owner[0]) == holder.pid and not rundir.lock_is_stale(tmp_path / rundir.LOCK)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The killed holder's file is still there, but nobody holds it: taken at once.
    assert (tmp_path / rundir.LOCK).exists()
    with rundir.run_lock(tmp_path) as got:
        assert got is True
    assert not (tmp_path / rundir.LOCK).exists()  # released and removed


def test_a_second_launch_of_a_busy_run_exits_non_zero_and_writes_nothing(tmp_path):
    """The loser of a same-directory race: exit status 3, "[busy]", and neither config.yaml
    nor Hydra's .hydra/ record written into the winner's directory."""
    run_dir = tmp_path / "tiny" / "parity_prefix" / "rlt1" / "2+2" / "seed42"
    run_dir.mkdir(parents=True)
    with rundir.run_lock(run_dir) as got:
        assert got
        proc = subprocess.run(
            [sys.executable, "train.py", "experiment=tiny", f"root={tmp_path}"],
            cwd=REPO,
            env=dict(os.environ, WANDB_MODE="disabled"),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "[busy]" in proc.stdout + proc.stderr
    assert f"'{os.getpid()} {platform.node()}'" in proc.stdout  # the holder, from its file
    assert not (run_dir / ".hydra").exists() and not (run_dir / rundir.CONFIG).exists()
