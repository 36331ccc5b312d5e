"""A run's configuration, checked: every value validated before anything is written, the
model family's dataclass filled from ``model.*`` (:func:`model_config`), extra Trainer
arguments checked (:func:`trainer_args`), and the result, :class:`RunSpec`, that the rest of a
run reads (:func:`prepare`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlt import families, plugins, rundir
from rlt.tasks import get_task, vocab
from rlt.training import hydra_env, optim, schema
from rlt.training.environment import check_environment
from rlt.training.families import (
    RLT_VARIANTS,
    has_feedback,
    model_config,
    rlt_variant,
    variant_option,
)
from rlt.training.schedule import FeedbackSchedule
from rlt.training.settings import ConfigError, Settings, settings_from, trainer_args


@dataclass
class RunSpec:
    """Everything a run needs, validated: built from the composed Hydra config."""

    run_dir: Path
    family: str
    entry: families.Family  # the family's entry in the table: what the run asks of its family
    model_kwargs: dict[str, Any]
    task: Any
    test_lengths: list[int]
    accumulate: int
    schedule: FeedbackSchedule | None
    identity: dict[str, Any]
    settings: Settings  # what the run reads of cfg from here on (rlt/training/settings.py)

    @property
    def dir(self) -> rundir.RunDir:
        """The run directory as the run owns it: its files, lock, status and results."""
        return rundir.RunDir(self.run_dir)

    def datamodule(self):
        """The task's LightningDataModule at the run's batch sizes and step count (training
        and eval.py read the same data)."""
        from rlt.tasks.data import TaskDataModule

        s = self.settings.scale
        return TaskDataModule(
            task=self.task,
            micro_batch_size=s.micro_batch,
            global_batch_size=s.global_batch,
            max_steps=s.max_steps,
            eval_batch_size=s.eval_batch,
        )


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------
def prepare(cfg: DictConfig, *, on_this_machine: bool = True, scoring: bool = False) -> RunSpec:
    """Validate ``cfg`` and resolve it into a :class:`RunSpec`; raises :class:`ConfigError`
    naming the config key and the fix. Allocates no tensors. ``on_this_machine=False`` (a grid
    checked before it is submitted to SLURM) skips what only the machine that trains can tell
    (CUDA). ``scoring=True`` (a stored config read back to score a kept checkpoint) never
    builds the optimizer and scheduler: their ``_target_`` entries come from a run directory,
    which must not run code, and scoring needs neither."""
    load_plugins(cfg.get("plugins"))
    _check_groups(cfg)
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # interpolation errors name the key already
        raise ConfigError(f"config does not resolve: {e}") from e
    schema.check(cfg, stored=scoring)
    _check_shapes(cfg)
    _check_paths(cfg)
    family, _, kwargs = model_config(cfg)
    entry = families.get(family)  # what the run asks of its family, looked up once
    extra_trainer_args = trainer_args(cfg)
    if not scoring:
        _check_optim(cfg)
        _check_extra_callbacks(cfg)
    check_environment(cfg, cuda=on_this_machine)
    schedule = _feedback_schedule(cfg, entry)
    _check_variant(cfg, entry, schedule)
    if schedule is not None:
        kwargs["feedback_interval"] = schedule.at(0)
    task = _task(cfg)
    if task.vocab_size != kwargs.get("vocab_size", vocab.VOCAB_SIZE):
        kwargs["vocab_size"] = task.vocab_size  # the task adds tokens to the shared 140
    run_dir = hydra_env.run_dir_for(cfg)
    scale = cfg.scale
    lengths = list(task.test_lengths)
    if scale.test_lengths_limit:
        lengths = _spread(sorted(lengths), int(scale.test_lengths_limit))
    return RunSpec(
        run_dir=run_dir,
        family=family,
        entry=entry,
        model_kwargs=kwargs,
        task=task,
        test_lengths=[int(x) for x in lengths],
        accumulate=scale.global_batch // scale.micro_batch,
        schedule=schedule,
        identity=_identity(cfg, entry, run_dir),
        settings=settings_from(cfg, extra_trainer_args),
    )


def load_plugins(names) -> None:
    """Import the config's ``plugins`` (modules that register tasks, model families, metrics)."""
    if names is None:
        return
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(
            f"plugins must be a list of module names, e.g. plugins=[my_lab.tasks]; got {names!r}"
        )
    for name, e in plugins.load(list(names)):
        raise ConfigError(
            f"plugins: cannot import {name!r} ({type(e).__name__}: {e}); run from its directory, "
            "put it on PYTHONPATH or install it"
        ) from e


