"""``python -m rlt.bench --mode stream``: inference cost of each family (rlt/bench.py runs it).

Prefill throughput, per-token decode latency at given positions, the state's bytes per
sequence split into the part that grows with the position and the bounded part, and, for the
bandwidth bound, the bytes of weights a token's sequential step reads beside the machine's
one-thread read bandwidth. Also the two timing helpers both modes share.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from rlt.tasks import vocab


def positions_arg(value: str) -> list[int]:
    """``--positions``: a comma list of whole positions >= 1, sorted (``16,64,256``)."""
    items = value.split(",")
    if any(not item.strip() for item in items):
        raise argparse.ArgumentTypeError(f"{value!r} has an empty item; give e.g. 16,64,256")
    out = []
    for item in items:
        try:
            position = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} is not a whole number; give e.g. 16,64,256"
            ) from None
        if position < 1:
            raise argparse.ArgumentTypeError(f"{position} is not >= 1 (a decode position)")
        out.append(position)
    return sorted(set(out))


def megabytes_arg(value: str) -> float:
    """``--bandwidth-mb``: a finite number of megabytes > 0."""
    try:
        mb = float(value)
    except ValueError:
        mb = math.nan
    if not math.isfinite(mb):
        raise argparse.ArgumentTypeError(f"{value!r} is not a finite number of megabytes")
    if mb <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not > 0 (megabytes read)")
    return mb


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


class _Step:
    """One decode step as a zero-argument call that keeps the new state."""

    def __init__(self, model: torch.nn.Module, token: torch.Tensor, state: Any) -> None:
        self.model, self.token, self.state = model, token, state

    def __call__(self) -> None:
        _, self.state = self.model.step(self.token, self.state)


def split_bytes(state: Any) -> tuple[int, int]:
    """(growing, bounded) bytes of a streaming state: what grows with the position (the RLT's
    encoder caches and memory, the Transformer's KV caches) and what does not (the RLT's s_t
    and window caches, the LSTM's (h, c), DeltaNet's state)."""
    if hasattr(state, "recurrent_nbytes"):  # RLTState
        return state.encoder_nbytes(), state.recurrent_nbytes()
    if type(state).__name__ == "TransformerState":
        return state.nbytes(), 0
    return 0, state.nbytes()


def growing_layers(variant: str, n_enc: int, n_dec: int) -> int:
    """Layers of keys and values (each d wide) that a family keeps for every position: the
    growing part of its state (:func:`split_bytes`). Every layer of the Transformer; an RLT's
    encoder blocks and its memory; none for the LSTM and DeltaNet, whose states are bounded."""
    if variant == "transformer":
        return n_enc + n_dec
    if variant.startswith("rlt"):
        return n_enc + 1
    return 0


def stream_bytes(args: argparse.Namespace, n_enc: int, n_dec: int) -> dict[str, int]:
    """At least the bytes stream mode holds at once, from its arguments alone: the token batch
    (int64); one variant's prefill to the last position: its logits over the vocabulary, one
    hidden state per token and the keys and values its state keeps (float32), and, where it
    attends over the prefix, the causal mask of every (query, key) pair in its bool and float
    forms (5 bytes a pair: the prefill attends with a mask); and, on CPU, the bandwidth buffer.
    A block's other activations come on top: the point is that a size no machine holds is
    refused before any work rather than by the allocator."""
    last = max(args.positions)
    tokens = args.stream_batch * (last + 1)
    kv = max(growing_layers(v, n_enc, n_dec) for v in args.variants)
    per_token = 8 + 4 * (vocab.VOCAB_SIZE + args.d_model + 2 * kv * args.d_model)
    mask = 5 * last * last if kv else 0
    buffer = int(args.bandwidth_mb * 2**20) if args.device == "cpu" else 0
    return {"sequences": per_token * tokens, "mask": mask, "buffer": buffer}


def available_bytes(device: str = "cpu") -> int | None:
    """Memory free for new allocations on ``device``: CUDA's free memory, or the host's
    MemAvailable (/proc/meminfo; the free pages elsewhere); None where it cannot be read."""
    try:
        if device.startswith("cuda"):
            return torch.cuda.mem_get_info(torch.device(device))[0]
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, RuntimeError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def too_large(args: argparse.Namespace, n_enc: int, n_dec: int) -> str | None:
    """Why stream mode's arguments ask for more memory than the device has, naming the
    argument to lower; None when they fit or the free memory cannot be read."""
    have = available_bytes(args.device)
    need = stream_bytes(args, n_enc, n_dec)
    total = sum(need.values())
    if have is None or total <= have:
        return None
    last = max(args.positions)
    if need["buffer"] > total / 2:
        lower = f"--bandwidth-mb (now {args.bandwidth_mb:g})"
    elif args.stream_batch > last:
        lower = f"--stream-batch (now {args.stream_batch})"
    else:
        lower = f"--positions (the largest now {last})"
    return (
        f"--mode stream would hold at least {total / 1e9:.1f} GB (--stream-batch "
        f"{args.stream_batch} x {last + 1} tokens: {need['sequences'] / 1e9:.1f} GB; the "
        f"prefill's causal mask: {need['mask'] / 1e9:.1f} GB; the bandwidth buffer: "
        f"{need['buffer'] / 1e9:.1f} GB) and {args.device} has {have / 1e9:.1f} GB available: "
        f"lower {lower}"
    )


def read_gb_s(nbytes: int = 512 * 2**20, repeats: int = 5) -> float:
    """The machine's read bandwidth for one thread (GB/s): the best of ``repeats`` sums of a
    float32 buffer far larger than any cache (a sum reads each byte once and does little else)."""
    x = torch.ones(nbytes // 4)
    x.sum()  # touch every page first
    best = min(timed(x.sum, "cpu")[0] for _ in range(repeats))
    return nbytes / best / 1e9


def weight_bytes(model: torch.nn.Module) -> dict[str, int]:
    """Bytes of the model's weights, and of its decoder blocks (RLT: the part a token's
    sequential step reads; the encoder runs over the whole prompt at once)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    decoder = getattr(model, "decoder", None)
    dec = sum(p.numel() * p.element_size() for p in decoder.parameters()) if decoder else total
    return {"all": total, "per_token_step": dec}


