"""rlt/allocator.py: importing rlt makes glibc keep freed memory (no page faults on reuse)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the setting applies to glibc's malloc only",
)

CHUNK = 24 * 2**20  # below glibc's largest mmap threshold, above its default one
PAGES = 3 * CHUNK // 4096

# Allocates three chunks, touches every page, frees them, five times; prints the minor page
# faults (the kernel's count) of each round, and rlt.allocator.status.
PROBE = f"""
import ctypes, json, resource
import rlt, rlt.allocator
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
faults = []
for _ in range(5):
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    chunks = [libc.malloc({CHUNK}) for _ in range(3)]
    for c in chunks:
        libc.memset(c, 1, {CHUNK})
    for c in reversed(chunks):
        libc.free(c)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
print(json.dumps({{"faults": faults, "status": rlt.allocator.status}}))
"""


def probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "RLT_MALLOC"))}
    clean.pop("GLIBC_TUNABLES", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_freed_memory_is_reused_without_faults() -> None:
    on = probe()
    assert on["status"] == "on"
    assert on["faults"][0] >= PAGES * 0.9  # the first round faults every page in
    assert max(on["faults"][1:]) < PAGES * 0.05, on["faults"]


def test_off_switch_leaves_glibc_defaults() -> None:
    # the same probe with the setting off faults again every round: what the setting removes
    off = probe(RLT_MALLOC="off")
    assert off["status"] == "off (RLT_MALLOC=off)"
    assert min(off["faults"][1:]) > PAGES * 0.5, off["faults"]


def test_user_malloc_settings_win() -> None:
    user = probe(MALLOC_TRIM_THRESHOLD_="131072")
    assert user["status"].startswith("off (the environment tunes malloc itself")
    assert min(user["faults"][1:]) > PAGES * 0.5, user["faults"]
