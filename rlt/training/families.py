"""What config validation reads of the model families: ``model.family`` -> its config
dataclass (from the one table, rlt/families.py), the model node's config-only keys,
:func:`model_config` (a model node checked against its family's dataclass) and
:func:`resolve_model` (that, with the feedback schedule parsed and the label checked against
the variant it trains). ``spec.py`` (validation) and ``hydra_support.py`` (the command-line
key check) both read it."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlt import families
from rlt.families import CONFIG_CLASSES
from rlt.training.schedule import FeedbackSchedule
from rlt.training.schema import ConfigError

# model.family -> its config dataclass, over the live table (plugins' families included).
FAMILIES = CONFIG_CLASSES

# Config-only keys of a model node (identity and grouping); every other key is a field of the
# family's config dataclass.
MODEL_META = ("name", "family", "label", "arch_tag", "feedback_schedule")


RLT_VARIANTS = ("RLT-0", "RLT-1", "RLT-2")


def rlt_variant(feedback_interval: int | None) -> str:
    """The RLT variant a feedback interval trains, as labels start: RLT-0 (no feedback),
    RLT-1 (B = 1) or RLT-2 (B > 1)."""
    if feedback_interval is None:
        return "RLT-0"
    return "RLT-1" if feedback_interval == 1 else "RLT-2"


def variant_option(feedback_interval: int | None) -> str:
    """The model option (conf/model/<name>.yaml) that trains a feedback interval."""
    variant = rlt_variant(feedback_interval)
    if variant == "RLT-2":
        return f"model=rlt2 model.feedback_interval={feedback_interval}"
    return "model=rlt0" if variant == "RLT-0" else "model=rlt1"


# Fields that come from other groups: sizes from scale, depth from split.
_FROM_SCALE = ("d_model", "n_heads", "d_ff")


def model_config(cfg: DictConfig) -> tuple[str, type, dict[str, Any]]:
    """(family, config class, validated kwargs) of the model a config describes: every key of
    ``model`` but the meta keys is passed to the family's dataclass; sizes come from ``scale``
    and depth from ``split``. Unknown keys and bad values raise ConfigError naming the fix."""
    entry, config_cls, kwargs = _model_config(cfg)
    return entry.name, config_cls, kwargs


def _model_config(cfg: DictConfig) -> tuple[families.Family, type, dict[str, Any]]:
    model, scale, split = cfg.model, cfg.scale, cfg.split
    family = model.get("family")
    if families.find(family) is None:
        raise ConfigError(
            f"model.family {family!r} is unknown; expected one of {sorted(FAMILIES)} (a lab's "
            "family is registered by its module: plugins=[its.module])"
        )
    try:
        entry, config_cls = families.checked(family)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    fields = {f.name for f in dataclasses.fields(config_cls)}
    settable = sorted(fields - set(_FROM_SCALE) - {"n_enc", "n_dec", "n_layers", "vocab_size"})
    # The baselines carry feedback_interval: null only so every model node has the same keys.
    meta = MODEL_META if entry.feedback else (*MODEL_META, "feedback_interval")
    given = {k: v for k, v in model.items() if k not in meta}
    unknown = sorted(set(given) - set(settable))
    if unknown:
        raise ConfigError(
            f"model.{unknown[0]} is not a field of model family {family!r} "
            f"(unknown: {unknown}); valid keys: model.{', model.'.join(settable)}"
        )
    for f in dataclasses.fields(config_cls):
        if f.name in given:
            _check_type(f"model.{f.name}", given[f.name], f.default)
    kwargs = dict(given)
    kwargs.update({k: scale[k] for k in _FROM_SCALE if k in fields})
    matched_d_ff = getattr(config_cls, "matched_d_ff", None)
    if "d_ff" in fields and scale.d_ff is not None and matched_d_ff is not None:
        # A family whose token mixing has more or fewer parameters than attention (DeltaNet's
        # layer one d x d matrix more) gets the FFN width that matches the Transformer's blocks.
        kwargs["d_ff"] = matched_d_ff(scale.d_ff, kwargs)
    kwargs.update(entry.depth(split.n_enc, split.n_dec))
    try:
        config_cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model config: {e}") from e
    return entry, config_cls, kwargs


def resolve_model(
    cfg: DictConfig,
) -> tuple[families.Family, dict[str, Any], FeedbackSchedule | None]:
    """The model a checked config trains: its family's entry, the validated keyword arguments
    (:func:`model_config`; the feedback interval a schedule starts with) and its feedback
    schedule, if any. RLT-2 has its chunk size, and the model's label names the variant (or
    the schedule) its feedback interval trains."""
    entry, _, kwargs = _model_config(cfg)  # what the run asks of its family, looked up once
    model = cfg.model
    if (
        entry.feedback
        and str(model.get("name", "")).startswith("rlt2")
        and model.get("feedback_interval") is None
    ):
        raise ConfigError("RLT-2 needs a chunk size: set model.feedback_interval=B (e.g. 4)")
    schedule = _feedback_schedule(cfg, entry)
    _check_variant(cfg, entry, schedule)
    if schedule is not None:
        kwargs["feedback_interval"] = schedule.at(0)
    return entry, kwargs, schedule


def _check_type(key: str, value: Any, default: Any) -> None:
    """A model field takes the type of its default (an int is fine where a float is)."""
    if default is None or default is dataclasses.MISSING or value is None:
        return
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int | float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and (isinstance(value, int) or not isinstance(default, int))
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(
            f"{key} must be of type {type(default).__name__} (default {default!r}), got {value!r}"
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
