"""The fused recurrence's token loops in C++ (rlt/models/csrc/token_loop.cpp), built on first use.

The eager fused path (rlt/models/recurrence.py) spends much of a small model's step in the
Python interpreter between its per-token ATen calls. The C++ loops make the same calls, in
the same order, on the same buffers, with the interpreter and the autograd dispatch gone;
``fused_decode(..., native=True)`` selects them. PyTorch's extension API compiles the file
once per machine and torch version (into ``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``; ~30 s) and later processes load the cached library.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

SOURCE = Path(__file__).parent / "csrc" / "token_loop.cpp"
NAME = "rlt_token_loop"


def native_available() -> tuple[bool, str]:
    """(can the C++ loops be built here, why not)."""
    if not SOURCE.is_file():
        return False, f"{SOURCE} is missing from this installation"
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        return False, "no C++ compiler (c++ or g++) on PATH"
    if _ninja() is None:
        return False, "ninja is not installed (pip install ninja)"
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
        from torch.utils.cpp_extension import _get_build_directory

        directory = Path(_get_build_directory(NAME, verbose=False))
    except Exception:  # a private helper: without it, assume nothing is built
        return False
    return any(directory.glob(f"{NAME}*.so"))


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
    return load(
        name=NAME,
        sources=[str(SOURCE)],
        extra_cflags=["-O2"],
        verbose=False,
    )
