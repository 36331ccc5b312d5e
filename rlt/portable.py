"""Portable CPU arithmetic: one code path for every x86-64 CPU with AVX2 (``RLT_PORTABLE=1``).

PyTorch picks its vectorized CPU kernels by the CPU's instruction set (AVX2 or AVX-512: softmax
and reductions then sum in another order), MKL picks its GEMM code path by the CPU, and oneDNN
(the LSTM, some convolutions) its ISA. So one seed's run gives other float32 roundings on
another host, and a run at the edge of learning can land on the other side. With
``RLT_PORTABLE=1`` in the environment, importing ``rlt`` pins all three to AVX2 before torch runs
its first kernel:

    ATEN_CPU_CAPABILITY=avx2   MKL_CBWR=AVX2   ONEDNN_MAX_CPU_ISA=AVX2

It holds for everything that imports ``rlt`` first (train.py, eval.py, ``python -m rlt.probe``,
``python -m rlt.bench``, SLURM jobs, which inherit the environment); results.json records what
was in force (``arithmetic``). Thread counts are pinned by the configs already (one thread per
run in the grids). Off by default: its numbers differ from the default path's even on one host
(a tiny run's training loss moves in the 7th digit on an AMD EPYC), so turning it on would
change every committed result's reproduction, and its cross-host claim is verified on the CPU
models listed in README.md only. A value the user set for one of the variables wins.
"""

from __future__ import annotations

import os
import platform
import sys

ENV = "RLT_PORTABLE"
SETTINGS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}

status = "off"


def requested() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "on", "true", "yes")


def pin() -> str:
    """Set the variables (where the user has not) when ``RLT_PORTABLE`` asks for it; say what
    was done. Must run before torch's first CPU kernel: ``import rlt`` does it."""
    global status
    if not requested():
        status = "off"
        return status
    for name, value in SETTINGS.items():
        os.environ.setdefault(name, value)
    late = "torch" in sys.modules
    status = "on" + (
        " (torch was imported before rlt: check arithmetic.cpu_capability)" if late else ""
    )
    return status


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), so a number is read with its host."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, object]:
    """What decided this process's CPU arithmetic (for results.json ``arithmetic``)."""
    import torch

    return {
        "portable": status.startswith("on"),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{name.lower(): os.environ.get(name) for name in SETTINGS},
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
    }
