"""The fused recurrence's token loops in C++ (rlt/models/csrc/token_loop.cpp), built on first use.

The eager fused path (rlt/models/recurrence.py) spends much of a small model's step in the
Python interpreter between its per-token ATen calls. The C++ loops make the same calls, in
the same order, on the same buffers, with the interpreter and the autograd dispatch gone;
``fused_decode(..., native=True)`` selects them. PyTorch's extension API compiles the file
once per environment (into ``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``,
under a name that carries a digest of the source, torch and Python: ``library_name()``; ~30 s)
and later processes load the cached library.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from pathlib import Path

SOURCE = Path(__file__).parent / "csrc" / "token_loop.cpp"
NAME = "rlt_token_loop"
CFLAGS = ["-O2"]


@functools.cache
def library_name() -> str:
    """``NAME`` plus a digest of everything the build depends on: the source's text and path,
    this torch (version, headers) and this Python. Two environments that share the extension
    cache (two venvs or clones under one home directory) then build one library each, once,
    where under a shared name each would rebuild the other's (ninja sees another command line)."""
    import hashlib

    import torch
    from torch.utils.cpp_extension import include_paths

    parts = [
        SOURCE.read_text(),
        str(SOURCE.resolve()),
        torch.__version__,
        *include_paths(),
        sys.executable,
        sys.version,
        os.environ.get("CXX", "c++"),
        *CFLAGS,
    ]
    return f"{NAME}_{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:12]}"


def native_available() -> tuple[bool, str]:
    """(can the C++ loops be built here, why not)."""
    if not SOURCE.is_file():
        return False, f"{SOURCE} is missing from this installation"
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        return False, "no C++ compiler (c++ or g++) on PATH"
    if _ninja() is None:
        return False, "ninja is not installed (pip install ninja)"
    ok, why = compiler_works()  # PyTorch asks the compiler even to load a built library
    if not ok:
        return False, why
    return True, ""


@functools.cache
def compiler_works() -> tuple[bool, str]:
    """Whether the compiler PyTorch would build with (``$CXX``, else ``c++``) compiles a trivial
    C++ file: a compiler that is on PATH but broken passes every other check and fails only
    after a run has started. Once per process, and remembered on disk per compiler binary."""
    import hashlib
    import subprocess
    import tempfile

    compiler = shutil.which(os.environ.get("CXX", "c++")) or os.environ.get("CXX", "c++")
    try:
        stamp_key = f"{compiler} {os.stat(compiler).st_mtime_ns}"
    except OSError:
        return False, f"the C++ compiler {compiler!r} does not exist"
    stamp = Path(tempfile.gettempdir()) / (
        "rlt_cxx_ok_" + hashlib.sha1(stamp_key.encode()).hexdigest()[:16]
    )
    if stamp.exists():
        return True, ""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int main() { return 0; }\n")
        try:
            proc = subprocess.run(
                [compiler, "-c", str(src), "-o", str(Path(tmp) / "probe.o")],
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, f"the C++ compiler {compiler!r} does not run ({type(e).__name__})"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return False, f"the C++ compiler {compiler!r} fails on a trivial file ({tail[0]})"
    stamp.touch()
    return True, ""


def _ninja() -> str | None:
    """The ninja executable: on PATH, or the pip package's (a venv used without activating it
    has its bin directory off PATH)."""
    found = shutil.which("ninja")
    if found is None:
        try:
            import ninja
        except ImportError:
            return None
        found = shutil.which("ninja", path=getattr(ninja, "BIN_DIR", None))
    return found


def is_built() -> bool:
    """Whether a library from an earlier build is in the extension cache (loading it then
    takes well under a second; a changed source is rebuilt once)."""
    try:
        directory = _build_directory()
    except Exception:  # a private helper: without it, assume nothing is built
        return False
    return any(directory.glob(f"{library_name()}*.so"))


# How long a process waits for another one that builds the library before it gives up (the
# build itself takes ~30 s on 2 cores).
BUILD_WAIT_S = 600.0


def _build_directory() -> Path:
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(library_name(), verbose=False))


@contextlib.contextmanager
def _build_lock(directory: Path, wait_s: float = BUILD_WAIT_S):
    """Hold ``<build dir>.build.flock`` (``filelock``: an OS lock the kernel drops when its
    holder dies) around a build. PyTorch's own lock (a plain file ``lock`` in the build
    directory) outlives a killed build and makes every later build wait forever; while this
    lock is held no other process of ours builds, so such a file is a dead build's and is
    removed. Waits for a live builder at most ``wait_s`` seconds, with a message."""
    from filelock import FileLock, Timeout

    directory.parent.mkdir(parents=True, exist_ok=True)
    path = directory.parent / f"{directory.name}.build.flock"
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(
            f"[rlt] waiting for another process that builds the C++ token loop "
            f"(lock {path}; at most {wait_s:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        try:
            lock.acquire(timeout=wait_s, poll_interval=0.5)
        except Timeout:
            raise RuntimeError(
                f"another process has been building the C++ token loop for over "
                f"{wait_s:.0f} s (lock {path}); if none is, delete that file"
            ) from None
    try:
        stale = directory / "lock"
        if stale.exists():
            print(f"[rlt] removing {stale}, left by a killed build", file=sys.stderr)
            stale.unlink(missing_ok=True)
        yield
    finally:
        lock.release()


@functools.cache
def token_loop():
    """The compiled extension module (forward_loop, backward_loop)."""
    ok, why = native_available()
    if not ok:
        raise RuntimeError(f"the C++ token loop cannot be built: {why}")
    from torch.utils.cpp_extension import load

    ninja_dir = os.path.dirname(_ninja())
    if ninja_dir not in os.environ.get("PATH", "").split(os.pathsep):  # torch runs "ninja"
        os.environ["PATH"] = ninja_dir + os.pathsep + os.environ.get("PATH", "")
    with _build_lock(_build_directory()):
        return load(
            name=library_name(),
            sources=[str(SOURCE)],
            extra_cflags=CFLAGS,
            verbose=False,
        )
