"""Atomic writes: a reader sees a file's old contents or its new ones, never a partial file.

The one atomic write of the package (run files, checkpoints, state files, grid.json), at the
ground floor so that the models' state snapshots and the run directory share it; rlt.rundir
hands the same names on.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    atomic_write(path, lambda f: f.write(text))


def atomic_write(path: str | Path, write: Callable[[IO], Any], mode: str = "w") -> None:
    """``write(f)`` into a temporary file in ``path``'s directory (opened with ``mode``, synced),
    then :func:`atomic_replace`."""

    def write_to(tmp: Path) -> None:
        with open(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())

    atomic_replace(path, write_to)


def atomic_replace(path: str | Path, write_to: Callable[[Path], Any]) -> None:
    """``write_to(tmp)`` writes a temporary file in ``path``'s directory, which is then renamed
    to ``path``: a reader sees the old file or the new one, never a partial one, and a write
    that fails leaves the old file as it was. The one atomic write of the package (run files,
    checkpoints, state files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from collaborators
    try:
        write_to(Path(tmp))
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
