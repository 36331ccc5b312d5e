"""``python -m rlt.bench``: training-step and streaming speed of the four model variants (and
of the recurrent baselines, asked for by name: lstm, deltanet, deltaproduct, pdssm).

Times a full training step (forward, loss, backward, gradient clipping, AdamW) of the
Transformer, RLT-0, RLT-1 and RLT-2 in one process, with identical weights (RLT-0 takes the
RLT-1 weights it has; the Transformer starts from the same seed) and identical data,
interleaving the variants so that drifting machine load hits all of them alike: one warm-up
round, then ``--repeats`` timed rounds. Reports medians, min-max spread, ratios, achieved
GFLOP/s (FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode``) against a ``torch.mm``
reference measured in the same run, and the peak memory of one step.

``--compile`` times the compiled forms instead of the eager ones: every variant under
``torch.compile`` (RLT-1/RLT-2 train their recurrence through the compiled chunk step of
rlt/models/compiled.py, RLT-0 and the Transformer are compiled whole), so the ratios compare
compiled with compiled; the first (warm-up) round's extra time is reported as the compile
time, measured with an empty inductor cache unless ``--warm-cache``.

``--native`` times RLT-1/RLT-2 with the fused recurrence's token loops in C++
(rlt/models/native.py: the same operations without the interpreter) and reports the time to
build or load the library.

``--stack K`` times K seeds trained in one stacked step against K single steps and against one
step at K times the batch (rlt/bench_stack.py).

``--mode stream`` times inference instead: prefill throughput, per-token decode latency at
given positions, and the state's bytes per sequence.

Peak memory on CPU comes from the PyTorch profiler's memory timeline (every tensor
allocation and free during one step; the peak above the live tensors at the step's start);
on CUDA from ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import rlt.allocator
import rlt.portable
from rlt.bench_measure import (  # noqa: F401 - the measures, also bench.<name> for callers
    SETTLED_FAULTS,
    WARMUP_MAX,
    count_flops,
    heap_settled,
    max_rss_mb,
    minor_faults,
    mm_rate,
    paired_ratio,
    peak_memory,
    ratios,
    summary,
)
from rlt.bench_stack import bench_stack, print_stack
from rlt.bench_steps import build_variants, run_rounds, train_step_fn  # noqa: F401 - bench.<name>
from rlt.bench_stream import (
    bench_stream,
    megabytes_arg,
    positions_arg,
    print_stream,
    too_large,
)
from rlt.models import parse_split
from rlt.portable import cpu_model

PRESETS: dict[str, dict[str, Any]] = {
    # the report's width and split (shared/SPEC.md section 1), issue 7's micro-batch and length
    "paper": dict(d_model=512, n_heads=4, d_ff=1365, split="4+4", batch=64, length=40),
    # the CPU demo preset (conf/scale/small.yaml)
    "small": dict(d_model=64, n_heads=4, d_ff=170, split="2+2", batch=64, length=40),
}
VARIANTS = ("transformer", "rlt0", "rlt1", "rlt2")
# The recurrent baselines (not in the report), depth = the split total, each with the FFN width
# a run gives it (matched_d_ff: the Transformer's block parameters); asked for by name.
BASELINES = ("lstm", "deltanet", "deltaproduct", "pdssm")


def compiled_forms(models: dict[str, torch.nn.Module]) -> dict[str, torch.nn.Module]:
    """``torch.compile`` of each model (same parameters); RLT-1/RLT-2 switch their recurrence
    to the compiled chunk step, which the whole-model compile leaves to itself."""
    from rlt.models.compiled import host_vector_width_for_inductor

    host_vector_width_for_inductor()
    out = {}
    for name, model in models.items():
        if name in ("rlt1", "rlt2"):
            model.compiled_step = True
        out[name] = torch.compile(model)
    return out


def _warmup(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of rounds or auto, got {value!r}") from None


def bench_train(args: argparse.Namespace) -> dict[str, Any]:
    models = build_variants(args)
    generator = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(1, 140, (args.batch, args.length + 1), generator=generator)
    tokens = tokens.to(args.device)
    forward_backward = {
        name: (
            lambda m=m: F.cross_entropy(
                m(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()
            ).backward()
        )
        for name, m in models.items()
    }
    # counted on the eager forms (a dispatch mode cannot run inside compiled code)
    flops = {name: count_flops(fn) for name, fn in forward_backward.items()}
    native_build_s = None
    if args.native:  # the C++ token loops: build (or load) once, outside the timed steps
        from rlt.models.native import token_loop

        start = time.perf_counter()
        token_loop()
        native_build_s = time.perf_counter() - start
        for name in ("rlt1", "rlt2"):
            if name in models:
                models[name].native_step = True
    stepped = compiled_forms(models) if args.compile else models
    steps = {name: train_step_fn(m, tokens, args) for name, m in stepped.items()}
    if args.cuda_graph:
        steps = {name: cuda_graphed(fn) for name, fn in steps.items()}
    wall, cpu, faults, warm, first = run_rounds(steps, args)
    memory = (
        {name: peak_memory(fn, args.device) for name, fn in steps.items()} if args.memory else {}
    )
    rate = mm_rate(args)
    rows = {}
    for name in steps:
        med = statistics.median(wall[name])
        rows[name] = {
            "params": sum(p.numel() for p in models[name].parameters()),
            "wall_s": summary(wall[name]),
            "rounds_s": wall[name],  # each timed round, in order (for the paired ratios)
            # the spread the targets are judged on: slowest over fastest timed round
            "spread": max(wall[name]) / min(wall[name]),
            "cpu_s": summary(cpu[name]),
            "minor_faults_per_step": statistics.median(faults[name]),
            "flops": flops[name],
            "gflops_per_s": flops[name] / med / 1e9,
            "fraction_of_mm": flops[name] / med / 1e9 / rate,
            "peak_bytes": memory.get(name),
            # the first step's time beyond a steady one: compiling (and first-call setup)
            "compile_s": first[name] - med if args.compile else None,
            # the untimed rounds before: with --warmup auto, until the heap stopped growing
            "warmup": warm[name],
        }
    return {
        "rows": rows,
        "mm_gflops_per_s": rate,
        "ratios": ratios(rows),
        "native_build_s": native_build_s,
    }


def cuda_graphed(step: Callable[[], None]) -> Callable[[], None]:
    """Capture a whole training step in a CUDA graph (static shapes, no host sync inside)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm up allocator and optimizer state outside the capture
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def print_train(result: dict[str, Any], args: argparse.Namespace) -> None:
    rows, rate = result["rows"], result["mm_gflops_per_s"]
    base = rows.get("rlt0")
    tf = rows.get("transformer")
    print(
        f"\ntraining step, {args.preset} d={args.d_model} split {args.split} batch {args.batch} "
        f"length {args.length} threads {torch.get_num_threads()} {'bf16' if args.bf16 else 'fp32'}"
        f"{' compiled' if args.compile else ''}{' native' if args.native else ''}"
    )
    header = (
        f"{'variant':<12}{'params':>12}{'median s':>10}{'min-max s':>16}{'max/min':>8}"
        f"{'cpu s':>8}{'x rlt0':>8}{'x tf':>7}{'GFLOP':>9}{'GFLOP/s':>9}{'% mm':>6}"
        f"{'peak MB':>9}{'faults/step':>12}"
    )
    print(header)
    for name, r in rows.items():
        med = r["wall_s"]["median"]
        x0 = f"{med / base['wall_s']['median']:.2f}" if base else "-"
        xt = f"{med / tf['wall_s']['median']:.2f}" if tf else "-"
        peak = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.0f}"
        print(
            f"{name:<12}{r['params']:>12,}{med:>10.3f}"
            f"{r['wall_s']['min']:>8.3f}-{r['wall_s']['max']:<7.3f}{r['spread']:>8.2f}"
            f"{r['cpu_s']['median']:>8.3f}{x0:>8}{xt:>7}{r['flops'] / 1e9:>9.1f}"
            f"{r['gflops_per_s']:>9.1f}{100 * r['fraction_of_mm']:>6.0f}{peak:>9}"
            f"{r['minor_faults_per_step']:>12,.0f}"
        )
    if args.compile:
        print(
            "compile time (first step minus a steady one, s): "
            + ", ".join(f"{name} {r['compile_s']:.1f}" for name, r in rows.items())
        )
    if args.native:
        print(f"C++ token loop: built or loaded in {result['native_build_s']:.1f} s")
    print(
        f"torch.mm reference ({args.batch * args.length}x{args.d_model} @ {args.d_model}x{4 * args.d_model}): "
        f"{rate:.1f} GFLOP/s"
    )
    print("ratios: " + ", ".join(f"{k} = {v:.3f}" for k, v in result["ratios"].items()))
    print(
        "spread (max/min over the timed rounds): "
        + ", ".join(f"{name} {r['spread']:.2f}" for name, r in rows.items())
        + f"; host CPU: {cpu_model()}; allocator (rlt/allocator.py): {rlt.allocator.status}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rlt.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--n-heads", type=int)
    parser.add_argument("--d-ff", type=int)
    parser.add_argument("--split", help="encoder+decoder blocks, e.g. 4+4")
    parser.add_argument("--batch", type=int, help="micro-batch of the training step")
    parser.add_argument("--length", type=int, help="sequence length of the training step")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma list of " + ",".join(VARIANTS + BASELINES),
    )
    parser.add_argument("--rlt2-interval", type=int, default=4, help="B of the rlt2 variant")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--warmup",
        type=_warmup,
        default="auto",
        help="untimed rounds first: a number, or auto (default): until no variant's step "
        f"faults in more than {SETTLED_FAULTS} new pages (the heap stopped growing), "
        f"at least 1 and at most {WARMUP_MAX} rounds",
    )
    parser.add_argument("--mode", choices=["train", "stream", "both"], default="train")
    _stream_options(parser)
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip peak memory")
    parser.add_argument("--plain", action="store_true", help="RLT-1/2 on the plain autograd path")
    parser.add_argument(
        "--compile", action="store_true", help="time the compiled forms (torch.compile)"
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="RLT-1/2 run the fused recurrence's token loops in C++ (rlt/models/native.py)",
    )
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="with --compile: keep inductor's on-disk cache (default: an empty one, so the "
        "compile time is a first compile's)",
    )
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--cuda-graph", action="store_true", help="replay each step as a CUDA graph"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--stack", type=int, help="K: K seeds' step stacked against K single steps (bench_stack.py)"
    )
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.variants:
        parser.error(f"--variants names none; choose from {','.join(VARIANTS + BASELINES)}")
    unknown = set(args.variants) - set(VARIANTS) - set(BASELINES)
    if unknown:
        parser.error(
            f"--variants: unknown {sorted(unknown)}; choose from {','.join(VARIANTS + BASELINES)}"
        )
    if args.cuda_graph and args.device != "cuda":
        parser.error("--cuda-graph needs --device cuda")
    if args.compile and args.plain:
        parser.error("--compile and --plain exclude each other (the plain path is never compiled)")
    if args.native and (args.compile or args.plain):
        parser.error("--native is the eager fused path's loop: drop --compile / --plain")
    if args.compile and args.cuda_graph:
        parser.error("--compile brings its own CUDA graphs; drop --cuda-graph")
    if args.compile and args.warmup != "auto" and args.warmup < 1:
        parser.error("--compile needs --warmup >= 1 (the first round compiles)")
    _check_args(parser, args)
    return args


