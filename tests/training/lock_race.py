"""A two-process race on the run lock (issue 29 item 4), run by test_run_lock.py and by hand:

    python tests/training/lock_race.py RUN_DIR N     # prints "<double holders> <false refusals>"

Each of two processes tries N times to take ``rundir.run_lock`` and, while it holds it, marks
the hold with an exclusive create of ``holder``: a create that fails means both held the lock
at once. Between tries it also runs the run's writability check, whose failures are false
refusals (the directory is writable).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from pathlib import Path


def _worker(run_dir: str, n: int, out) -> None:
    from rlt import rundir
    from rlt.training.lifecycle import check_writable
    from rlt.training.spec import ConfigError

    marker = Path(run_dir) / "holder"
    double = refused = 0
    for _ in range(n):
        with rundir.run_lock(run_dir) as got:
            if got:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    os.close(fd)
                    os.unlink(marker)
                except FileExistsError:
                    double += 1
        try:
            check_writable(Path(run_dir))
        except ConfigError:
            refused += 1
    out.put((double, refused))


def race(run_dir: str | Path, n: int) -> tuple[int, int]:
    """(double holders, false refusals) over two processes of ``n`` tries each."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(run_dir), n, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sum(r[0] for r in results), sum(r[1] for r in results)


if __name__ == "__main__":
    print(*race(sys.argv[1], int(sys.argv[2])))
