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
    return mean_over_examples(parts)


def mean_over_examples(parts: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Each metric's mean over every example of ``parts`` (``example_metrics`` per batch): the
    one reduction validation (Lightning's loop, rlt/training/module.py) and evaluation share."""
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


@torch.no_grad()
def evaluate_intervened(
    model: nn.Module,
    loaders: Mapping[int, Iterable[dict[str, torch.Tensor]]],
    how,
    with_exact: bool = False,
    acc_mode: str = "last",
    progress=None,
    by_position: list | None = None,
) -> list[dict[str, float]]:
    """:func:`evaluate_lengths` through the streaming path with a state intervention ``how``
    (rlt.models.intervene.Intervention) applied: the same rows ``{length, metric, value}``.

    ``by_position``, a list, receives per length the accuracy at each scored input position
    (teacher-forced, the share of examples whose prediction there is right), so a reader sees
    where after a drop a model goes wrong and whether it recovers: ``{length, position: [..],
    acc: [..], n: [..]}`` over the positions at least one example scores."""
    from rlt.models import intervene

    was_training = model.training
    model.eval()
    rows: list[dict[str, float]] = []
    try:
        for length, loader in loaders.items():
            parts, hits, total = [], 0, 0
            right, scored = None, None  # per position: examples right, examples scored
            for batch in loader:
                batch = {
                    k: v.to(_device(model)) if torch.is_tensor(v) else v for k, v in batch.items()
                }
                tokens, prompt_len = batch["tokens"], batch["prompt_len"]
                logits = None
                for p in torch.unique(prompt_len).tolist():  # the boundary is per prompt length
                    idx = (prompt_len == p).nonzero().squeeze(1)
                    cuts = how.cuts(tokens.shape[1], int(p))
                    part, _ = intervene.stream(model, tokens[idx], cuts, how.parts)
                    if logits is None:
                        logits = part.new_zeros(*tokens.shape, part.shape[-1])
                    logits[idx] = part
                parts.append(task_metrics.example_metrics(logits, batch, acc_mode))
                hit = ((logits.argmax(-1) == batch["labels"]) & batch["score"]).sum(0)
                n_scored = batch["score"].sum(0)
                right = hit if right is None else _padded_sum(right, hit)
                scored = n_scored if scored is None else _padded_sum(scored, n_scored)
                if with_exact:

                    def generate(prompt, n, eos_id=None):
                        return intervene.generate(model, prompt, n, how, eos_id=eos_id)

                    ok = task_metrics.greedy_exact(generate, batch)
                    hits, total = hits + int(ok.sum()), total + int(ok.numel())
            metrics = {k: float(torch.cat([p[k] for p in parts]).float().mean()) for k in parts[0]}
            if with_exact:
                metrics["exact"] = hits / max(1, total)
            rows += [{"length": int(length), "metric": k, "value": v} for k, v in metrics.items()]
            if by_position is not None:
                where = (scored > 0).nonzero().squeeze(1)
                by_position.append(
                    {
                        "length": int(length),
                        "position": where.tolist(),
                        "acc": (right[where].double() / scored[where]).tolist(),
                        "n": scored[where].tolist(),
                    }
                )
            if progress is not None:
                progress(length, metrics)
    finally:
        model.train(was_training)
    return rows


def _padded_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` for per-position counts of batches padded to different lengths."""
    if a.shape[0] < b.shape[0]:
        a, b = b, a
    out = a.clone()
    out[: b.shape[0]] += b
    return out


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
