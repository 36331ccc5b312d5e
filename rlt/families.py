"""The model families, in one table: what builds them and how the analysis names them.

Every other place reads this table: config validation (``model.family`` -> its config
dataclass), ``build_model`` (config -> model), the LightningModule per family, and the analysis
labels, their order, colours and markers. A new family is its model file (a
``rlt.models.base.SequenceModel``), its config dataclass and one :func:`register` call
(docs/EXTENDING.md walks through one). No torch import here: classes are named by import path
and loaded on first use, so the analysis can read the table cheaply.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One labelled model of a family, as tables and legends show it."""

    label: str  # the label's first words: "RLT-1", "DeltaNet [0,1]", "LSTM"
    names: tuple[str, ...] = ()  # model.name prefixes that are this variant (longest wins)
    cmap: str = "Purples"  # matplotlib colormap giving its hue
    marker: str = "*"  # marker of a depth-only variant (RLT markers follow the split)


@dataclass(frozen=True)
class Family:
    """A model family: ``model.family`` in the config."""

    name: str
    config: str  # "module:Class" of its config dataclass (fields = the model.* keys)
    model: str  # "module:Class" of its SequenceModel, built as Model(config)
    depth_only: bool  # built and labelled by depth alone ("Transformer 8"); False: by split
    variants: tuple[Variant, ...]  # the first is the family's default
    # A feedback interval B (model.feedback_interval) that a run chooses, a schedule changes and
    # evaluation sets after a checkpoint loads (the RLT's chunk size); False: the node's
    # feedback_interval is null and nothing reads it.
    feedback: bool = False
    # "module:Class" of the family's LightningModule (a rlt.training.module.SequenceModule);
    # None: the shared one, named after the family.
    module: str | None = None

    def config_class(self) -> type:
        return load(self.config)

    def model_class(self) -> type:
        return load(self.model)

    def depth(self, n_enc: int, n_dec: int) -> dict[str, int]:
        """The config's depth fields for a split: a split family keeps n_enc and n_dec, a
        depth-only family stacks n_enc + n_dec layers."""
        if self.depth_only:
            return {"n_layers": n_enc + n_dec}
        return {"n_enc": n_enc, "n_dec": n_dec}

    def split_name(self, split: str) -> str | None:
        """The split as a run records it: its name for a split family, None otherwise."""
        return None if self.depth_only else split

    def interval(self, stored: int | None, scheduled: int | None) -> int | None:
        """The chunk size a checkpoint is evaluated with: the last stage's under a feedback
        schedule (SPEC: inference uses it), else the one it trained with; None without
        feedback."""
        if not self.feedback:
            return None
        return scheduled if scheduled is not None else stored


