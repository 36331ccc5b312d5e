"""``python -m rlt.bench --stack K``: what training K seeds in one batched step would save.

For each variant, three training steps (forward, loss, backward, clipping, AdamW), interleaved
as the other measures:

- ``single``: one seed's step at ``--batch`` (K of them is what a grid pays today);
- ``batch xK``: one model's step at K times the batch: the floor any stacking can reach (the
  same arithmetic with one set of weights, no per-seed work at all);
- ``stack K``: K seeds stacked by rlt/models/stacking.py (one bmm per linear map over the K
  seeds' weights, each seed its own gradients, clipping and AdamW), where the model stacks;
  where it does not, the reason is printed and only the floor is measured.

The ratios printed are against K single steps: below 1 is what stacking saves.
"""

from __future__ import annotations

import argparse
import copy
import statistics
from typing import Any

import torch
import torch.nn.functional as F

from rlt.bench_measure import peak_memory
from rlt.bench_steps import build_variants, run_rounds, train_step_fn
from rlt.models.stacking import stack, why_not


def stacked_step(models: list[torch.nn.Module], tokens: torch.Tensor, args: argparse.Namespace):
    """K seeds' optimizer steps through one stacked forward and backward; tokens (K, N, T+1)."""
    k, n, t1 = tokens.shape
    module = stack(models)
    opts = [
        torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        for m in models
    ]
    inputs, labels = tokens[:, :, :-1].reshape(k * n, t1 - 1), tokens[:, :, 1:]

    def step() -> None:
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        logits = module(inputs).reshape(k, n, t1 - 1, -1)
        losses = [F.cross_entropy(logits[i].flatten(0, 1), labels[i].flatten()) for i in range(k)]
        torch.stack(losses).sum().backward()
        for model, opt in zip(models, opts):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    return step


def bench_stack(args: argparse.Namespace) -> dict[str, Any]:
    k = args.stack
    seeds = [
        build_variants(argparse.Namespace(**{**vars(args), "seed": args.seed + i}))
        for i in range(k)
    ]
    if args.native:  # the C++ token loops, as bench_train sets them
        from rlt.models.native import token_loop

        token_loop()
        for models in seeds:
            for name in ("rlt1", "rlt2"):
                if name in models:
                    models[name].native_step = True
    generator = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(1, 140, (k, args.batch, args.length + 1), generator=generator)
    tokens = tokens.to(args.device)
    steps, why = {}, {}
    for name in args.variants:
        models = [s[name] for s in seeds]
        steps[f"{name} single"] = train_step_fn(models[0], tokens[0], args)
        wide = copy.deepcopy(models[0])
        steps[f"{name} batch x{k}"] = train_step_fn(wide, tokens.flatten(0, 1), args)
        why[name] = why_not(models[0])
        if why[name] is None:
            steps[f"{name} stack {k}"] = stacked_step(models, tokens, args)
    wall, _, _, _, _ = run_rounds(steps, args)
    rows = {}
    for name in args.variants:
        single = statistics.median(wall[f"{name} single"])
        row: dict[str, Any] = {"single_s": single, "k_singles_s": k * single, "why_not": why[name]}
        for key, label in (("batch", f"{name} batch x{k}"), ("stack", f"{name} stack {k}")):
            if label in wall:
                med = statistics.median(wall[label])
                row[f"{key}_s"] = med
                row[f"{key}_vs_single"] = med / single
                row[f"{key}_vs_k_singles"] = med / (k * single)
                if args.memory:
                    row[f"{key}_peak_bytes"] = peak_memory(steps[label], args.device)
        rows[name] = row
    return {"k": k, "rows": rows}


def print_stack(result: dict[str, Any], args: argparse.Namespace) -> None:
    k = result["k"]
    print(
        f"\n{k} seeds in one step, {args.preset} d={args.d_model} split {args.split} batch "
        f"{args.batch} length {args.length} threads {torch.get_num_threads()} (ratios: x one "
        f"seed's step, and against {k} single steps)"
    )
    print(
        f"{'variant':<12}{'single s':>10}{f'batch x{k} s':>13}{'x1':>6}{f'/{k}':>6}"
        f"{f'stack {k} s':>12}{'x1':>6}{f'/{k}':>6}{'peak MB':>9}"
    )
    for name, r in result["rows"].items():
        cells = "".join(_cells(r, key) for key in ("batch", "stack"))
        peak = r.get("stack_peak_bytes") or r.get("batch_peak_bytes")
        peak_mb = "-" if peak is None else f"{peak / 2**20:.0f}"
        print(f"{name:<12}{r['single_s']:>10.3f}{cells}{peak_mb:>9}")
        if r["why_not"]:
            print(f"{'':<12}does not stack: {r['why_not']}")


def _cells(row: dict[str, Any], key: str) -> str:
    """Seconds, x one seed, x K seeds of the ``batch`` or ``stack`` step (dashes if not run)."""
    width = 12 if key == "stack" else 13
    if f"{key}_s" not in row:
        return f"{'-':>{width}}{'-':>6}{'-':>6}"
    return (
        f"{row[f'{key}_s']:>{width}.3f}{row[f'{key}_vs_single']:>6.2f}"
        f"{row[f'{key}_vs_k_singles']:>6.2f}"
    )
