"""Model labels, their order and their colours: one definition so every table and figure agrees.

A label names an architecture the way the report's tables do: "RLT-1 4+4", "RLT-2 B=4 4+4",
"RLT-0 4+4", "Transformer 8". Seeds of the same label are aggregated into one table cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rlt import families

# Report order of the tasks (Table 1); a task variant (parity_3to16, parity_prefix, ...) sorts
# right after its task, and tasks we do not know come after, alphabetically.
TASK_ORDER = ("addition", "parity", "mod5_flat", "mod5_brackets", "s5_swaps", "s5")

# What one unit of "length" counts, per task (SPEC section 3), for axis labels; a variant
# counts as its task.
LENGTH_UNITS = {
    "addition": "digits per operand",
    "parity": "bits",
    "mod5_flat": "symbols",
    "mod5_brackets": "characters",
    "s5": "operations",
    "s5_swaps": "operations",
}


def base_task(task: str) -> str | None:
    """The report's task a task name belongs to: itself, or the longest known task it extends
    with "_<variant>" (parity_3to16 -> parity, s5_swaps -> s5_swaps); None for others."""
    known = [t for t in TASK_ORDER if task == t or task.startswith(t + "_")]
    return max(known, key=len) if known else None


def length_unit(task: str) -> str | None:
    base = base_task(task)
    return LENGTH_UNITS.get(base) if base else None


# What each metric of results.json measures (rlt/tasks/metrics.py), for titles and axes.
_METRIC_WORDS = {
    "token_acc": "token accuracy (every scored position, teacher-forced)",
    "seq_acc": "whole-sequence accuracy (every scored position right)",
    "exact": "exact match (greedy generation of the whole answer)",
}


def _acc_mode(task: str) -> str:
    from rlt.tasks.base import TASKS

    cls = TASKS.get(base_task(task) or task)
    return cls.acc_mode if cls is not None else "last"


def metric_words(metric: str, tasks) -> str:
    """What ``metric`` means over ``tasks``: ``acc`` is the final-label (final-state) accuracy
    on most tasks and the teacher-forced token accuracy on addition (its ``acc_mode``)."""
    if metric != "acc":
        return _METRIC_WORDS.get(metric, metric)
    tasks = sorted(set(tasks))
    by_tokens = [t for t in tasks if _acc_mode(t) == "tokens"]
    if not by_tokens:
        return "final-label accuracy"
    if len(by_tokens) == len(tasks):
        return "teacher-forced token accuracy"
    return f"accuracy (final label; {', '.join(by_tokens)}: teacher-forced token accuracy)"


# The one order of model variants in every table and legend (columns, rows, the feedback and
# schedule views), their hues and markers, and which are labelled by depth alone
# ("Transformer 8", "LSTM 2"): all read from the family table, rlt/families.py.
DEPTH_VARIANTS = families.DEPTH_LABELS


def _variant_rank(variant: str) -> int:
    labels = [v.label for v in families.variants()]
    return labels.index(variant) if variant in labels else len(labels)


_MODEL_NAME = re.compile(r"^rlt[-_]?([012])(?:[-_]?b(\d+))?", re.IGNORECASE)
_SPLIT = re.compile(r"^(\d+)\+(\d+)$")
_LAYERS_TAG = re.compile(r"^L(\d+)$")
_LABEL_B = re.compile(r"\bB=(\d+(?:→\d+)*)")


@dataclass(frozen=True)
class ModelKey:
    """The architecture of a run, reduced to what tables group by."""

    variant: str  # "RLT-1", "RLT-2", "RLT-0", "Transformer" or the raw model name
    split: str | None  # literal split string ("4+4"); None for the Transformer
    n_enc: int | None
    n_dec: int | None
    n_layers: int | None
    feedback_interval: int | None
    schedule: tuple[int, ...] | None = None  # chunk sizes of a feedback schedule, in order
    # A user's own name for a configuration (its model.label, e.g. "RLT-1 alpha=0.5"), when it
    # is not the variant's standard label: the column is then the user's, never merged.
    custom: str | None = None

    @property
    def label(self) -> str:
        if self.custom:
            return f"{self.custom} {self.split}" if self.split else self.custom
        return self.standard_label

    @property
    def standard_label(self) -> str:
        if self.variant in DEPTH_VARIANTS:
            return f"{self.variant} {self.n_layers}" if self.n_layers else self.variant
        name = self.variant
        if self.variant == "RLT-2":
            if self.schedule:
                name = "RLT-2 B=" + "→".join(str(b) for b in self.schedule)
            else:
                name = f"RLT-2 B={self.feedback_interval}"
        return f"{name} {self.split}" if self.split else name

    @property
    def rank(self) -> int:
        """The variant's place in the one order of model variants (unknown variants last)."""
        return _variant_rank(self.variant)

    @property
    def sort_key(self) -> tuple:
        rank = self.rank
        b = -1 if self.schedule else (self.feedback_interval or 0)
        return (rank, b, self.n_layers or 0, self.n_enc or 0, self.label)


def split_depths_or_none(split: str | None) -> tuple[int | None, int | None]:
    """(n_enc, n_dec) from a literal split string such as "4+4"; (None, None) for anything else
    (no split, a depth-only model). The strict parser is rlt.models.parse_split."""
    m = _SPLIT.match(str(split)) if split is not None else None
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _feedback_family(family: str | None) -> bool:
    """A registered family whose variants its feedback interval names (RLT-0, -1, -2)."""
    found = families.find(family)
    return found is not None and found.feedback