_TABLE: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family (a plugin's, or the built-in ones below). A name or label already taken by
    another family is an error, so two families never share a column."""
    if family.name in _TABLE and _TABLE[family.name] != family:
        raise ValueError(f"model family {family.name!r} is registered twice")
    taken = {v.label: f.name for f in _TABLE.values() for v in f.variants if f.name != family.name}
    for v in family.variants:
        if v.label in taken:
            raise ValueError(
                f"variant label {v.label!r} already belongs to family {taken[v.label]}"
            )
    if not family.variants:
        raise ValueError(f"model family {family.name!r} needs at least one variant (its label)")
    _TABLE[family.name] = family
    return family


def families() -> list[Family]:
    """Every registered family, built-in ones first, in the tables' order."""
    return list(_TABLE.values())


def get(name: str) -> Family:
    if name not in _TABLE:
        raise KeyError(f"model family {name!r} is unknown; expected one of {sorted(_TABLE)}")
    return _TABLE[name]


def find(name: object) -> Family | None:
    """The family of that name, or None (an unknown or missing ``model.family``)."""
    return _TABLE.get(name) if isinstance(name, str) else None


def variants() -> list[Variant]:
    """Every variant in table order: the one order of columns and legends."""
    return [v for f in _TABLE.values() for v in f.variants]


def variant(label: str) -> Variant | None:
    return next((v for v in variants() if v.label == label), None)


def depth_variant(model_name: str, family: str | None) -> str | None:
    """The label of a depth-only model from its model.name (the longest matching prefix) or,
    failing that, its family's default variant; None for the RLT and for unknown models."""
    name = (model_name or "").lower()
    matches = [
        (len(prefix), v.label)
        for f in _TABLE.values()
        if f.depth_only
        for v in f.variants
        for prefix in v.names
        if name.startswith(prefix)
    ]
    if matches:
        return max(matches)[1]
    fam = _TABLE.get(family or "")
    return fam.variants[0].label if fam is not None and fam.depth_only else None


class _DepthLabels:
    """The labels of depth-only variants, read from the table when asked (plugins included)."""

    def __contains__(self, label: object) -> bool:
        return any(v.label == label for v in self._labels())

    def __iter__(self) -> Iterator[str]:
        return (v.label for v in self._labels())

    @staticmethod
    def _labels() -> list[Variant]:
        return [v for f in _TABLE.values() if f.depth_only for v in f.variants]


DEPTH_LABELS = _DepthLabels()


class _ConfigClasses(Mapping):
    """``model.family`` -> its config dataclass, over the live table."""

    def __contains__(self, name: object) -> bool:  # registered: nothing loaded to tell
        return name in _TABLE

    def __getitem__(self, name: str) -> type:
        if name not in _TABLE:
            raise KeyError(name)
        return _TABLE[name].config_class()

    def __iter__(self) -> Iterator[str]:
        return iter(list(_TABLE))

    def __len__(self) -> int:
        return len(_TABLE)


CONFIG_CLASSES = _ConfigClasses()


# What every family's model provides (docs/EXTENDING.md): training's forward, and the streaming
# state that generation and evaluation run on.
MODEL_METHODS = ("forward", "init_state", "prefill", "step")


def checked(name: str) -> tuple[Family, type]:
    """The family of that name and its config dataclass, once the config and model classes
    load and provide what a run reads of them; ``ValueError`` naming what is wrong (a plugin's
    family is checked with the config, not where a run first reaches the missing part)."""
    entry = get(name)
    where = f"model family {name!r}"
    loaded = {}
    for what, path in (("config", entry.config), ("model", entry.model)):
        try:
            loaded[what] = load(path)
        except (ImportError, AttributeError, ValueError) as e:
            first = str(e).splitlines()[0] if str(e) else ""
            raise ValueError(
                f"{where}: its {what} class {path!r} does not load ({type(e).__name__}: "
                f'{first}); fix the "module:Class" path in its Family(...) entry'
            ) from e
    config_cls, model_cls = loaded["config"], loaded["model"]
    fields = getattr(config_cls, "__dataclass_fields__", None)
    if fields is None:
        raise ValueError(f"{where}: its config class {entry.config!r} is not a dataclass")
    if "vocab_size" not in fields:
        raise ValueError(
            f"{where}: its config {config_cls.__name__} has no vocab_size field (the run sets it "
            "from the task: the model's embedding and output size); add vocab_size: int = 140"
        )
    own = [k for k in model_cls.__mro__ if not k.__module__.startswith("torch")]
    missing = [m for m in MODEL_METHODS if not any(m in k.__dict__ for k in own)]
    if missing:
        raise ValueError(
            f"{where}: its model {model_cls.__name__} lacks {', '.join(missing)} (a "
            "rlt.models.base.SequenceModel provides forward, init_state, prefill and step: "
            "docs/EXTENDING.md)"
        )
    return entry, config_cls


def load(path: str) -> type:
    """The class a "module:Class" path names (imported on first use)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


register(
    Family(
        "rlt",
        "rlt.models.config:RLTConfig",
        "rlt.models.rlt:RecurrentLoopedTransformer",
        depth_only=False,
        variants=(
            Variant("RLT-1", ("rlt1",), "Blues"),
            Variant("RLT-2", ("rlt2",), "Oranges"),
            Variant("RLT-0", ("rlt0",), "Greens"),
        ),
        feedback=True,
    )
)
register(
    Family(
        "transformer",
        "rlt.models.config:TransformerConfig",
        "rlt.models.transformer:DecoderOnlyTransformer",
        depth_only=True,
        variants=(Variant("Transformer", ("transformer",), "Greys", "x"),),
    )
)
register(
    Family(
        "lstm",
        "rlt.models.config:LSTMConfig",
        "rlt.models.lstm:LSTMModel",
        depth_only=True,
        variants=(Variant("LSTM", ("lstm",), "RdPu", "+"),),
    )
)
register(
    Family(
        "deltanet",
        "rlt.models.config:DeltaNetConfig",
        "rlt.models.deltanet:DeltaNet",
        depth_only=True,
        variants=(
            Variant("DeltaNet [-1,1]", ("deltanet",), "Reds"),
            Variant("DeltaNet [0,1]", ("deltanet01",), "YlOrBr"),
            Variant("Gated DeltaNet [-1,1]", ("gated_deltanet",), "Purples"),
            Variant("Gated DeltaNet [0,1]", ("gated_deltanet01",), "GnBu"),
        ),
    )
)
register(
    Family(
        "deltaproduct",
        "rlt.models.config:DeltaProductConfig",
        "rlt.models.deltaproduct:DeltaProduct",
        depth_only=True,
        variants=(Variant("DeltaProduct [-1,1]", ("deltaproduct",), "PuBu", "P"),),
    )
)
register(
    Family(
        "pdssm",
        "rlt.models.config:PDSSMConfig",
        "rlt.models.pdssm:PDSSM",
        depth_only=True,
        variants=(Variant("PD-SSM", ("pdssm",), "YlOrRd", "s"),),
    )
)
