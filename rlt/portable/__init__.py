"""Portable CPU arithmetic: one code path for every x86-64 CPU with AVX2, on by default.

PyTorch picks its vectorized CPU kernels by the CPU's instruction set (AVX2 or AVX-512: softmax
and reductions then sum in another order), MKL picks its GEMM code path and its blocking by the
CPU, and oneDNN (the LSTM, some convolutions) its ISA. So one seed's run would give other float32
roundings on another host, and a run at the edge of learning could land on the other side.
Importing ``rlt`` pins all three before torch runs its first kernel:

    ATEN_CPU_CAPABILITY=avx2   MKL_CBWR=AVX2,STRICT   ONEDNN_MAX_CPU_ISA=AVX2

``STRICT`` (since 2026-12-05, issue 55) is MKL's strict reproducibility mode for GEMM: each
output element is summed in one order whatever the number of threads, the alignment or the
number of rows in the call. Without it (``MKL_CBWR=AVX2``, the portable arithmetic of
2026-12-03 to 2026-12-04) the rounding of a row depended on how many rows one call held, so
RLT-2's state after 6 prompt tokens differed from its state after 4 in the last bits on an
Intel Xeon, and that host parted from the AMD references at step 20. A run keeps the arithmetic
it started in: status.json records ``portable`` and ``arithmetic`` (the three settings), and a resume in another one is
refused (:func:`resume_mismatch`); ``MKL_CBWR=AVX2`` (set by hand) resumes a run begun before.

Pinning is not all of it: MKL picks some code paths by the CPU's vendor whatever ``MKL_CBWR``
says (an AMD EPYC runs ``AUTO,STRICT``), and its float32 square root, which AdamW takes every
step, is one unit in the last place off there for about one value in six. So the processes that
train rlt's models (and benchmark or probe them) also round float32 square roots correctly, on every CPU
(rlt/portable/kernels.py, since 2026-12-07; ``RLT_EXACT_SQRT=0`` gives torch's own, the
arithmetic of runs begun before; ``exact_sqrt`` in status.json and results.json).

It holds for everything that imports ``rlt`` first (train.py, eval.py, ``python -m rlt.probe``,
``python -m rlt.bench``, SLURM jobs); results.json records what was in force (``arithmetic``).
``RLT_PORTABLE=0`` gives torch's own choice (the CPU's widest kernels: how every result
committed before 2026-12-03 was made). Where the CPU has no AVX2 (another architecture, an old
x86) nothing is pinned and results.json says so. A value the user set for one of the three
variables wins (and then the arithmetic is not the portable one, but for ``MKL_CBWR=AVX2``,
the earlier portable arithmetic). ``python -m rlt.portable --check`` retrains the committed
references on this host and says whether it reproduces them (rlt/portable/check.py).
"""

from __future__ import annotations

import os
import platform
import sys

ENV = "RLT_PORTABLE"
EXACT_SQRT = "RLT_EXACT_SQRT"
SETTINGS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
# MKL's setting of the portable arithmetic of 2026-12-03 to 2026-12-04 (not STRICT: a row's
# rounding depended on the rows in the call): still portable, to resume a run begun then.
EARLIER_MKL_CBWR = "AVX2"
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
    """Set the variables unless ``RLT_PORTABLE`` turns the mode off, the CPU has no AVX2, or
    the user set one of them to another value (then nothing is set: the user's arithmetic is
    the user's); say what was done. Must run before torch's first CPU kernel: ``import rlt``
    does it."""
    global status
    if not requested():
        status = f"off ({ENV}={os.environ.get(ENV)})"
        return status
    if not has_avx2():
        status = f"unavailable (no AVX2 flag readable on this {platform.machine()} CPU)"
        return status
    theirs = [
        n for n, v in SETTINGS.items() if n in os.environ and _norm(os.environ[n]) != _norm(v)
    ]
    earlier = theirs == ["MKL_CBWR"] and _norm(os.environ["MKL_CBWR"]) == EARLIER_MKL_CBWR
    if theirs and not earlier:  # a value the user set wins: the arithmetic is not portable
        status = "off (set by the user: " + ", ".join(f"{n}={os.environ[n]}" for n in theirs) + ")"
        return status
    for name, value in SETTINGS.items():
        os.environ.setdefault(name, value)
    late = " (torch was imported before rlt: check arithmetic.cpu_capability)"
    status = "on" + (
        " (MKL_CBWR=AVX2: the portable arithmetic of runs begun before 2026-12-05)"
        if earlier
        else late
        if "torch" in sys.modules
        else ""
    )
    return status


def _norm(value: str) -> str:
    """A setting's value compared loosely: case, spaces and MKL's ``BRANCH=`` do not matter."""
    return value.strip().upper().replace(" ", "").removeprefix("BRANCH=")


def active() -> bool:
    return status.startswith("on")


def exact_sqrt() -> bool:
    """Whether this process rounds float32 square roots correctly on every CPU
    (rlt/portable/kernels.py): while portable arithmetic is on in its settings of today, unless
    ``RLT_EXACT_SQRT=0`` (torch's own square root: the portable arithmetic of runs begun before
    2026-12-07, which differs on AMD hosts). ``MKL_CBWR=AVX2`` (the earlier arithmetic) keeps
    torch's own too."""
    if not active() or mkl_cbwr() == EARLIER_MKL_CBWR:
        return False
    value = os.environ.get(EXACT_SQRT, "").strip().lower()
    if value and value not in ON + OFF:
        print(
            f"[rlt] {EXACT_SQRT}={os.environ[EXACT_SQRT]!r} is neither on nor off; keeping the "
            "default, on",
            file=sys.stderr,
        )
    return value not in OFF


