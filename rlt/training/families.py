"""What config validation reads of the model families: ``model.family`` -> its config
dataclass (from the one table, rlt/families.py), and the model node's config-only keys.
``spec.py`` (validation) and ``hydra_support.py`` (the command-line key check) both read it."""

from __future__ import annotations

from rlt.families import CONFIG_CLASSES

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
