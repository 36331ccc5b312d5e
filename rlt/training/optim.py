"""The optimizer and the learning-rate schedule, built from config (conf/optim/, conf/scheduler/).

Both groups are Hydra ``_target_`` entries with ``_partial_: true``: the target is any callable
(``torch.optim.SGD``, ``torch.optim.lr_scheduler.StepLR``, a function of your own), the other
keys its keyword arguments. The run completes the call with what only it knows:

- the optimizer gets the parameter groups (matrices and embeddings decay, norms, biases and the
  learned initial state do not; each group carries its own ``weight_decay``) and ``lr`` from
  ``scale.lr``;
- the scheduler gets the optimizer and, if its signature takes one, ``max_steps`` from
  ``scale.max_steps``. It is stepped once per optimizer step.

Two keys of conf/optim/ are read by the run, not passed to the optimizer: ``grad_clip``
(gradient clipping at this global norm; null for none) and ``decay_embeddings``.

Defaults (the report's): AdamW, betas (0.9, 0.95), weight decay 0.1, linear warmup over
``scale.warmup_steps`` then cosine to ``scale.min_lr`` at the last step.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import nn

# conf/optim/ keys the run reads itself; everything else is the optimizer's keyword arguments.
RUN_KEYS = ("grad_clip", "decay_embeddings")

# The targets a stored config without ``_target_`` (written before conf/optim/ and
# conf/scheduler/ were Hydra targets) was trained with; identity.py reads them.
LEGACY_OPTIMIZER = "torch.optim.AdamW"
LEGACY_SCHEDULER = "rlt.training.optim.warmup_cosine"


def cosine_multiplier(step: int, *, warmup: int, max_steps: int, lr: float, min_lr: float) -> float:
    """Multiplier of the base lr: linear warmup over ``warmup`` steps, then cosine to ``min_lr``
    at the last step (the report's schedule)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, max_steps - 1 - warmup)
    progress = min(1.0, (step - warmup) / span)
    floor = min_lr / lr
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int, min_lr: float, max_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The report's schedule (conf/scheduler/warmup_cosine.yaml). torch's
    ``SequentialLR(LinearLR, CosineAnnealingLR)`` gives the same values to ~1e-13 but not to
    the last bit (its cosine updates recursively), so this closed form stays: every stored
    result reproduces bit for bit (tests/training/test_optim.py compares the two)."""
    lr = optimizer.defaults["lr"]
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        functools.partial(
            cosine_multiplier, warmup=warmup_steps, max_steps=max_steps, lr=lr, min_lr=min_lr
        ),
    )


def _warmup_then_flat(step: int, *, warmup: int) -> float:
    return (step + 1) / warmup if warmup > 0 and step < warmup else 1.0


def constant(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int = 0
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``warmup_steps``, then ``scale.lr`` to the end
    (conf/scheduler/constant.yaml)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(_warmup_then_flat, warmup=warmup_steps)
    )


def decay_groups(
    model: nn.Module, weight_decay: float, decay_embeddings: bool = True
) -> list[dict]:
    """Parameter groups: matrices (and embeddings) decay; norms, biases, s* do not."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_embedding = "embed" in name
        if p.ndim >= 2 and (decay_embeddings or not is_embedding):
            decay.append(p)
        else:
            no_decay.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class OptimConfigError(ValueError):
    """conf/optim/ or conf/scheduler/ does not name a usable callable."""


def factory(group: str, node: dict[str, Any], *, drop: tuple[str, ...] = ()) -> Callable:
    """The partial a ``_target_`` entry describes, without the keys the run reads itself."""
    target = node.get("_target_")
    if not target:
        raise OptimConfigError(
            f"{group}._target_ is missing: name a callable (e.g. {group}._target_="
            f"{'torch.optim.AdamW' if group == 'optim' else 'rlt.training.optim.constant'}) or "
            f"choose one of conf/{group}/"
        )
    if node.get("_partial_") is not True:
        raise OptimConfigError(
            f"{group}._partial_ must be true: the run completes the call with what it alone "
            "knows (the parameters, the optimizer, the step count)"
        )
    args = {k: v for k, v in node.items() if k not in drop}
    try:
        made = instantiate(args, _convert_="all")
    except InstantiationException as e:
        first = str(e).strip().splitlines()[0]
        raise OptimConfigError(f"{group}._target_={target!r}: {first}") from e
    return made


def build_optimizer(
    model: nn.Module, optim_cfg: dict[str, Any], lr: float
) -> torch.optim.Optimizer:
    make = factory("optim", optim_cfg, drop=RUN_KEYS)
    groups = decay_groups(
        model, float(optim_cfg.get("weight_decay", 0.0)), optim_cfg.get("decay_embeddings", True)
    )
    return make(groups, lr=lr)


def takes(fn: Callable, name: str) -> bool:
    """Whether ``fn`` (a callable or a partial of one) accepts the keyword ``name``."""
    if isinstance(fn, functools.partial):
        if name in fn.keywords:
            return False  # the config already gives it
        fn = fn.func
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def build_scheduler(
    optimizer: torch.optim.Optimizer, scheduler_cfg: dict[str, Any], max_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    make = factory("scheduler", scheduler_cfg)
    extra = {"max_steps": max_steps} if takes(make, "max_steps") else {}
    return make(optimizer, **extra)


def check_builds(optim_cfg: dict[str, Any], scheduler_cfg: dict[str, Any]) -> None:
    """Both groups name an importable callable that accepts their arguments: a config error
    before any work starts, not a crash at the first step. Builds both on a one-parameter
    stand-in model."""
    probe = nn.Linear(1, 1)
    try:
        opt = build_optimizer(probe, optim_cfg, lr=1e-3)
        sched = build_scheduler(opt, scheduler_cfg, max_steps=2)
    except OptimConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise OptimConfigError(
            f"conf/optim or conf/scheduler does not build: {type(e).__name__}: {e}; check the "
            "keyword arguments against the target's signature"
        ) from e
    if isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise OptimConfigError(
            f"scheduler._target_={scheduler_cfg.get('_target_')!r} steps on a monitored metric, "
            "but the run steps its schedule once per optimizer step; choose a step-based "
            "schedule (conf/scheduler/, or a torch scheduler such as StepLR)"
        )
