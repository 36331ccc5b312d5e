"""glibc's allocator told to keep freed memory in the process, applied when ``rlt`` is imported.

A training step at the report's width allocates and frees hundreds of MB of tensors. glibc's
malloc, left to its defaults, gives much of that back to the kernel after every step (it
``munmap``s chunks above its mmap threshold and trims the top of the heap above its trim
threshold), so the next step faults the same pages in again: measured at d=512, split 4+4,
batch 64 on a 2-core AMD EPYC VM, ~20,000-26,000 minor page faults per RLT-0 step and ~100,000
(400 MB) per RLT-1 step, whose fused recurrence saves per-step buffers of ~60 MB for the
backward (above glibc's largest mmap threshold, 32 MiB, so always ``mmap``ed and ``munmap``ed).
Here no chunk is ``mmap``ed (every one comes from the heap) and up to ``TRIM_BYTES`` of freed
memory at the top of the heap stays with the process, so a steady training loop stops faulting
(0-2 faults per step at the report's width): BENCHMARKS.md ("Allocator") has the step times
before and after.

The results do not change (only where memory comes from). What it costs: a process keeps up
to ``TRIM_BYTES`` of freed memory it could have returned. Switch it off with ``RLT_MALLOC=off``
in the environment; it also stays off where the allocator is not glibc's or where the user
already tunes glibc's malloc (``MALLOC_*_`` variables or ``glibc.malloc`` in
``GLIBC_TUNABLES``): those settings win.
"""

from __future__ import annotations

import ctypes
import os
import platform

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4

MMAP_BYTES = (
    32 * 2**20
)  # glibc's largest accepted mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_BYTES = 2**30  # freed memory at the top of the heap kept before trimming
TOP_PAD_BYTES = 64 * 2**20  # extra bytes asked of the kernel whenever the heap grows

ENV = "RLT_MALLOC"
USER_SETTINGS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)

# What happened at import, for the benchmark's JSON and for a user who asks.
status = "not applied"


def keep_freed_memory() -> str:
    """Apply the settings (once per process is enough; repeating is harmless) and say what was
    done: ``on``, or ``off (<why>)``."""
    global status
    status = _apply()
    return status


def _apply() -> str:
    if os.environ.get(ENV, "on").strip().lower() in ("off", "0", "false", "no"):
        return f"off ({ENV}={os.environ[ENV]})"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "off (the allocator is not glibc's)"
    user = [name for name in USER_SETTINGS if name in os.environ]
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        user.append("GLIBC_TUNABLES")
    if user:
        return f"off (the environment tunes malloc itself: {', '.join(user)})"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "off (no mallopt in this process)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = (
        (M_MMAP_MAX, 0),  # chunks above any mmap threshold from the heap too
        (M_MMAP_THRESHOLD, MMAP_BYTES),
        (M_TRIM_THRESHOLD, TRIM_BYTES),
        (M_TOP_PAD, TOP_PAD_BYTES),
    )
    refused = [param for param, value in settings if mallopt(param, value) != 1]
    return "on" if not refused else f"off (mallopt refused {refused})"
