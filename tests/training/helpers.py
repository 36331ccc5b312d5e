"""Composing configs the way train.py does, without a command line."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"


def compose_cfg(overrides: list[str] | None = None, hydra: bool = False) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides or []), return_hydra_config=hydra)


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def load_results(run_dir: str | Path) -> dict:
    """A run directory's results.json."""
    return json.loads((Path(run_dir) / "results.json").read_text())


class SeenValidations(L.Callback):
    """A user's Lightning callback (``callbacks.extra``): the step and ``val/*`` metrics that
    Lightning's validation loop hands every callback, collected class-wide for a test."""

    seen: list[tuple[int, dict[str, float]]] = []

    def on_validation_end(self, trainer, pl_module):
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        SeenValidations.seen.append((trainer.global_step, metrics))
