"""The config's schema, declared once: the top-level keys (:class:`Run`), the groups a run
reads as fixed keys (scale, split, trainer, callbacks) with their types and bounds as
dataclasses, the numbers a run reads inside the open groups (:data:`OPEN_NUMBERS`) and the
rules between fields. ``spec.prepare`` checks a composed config against it (:func:`check`), so
a misspelled key (``+scale.lrr=1``, which Hydra accepts because of the ``+``) or a value of the
wrong type or out of bounds is refused in one line naming the key and the fix rather than
ignored or failing deep inside a run. What needs more than the config (paths, shapes against
the model, the machine) is checked in ``spec.py`` and ``environment.py``.

Why these are not registered in Hydra's ConfigStore (docs/DESIGN.md, section 5): Hydra then
refuses a wrong type while composing, in several lines that do not name the fix, and cannot
type a key that is ``auto`` or a number. The groups left out are open by design: ``task``
(a plugin task has its own options), ``model`` (its schema is the family's config dataclass,
``spec.model_config``), ``optim`` and ``scheduler`` (keyword arguments of a ``_target_``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


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
    n_val: int | None = _number(int, 1, nullable=True)
    n_test: int | None = _number(int, 1, nullable=True)
    test_lengths_limit: int | None = _number(int, 1, nullable=True)


@dataclass(frozen=True)
class Split:
    name: str = ""
    n_enc: int = 0  # ranges: spec._check_shapes
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


def check(cfg: DictConfig, *, stored: bool = False) -> None:
    """No unknown top-level key (``+foo=1``) nor key of a schema group (``+scale.lrr=1``), every
    numeric field of the schema and of :data:`OPEN_NUMBERS` of its type and within its bounds,
    and the rules between fields; raises :class:`ConfigError` naming the key and the fix.
    ``stored``: a run directory's config read back (to score it), which may hold group keys of
    an older version that nothing reads any more: those are let through."""
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


def _check_rules(cfg: DictConfig) -> None:
    """What holds between fields, or of a field beyond its bounds."""
    if cfg.scale.min_lr > cfg.scale.lr:
        raise ConfigError(
            f"scale.min_lr ({cfg.scale.min_lr}) must not exceed scale.lr ({cfg.scale.lr})"
        )
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
