"""The locks of runs and sweeps: a run's ``.lock`` held by the process training it (its owner
"<pid> <host>" written in for ``rlt.sweep status``), a sweep's ``.grid.lock`` while a launch
merges grid.json, and how a reader tells a live holder from a dead one. OS locks (flock) that
the kernel drops when their holder dies; an exclusive create where a file system has none.
Standard library only."""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import time
from pathlib import Path

LOCK = ".lock"  # a run's: <run_dir>/.lock

SWEEP_LOCK = ".grid.lock"


@contextlib.contextmanager
def sweep_lock(sweep_dir: str | Path, wait_s: float = 120.0):
    """Hold ``sweep_dir/.grid.lock`` while a launch merges its cells into grid.json, so two
    launches into one sweep at once both keep theirs. An OS lock (flock) the kernel drops when
    its holder dies; the file stays (empty) and is never the lock itself. Waits for another
    launch at most ``wait_s`` seconds (a merge takes milliseconds), then names the file. Where
    the file system has no flock, the merge goes ahead unlocked, as before."""
    path = Path(sweep_dir) / SWEEP_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # 0o666 less the umask, as every file of a run: collaborators launch into it too
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file: flock works on a read-only descriptor
        fd = os.open(path, os.O_RDONLY)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"another launch into this sweep (a live process: the kernel frees the "
                        f"lock of a dead one) has held {path} for over {wait_s:g} s; let it "
                        "finish starting, or stop it, and launch again"
                    ) from None
                time.sleep(0.05)
            except OSError:  # no flock on this file system
                break
        yield
    finally:
        os.close(fd)  # drops the flock


@contextlib.contextmanager
def run_lock(run_dir: str | Path):
    """Hold ``run_dir/.lock`` exclusively while training; yields whether this process got it.

    An OS lock (flock) on the file: exclusive between processes, and the kernel drops it when
    its holder dies, so a killed run's leftover file never blocks the next one and no process
    ever deletes another's lock. The holder writes "<pid> <host>" into the file for readers
    (``rlt.sweep status``); it unlinks the file while still holding it, and a taker that finds
    it locked a file already unlinked tries again. Where the file system has no flock (some
    cluster file systems), an exclusive create of a file that already holds the owner."""
    path = Path(run_dir) / LOCK
    owner = f"{os.getpid()} {platform.node()}".encode()
    for _ in range(100):
        try:  # 0o666 less the umask, as every file of a run: collaborators train in it too
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError as e:  # another user's lock file: held, or left by a killed run
            if not path.exists():  # no lock file, and none may be created here
                raise PermissionError(
                    f"cannot create {path}: this user may not write to {path.parent}; make it "
                    "writable, or put the run elsewhere (root=DIR)"
                ) from e
            if _held_by_another_user(path):
                yield False
                return
            continue  # a dead holder's file, unlinked: take the lock anew
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            yield False
            return
        except OSError:  # no flock here
            os.close(fd)
            with _exclusive_create(path, owner) as got:
                yield got
            return
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(fd).st_ino:  # released and unlinked between open and flock
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.write(fd, owner)
            yield True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)  # drops the flock
        return
    raise RuntimeError(f"could not take {path}: it kept changing under this process")


def _held_by_another_user(path: Path) -> bool:
    """Whether another user's ``.lock`` is held (flock works on a read-only descriptor); a
    file its dead holder left (SIGKILL) is unlinked instead, as the holder would have done,
    which the run directory's write permission allows."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except PermissionError:  # not even readable (its owner's umask): cannot tell, say busy
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # no flock here: the file alone says a run holds it
        return True
    else:
        try:
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                return False  # already replaced by another run's lock: never remove that one
            os.unlink(path)
        except FileNotFoundError:
            pass
        except PermissionError as e:
            raise RuntimeError(
                f"{path} was left by another user's run that has ended, and this user may not "
                "remove it; ask them (or an administrator) to delete it, then run again"
            ) from e
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def _exclusive_create(path: Path, owner: bytes):
    """The lock without flock: a file written in full under a private name, then linked to
    ``path`` (atomic, fails if it exists), so nobody ever sees it empty. A lock whose owner is
    dead on this host is broken by renaming it to a private name first (only one taker wins)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    tmp.write_bytes(owner)
    got = False
    try:
        for _ in range(2):
            try:
                os.link(tmp, path)
                got = True
                break
            except FileExistsError:
                if not lock_is_stale(path):
                    break
                grave = path.with_name(f"{path.name}.dead.{os.getpid()}")
                with contextlib.suppress(FileNotFoundError):
                    os.rename(path, grave)
                    if not lock_is_stale(grave):  # a live owner's fresh lock: give it back
                        with contextlib.suppress(FileExistsError):
                            os.link(grave, path)
                    grave.unlink()
    finally:
        tmp.unlink(missing_ok=True)
    try:
        yield got
    finally:
        if got:
            path.unlink(missing_ok=True)


def live_state(run_dir: str | Path, state: str | None) -> str | None:
    """A status file's state as readers report it: "running" only while a live process holds
    the run's lock, else "interrupted" (killed; the same command resumes it). One rule for
    ``rlt.sweep status`` and the analysis tables."""
    lock = Path(run_dir) / LOCK
    if state == "running" and (not lock.exists() or lock_is_stale(lock)):
        return "interrupted"
    return state


def lock_is_stale(lock: Path) -> bool:
    """Whether a run's ``.lock`` names a process that no longer runs (on this host; another
    host's lock, e.g. a SLURM job elsewhere, is trusted)."""
    try:
        text = Path(lock).read_text()
        if not text and time.time() - Path(lock).stat().st_mtime < 10:
            return False  # just taken: its owner writes itself in next
        pid_s, host = text.split(maxsplit=1)
        pid = int(pid_s)
    except (OSError, ValueError):
        return True
    if host != platform.node():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