def _stream_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--positions", type=positions_arg, default="16,64,256,512", help="decode positions (stream)"
    )
    parser.add_argument("--stream-batch", type=int, default=1)
    parser.add_argument(
        "--bandwidth-mb",
        type=megabytes_arg,
        default=512,
        help="stream mode: buffer read for the bandwidth",
    )


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Bad values end with one usage line naming the option, not a traceback."""
    for name in (
        "threads", "repeats", "batch", "length", "d_model", "n_heads", "d_ff", "stream_batch",
        "rlt2_interval",
    ):  # fmt: skip
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.stack is not None and args.mode != "train":
        parser.error("--stack K times training steps: drop --mode stream/both")
    if args.stack is not None and (args.compile or args.cuda_graph or args.bf16 or args.stack < 1):
        parser.error(
            "--stack K needs K >= 1 and the eager fp32 step (no --compile/--cuda-graph/--bf16)"
        )
    if args.warmup != "auto" and args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.d_model % args.n_heads:
        parser.error(f"--n-heads ({args.n_heads}) must divide --d-model ({args.d_model})")
    try:
        n_enc, n_dec = parse_split(args.split)
    except ValueError as e:
        parser.error(f"--split: {e}")
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        parser.error(f"--device {args.device!r}: use cpu or cuda (or cuda:N)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this machine has no CUDA (use --device cpu)")
    if args.mode in ("stream", "both") and (why := too_large(args, n_enc, n_dec)) is not None:
        parser.error(why)
    if args.json and (why := _unwritable(args.json)) is not None:
        parser.error(f"--json {args.json}: {why} (checked before measuring, not after)")


def _unwritable(path: str) -> str | None:
    """Why the result file cannot be written where it is asked for, or None."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"{folder} is not a directory; create it or give another path"
    if os.path.isdir(path):
        return "that is a directory; give a file name"
    if not os.access(folder, os.W_OK):
        return f"{folder} is not writable; give another path"
    return None


