"""Portable CPU arithmetic: one code path for every x86-64 CPU with AVX2, on by default.

PyTorch picks its vectorized CPU kernels by the CPU's instruction set (AVX2 or AVX-512: softmax
and reductions then sum in another order), MKL picks its GEMM code path by the CPU, and oneDNN
(the LSTM, some convolutions) its ISA. So one seed's run would give other float32 roundings on
another host, and a run at the edge of learning could land on the other side. Importing ``rlt``
pins all three to AVX2 before torch runs its first kernel:

    ATEN_CPU_CAPABILITY=avx2   MKL_CBWR=AVX2   ONEDNN_MAX_CPU_ISA=AVX2

It holds for everything that imports ``rlt`` first (train.py, eval.py, ``python -m rlt.probe``,
``python -m rlt.bench``, SLURM jobs); results.json records what was in force (``arithmetic``)
and a run keeps the mode it started in (a resume in the other mode is refused,
:func:`resume_mismatch`). On by default since 2026-12-03 (issue 40): it costs nothing
measurable on the host it was measured on (BENCHMARKS.md, "Portable mode"), and without it the
same seed gives other numbers on another CPU. ``RLT_PORTABLE=0`` gives torch's own choice (the
CPU's widest kernels: how every result committed before that date was made). Where the CPU has
no AVX2 (another architecture, an old x86) nothing is pinned and results.json says so. A value
the user set for one of the three variables wins.
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
ON = ("1", "on", "true", "yes")
OFF = ("0", "off", "false", "no")

status = "off"


def requested() -> bool:
    """Whether the environment asks for portable arithmetic: yes unless ``RLT_PORTABLE`` says
    off (0/off/false/no). Any other value is named on stderr and the default holds."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in OFF:
        return False
    if value and value not in ON:
        print(
            f"[rlt] {ENV}={os.environ[ENV]!r} is neither on (1/on/true/yes) nor off "
            "(0/off/false/no); keeping the default, on",
            file=sys.stderr,
        )
    return True


def cpu_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo on Linux; empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def has_avx2() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and "avx2" in cpu_flags()


def pin() -> str:
    """Set the variables (where the user has not) unless ``RLT_PORTABLE`` turns the mode off or
    the CPU has no AVX2; say what was done. Must run before torch's first CPU kernel:
    ``import rlt`` does it."""
    global status
    if not requested():
        status = f"off ({ENV}={os.environ.get(ENV)})"
        return status
    if not has_avx2():
        status = f"unavailable (no AVX2 flag readable on this {platform.machine()} CPU)"
        return status
    for name, value in SETTINGS.items():
        os.environ.setdefault(name, value)
    theirs = [n for n, v in SETTINGS.items() if os.environ[n].strip().lower() != v.lower()]
    if theirs:  # a value the user set wins, and then the arithmetic is not the portable one
        status = "off (set by the user: " + ", ".join(f"{n}={os.environ[n]}" for n in theirs) + ")"
        return status
    late = "torch" in sys.modules
    status = "on" + (
        " (torch was imported before rlt: check arithmetic.cpu_capability)" if late else ""
    )
    return status


def active() -> bool:
    return status.startswith("on")


def resume_mismatch(started_portable: object) -> str | None:
    """Why a run that started with ``portable`` = ``started_portable`` (status.json) cannot
    resume in this process, or None. A run started before the mode was recorded (None)
    started with it off, the default then."""
    if started_portable is None:
        started_portable = False
    if not isinstance(started_portable, bool) or started_portable == active():
        return None
    if started_portable:
        return (
            f"it started with portable arithmetic on and this process has it {status}: resume "
            f"it on a CPU with AVX2 without {ENV}=0"
        )
    return f"it started with portable arithmetic off: resume it with {ENV}=0"


def scoring_note(results: dict) -> str | None:
    """What to tell someone scoring a finished run (eval.py, the probe) in another arithmetic
    than it was trained in: its numbers can move in the last digits against results.json's.
    A results.json without ``arithmetic`` predates the record: trained with the mode off."""
    trained = (results.get("arithmetic") or {}).get("portable", False)
    if not isinstance(trained, bool) or trained == active():
        return None
    fix = f"{ENV}=0" if not trained else f"a CPU with AVX2 and without {ENV}=0"
    return (
        f"was trained with portable arithmetic {'on' if trained else 'off'} and is scored with it "
        f"{status}: its numbers can differ from results.json's in the last digits ({fix} scores "
        "it in its own)"
    )


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
        "portable": active(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{name.lower(): os.environ.get(name) for name in SETTINGS},
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
    }
