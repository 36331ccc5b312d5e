"""GEMM throughput (GFLOP/s, 1 thread) at the model's shapes in this process's arithmetic:
``RLT_PORTABLE=0 python scripts/gemm_speed.py`` against ``python scripts/gemm_speed.py``
(BENCHMARKS.md, "Portable mode on an Intel Xeon")."""

import os
import time

import torch

import rlt  # noqa: F401  (pins portable arithmetic unless RLT_PORTABLE=0)

torch.set_num_threads(1)
out = []
for m, k, n in [(1312, 512, 2730), (1312, 1365, 512), (1280, 64, 256), (64, 64, 192)]:
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    reps = max(3, int(2e9 / (2 * m * k * n)))
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    seconds = (time.perf_counter() - start) / reps
    out.append(f"{m}x{k}@{k}x{n}: {2 * m * k * n / seconds / 1e9:6.1f} GFLOP/s")
print(f"MKL_CBWR={os.environ.get('MKL_CBWR')} RLT_PORTABLE={os.environ.get('RLT_PORTABLE')}")
print(" | ".join(out))