def started_arithmetic() -> dict[str, object]:
    """What a fresh run records as the arithmetic it starts in (status.json ``arithmetic``):
    the three settings and whether its square roots are exact; it resumes only in the same."""
    return {**variables(), "exact_sqrt": exact_sqrt()}


def variables() -> dict[str, str | None]:
    """The three settings as this process has them (normalized; None where unset), portable
    or not: what status.json (``arithmetic``) and scored files record, and a resume compares."""
    return {n.lower(): (_norm(os.environ[n]) if n in os.environ else None) for n in SETTINGS}


# What a portable run recorded before ``arithmetic`` was: the portable settings of 2026-12-03/04.
EARLIER = {
    "aten_cpu_capability": "AVX2",
    "mkl_cbwr": EARLIER_MKL_CBWR,
    "onednn_max_cpu_isa": "AVX2",
}


def mkl_cbwr() -> str | None:
    """MKL's setting in force while portable arithmetic is on (``AVX2,STRICT``, or ``AVX2`` for
    the earlier portable arithmetic), else None."""
    return variables()["mkl_cbwr"] if active() else None


def _settings_text(values: dict, keys: list[str]) -> str:
    return " ".join(
        f"{k.upper()}={values.get(k)}" if values.get(k) else f"{k.upper()} unset" for k in keys
    )


def _differing(then: object, portable_then: bool) -> tuple[str, str] | None:
    """How this process's settings differ from ``then`` (a record, or None where the run
    predates it: the earlier portable settings if it was portable, else not compared), as
    ("<then> and this process has <now>", "<then>"), or None where they agree."""
    if not isinstance(then, dict):
        if not portable_then:
            return None
        then = EARLIER
    then = {k: _norm(v) if isinstance(v, str) else None for k, v in then.items()}
    now = variables()
    keys = [k for k in now if then.get(k) != now[k]]
    if not keys:
        return None
    was = _settings_text(then, keys)
    return f"{was} and this process has {_settings_text(now, keys)}", was


def resume_mismatch(started_portable: object, started_settings: object = None) -> str | None:
    """Why a run that started with ``portable`` = ``started_portable`` and the settings
    ``started_settings`` (status.json ``portable`` and ``arithmetic``) cannot resume in this
    process, or None. A run started before the mode was recorded (None) started with it off,
    the default then; a portable run started before the settings were recorded started with
    the earlier portable settings (``MKL_CBWR=AVX2``, not STRICT)."""
    if started_portable is None:
        started_portable = False
    if not isinstance(started_portable, bool):
        return None
    if started_portable == active():
        differ = _differing(started_settings, started_portable)
        if differ is None:  # the exact square root is part of portable arithmetic only
            return _sqrt_mismatch(started_settings) if started_portable else None
        return f"it started with {differ[0]}: resume it with {differ[1]}"
    if started_portable:
        return (
            f"it started with portable arithmetic on and this process has it {status}: resume "
            f"it on a CPU with AVX2 without {ENV}=0"
        )
    return f"it started with portable arithmetic off: resume it with {ENV}=0"


def _sqrt_mismatch(started_settings: object) -> str | None:
    """Why a run in this arithmetic's settings cannot resume here for its square root: it
    started with torch's own (before 2026-12-07, or ``RLT_EXACT_SQRT=0``: no ``exact_sqrt``
    recorded means torch's) and this process rounds exactly, or the other way round."""
    then = isinstance(started_settings, dict) and started_settings.get("exact_sqrt") is True
    if then == exact_sqrt():
        return None
    if then:
        return (
            f"it started with float32 square roots rounded exactly and this process has "
            f"{EXACT_SQRT}={os.environ.get(EXACT_SQRT)}: resume it without {EXACT_SQRT}=0"
        )
    return (
        "it started with torch's own float32 square root (begun before 2026-12-07, or with "
        f"{EXACT_SQRT}=0) and this process rounds it exactly: resume it with {EXACT_SQRT}=0"
    )


def scoring_note(results: dict) -> str | None:
    """What to tell someone scoring a finished run (eval.py, the probe) in another arithmetic
    than it was trained in: its numbers can move in the last digits against results.json's.
    A results.json without ``arithmetic`` predates the record: trained with the mode off."""
    arithmetic = results.get("arithmetic") or {}
    trained = arithmetic.get("portable", False)
    if not isinstance(trained, bool):
        return None
    if trained == active():
        recorded = {k: arithmetic.get(k) for k in EARLIER} if "mkl_cbwr" in arithmetic else None
        differ = _differing(recorded, trained)
        if differ is None:
            return None
        return (
            f"was trained with {differ[0]}: its numbers can differ from results.json's in the last "
            "digits (the settings it was trained with score it in its own)"
        )
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

    from rlt.portable import kernels

    return {
        "portable": active(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{name.lower(): os.environ.get(name) for name in SETTINGS},
        # float32 square roots rounded correctly on every CPU (rlt/portable/kernels.py), since
        # 2026-12-07; absent from earlier results
        "exact_sqrt": kernels.installed(),
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
    }
