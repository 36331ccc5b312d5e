"""What a run needs to know about SLURM, asked of SLURM's own commands (scontrol, squeue,
sacct); standard library only, and every function answers None / {} off a cluster.

- :func:`job_info`: the job a run is part of (recorded in status.json).
- :func:`was_requeued`: whether the SIGTERM a run just received is a requeue (preemption,
  ``scontrol requeue``, submitit's time-out handler) rather than a cancellation: a requeue
  raises the job's restart count above the one the job started with.
- :func:`queue_states`: job id -> SLURM state, for ``python -m rlt.sweep status``.
- :func:`quiet_polling`: submitit polls job states with ``sacct``; on a cluster without
  accounting every poll prints warnings. Checked once per launch; without accounting the
  launcher polls ``squeue`` instead.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import time
from typing import Any

_TIMEOUT_S = 20


def job_info() -> dict[str, Any] | None:
    """The SLURM job this process runs in (ids as strings, restart count as int), else None."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    array_task = os.environ.get("SLURM_ARRAY_TASK_ID")
    return {
        "job_id": job_id,
        # The id squeue shows and scancel takes: 123_4 for an array task, else the job id.
        "queue_id": f"{array_job}_{array_task}" if array_job and array_task else job_id,
        "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
        "node": os.environ.get("SLURMD_NODENAME"),
    }


def _run(command: list[str]) -> str | None:
    """stdout of a SLURM command, or None when it is missing or fails."""
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def was_requeued(wait_s: float = 3.0) -> bool:
    """Whether SLURM has requeued the job this process runs in. A requeue (``scontrol
    requeue``, preemption with PreemptMode=REQUEUE, submitit's time-out handler) increments the
    job's ``Restarts`` before its processes get SIGTERM; ``scancel`` does not."""
    info = job_info()
    if info is None:
        return False
    # Right after a requeue the controller may answer with nothing for a moment: ask again.
    deadline = time.monotonic() + wait_s
    while True:
        out = _run(["scontrol", "show", "job", info["job_id"]])
        match = re.search(r"\bRestarts=(\d+)", out or "")
        if match is not None and int(match.group(1)) > info["restart_count"]:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def queue_states(queue_ids: list[str]) -> dict[str, str]:
    """``{queue id: state}`` (PENDING, RUNNING, ...) for the jobs squeue still knows; jobs it
    has forgotten (finished a while ago) and everything off a cluster are absent."""
    if not queue_ids:
        return {}
    out = _run(
        ["squeue", "--noheader", "--states=all", "--format=%i|%T", "--jobs", ",".join(queue_ids)]
    )
    states = {}
    for line in (out or "").splitlines():
        job, _, state = line.strip().partition("|")
        if job:
            states[job] = state
    return states


def squeue_available() -> bool:
    """Whether this machine can ask the cluster for job states (squeue installed and the
    controller answering)."""
    return _run(["squeue", "--noheader", "--format=%i", "--name=rlt-probe"]) is not None


def accounting_available() -> bool:
    """Whether ``sacct`` answers on this cluster (many small clusters run without
    accounting storage; then it exits non-zero with 'accounting storage is disabled')."""
    return (
        _run(["sacct", "--noheader", "--allocations", "--format=JobID", "--jobs", "1"]) is not None
    )


def quiet_polling() -> bool:
    """Make submitit poll with squeue when sacct does not work here (checked once). Returns
    whether squeue polling is now in use."""
    from submitit.slurm import slurm as submitit_slurm

    watcher_class = squeue_watcher_class()
    if isinstance(submitit_slurm.SlurmJob.watcher, watcher_class):
        return True
    if shutil.which("squeue") is None or accounting_available():
        return False
    delay_s = submitit_slurm.SlurmJob.watcher._delay_s
    submitit_slurm.SlurmJob.watcher = watcher_class(delay_s=delay_s)
    return True


@functools.cache
def squeue_watcher_class() -> type:
    """submitit's SlurmInfoWatcher, reading squeue (built on first use: submitit is the
    optional launcher plugin's dependency)."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class _SqueueWatcher(SlurmInfoWatcher):
        """submitit's job-state watcher reading ``squeue`` instead of ``sacct``. squeue forgets
        a job some minutes after it ends (MinJobAge): a job it no longer lists is reported
        COMPLETED, and submitit then reads the job's result file (or says the job left none)."""

        def update(self) -> None:
            pending = self._registered - self._finished
            if not pending:
                return
            self._num_calls += 1
            base_ids = sorted({job.split("_")[0] for job in pending})
            command = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%N"]
            try:
                done = subprocess.run(
                    [*command, "--jobs", ",".join(base_ids)],
                    capture_output=True,
                    text=True,
                    timeout=_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired):
                return  # asked again at the next poll
            # squeue exits non-zero when it knows none of the jobs (all finished and forgotten);
            # any other error (controller unreachable) leaves the states as they were.
            if done.returncode != 0 and "Invalid job id" not in done.stderr:
                return
            info = self.read_info("JobID|State|NodeList\n" + done.stdout)
            for job in pending - set(info):
                info[job] = {"JobID": job, "State": "COMPLETED", "NodeList": ""}
            self._info_dict.update(info)
            self._last_status_check = time.time()
            for job in pending:
                if self.is_done(job, mode="cache"):
                    self._finished.add(job)

    return _SqueueWatcher
