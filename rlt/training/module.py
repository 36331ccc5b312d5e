"""LightningModules: one per architecture family, sharing the report's loss and optimizer.

The loss is the mean per-example loss (each example's mean cross-entropy over its supervised
positions, then the mean over examples), the quantity the report selects checkpoints on.
Gradient accumulation averages micro-batches, so a step's gradient is that of the global batch.
"""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Any

import lightning as L
import torch
from torch import nn

from rlt.models import DeltaNetConfig, LSTMConfig, RLTConfig, TransformerConfig, build_model
from rlt.tasks import metrics as task_metrics


def lr_lambda(step: int, *, warmup: int, max_steps: int, lr: float, min_lr: float) -> float:
    """Multiplier of the base lr: linear warmup over ``warmup`` steps, then cosine to ``min_lr``
    at the last step (the report's schedule)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, max_steps - 1 - warmup)
    progress = min(1.0, (step - warmup) / span)
    floor = min_lr / lr
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def decay_groups(
    model: nn.Module, weight_decay: float, decay_embeddings: bool = True
) -> list[dict]:
    """AdamW parameter groups: matrices (and embeddings) decay; norms, biases, s* do not."""
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


class SequenceModule(L.LightningModule):
    """Shared training logic; subclasses only say how to build their model."""

    def __init__(
        self, model_cfg: dict, optim_cfg: dict, schedule_cfg: dict, failure: dict | None = None
    ):
        super().__init__()
        self.save_hyperparameters()
        self.model = self.build(model_cfg)
        self.optim_cfg = optim_cfg
        self.schedule_cfg = schedule_cfg
        self.failure = failure or None

    def build(self, model_cfg: dict) -> nn.Module:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)

    # -- training --------------------------------------------------------------------------
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.model(batch["tokens"])  # (B, T, V)
        loss = task_metrics.loss(logits, batch["labels"])
        loss = self._maybe_inject_failure(loss)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite training loss ({loss.item()}) at step {self.global_step}; "
                "lower the learning rate or check the data"
            )
        self.log(
            "train/loss", loss, on_step=True, prog_bar=True, batch_size=batch["tokens"].shape[0]
        )
        if self._trainer is not None and self.trainer.optimizers:
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            self.log("train/lr", float(lr), on_step=True, batch_size=batch["tokens"].shape[0])
        return loss

    def _maybe_inject_failure(self, loss: torch.Tensor) -> torch.Tensor:
        """Testing switch (callbacks.inject_failure): fail on purpose at a given step (kind
        error, nan, or sigterm: the process sends itself SIGTERM once; slow: every step from
        then on sleeps ``seconds``, so a test can give a run a duration it can rely on)."""
        if not self.failure or self.global_step < int(self.failure["step"]):
            return loss
        kind = str(self.failure["kind"]).lower()
        if kind == "slow":
            time.sleep(float(self.failure.get("seconds", 0.1)))
            return loss
        if kind == "nan":  # YAML reads a bare nan as a float
            return loss * float("nan")
        if kind == "sigterm":  # stopped from outside, as SLURM or kill would
            if not self.failure.get("sent"):
                self.failure["sent"] = True
                os.kill(os.getpid(), signal.SIGTERM)
            return loss
        raise RuntimeError(
            f"injected failure at step {self.global_step} (callbacks.inject_failure)"
        )

    # -- optimizer -------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        o, s = self.optim_cfg, self.schedule_cfg
        groups = decay_groups(self.model, o["weight_decay"], o.get("decay_embeddings", True))
        opt = torch.optim.AdamW(groups, lr=s["lr"], betas=tuple(o["betas"]))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt,
            lambda step: lr_lambda(
                step,
                warmup=s["warmup_steps"],
                max_steps=s["max_steps"],
                lr=s["lr"],
                min_lr=s["min_lr"],
            ),
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class RLTModule(SequenceModule):
    """RLT-1, RLT-2 and RLT-0 (the feedback interval is a model setting)."""

    def build(self, model_cfg: dict) -> nn.Module:
        return build_model(RLTConfig(**model_cfg))

    def set_feedback_interval(self, interval: int | None) -> None:
        self.model.feedback_interval = interval


class TransformerModule(SequenceModule):
    """The decoder-only Transformer baseline."""

    def build(self, model_cfg: dict) -> nn.Module:
        return build_model(TransformerConfig(**model_cfg))


class LSTMModule(SequenceModule):
    """The LSTM recurrent control (not in the report)."""

    def build(self, model_cfg: dict) -> nn.Module:
        return build_model(LSTMConfig(**model_cfg))


class DeltaNetModule(SequenceModule):
    """DeltaNet with eigenvalues in [-1, 1] or [0, 1] (issue 14, not in the report)."""

    def build(self, model_cfg: dict) -> nn.Module:
        return build_model(DeltaNetConfig(**model_cfg))


MODULES: dict[str, type[SequenceModule]] = {
    "rlt": RLTModule,
    "transformer": TransformerModule,
    "lstm": LSTMModule,
    "deltanet": DeltaNetModule,
}
