"""What the benchmark measures besides time (``python -m rlt.bench``): page faults and when the
heap has settled, FLOPs, peak memory, and the ratios it prints from the rows it timed."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from rlt.bench_stream import timed

try:
    import resource
except ImportError:  # not on Windows: page faults are reported as 0
    resource = None


# --warmup auto: a round is steady once no variant's step maps in more than this many new pages
SETTLED_FAULTS = 1024  # 4 MiB of 4 KiB pages
WARMUP_MAX = 8


def heap_settled(warm: dict[str, list[dict[str, float]]]) -> bool:
    """Whether the last warm-up round was steady: every variant's step faulted in at most
    ``SETTLED_FAULTS`` new pages. Until then the process heap is still growing to the step's
    high-water mark (4 models interleaved in one process take a few rounds at the report's
    width; one model training alone, 2 steps), and a timed round would count the kernel
    mapping pages in, not the step (BENCHMARKS.md, "Warm-up")."""
    return all(rounds and rounds[-1]["minor_faults"] <= SETTLED_FAULTS for rounds in warm.values())


def minor_faults() -> int:
    """Minor page faults of this process so far (pages the kernel mapped in again)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else 0


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of one call, as FlopCounterMode counts them (matmul-family ops only)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def peak_memory(fn: Callable[[], Any], device: str) -> int | None:
    """Peak bytes allocated during one call, above what was live when it started."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - start
    try:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler._memory_profiler import Action

        with profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        ) as prof:
            fn()
        current = peak = 0
        for _, action, _, size in prof._memory_profile().timeline:
            if action == Action.CREATE:
                current += size
            elif action == Action.DESTROY:
                current -= size
            peak = max(peak, current)
        return peak
    except Exception:  # noqa: BLE001 - a private API: report "not measured" rather than fail
        return None


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def paired_ratio(a: list[float], b: list[float]) -> float:
    """The median over rounds of a's step time over b's in the same round. The variants run
    interleaved, so a host that slows down or speeds up during the run moves both sides of each
    round's ratio alike, where the ratio of the two medians can pair a fast round with a slow
    one."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Median step-time ratios (wall clock; ``cpu:`` = process CPU time; ``paired:`` = the
    median of the per-round ratios, :func:`paired_ratio`) and FLOP ratios."""

    def ratio(a: str, b: str, key: str, field: str = "median") -> float | None:
        if a not in rows or b not in rows:
            return None
        x, y = rows[a][key], rows[b][key]
        if isinstance(x, dict):
            x, y = x[field], y[field]
        return None if x is None or y is None else x / y

    out = {
        "rlt1/rlt0": ratio("rlt1", "rlt0", "wall_s"),
        "rlt2/rlt0": ratio("rlt2", "rlt0", "wall_s"),
        "rlt1/transformer": ratio("rlt1", "transformer", "wall_s"),
        "rlt0/transformer": ratio("rlt0", "transformer", "wall_s"),
        "flops_rlt1/rlt0": ratio("rlt1", "rlt0", "flops"),
        "memory_rlt1/rlt0": ratio("rlt1", "rlt0", "peak_bytes"),
        "cpu:rlt1/rlt0": ratio("rlt1", "rlt0", "cpu_s"),
        "cpu:rlt2/rlt0": ratio("rlt2", "rlt0", "cpu_s"),
        "cpu:rlt1/transformer": ratio("rlt1", "transformer", "cpu_s"),
    }
    for a, b in (("rlt1", "rlt0"), ("rlt2", "rlt0")):
        if a in rows and b in rows and "rounds_s" in rows[a]:
            out[f"paired:{a}/{b}"] = paired_ratio(rows[a]["rounds_s"], rows[b]["rounds_s"])
    return {k: v for k, v in out.items() if v is not None}


def mm_rate(args: argparse.Namespace) -> float:
    """GFLOP/s of torch.mm on a well-shaped GEMM of the step's size: (B*T, d) x (d, 4d).

    (The FFN's own (d, 2 d_ff) = (512, 2730) runs slower: its odd width costs MKL ~30%.)
    """
    m, k, n = args.batch * args.length, args.d_model, 4 * args.d_model
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    a = torch.randn(m, k, device=args.device, dtype=dtype)
    b = torch.randn(k, n, device=args.device, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b)
    times = [timed(lambda: torch.mm(a, b), args.device)[0] for _ in range(max(5, args.repeats))]
    return 2 * m * k * n / statistics.median(times) / 1e9


def max_rss_mb() -> float | None:
    """The process's resident set at its largest, in MB (None where it is not known)."""
    if resource is None:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
