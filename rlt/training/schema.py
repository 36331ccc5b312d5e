"""The schema of the config groups a run reads as fixed keys (scale, split, trainer, callbacks):
each group's keys with their types and lower bounds, as dataclasses. ``spec.prepare`` checks a
composed config against them, so a misspelled key (``+scale.lrr=1``, which Hydra accepts because
of the ``+``) or a value of the wrong type is refused in one line naming the key and the fix
rather than ignored or failing deep inside a run.

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

from omegaconf import DictConfig, OmegaConf

from rlt.training.settings import ConfigError


def _number(kind: type, minimum: float, nullable: bool = False) -> Any:
    """A numeric field: its type (int, or float where an int is fine too) and lower bound."""
    return field(default=None, metadata={"kind": kind, "min": minimum, "nullable": nullable})


@dataclass
class Scale:
    name: str = ""
    d_model: int = _number(int, 1)
    n_heads: int = _number(int, 1)
    d_ff: int | None = _number(int, 1, nullable=True)
    global_batch: int = _number(int, 1)
    micro_batch: int = _number(int, 1)
    max_steps: int = _number(int, 1)
    val_every: int = _number(int, 1)
    warmup_steps: int = _number(int, 0)
    lr: float = _number(float, 0)
    min_lr: float = _number(float, 0)
    eval_batch: int = _number(int, 1)
    n_val: int | None = _number(int, 1, nullable=True)
    n_test: int | None = _number(int, 1, nullable=True)
    test_lengths_limit: int | None = _number(int, 1, nullable=True)


@dataclass
class Split:
    name: str = ""
    n_enc: int = 0  # ranges: spec._check_shapes
    n_dec: int = 0


@dataclass
class Trainer:
    accelerator: str = "cpu"
    devices: Any = 1  # an integer or auto
    precision: Any = "32-true"
    threads: Any = "auto"  # auto or an integer
    compile: Any = "auto"  # auto | on | off
    native: Any = "auto"  # auto | on | off
    progress_bar: bool = True
    progress_every: int | None = _number(int, 1, nullable=True)
    progress_seconds: float = _number(float, 0)
    log_every_n_steps: int = _number(int, 1)
    args: dict = field(default_factory=dict)  # Lightning Trainer arguments: checked there


@dataclass
class EarlyStop:
    val_acc: float | None = _number(float, 0, nullable=True)
    patience: int = _number(int, 1)


@dataclass
class Callbacks:
    policies: list = field(default_factory=list)
    budgets: list = field(default_factory=list)
    inject_failure: Any = None
    early_stop: EarlyStop = field(default_factory=EarlyStop)
    diagnostics_every: int | None = _number(int, 1, nullable=True)
    extra: list = field(default_factory=list)


GROUPS: dict[str, type] = {
    "scale": Scale,
    "split": Split,
    "trainer": Trainer,
    "callbacks": Callbacks,
}


def check(cfg: DictConfig, *, stored: bool = False) -> None:
    """Every key of the schema's groups is known and every numeric one has its type and
    range; raises :class:`ConfigError` naming the key and the fix. ``stored``: a run
    directory's config read back (to score it), which may hold keys of an older version that
    nothing reads any more: those are let through."""
    for group, schema in GROUPS.items():
        node = cfg.get(group)
        if isinstance(node, DictConfig):
            _check_node(group, node, schema, stored)


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


def check_number(key: str, value: Any, kind: type, min: float, nullable: bool) -> None:  # noqa: A002
    """One line naming the key where ``value`` is not of ``kind`` or below ``min``."""
    if value is None and nullable:
        return
    ok_type = not isinstance(value, bool) and (
        isinstance(value, int) if kind is int else isinstance(value, int | float)
    )
    if not ok_type or not math.isfinite(value) or value < min:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{key} must be {what} >= {min}, got {value!r}")