def _check_optim(cfg: DictConfig) -> None:
    """conf/optim/ and conf/scheduler/ build (an importable target taking their arguments)."""
    try:
        optim.check(
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


def _check_shapes(cfg: DictConfig) -> None:
    """The split, the batch sizes and step counts fit together; RLT-2 has its chunk size."""
    scale, model, split = cfg.scale, cfg.model, cfg.split
    for key in ("n_enc", "n_dec"):
        if not isinstance(split[key], int) or split[key] < 0:
            raise ConfigError(f"split.{key} must be a non-negative integer, got {split[key]!r}")
    if split.n_enc + split.n_dec < 1:
        raise ConfigError(f"split {split.name!r} has no layers; pick e.g. split=4+4")
    if scale.global_batch % scale.micro_batch != 0:
        raise ConfigError(
            f"scale.global_batch={scale.global_batch} is not a multiple of "
            f"scale.micro_batch={scale.micro_batch}"
        )
    if scale.max_steps < 1 or scale.val_every < 1:
        raise ConfigError("scale.max_steps and scale.val_every must be >= 1")
    if scale.warmup_steps > scale.max_steps:
        raise ConfigError(
            f"scale.warmup_steps={scale.warmup_steps} exceeds scale.max_steps={scale.max_steps}: "
            "the learning rate would never reach scale.lr; lower scale.warmup_steps"
        )
    if has_feedback(model.get("family")) and str(model.get("name", "")).startswith("rlt2"):
        if model.get("feedback_interval") is None:
            raise ConfigError("RLT-2 needs a chunk size: set model.feedback_interval=B (e.g. 4)")
    _check_budgets(cfg.callbacks.get("budgets"), scale, model)


def _check_budgets(budgets, scale, model) -> None:
    """``callbacks.budgets``: a list of validation steps inside the run (a checkpoint is kept
    there), for a model without a feedback schedule (whose stages the whole run places)."""
    if budgets is None:
        return
    if not isinstance(budgets, list | ListConfig):
        raise ConfigError(
            f"callbacks.budgets must be a list of steps, got {budgets!r}; e.g. "
            "callbacks.budgets=[16000,32000]"
        )
    if budgets and model.get("feedback_schedule"):
        raise ConfigError(
            "callbacks.budgets with model.feedback_schedule: the schedule's stages are placed on "
            "the whole run's steps, so a budget would not be the shorter run it names; train "
            "the shorter run itself (scale.max_steps), or drop callbacks.budgets"
        )
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int) or not 0 < b < scale.max_steps:
            raise ConfigError(
                f"callbacks.budgets: {b!r} is not a step inside the run; give steps between 1 and "
                f"scale.max_steps-1 ({scale.max_steps - 1}), e.g. callbacks.budgets=[16000,32000]"
            )
        if b % scale.val_every:
            raise ConfigError(
                f"callbacks.budgets: step {b} is not a validation step (scale.val_every="
                f"{scale.val_every}); give multiples of scale.val_every"
            )


