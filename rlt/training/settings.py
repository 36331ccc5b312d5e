"""What a run reads of its config, as plain values (:class:`Settings`), built once the schema
has checked it (:func:`settings_from`, which also checks what the settings import: the Trainer
arguments, the optimizer and schedule targets, the extra callbacks).

Past ``prepare`` nothing reads the Hydra config: the trainer, the module, the callbacks, the
evaluation and the loggers take the ``RunSpec`` and its ``Settings``, so they can be built
and tested without Hydra, and a config key is read in one place (here).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlt.training import optim, schema
from rlt.training.schema import ConfigError


@dataclass(frozen=True)
class Settings:
    seed: int
    # the schema's groups as the run reads them (rlt/training/schema.py): scale.max_steps,
    # trainer.threads, callbacks.early_stop.val_acc, ... under the config's own names
    scale: schema.Scale
    trainer: schema.Trainer
    callbacks: schema.Callbacks  # budgets sorted, without repeats
    # optimizer and schedule (conf/optim/, conf/scheduler/; rlt/training/optim.py)
    optim: dict[str, Any]
    scheduler: dict[str, Any]
    grad_clip: float | None
    failure: dict[str, Any] | None  # callbacks.inject_failure, where it targets this cell
    trainer_args: dict[str, Any]  # trainer.args, checked against lightning.Trainer
    overfit_batches: float
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


def settings_from(cfg: DictConfig, *, scoring: bool = False) -> Settings:
    """The run's settings from its checked, resolved config: the schema's groups built from
    it (:func:`build`), the rest read here, with what they name checked:
    ``trainer.args`` against lightning.Trainer, and (unless ``scoring`` a stored config, whose
    targets must not run) the optimizer, schedule and ``callbacks.extra`` importable."""
    extra_trainer_args = trainer_args(cfg)
    if not scoring:
        _check_optim(cfg)
        _check_extra_callbacks(cfg)
    callbacks = build(schema.Callbacks, cfg.callbacks)
    callbacks = dataclasses.replace(
        callbacks,
        budgets=sorted({int(b) for b in callbacks.budgets or []}),
        extra=list(callbacks.extra or []),
        policies=list(callbacks.policies),
    )
    failure = callbacks.inject_failure or None
    if failure and failure.get("cell") not in (None, cfg.cell):
        failure = None  # the injected failure targets another cell of the sweep
    wandb = cfg.logger.get("wandb")
    return Settings(
        seed=cfg.seed,
        scale=build(schema.Scale, cfg.scale),
        trainer=build(schema.Trainer, cfg.trainer),
        callbacks=callbacks,
        optim=OmegaConf.to_container(cfg.optim, resolve=True),
        scheduler=OmegaConf.to_container(cfg.scheduler, resolve=True),
        grad_clip=cfg.optim.grad_clip,
        failure=failure,
        trainer_args=extra_trainer_args,
        overfit_batches=cfg.debug_flags.overfit_batches,
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


def build(schema: type, node: DictConfig | None) -> Any:
    """The schema's dataclass holding a checked group's values (containers as plain lists and
    dicts, a group within the group as its own dataclass): what the run reads of the group
    (``Settings.scale``, ``.trainer``, ``.callbacks``). A key the schema does not know (a
    stored config of an older version) is left out; a missing one takes the field's default."""
    values = {}
    for f in dataclasses.fields(schema):
        if node is None or f.name not in node:
            continue
        value = node[f.name]
        if dataclasses.is_dataclass(f.default_factory) and isinstance(value, DictConfig):
            value = build(f.default_factory, value)
        elif isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        values[f.name] = value
    return schema(**values)


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


def _check_optim(cfg: DictConfig) -> None:
    """conf/optim/ and conf/scheduler/ build (an importable target taking their arguments)."""
    try:
        optim.check_builds(
            OmegaConf.to_container(cfg.optim, resolve=True),
            OmegaConf.to_container(cfg.scheduler, resolve=True),
        )
    except optim.OptimConfigError as e:
        raise ConfigError(str(e)) from e


def _check_extra_callbacks(cfg: DictConfig) -> None:
    """Each ``callbacks.extra`` target is an importable Lightning callback class."""
    import lightning as L
    from hydra.utils import get_class

    for node in cfg.callbacks.get("extra") or []:
        try:
            target = get_class(node._target_)
        except Exception as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(
                f"callbacks.extra: cannot import {node._target_!r} ({why}); check the module and "
                "class name (e.g. lightning.pytorch.callbacks.ModelCheckpoint)"
            ) from e
        if not issubclass(target, L.Callback):
            raise ConfigError(
                f"callbacks.extra: {node._target_} is not a lightning Callback; give one "
                "(e.g. lightning.pytorch.callbacks.ModelCheckpoint)"
            )