def bench_stream(args: argparse.Namespace, models: dict[str, torch.nn.Module]) -> dict[str, Any]:
    """Prefill throughput, decode latency at each position, state bytes per sequence; and, for
    the bandwidth bound, the bytes of weights a token's step reads beside the machine's read
    bandwidth (one thread)."""
    last = max(args.positions)
    generator = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(1, 140, (args.stream_batch, last + 1), generator=generator)
    tokens = tokens.to(args.device)
    rows: dict[str, Any] = {}
    with torch.no_grad():
        for name, model in models.items():
            model.eval()
            prefill = []
            for _ in range(max(3, args.repeats // 2)):
                w, _ = timed(
                    lambda m=model: m.prefill(tokens[:, :last], m.init_state(args.stream_batch)),
                    args.device,
                )
                prefill.append(w)
            latency, state_bytes, recurrent_bytes, growing_bytes = {}, {}, {}, {}
            for p in args.positions:
                _, state = model.prefill(tokens[:, :p], model.init_state(args.stream_batch))
                # The state after p tokens (the timed steps below move it on).
                state_bytes[p] = state.nbytes() / args.stream_batch
                growing, bounded = split_bytes(state)
                growing_bytes[p] = growing / args.stream_batch
                recurrent_bytes[p] = bounded / args.stream_batch
                times = []
                for _ in range(max(5, args.repeats)):  # consecutive steps from position p
                    step = _Step(model, tokens[:, p], state)
                    times.append(timed(step, args.device)[0])
                    state = step.state
                latency[p] = statistics.median(times)
            rows[name] = {
                "prefill_tokens_per_s": args.stream_batch * last / statistics.median(prefill),
                "weight_bytes": weight_bytes(model),
                "decode_s": latency,
                "state_bytes_per_seq": state_bytes,
                "recurrent_state_bytes_per_seq": recurrent_bytes,  # the bounded part
                "growing_state_bytes_per_seq": growing_bytes,
            }
            print(f"  {name:<12} done", flush=True)
    first, final = min(args.positions), max(args.positions)
    growth = {name: r["decode_s"][final] / r["decode_s"][first] for name, r in rows.items()}
    out = {"rows": rows, f"decode_{final}/decode_{first}": growth}
    if args.device == "cpu":
        gb_s = read_gb_s(max(4, int(args.bandwidth_mb * 2**20)))
        out["read_gb_s_one_thread"] = gb_s
        # seconds per prefilled token if only reading the step's weights once per token
        # (every sequence of the batch shares them) limited the speed
        out["prefill_s_per_token_vs_weight_read"] = {
            name: {
                "measured": 1 / r["prefill_tokens_per_s"],
                "weight_read_bound": r["weight_bytes"]["per_token_step"]
                / (gb_s * 1e9)
                / args.stream_batch,
            }
            for name, r in rows.items()
        }
    return out


def print_stream(result: dict[str, Any], args: argparse.Namespace) -> None:
    rows = result["rows"]
    print(f"\nstreaming, batch {args.stream_batch}, d={args.d_model} split {args.split}")
    cols = "".join(f"{'decode@' + str(p) + ' ms':>16}" for p in args.positions)
    last = max(args.positions)
    print(
        f"{'variant':<12}{'prefill tok/s':>14}{cols}{'state KB/seq @' + str(last):>20}"
        f"{'growing KB':>12}{'bounded KB':>12}"
    )
    for name, r in rows.items():
        print(
            f"{name:<12}{r['prefill_tokens_per_s']:>14.0f}"
            + "".join(f"{1e3 * r['decode_s'][p]:>16.2f}" for p in args.positions)
            + f"{r['state_bytes_per_seq'][last] / 1024:>20.1f}"
            + f"{r['growing_state_bytes_per_seq'][last] / 1024:>12.1f}"
            + f"{r['recurrent_state_bytes_per_seq'][last] / 1024:>12.1f}"
        )
    key = next(k for k in result if k.startswith("decode_"))
    print(f"{key}: " + ", ".join(f"{k} = {v:.2f}" for k, v in result[key].items()))
    if "read_gb_s_one_thread" in result:
        print(
            f"read bandwidth, one thread (sum of a {args.bandwidth_mb:g} MB buffer): "
            f"{result['read_gb_s_one_thread']:.1f} GB/s; prefill ms per token, measured / "
            "reading the step's weights once per token at that bandwidth: "
            + ", ".join(
                f"{k} {1e3 * v['measured']:.2f}/{1e3 * v['weight_read_bound']:.2f}"
                for k, v in result["prefill_s_per_token_vs_weight_read"].items()
            )
        )