def _check_variant(
    cfg: DictConfig, entry: families.Family, schedule: FeedbackSchedule | None
) -> None:
    """The model's label names the variant its feedback interval trains: ``model=rlt1
    model.feedback_interval=4`` trains RLT-2 B=4 and would be stored and labelled RLT-1, so it
    is refused with the option to use. With a feedback schedule the label must name the
    schedule's chunk sizes (``RLT-2 B=8→4→1``, optionally followed by what else tells two
    schedules apart: ``RLT-2 B=4→1 at 75%``), whatever model.feedback_interval says."""
    if not entry.feedback:
        return
    model = cfg.model
    if schedule is not None:
        # the stages as written (a short run can merge fractional stages when parsed)
        written = OmegaConf.to_container(model.feedback_schedule)
        named = "RLT-2 B=" + "→".join(str(stage[1]) for stage in written)
        label = str(model.label)  # the stages, then what else tells two schedules apart
        if not (label == named or label.startswith(named + " ")) or not str(model.name).startswith(
            "rlt2_sched"
        ):
            raise ConfigError(
                f"model={model.name} (label {model.label!r}) does not name the feedback schedule "
                f"it trains ({named}); use a schedule preset (model=rlt2_sched_4to1, "
                "rlt2_sched_8to1) or name it: model.name=rlt2_sched_<stages> "
                f"\"model.label='{named}'\""
            )
        return
    interval = model.feedback_interval
    trains, label = rlt_variant(interval), str(model.label)
    if not label.startswith(trains):
        named = next((v for v in RLT_VARIANTS if label.startswith(v)), label)
        raise ConfigError(
            f"model={model.name} is {named}, but model.feedback_interval="
            f"{'null' if interval is None else interval} trains {trains}; use "
            f"{variant_option(interval)} so the run's name, directory and label say what it trains"
        )


# A path component taken from a config value: no separators, not "." or "..".
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_+=.,@-]+$")


def _check_paths(cfg: DictConfig) -> None:
    """Every directory name a run takes from a value (sweep name or preset, task, model,
    architecture, seed) is a plain name, so no value can place files outside ``root``."""
    parts = {
        "sweep_name": cfg.sweep_name,
        "scale.name": cfg.scale.name,
        "task.name": cfg.task.name,
        "model.name": cfg.model.name,
        "model.arch_tag": cfg.model.arch_tag,
    }
    for key, value in parts.items():
        if value is None and key == "sweep_name":
            continue
        text = str(value)
        if not _SAFE_NAME.match(text) or text.strip(".") == "":
            raise ConfigError(
                f"{key}={text!r} cannot name a directory: use letters, digits and - _ + = . , @ "
                "(no '/' and not '.' or '..'), so the run stays under root"
            )
    out = Path(str(cfg.out_dir)).resolve()
    root = Path(str(cfg.root)).resolve()
    if hydra_env.hydra_output_dir() is None and root not in out.parents:
        raise ConfigError(
            f"out_dir {cfg.out_dir!r} is not under root {cfg.root!r}; leave out_dir as it is"
        )


def check_writable_root(path: Path) -> None:
    """The nearest existing directory of ``path`` is writable (its permission bits)."""
    path = Path(path).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not os.access(existing, os.W_OK):
        raise ConfigError(
            f"cannot write under {path} ({existing} is read-only); make it writable or put the "
            "runs elsewhere with root=DIR"
        )


def _feedback_schedule(cfg: DictConfig, entry: families.Family) -> FeedbackSchedule | None:
    """``model.feedback_schedule`` parsed and checked (None when there is none)."""
    model = cfg.model
    if not model.get("feedback_schedule"):
        return None
    if not entry.feedback or model.feedback_interval is None:
        raise ConfigError(
            "model.feedback_schedule needs an RLT model with feedback (model=rlt2 or rlt1)"
        )
    try:
        schedule = FeedbackSchedule.parse(
            OmegaConf.to_container(model.feedback_schedule), cfg.scale.max_steps
        )
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if schedule.at(0) is None or any(b is None for _, b in schedule.stages):
        raise ConfigError("model.feedback_schedule: every stage needs a finite chunk size B")
    return schedule


def _task(cfg: DictConfig):
    """The task with its options and the scale's validation/test set sizes."""
    try:
        options = dict(cfg.task.options)
        if cfg.task.test_lengths:
            options["test_lengths"] = list(cfg.task.test_lengths)
        return get_task(
            cfg.task.kind,
            data_seed=cfg.task.data_seed,
            n_val=cfg.scale.n_val,
            n_test=cfg.scale.n_test,
            **options,
        )
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"task {cfg.task.name!r}: {e}") from e


