"""The steps ``python -m rlt.bench`` times: the variants it builds, one training step of each,
and the interleaved rounds (shared by the step, stream and stack measures)."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from rlt.bench_measure import WARMUP_MAX, heap_settled, minor_faults
from rlt.bench_stream import timed
from rlt.models import build_model, parse_split
from rlt.models import config as mc
from rlt.portable import kernels

kernels.install()  # the training step as training takes it (AdamW's exact square root)


def build_variants(args: argparse.Namespace) -> dict[str, torch.nn.Module]:
    """The requested variants; the RLT ones share every parameter they have in common."""
    n_enc, n_dec = parse_split(args.split)
    common = dict(d_model=args.d_model, n_heads=args.n_heads, d_ff=args.d_ff, vocab_size=140)
    torch.manual_seed(args.seed)
    rlt1 = build_model(
        mc.RLTConfig(n_enc=n_enc, n_dec=n_dec, feedback_interval=1, fused=not args.plain, **common)
    )
    models: dict[str, torch.nn.Module] = {}
    for name in args.variants:
        if name == "transformer":
            torch.manual_seed(args.seed)
            models[name] = build_model(mc.TransformerConfig(n_layers=n_enc + n_dec, **common))
        elif name == "rlt0":
            rlt0 = build_model(
                mc.RLTConfig(n_enc=n_enc, n_dec=n_dec, feedback_interval=None, **common)
            )
            missing = rlt0.load_state_dict(rlt1.state_dict(), strict=False).missing_keys
            assert not missing, f"RLT-0 parameters missing from RLT-1: {missing}"
            models[name] = rlt0
        elif name == "rlt1":
            models[name] = copy.deepcopy(rlt1)
        elif name == "rlt2":
            models[name] = copy.deepcopy(rlt1)
            models[name].feedback_interval = args.rlt2_interval
        elif name == "lstm":
            torch.manual_seed(args.seed)
            models[name] = build_model(
                mc.LSTMConfig(d_model=args.d_model, n_layers=n_enc + n_dec, vocab_size=140)
            )
        elif name in ("deltanet", "deltaproduct", "pdssm"):
            torch.manual_seed(args.seed)
            config = {"deltanet": mc.DeltaNetConfig, "deltaproduct": mc.DeltaProductConfig}.get(
                name, mc.PDSSMConfig
            )
            fields = {**common, "n_layers": n_enc + n_dec}
            fields["d_ff"] = config.matched_d_ff(args.d_ff, fields)
            models[name] = build_model(config(**fields))
    return {name: m.to(args.device) for name, m in models.items()}


def train_step_fn(
    model: torch.nn.Module, tokens: torch.Tensor, args: argparse.Namespace
) -> Callable[[], None]:
    """One optimizer step of the report's recipe on next-token prediction."""
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=1e-4,
        betas=(0.9, 0.95),
        weight_decay=0.1,
        capturable=args.cuda_graph,  # step count on the device: no host sync inside a graph
    )
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    autocast = torch.autocast(args.device, dtype=torch.bfloat16) if args.bf16 else nullcontext()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast:
            logits = model(inputs)  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def run_rounds(steps: dict[str, Callable[[], None]], args: argparse.Namespace):
    """Warm-up rounds (``--warmup``), then ``--repeats`` timed ones, the variants interleaved.
    Returns per variant: wall and CPU seconds and minor faults of each timed round, the warm-up
    rounds (wall_s, minor_faults), and the first step's wall time."""
    wall: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    faults: dict[str, list[int]] = {name: [] for name in steps}
    warm: dict[str, list[dict[str, float]]] = {name: [] for name in steps}
    first: dict[str, float] = {}
    round_, timed_rounds = 0, 0
    while timed_rounds < args.repeats:
        warming = round_ < WARMUP_MAX if args.warmup == "auto" else round_ < args.warmup
        if warming and args.warmup == "auto" and round_ >= 1 and heap_settled(warm):
            warming = False
        for name, fn in steps.items():  # interleaved: load drift hits every variant alike
            before = minor_faults()
            w, c = timed(fn, args.device)
            fault_count = minor_faults() - before
            first.setdefault(name, w)
            if warming:
                warm[name].append({"wall_s": w, "minor_faults": fault_count})
            else:
                wall[name].append(w)
                cpu[name].append(c)
                faults[name].append(fault_count)
            label = f"warm-up {round_ + 1}" if warming else f"round {timed_rounds + 1:>2}"
            print(f"  {label:<10} {name:<12} {w:8.3f} s  {fault_count:>8,} faults", flush=True)
        round_ += 1
        timed_rounds += not warming
    return wall, cpu, faults, warm, first
