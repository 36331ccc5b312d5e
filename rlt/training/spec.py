"""A run's configuration, checked, and the result, :class:`RunSpec`, that the rest of a run
reads (:func:`prepare`): the config against its schema (rlt/training/schema.py), the model
against its family (rlt/training/families.py), the settings a run reads (with the Trainer
arguments, optimizer and callbacks they name: rlt/training/settings.py), the machine
(environment.py), the task and the run directory; every value validated before anything is
written."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlt import families, plugins, rundir
from rlt.tasks import get_task, vocab
from rlt.tasks.base import TASKS, check_rendering
from rlt.training import hydra_env, schema
from rlt.training.environment import check_environment
from rlt.training.families import resolve_model
from rlt.training.schedule import FeedbackSchedule
from rlt.training.settings import ConfigError, Settings, settings_from


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
    schema.check(cfg, stored=scoring)  # resolves cfg in place
    entry, kwargs, schedule = resolve_model(cfg)
    settings = settings_from(cfg, scoring=scoring)
    check_environment(cfg, cuda=on_this_machine)
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
        family=entry.name,
        entry=entry,
        model_kwargs=kwargs,
        task=task,
        test_lengths=[int(x) for x in lengths],
        accumulate=scale.global_batch // scale.micro_batch,
        schedule=schedule,
        identity=_identity(cfg, entry, run_dir),
        settings=settings,
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
        if isinstance(e, ModuleNotFoundError) and e.name and name.startswith(e.name):
            raise ConfigError(
                f"plugins: cannot find {name!r} ({e}); run from its directory, put it on "
                "PYTHONPATH or install it"
            ) from e
        raise ConfigError(f"plugins: {name!r} failed while importing: {plugins.where(e)}") from e


def check_writable_root(path: Path) -> None:
    """The nearest existing directory of ``path`` is writable (its permission bits)."""
    path = Path(path).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(
            f"cannot write under {path}: {existing} is a file, not a directory; put the runs "
            "elsewhere with root=DIR"
        )
    if not os.access(existing, os.W_OK):
        raise ConfigError(
            f"cannot write under {path} ({existing} is read-only); make it writable or put the "
            "runs elsewhere with root=DIR"
        )


def _task(cfg: DictConfig):
    """The task with its options and the scale's validation/test set sizes."""
    try:
        options = dict(cfg.task.options)
        if cfg.task.test_lengths:
            options["test_lengths"] = list(cfg.task.test_lengths)
        sizes = {
            "data_seed": cfg.task.data_seed,
            "n_val": cfg.scale.n_val,
            "n_test": cfg.scale.n_test,
        }
        task = get_task(cfg.task.kind, **sizes, **options)
        # A plugin task's examples, before anything is written; once per class and options (a
        # grid's precheck prepares the same task for every model, split and seed).
        key = (type(task), repr(sorted({**sizes, **options}.items())))
        if key not in _RENDERING_CHECKED:
            check_rendering(task)
            _RENDERING_CHECKED.add(key)
        return task
    except (ValueError, TypeError, KeyError) as e:
        hint = ""
        if cfg.task.kind not in TASKS:
            hint = " (a lab's task is registered by its module: plugins=[its.module])"
        raise ConfigError(f"task {cfg.task.name!r}: {e}{hint}") from e


# Task classes and options whose rendering this process has checked.
_RENDERING_CHECKED: set[tuple[type, str]] = set()


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
