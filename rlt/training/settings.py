"""What a run reads of its config once ``prepare`` has validated it, as plain values.

Past ``prepare`` nothing reads the Hydra config: the trainer, the module, the callbacks, the
evaluation and the loggers take the ``RunSpec`` and its ``Settings``, so they can be built
and tested without Hydra, and a config key is read in one place (here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """A configuration that cannot run; raised before any work starts."""


@dataclass(frozen=True)
class Settings:
    seed: int
    # scale
    d_model: int
    max_steps: int
    micro_batch: int
    global_batch: int
    eval_batch: int
    val_every: int
    n_test: int | None
    # optimizer and schedule (conf/optim/, conf/scheduler/; rlt/training/optim.py)
    lr: float
    optim: dict[str, Any]
    scheduler: dict[str, Any]
    grad_clip: float | None
    # checkpoints, early stopping, diagnostics, failure injection (conf/callbacks/)
    policies: list[str]
    budgets: list[int]  # steps whose policy checkpoints are kept and scored (test_by_budget)
    early_stop_acc: float | None
    early_stop_patience: int
    diagnostics_every: int | None
    failure: dict[str, Any] | None
    extra_callbacks: list[dict[str, Any]]  # the user's Lightning callbacks (_target_ nodes)
    # trainer (conf/trainer/)
    threads: Any
    accelerator: str
    devices: Any
    precision: str
    compile: Any
    native: Any
    trainer_args: dict[str, Any]
    log_every: int
    overfit_batches: float
    progress_bar: bool
    progress_every: int | None
    progress_seconds: float
    # outputs
    csv: bool
    wandb: dict[str, Any] | None
    print_table: bool
    plugins: list[str]  # the modules that registered the run's task, family or metrics
    force: bool  # retrain over a finished or differently configured run
    resume: bool  # continue from checkpoints/last.ckpt when there is one
    probe: Any
    resolved: dict[str, Any]  # the whole resolved config (W&B's run config)
    config_yaml: str  # ... as config.yaml holds it (results.json's config_hash)
    unresolved_yaml: str  # the config as composed (interpolations kept): Hydra's .hydra record


def settings_from(cfg: DictConfig, trainer_args: dict[str, Any]) -> Settings:
    """The run's settings from its validated, resolved config."""
    scale, cb, tr = cfg.scale, cfg.callbacks, cfg.trainer
    failure = OmegaConf.to_container(cb.inject_failure) if cb.inject_failure else None
    if failure and failure.get("cell") not in (None, cfg.cell):
        failure = None  # the injected failure targets another cell of the sweep
    wandb = cfg.logger.get("wandb")
    return Settings(
        seed=cfg.seed,
        d_model=scale.d_model,
        max_steps=scale.max_steps,
        micro_batch=scale.micro_batch,
        global_batch=scale.global_batch,
        eval_batch=scale.eval_batch,
        val_every=scale.val_every,
        n_test=scale.n_test,
        lr=scale.lr,
        optim=OmegaConf.to_container(cfg.optim, resolve=True),
        scheduler=OmegaConf.to_container(cfg.scheduler, resolve=True),
        grad_clip=cfg.optim.grad_clip,
        policies=list(cb.policies),
        budgets=sorted({int(b) for b in cb.get("budgets") or []}),
        early_stop_acc=cb.early_stop.val_acc,
        early_stop_patience=cb.early_stop.patience,
        diagnostics_every=cb.diagnostics_every,
        failure=failure,
        extra_callbacks=OmegaConf.to_container(cb.extra, resolve=True) if cb.get("extra") else [],
        threads=tr.threads,
        accelerator=str(tr.accelerator),
        devices=tr.devices,
        precision=tr.precision,
        compile=tr.get("compile", "off"),
        native=tr.get("native", "off"),
        trainer_args=trainer_args,
        log_every=tr.log_every_n_steps,
        overfit_batches=cfg.debug_flags.overfit_batches,
        progress_bar=bool(tr.progress_bar),
        progress_every=tr.progress_every,
        progress_seconds=tr.progress_seconds,
        csv=bool(cfg.logger.csv),
        wandb=OmegaConf.to_container(wandb, resolve=True) if wandb else None,
        print_table=bool(cfg.print_table),
        plugins=[str(n) for n in (cfg.get("plugins") or [])],
        force=bool(cfg.get("force", False)),
        resume=bool(cfg.get("resume", True)),
        probe=(cfg.get("evaluate") or {}).get("probe", "auto"),
        resolved=OmegaConf.to_container(cfg, resolve=True),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        unresolved_yaml=OmegaConf.to_yaml(cfg),
    )


# Trainer arguments the run sets itself, and the config key that controls each.
_TRAINER_OWN = {
    "accelerator": "trainer.accelerator",
    "devices": "trainer.devices",
    "precision": "trainer.precision",
    "max_steps": "scale.max_steps",
    "accumulate_grad_batches": "scale.global_batch / scale.micro_batch",
    "gradient_clip_val": "optim.grad_clip",
    "gradient_clip_algorithm": "optim.grad_clip",
    "val_check_interval": "scale.val_every (optimizer steps between validations)",
    "limit_val_batches": "scale.n_val (the validation set's size)",
    "num_sanity_val_steps": "scale.val_every",
    "check_val_every_n_epoch": "scale.val_every",
    "enable_checkpointing": "callbacks.policies, or a ModelCheckpoint in callbacks.extra",
    "enable_progress_bar": "trainer.progress_bar",
    "enable_model_summary": "-",
    "logger": "logger=...",
    "callbacks": "callbacks.extra (a list of {_target_: ...} Lightning callbacks)",
    "log_every_n_steps": "trainer.log_every_n_steps",
    "overfit_batches": "debug=overfit",
    "default_root_dir": "hydra.run.dir / root",
}


def trainer_args(cfg: DictConfig) -> dict[str, Any]:
    """``trainer.args``: extra lightning.Trainer arguments, checked against its signature."""
    import inspect

    import lightning as L

    node = cfg.trainer.get("args")
    extra = {} if node is None else OmegaConf.to_container(node, resolve=True)
    valid = set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
    for key in extra:
        if key in _TRAINER_OWN:
            raise ConfigError(
                f"trainer.args.{key} is set by the run itself; use {_TRAINER_OWN[key]} instead"
            )
        if key not in valid:
            raise ConfigError(
                f"trainer.args.{key} is not a lightning.Trainer argument; valid: "
                + ", ".join(sorted(valid - set(_TRAINER_OWN)))
            )
    return extra
