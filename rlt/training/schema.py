"""The config's schema, declared once: the top-level keys (:class:`Run`), the groups a run
reads as fixed keys (scale, split, trainer, callbacks) with their types and bounds as
dataclasses, the numbers a run reads inside the open groups (:data:`OPEN_NUMBERS`) and the
rules between fields, the shapes (split, batches, budgets) and the directory names a run takes
from values. ``spec.prepare`` checks a composed config against it (:func:`check`), so a
misspelled key (``+scale.lrr=1``, which Hydra accepts because of the ``+``) or a value of the
wrong type or out of bounds is refused in one line naming the key and the fix rather than
ignored or failing deep inside a run. What needs more than the config is checked by its owner:
the model against its family (``families.resolve_model``), the Trainer arguments, optimizer
and callbacks they import (``settings.settings_from``), the machine (``environment.py``).

Why these are not registered in Hydra's ConfigStore (docs/DESIGN.md, section 5): Hydra then
refuses a wrong type while composing, in several lines that do not name the fix, and cannot
type a key that is ``auto`` or a number. The groups left out are open by design: ``task``
(a plugin task has its own options), ``model`` (its schema is the family's config dataclass,
``families.model_config``), ``optim`` and ``scheduler`` (keyword arguments of a ``_target_``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlt.rundir import POLICIES
from rlt.training.hydra_env import hydra_output_dir


class ConfigError(ValueError):
    """A configuration that cannot run; raised before any work starts."""


def _number(
    kind: type,
    minimum: float,
    nullable: bool = False,
    *,
    positive: bool = False,
    maximum: float | None = None,
    why: str = "",
) -> Any:
    """A numeric field: its type (int, or float where an int is fine too), lower bound (and
    whether it must also be above 0), and an upper bound with the reason for it."""
    bounds = {"positive": positive, "max": maximum, "why": why}
    return field(
        default=None, metadata={"kind": kind, "min": minimum, "nullable": nullable, **bounds}
    )


# The Lightning precisions a run accepts (trainer.precision).
PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "64")


# Why a validation or test set has at most a million examples per length: each is generated
# and held in memory before the first is scored, so a typo (1000000000) must fail at once.
_HELD = "examples per length, generated and held in memory before scoring"


@dataclass(frozen=True)
class Scale:
    name: str = ""
    d_model: int = _number(int, 1)
    n_heads: int = _number(int, 1)
    d_ff: int | None = _number(int, 1, nullable=True)
    global_batch: int = _number(int, 1)
    micro_batch: int = _number(int, 1)
    max_steps: int = _number(
        int, 1, maximum=10**9, why="a step count Lightning and the schedule can hold"
    )
    val_every: int = _number(int, 1)
    warmup_steps: int = _number(int, 0)
    lr: float = _number(float, 0, positive=True)
    min_lr: float = _number(float, 0)
    eval_batch: int = _number(int, 1)
    n_val: int | None = _number(int, 1, nullable=True, maximum=10**6, why=_HELD)
    n_test: int | None = _number(int, 1, nullable=True, maximum=10**6, why=_HELD)
    test_lengths_limit: int | None = _number(int, 1, nullable=True)


@dataclass(frozen=True)
class Split:
    name: str = ""
    n_enc: int = 0  # ranges: _check_shapes
    n_dec: int = 0


@dataclass(frozen=True)
class Trainer:
    accelerator: str = "cpu"
    devices: Any = 1  # an integer or auto
    precision: Any = "32-true"
    threads: Any = "auto"  # auto or an integer
    # auto | on | off; a config written before the key existed ran without (off)
    compile: Any = "off"
    native: Any = "off"
    progress_bar: bool = True
    progress_every: int | None = _number(int, 1, nullable=True)
    progress_seconds: float = _number(float, 0)
    log_every_n_steps: int = _number(int, 1)
    args: dict = field(default_factory=dict)  # Lightning Trainer arguments: checked there


@dataclass(frozen=True)
class EarlyStop:
    val_acc: float | None = _number(float, 0, nullable=True)
    patience: int = _number(int, 1)


@dataclass(frozen=True)
class Callbacks:
    policies: list = field(default_factory=list)
    budgets: list = field(default_factory=list)
    inject_failure: Any = None
    early_stop: EarlyStop = field(default_factory=EarlyStop)
    diagnostics_every: int | None = _number(int, 1, nullable=True)
    extra: list = field(default_factory=list)


@dataclass
class Run:
    """The top-level keys: the groups, the seed, where the run goes and how it is run."""

    task: Any = None
    model: Any = None
    split: Any = None
    scale: Any = None
    trainer: Any = None
    logger: Any = None
    callbacks: Any = None
    optim: Any = None
    scheduler: Any = None
    seed: int = _number(int, 0, maximum=2**32 - 1, why="the seed of numpy's and torch's generators")
    root: Any = None
    sweep_name: Any = None
    group: Any = None
    cell: Any = None
    out_dir: Any = None
    resume: Any = None
    force: Any = None
    print_table: Any = None
    debug_flags: Any = None
    evaluate: Any = None
    plugins: Any = None


GROUPS: dict[str, type] = {
    "scale": Scale,
    "split": Split,
    "trainer": Trainer,
    "callbacks": Callbacks,
}

# Numbers a run reads inside the open groups (a plugin task, an optimizer's keyword arguments),
# checked as the schema's fields are: key -> _number(...).
OPEN_NUMBERS: dict[str, Any] = {
    "task.data_seed": _number(int, 0),
    "optim.weight_decay": _number(float, 0),
    "optim.grad_clip": _number(float, 0, nullable=True),
}
TOP_LEVEL = frozenset(f.name for f in dataclasses.fields(Run))
# Top-level keys that are true or false, nothing else.
SWITCHES = ("resume", "force", "print_table")


def check(cfg: DictConfig, *, stored: bool = False) -> None:
    """The config against its schema, in order: the groups a run reads are there (and the
    values read before interpolation make sense), it resolves (in place), no unknown top-level
    key (``+foo=1``) nor key of a schema group (``+scale.lrr=1``), every numeric field of the
    schema and of :data:`OPEN_NUMBERS` of its type and within its bounds, the rules between
    fields, the shapes (split, batches, budgets) and the directory names a run takes from
    values; raises :class:`ConfigError` naming the key and the fix. ``stored``: a run
    directory's config read back (to score it), which may hold group keys of an older version
    that nothing reads any more: those are let through."""
    _check_groups(cfg)
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # interpolation errors name the key already
        raise ConfigError(f"config does not resolve: {e}") from e
    unknown = sorted(set(cfg.keys()) - TOP_LEVEL)
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {unknown}; valid top-level keys: {sorted(TOP_LEVEL)}"
        )
    for group, schema in GROUPS.items():
        node = cfg.get(group)
        if isinstance(node, DictConfig):
            _check_node(group, node, schema, stored)
    top = {f.name: f for f in dataclasses.fields(Run) if "kind" in f.metadata}
    for key, f in {**top, **OPEN_NUMBERS}.items():
        value = OmegaConf.select(cfg, key, default="<missing>")
        if value == "<missing>":
            raise ConfigError(f"{key} is missing from the config; add it (see conf/)")
        check_number(key, value, **f.metadata)
    _check_rules(cfg)
    _check_shapes(cfg)
    _check_paths(cfg)


def _check_rules(cfg: DictConfig) -> None:
    """What holds between fields, or of a field beyond its bounds."""
    if cfg.scale.min_lr > cfg.scale.lr:
        raise ConfigError(
            f"scale.min_lr ({cfg.scale.min_lr}) must not exceed scale.lr ({cfg.scale.lr})"
        )
    for key in SWITCHES:
        if key in cfg and not isinstance(cfg.get(key), bool):
            # bool("no") is True: force=no would retrain a finished run and replace its results
            raise ConfigError(f"{key} must be true or false, got {cfg.get(key)!r}")
    es = cfg.callbacks.early_stop.val_acc
    if es is not None and es > 1:
        raise ConfigError(f"callbacks.early_stop.val_acc is a fraction in [0, 1], got {es!r}")


def _check_node(path: str, node: DictConfig, schema: type, stored: bool) -> None:
    fields = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(set(node.keys()) - set(fields))
    if unknown and not stored:
        raise ConfigError(
            f"{path}.{unknown[0]} is not a key of {path} (nothing would read it); valid keys: "
            + ", ".join(f"{path}.{k}" for k in fields)
        )
    for name, f in fields.items():
        key = f"{path}.{name}"
        value = OmegaConf.select(node, name, default="<missing>")
        if value == "<missing>":
            if "kind" in f.metadata:
                raise ConfigError(f"{key} is missing from the config; add it (see conf/)")
            continue
        nested = f.default_factory
        if dataclasses.is_dataclass(nested):  # a group within the group (early_stop)
            if isinstance(value, DictConfig):
                _check_node(key, value, nested, stored)
            continue
        if "kind" in f.metadata:
            check_number(key, value, **f.metadata)


def check_number(
    key: str,
    value: Any,
    kind: type,
    min: float,
    nullable: bool,  # noqa: A002
    positive: bool = False,
    max: float | None = None,
    why: str = "",
) -> None:  # noqa: A002
    """One line naming the key where ``value`` is not of ``kind``, below ``min`` (or not above
    0 where ``positive``) or above ``max``."""
    if value is None and nullable:
        return
    ok_type = not isinstance(value, bool) and (
        isinstance(value, int) if kind is int else isinstance(value, int | float)
    )
    if not ok_type or not math.isfinite(value) or value < min:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{key} must be {what} >= {min}, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(f"{key} must be > 0, got {value!r}")
    if max is not None and value > max:
        raise ConfigError(f"{key} must be at most {max:,}, got {value!r} ({why})")


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
    if precision not in PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision!r} is not a precision; use one of "
            f"{', '.join(PRECISIONS)}"
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
    if names is None or any(p not in POLICIES for p in names):
        raise ConfigError(
            f"callbacks.policies={policies!r}: each must be one of {', '.join(POLICIES)}"
        )
    if "min_val_loss" not in names:
        raise ConfigError(
            f"callbacks.policies={names} must keep min_val_loss, the report's selection (the "
            "checkpoint results.json is built on); add the others beside it"
        )
    probe = (cfg.get("evaluate") or {}).get("probe", "auto")
    if probe not in ("auto", True, False, "off"):
        raise ConfigError(
            f"evaluate.probe={probe!r}: use auto (on for tasks with a running target), true or false"
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


def _check_shapes(cfg: DictConfig) -> None:
    """The split, the batch sizes and step counts fit together."""
    scale, model, split = cfg.scale, cfg.model, cfg.split
    for key in ("n_enc", "n_dec"):
        if not isinstance(split[key], int) or split[key] < 0:
            raise ConfigError(f"split.{key} must be a non-negative integer, got {split[key]!r}")
    if split.n_enc + split.n_dec < 1:
        raise ConfigError(f"split {split.name!r} has no layers; pick e.g. split=4+4")
    named = re.fullmatch(r"(\d+)\+(\d+)", str(split.name))
    if named and (int(named[1]), int(named[2])) != (split.n_enc, split.n_dec):
        # the name is the run's directory and table column: a 3+2 stored as 2+2 would be
        # averaged with the real 2+2 runs
        raise ConfigError(
            f"split.name {split.name!r} does not match split.n_enc={split.n_enc} + "
            f"split.n_dec={split.n_dec}; use split={split.n_enc}+{split.n_dec} (or change both)"
        )
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
    if hydra_output_dir() is None and root not in out.parents:
        raise ConfigError(
            f"out_dir {cfg.out_dir!r} is not under root {cfg.root!r}; leave out_dir as it is"
        )
