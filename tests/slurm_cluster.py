"""A real one-node SLURM cluster for the tests: munged, slurmctld and slurmd started from a
temporary directory (own munge key and socket, own ports, accounting off), CPU only.

Needs the Debian packages ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them) and root (the
daemons run as root here). Everything lives in the temporary directory; :meth:`stop` ends only
the processes started here and removes the directory. Clients (sbatch, squeue, scontrol) find
the cluster through ``SLURM_CONF``, which :meth:`start` sets for this process and its children
(jobs inherit it too).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")


def missing_requirements() -> str | None:
    """Why a cluster cannot start here, or None."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the SLURM daemons of the test cluster run as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    with open("/proc/meminfo") as f:
        total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
    return int(total_kb / 1024 * 0.8)


class SlurmCluster:
    partition = "debug"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rlt-slurm-"))
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.dir / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self._old_conf = os.environ.get("SLURM_CONF")

    def _write_config(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir()
        (d / "munge.key").write_bytes(os.urandom(1024))
        (d / "munge.key").chmod(0o400)
        self.conf.write_text(
            f"""ClusterName=rlttest
SlurmctldHost={self.node}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket={d}/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName={self.node} CPUs={os.cpu_count()} RealMemory={_memory_mb()} State=UNKNOWN
PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        )

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.dir / "log" / f"{name}.out", "w")  # noqa: SIM115 (closed with the process)
        self.procs.append(
            subprocess.Popen([name, *args], stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        )

    def start(self, timeout_s: float = 60) -> SlurmCluster:
        self._write_config()
        d = self.dir
        self._spawn(
            "munged",
            "--foreground",
            "--force",
            f"--key-file={d}/munge.key",
            f"--socket={d}/munge.socket",
            f"--pid-file={d}/munged.pid",
            f"--log-file={d}/log/munged.log",
            f"--seed-file={d}/munged.seed",
        )
        os.environ["SLURM_CONF"] = str(self.conf)
        deadline = time.time() + timeout_s
        while not (d / "munge.socket").exists():
            self._check_alive(deadline)
        self._spawn("slurmctld", "-D", "-i", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-f", str(self.conf))
        while self.node_state() not in ("idle", "mixed", "allocated"):
            self._check_alive(deadline)
        return self

    def _check_alive(self, deadline: float) -> None:
        dead = [p.args[0] for p in self.procs if p.poll() is not None]
        if dead or time.time() > deadline:
            logs = "\n".join(
                f"--- {f.name}\n{f.read_text()[-2000:]}"
                for f in sorted((self.dir / "log").iterdir())
            )
            self.stop()
            what = f"{', '.join(dead)} exited" if dead else "the node did not come up"
            raise RuntimeError(f"test SLURM cluster: {what}\n{logs}")
        time.sleep(0.3)

    def node_state(self) -> str:
        done = subprocess.run(
            ["sinfo", "--noheader", "--format=%T", "--nodes", self.node],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip().rstrip("*~#")

    def stop(self) -> None:
        """End the jobs and the daemons started here (nothing else) and remove the directory."""
        if any(p.poll() is None for p in self.procs):
            subprocess.run(
                ["scancel", "--full", "--partition", self.partition], capture_output=True
            )
        for p in reversed(self.procs):  # slurmd, slurmctld, then munged
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        if self._old_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = self._old_conf
        shutil.rmtree(self.dir, ignore_errors=True)

    def queue(self) -> dict[str, tuple[str, str]]:
        """``{job id: (state, reason)}`` of every job the controller knows."""
        out = subprocess.run(
            ["squeue", "--noheader", "--states=all", "--format=%i|%T|%r"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        jobs = {}
        for line in out.splitlines():
            job, state, reason = line.strip().split("|")
            jobs[job] = (state, reason)
        return jobs

    def release_requeued(self) -> list[str]:
        """Start requeued jobs now instead of after SLURM's requeue delay (about two minutes of
        BeginTime), so the tests do not wait for it. Returns the jobs released."""
        released = []
        for job, (state, reason) in self.queue().items():
            if state == "PENDING" and reason == "BeginTime":
                subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], check=True)
                released.append(job)
        return released