@contextlib.contextmanager
def empty_inductor_cache(wanted: bool):
    """Within the block, inductor compiles into an empty on-disk cache (a first compile's
    time); afterwards the cache is deleted and the caller's ``TORCHINDUCTOR_CACHE_DIR`` is as it
    was. Does nothing unless ``wanted``."""
    if not wanted:
        yield
        return
    key = "TORCHINDUCTOR_CACHE_DIR"
    before = os.environ.get(key)
    with tempfile.TemporaryDirectory(prefix="rlt-bench-inductor-", ignore_cleanup_errors=True) as d:
        os.environ[key] = d
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with empty_inductor_cache(args.compile and not args.warm_cache):
        return _measure(args)


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    result: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
            "allocator": rlt.allocator.status,
            "portable": rlt.portable.status,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        },
    }
    if args.stack is not None:
        result["stack"] = bench_stack(args)
        print_stack(result["stack"], args)
    elif args.mode in ("train", "both"):
        result["train"] = bench_train(args)
        result["ratios"] = result["train"]["ratios"]
        print_train(result["train"], args)
    if args.mode in ("stream", "both"):
        result["stream"] = bench_stream(args, build_variants(args))
        print_stream(result["stream"], args)
    result["machine"]["loadavg_before_after"] = [load_before[0], os.getloadavg()[0]]
    if (rss := max_rss_mb()) is not None:
        result["machine"]["max_rss_mb"] = rss
    print(f"load average (1 min) before/after: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=str)
    return result


if __name__ == "__main__":
    main()
