"""Run-directory files, written atomically so a crash never leaves half a results file."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = "results.json"
STATUS = "status.json"
CONFIG = "config.yaml"
CKPT_DIR = "checkpoints"
LAST_CKPT = "last.ckpt"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from collaborators
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(
        path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"
    )


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def read_json(path: str | Path, *, corrupt_ok: bool = False) -> dict | None:
    """The JSON object at ``path``, or None when the file does not exist (or, with
    ``corrupt_ok``, when it does not parse)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        if corrupt_ok:
            return None
        raise


def write_status(run_dir: str | Path, state: str, **fields: Any) -> dict:
    """Update ``status.json`` (state running/done/failed plus progress fields), keeping old fields."""
    path = Path(run_dir) / STATUS
    status = read_json(path) or {}
    status.update(fields)
    status["state"] = state
    status["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if state != "failed":
        status["error"] = None
        status["traceback"] = None
    atomic_write_json(path, status)
    return status


def lock_is_stale(lock: Path) -> bool:
    """Whether a run's ``.lock`` names a process that no longer runs (on this host; another
    host's lock, e.g. a SLURM job elsewhere, is trusted)."""
    import platform

    try:
        pid_s, host = Path(lock).read_text().split(maxsplit=1)
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
