"""Evaluation outside the training loop: validation sets and length generalization.

Plain ``torch.no_grad`` loops over the task's loaders, so the same code serves validation
during training, the test lengths after training, and anyone evaluating a checkpoint by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from rlt.tasks import metrics as task_metrics


@torch.no_grad()
def evaluate_loader(
    model: nn.Module, loader: Iterable[dict[str, torch.Tensor]], acc_mode: str = "last"
) -> dict[str, float]:
    """Mean of every per-example metric (loss, acc, token_acc, seq_acc) over a loader."""
    was_training = model.training
    model.eval()
    parts: list[dict[str, torch.Tensor]] = []
    try:
        for batch in loader:
            batch = {k: v.to(_device(model)) if torch.is_tensor(v) else v for k, v in batch.items()}
            logits = model(batch["tokens"])  # (B, T, V)
            parts.append(task_metrics.example_metrics(logits, batch, acc_mode))
    finally:
        model.train(was_training)
    if not parts:
        raise ValueError("empty evaluation loader")
    return {k: float(torch.cat([p[k] for p in parts]).float().mean()) for k in parts[0]}


@torch.no_grad()
def greedy_exact_rate(model: nn.Module, loader: Iterable[dict[str, torch.Tensor]]) -> float:
    """Addition: share of examples whose greedy continuation of the prompt is exactly the
    answer and EOS (streaming path: prefill + step)."""
    was_training = model.training
    model.eval()
    hits, total = 0, 0
    try:
        for batch in loader:
            batch = {k: v.to(_device(model)) if torch.is_tensor(v) else v for k, v in batch.items()}
            ok = task_metrics.greedy_exact(model.generate, batch)  # (B,) 0/1
            hits += int(ok.sum())
            total += int(ok.numel())
    finally:
        model.train(was_training)
    return hits / max(1, total)


def evaluate_lengths(
    model: nn.Module,
    loaders: Mapping[int, Iterable[dict[str, torch.Tensor]]],
    with_exact: bool = False,
    acc_mode: str = "last",
    progress=None,
) -> list[dict[str, float]]:
    """Rows ``{length, metric, value}`` for every test length: the shape a curve needs."""
    rows: list[dict[str, float]] = []
    for length, loader in loaders.items():
        metrics = evaluate_loader(model, loader, acc_mode)
        if with_exact:
            metrics["exact"] = greedy_exact_rate(model, loader)
        for name, value in metrics.items():
            rows.append({"length": int(length), "metric": name, "value": value})
        if progress is not None:
            progress(length, metrics)
    return rows


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
