"""A sequence's streaming state on disk: save it, restore it in another process or request, and
continue exactly where it stopped.

    save_state(model, state, "prompt.state")           # after model.prefill(prompt, ...)
    state = load_state(model, "prompt.state")          # later, elsewhere
    logits, state = model.step(token, state)           # bit for bit as if it never stopped

The file holds the state's tensors and plain values only (``torch.load(weights_only=True)``
reads it: a state file from someone else runs no code) and a description of the model it
belongs to: its family and every field of its config that shapes the computation (width,
heads, split, window, chunk size B, ...). A state is only meaningful for that model, so
:func:`load_state` refuses any other in one line naming the difference, and refuses a damaged
or truncated file the same way, changing nothing.

To reuse a prompt's state for several continuations, load (or keep) it once and continue from
it as often as needed: appending to a cache that another continuation has written past copies
it first (rlt.models.state.KVCache), so continuations never see each other's tokens.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlt.models.deltanet import DeltaNetLayerState, DeltaNetState
from rlt.models.state import KVCache, LSTMState, RLTState, TransformerState, WindowKV

FORMAT = "rlt-state/1"
STATE_TYPES = {
    cls.__name__: cls
    for cls in (
        KVCache,
        WindowKV,
        RLTState,
        TransformerState,
        LSTMState,
        DeltaNetState,
        DeltaNetLayerState,
    )
}
# Config fields that only change training, not what a state means.
TRAINING_ONLY = ("init_std", "checkpoint_activations", "tbptt", "fused")
_TRANSIENT = ("tip",)  # KVCache bookkeeping, rebuilt on the first append


class StateFileError(ValueError):
    """A state file that cannot be restored into this model (one line: what and why)."""


def describe(model: nn.Module) -> dict[str, Any]:
    """The model a state belongs to: its class and the config fields that shape the
    computation (RLT-2's chunk size B as the model runs it now)."""
    config = {k: v for k, v in dataclasses.asdict(model.config).items() if k not in TRAINING_ONLY}
    if "feedback_interval" in config:
        config["feedback_interval"] = model.feedback_interval
    return {"class": type(model).__name__, "config": config}


def save_state(model: nn.Module, state: Any, path: str | Path) -> None:
    """Write ``state`` (what ``model.prefill``/``step`` returned) to ``path``, atomically."""
    path = Path(path)
    blob = {"format": FORMAT, "model": describe(model), "state": _pack(state)}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(blob, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_state(model: nn.Module, path: str | Path) -> Any:
    """The state saved at ``path``, on the model's device, for ``model``; raises
    :class:`StateFileError` (one line) for a file that is missing, damaged, truncated, not a
    state file, or saved from a model of another configuration."""
    path = Path(path)
    device = next(model.parameters()).device
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError as e:
        raise StateFileError(f"{path} does not exist: save the state first (save_state)") from e
    except Exception as e:  # a damaged or truncated file: torch's message is many lines
        raise StateFileError(
            f"{path} is not a readable state file ({type(e).__name__}): damaged or truncated; "
            "save the state again"
        ) from e
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise StateFileError(f"{path} is not an rlt state file ({FORMAT}); save it with save_state")
    differences = _differences(blob.get("model") or {}, describe(model))
    if differences:
        raise StateFileError(
            f"{path} holds the state of another model ({'; '.join(differences)}, file -> this "
            "model); restore it into the model it was saved from"
        )
    try:
        return _unpack(blob["state"])
    except (KeyError, TypeError) as e:
        raise StateFileError(f"{path} holds a malformed state ({type(e).__name__}: {e})") from e


def _differences(saved: dict, here: dict) -> list[str]:
    if saved.get("class") != here["class"]:
        return [f"family {saved.get('class')} -> {here['class']}"]
    a, b = saved.get("config") or {}, here["config"]
    return [
        f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
    ]


def _pack(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        if type(x).__name__ not in STATE_TYPES:
            raise TypeError(f"cannot save a {type(x).__name__}: not a state type of rlt.models")
        fields = {
            f.name: _pack(getattr(x, f.name))
            for f in dataclasses.fields(x)
            if f.name not in _TRANSIENT
        }
        return {"__state__": type(x).__name__, **fields}
    if isinstance(x, list):
        return [_pack(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.detach()
    return x


def _unpack(x: Any) -> Any:
    if isinstance(x, dict):
        kind = x["__state__"]
        if kind not in STATE_TYPES:
            raise TypeError(f"unknown state type {kind!r}")
        return STATE_TYPES[kind](**{k: _unpack(v) for k, v in x.items() if k != "__state__"})
    if isinstance(x, list):
        return [_unpack(v) for v in x]
    return x