def model_key(
    *,
    model: str | None,
    family: str | None = None,
    split: str | None = None,
    n_enc: int | None = None,
    n_dec: int | None = None,
    n_layers: int | None = None,
    feedback_interval: int | None = None,
    feedback_schedule: list | None = None,
    label: str | None = None,
) -> ModelKey:
    """Classify a run from its results.json fields, falling back on its directory names.

    Runs that died before writing results.json only have their path (task/model/arch/seedN),
    so the same function must work from a model name ("rlt2_b4") and an arch tag ("L8", "4+4").
    `label` (the config's model label, which grid.json cells carry, e.g. "RLT-2 B=8→4→1")
    supplies the chunk size or schedule of an RLT-2 the name does not encode.
    """
    model = model or ""
    layers_tag = _LAYERS_TAG.match(str(split)) if split is not None else None
    if layers_tag:
        n_layers = n_layers or int(layers_tag.group(1))
        split = None
    pe, pd_ = split_depths_or_none(split)
    n_enc = n_enc if n_enc is not None else pe
    n_dec = n_dec if n_dec is not None else pd_
    if n_layers is None and n_enc is not None and n_dec is not None:
        n_layers = n_enc + n_dec
    baseline = _baseline_variant(model, family)
    if baseline:
        return _with_custom(ModelKey(baseline, None, None, None, n_layers, None), label)

    schedule = None
    if feedback_schedule:
        schedule = tuple(int(stage[1]) for stage in feedback_schedule)
    m = _MODEL_NAME.match(model)
    if m:
        variant = f"RLT-{m.group(1)}"
        if variant == "RLT-2" and feedback_interval is None and m.group(2):
            feedback_interval = int(m.group(2))
    elif _feedback_family(family) or model.lower().startswith("rlt"):
        variant = (
            "RLT-0" if feedback_interval is None else "RLT-1" if feedback_interval == 1 else "RLT-2"
        )
    else:
        variant = model or "unknown"
    if variant == "RLT-2" and feedback_interval is None and not schedule and label:
        b = _LABEL_B.search(label)
        if b:
            sizes = tuple(int(x) for x in b.group(1).split("→"))
            schedule = sizes if len(sizes) > 1 else None
            feedback_interval = sizes[0]
    if schedule and variant != "RLT-0":
        variant = "RLT-2"
    if variant == "RLT-0":
        feedback_interval = None
    if split is None and n_enc is not None and n_dec is not None:
        split = f"{n_enc}+{n_dec}"
    key = ModelKey(variant, split, n_enc, n_dec, n_layers, feedback_interval, schedule)
    return _with_custom(key, label)


def _with_custom(key: ModelKey, label: str | None) -> ModelKey:
    """The key under the user's label when the run's model.label is not its standard one."""
    if not label:
        return key
    standard = key.standard_label
    base = (
        standard[: -len(key.split) - 1] if key.split and standard.endswith(key.split) else standard
    )
    if label.strip() in (standard, base, key.variant):
        return key
    return replace(key, custom=label.strip())


def _baseline_variant(model: str, family: str | None) -> str | None:
    """The variant of a model known by depth alone (Transformer, LSTM, DeltaNet, a plugin's
    depth-only family), else None."""
    return families.depth_variant(model, family)


def task_sort_key(task: str) -> tuple:
    base = base_task(task)
    if base is None:
        return (len(TASK_ORDER), task)
    return (TASK_ORDER.index(base), "" if task == base else task)


_MARKERS = "os^Dv<>p*hX"
# Feedback schedules (issue 8), by their first chunk size B (bit length mod 4): B=8 purple,
# B=16 red, B=2 brown, B=4 magenta; hues the fixed-B families (blue, orange, green, grey) lack.
_SCHEDULE_COLORS = ("#6a3d9a", "#c0392b", "#8c564b", "#d01c8b")


def model_style(key: ModelKey) -> dict:
    """Colour and marker of a model, a pure function of its key.

    Deterministic rather than assigned in order of appearance, so a model keeps its colour
    across figures, sweeps and invocations: the family picks the hue, the share of decoder
    blocks the shade (4+4 darkest), the split the marker; a feedback schedule's first chunk
    size picks its hue and its number of stages the shade.
    """
    from matplotlib import colormaps

    if key.schedule:
        return _schedule_style(key)
    variant = families.variant(key.variant) or families.Variant(key.variant)
    cmap = colormaps[variant.cmap]
    if key.variant in DEPTH_VARIANTS:
        shade = 0.95 if (key.n_layers or 8) <= 8 else 0.65
        marker = variant.marker
    else:
        frac = (key.n_dec / key.n_layers) if key.n_dec is not None and key.n_layers else 0.5
        shade = 0.45 + 0.5 * min(frac / 0.5, 1.0)
        if key.variant == "RLT-2" and key.feedback_interval and not key.schedule:
            shade = min(1.0, max(0.3, shade - 0.1 * (key.feedback_interval.bit_length() - 3)))
        marker = _MARKERS[(key.n_dec or 0) % len(_MARKERS)]
    return {"color": cmap(shade), "marker": marker}


def _schedule_style(key: ModelKey) -> dict:
    """A schedule's colour: its first chunk size picks the hue, fewer stages a lighter tint
    (so B=8→1 and B=8→4→1 differ); the split picks the marker as for every RLT."""
    from matplotlib.colors import to_rgba

    assert key.schedule
    r, g, b, _ = to_rgba(_SCHEDULE_COLORS[key.schedule[0].bit_length() % len(_SCHEDULE_COLORS)])
    tint = min(0.6, 0.25 * max(0, 3 - len(key.schedule)))
    color = (r + (1 - r) * tint, g + (1 - g) * tint, b + (1 - b) * tint, 1.0)
    return {"color": color, "marker": _MARKERS[(key.n_dec or 0) % len(_MARKERS)]}
