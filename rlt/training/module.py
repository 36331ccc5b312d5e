"""LightningModules: one per architecture family, sharing the report's loss and optimizer.

The loss is the mean per-example loss (each example's mean cross-entropy over its supervised
positions, then the mean over examples), the quantity the report selects checkpoints on.
Gradient accumulation averages micro-batches, so a step's gradient is that of the global batch.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import lightning as L
import torch
from torch import nn

from rlt import families
from rlt.models import build_model
from rlt.portable import kernels
from rlt.tasks import metrics as task_metrics
from rlt.training import optim
from rlt.training.evaluate import mean_over_examples

# Training takes portable arithmetic's own kernels (a float32 square root that rounds alike on
# every CPU: AdamW's); nothing while RLT_PORTABLE=0 or RLT_EXACT_SQRT=0.
kernels.install()


class SequenceModule(L.LightningModule):
    """Shared training logic of every family (:func:`module_for` names one per family)."""

    family: str  # model.family: the config dataclass and model come from rlt/families.py

    def __init__(
        self,
        model_cfg: dict,
        optim_cfg: dict | None = None,
        scheduler_cfg: dict | None = None,
        *,
        lr: float = 0.0,
        max_steps: int = 1,
        failure: dict | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.model = self.build(model_cfg)
        self.optim_cfg = optim_cfg or {}
        self.scheduler_cfg = scheduler_cfg or {}
        self.lr, self.max_steps = lr, max_steps
        self.failure = failure or None

    def build(self, model_cfg: dict) -> nn.Module:
        return build_model(families.get(self.family).config_class()(**model_cfg))

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

    # -- validation: Lightning's loop, every ``scale.val_every`` optimizer steps --------------
    # The task's accuracy mode (rlt/tasks/metrics.py); the run sets it from the task.
    acc_mode: str = "last"

    def on_validation_epoch_start(self) -> None:
        self._val_parts: list[dict[str, torch.Tensor]] = []

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        # Full precision under a mixed-precision trainer too: checkpoint selection compares
        # these numbers, and the test lengths are scored in full precision after training.
        with torch.autocast(self.device.type, enabled=False):
            logits = self.model(batch["tokens"])  # (B, T, V)
        self._val_parts.append(task_metrics.example_metrics(logits, batch, self.acc_mode))

    def on_validation_epoch_end(self) -> None:
        """``val_metrics``: the means over the validation set as Python floats (what the run
        records); also ``val/<metric>`` in ``trainer.callback_metrics`` as float64 tensors (the
        same numbers, not rounded to float32), which the run's checkpoint and early-stopping
        callbacks and a user's own monitor. Loggers get them from the run's record
        (rlt/training/callbacks.py) at the optimizer step they belong to."""
        self.val_metrics = mean_over_examples(self._val_parts)
        self._val_parts = []
        exact = {
            f"val/{k}": torch.tensor(v, dtype=torch.float64) for k, v in self.val_metrics.items()
        }
        self.log_dict(exact, logger=False, prog_bar=False)

    # -- optimizer -------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        """conf/optim/ and conf/scheduler/ (rlt/training/optim.py), completed with the run's
        ``scale.lr`` and ``scale.max_steps``."""
        opt = optim.build_optimizer(self.model, self.optim_cfg, self.lr)
        sched = optim.build_scheduler(opt, self.scheduler_cfg, self.max_steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


_MODULES: dict[str, type[SequenceModule]] = {}


def module_for(entry: families.Family) -> type[SequenceModule]:
    """The LightningModule of a family (its entry in rlt/families.py, as ``RunSpec.entry``
    holds it): the one the entry names, else the shared training logic as ``<Name>Module``
    (``RltModule``, ``TransformerModule``, ...)."""
    family = entry.name
    if family not in _MODULES:
        if entry.module is not None:
            _MODULES[family] = families.load(entry.module)
        else:
            name = "".join(part.title() for part in family.split("_")) + "Module"
            _MODULES[family] = type(name, (SequenceModule,), {"family": family})
    return _MODULES[family]