def _identity(cfg: DictConfig, entry: families.Family, run_dir: Path) -> dict[str, Any]:
    """The run's identity as results.json["run"] records it."""
    model, split = cfg.model, cfg.split
    return {
        "task": cfg.task.name,
        "task_kind": cfg.task.kind,
        "model": model.name,
        "label": model.label,
        "family": entry.name,
        "split": entry.split_name(split.name),
        "n_enc": split.n_enc,
        "n_dec": split.n_dec,
        "n_layers": split.n_enc + split.n_dec,
        "feedback_interval": model.feedback_interval if entry.feedback else None,
        "seed": cfg.seed,
        "data_seed": cfg.task.data_seed,
        "preset": cfg.scale.name,
        "sweep": cfg.sweep_name,
        "cell": cfg.cell,
        "run_dir": str(run_dir),
        # Modules that registered the run's task, family or metrics, for the analysis to load.
        **({"plugins": list(cfg.plugins)} if cfg.get("plugins") else {}),
    }


def _check_groups(cfg: DictConfig) -> None:
    """The config groups and trainer/optimizer values a run reads exist and make sense: each
    refused with one line naming the key and the fix, before anything is written."""
    for group in ("task", "model", "split", "scale", "trainer", "optim", "scheduler", "callbacks"):
        if not isinstance(cfg.get(group), DictConfig):
            raise ConfigError(
                f"{group} is {cfg.get(group)!r}: choose one of conf/{group}/ "
                f"(e.g. {group}=<name>), or leave it at its default"
            )
    if cfg.get("root") in (None, "") or str(cfg.root) in ("None", "null"):
        raise ConfigError("root is null: give a directory for the runs, e.g. root=runs")
    root = Path(str(cfg.root))
    if root.exists() and not root.is_dir():
        raise ConfigError(f"root={cfg.root} is a file, not a directory; use root=DIR")
    precision = str(cfg.trainer.precision)
    if precision not in schema.PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision!r} is not a precision; use one of "
            f"{', '.join(schema.PRECISIONS)}"
        )
    devices = cfg.trainer.devices
    if devices != "auto" and (
        isinstance(devices, bool) or not isinstance(devices, int) or devices < 1
    ):
        raise ConfigError(f"trainer.devices must be an integer >= 1 or auto, got {devices!r}")
    betas = cfg.optim.get("betas", (0.9, 0.999))
    if (
        not isinstance(betas, ListConfig | list | tuple)
        or len(betas) != 2
        or not all(isinstance(b, int | float) and 0 <= b < 1 for b in betas)
    ):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1), got {betas!r}")
    epochs = (cfg.trainer.get("args") or {}).get("max_epochs")
    if isinstance(epochs, int) and (epochs == 0 or epochs < -1):
        raise ConfigError(
            f"trainer.args.max_epochs={epochs} would end training before its steps; leave it "
            "out (scale.max_steps ends a run)"
        )
    policies = cfg.callbacks.get("policies")
    names = list(policies) if isinstance(policies, ListConfig | list) else None
    if names is None or any(p not in rundir.POLICIES for p in names):
        raise ConfigError(
            f"callbacks.policies={policies!r}: each must be one of {', '.join(rundir.POLICIES)}"
        )
    if "min_val_loss" not in names:
        raise ConfigError(
            f"callbacks.policies={names} must keep min_val_loss, the report's selection (the "
            "checkpoint results.json is built on); add the others beside it"
        )
    extra = cfg.callbacks.get("extra")
    if extra is not None and (
        not isinstance(extra, ListConfig)
        or not all(isinstance(n, DictConfig) and n.get("_target_") for n in extra)
    ):
        raise ConfigError(
            f"callbacks.extra={extra!r}: give a list of Lightning callbacks, each "
            "{_target_: module.Class, ...}, e.g. "
            "'callbacks.extra=[{_target_: lightning.pytorch.callbacks.ModelCheckpoint, "
            "monitor: val/loss}]'"
        )


def _spread(values: list[int], k: int) -> list[int]:
    """``k`` values spread over a sorted list, always keeping the first and the last."""
    if k >= len(values):
        return values
    if k == 1:
        return [values[-1]]
    idx = sorted({round(i * (len(values) - 1) / (k - 1)) for i in range(k)})
    return [values[i] for i in idx]


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
