"""A sequence's streaming state on disk: save it, restore it in another process or request, and
continue exactly where it stopped.

    save_state(model, state, "prompt.state")           # after model.prefill(prompt, ...)
    state = load_state(model, "prompt.state")          # later, elsewhere
    logits, state = model.step(token, state)           # bit for bit as if it never stopped

The file (format ``rlt-state/2``) holds the state's tensors and plain values only
(``torch.load(weights_only=True)`` reads it: a state file from someone else runs no code), a
description of the model it belongs to (its family and every field of its config that shapes
the computation: width, heads, split, window, chunk size B, ...), the fingerprint of the
weights it was made with (sha256 of every state_dict tensor) and a sha256 checksum over all of
it. A state is only meaningful for that model and those weights, so :func:`load_state`
refuses, in one line naming what is wrong and changing nothing: a file whose checksum does not
match (flipped bytes load without error otherwise), a damaged or truncated one, one of another
model's configuration, one made with other weights (another seed, further training), and an
``rlt-state/1`` file (it has neither checksum nor fingerprint: prefill and save it again).

:func:`save_state` refuses, before writing anything, what is not this model's state (prefill's
``(logits, state)`` pair, a dict) and a directory that does not exist (it creates none: a
mistyped path fails instead of growing a tree); it writes through a temporary file and a
rename, so a good file is never replaced by a partial one.

To reuse a prompt's state for several continuations, load (or keep) it once and continue from
it as often as needed: appending to a cache that another continuation has written past copies
it first (rlt.models.state.KVCache), so continuations never see each other's tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlt.atomic import atomic_write
from rlt.models.deltanet import DeltaNetLayerState, DeltaNetState
from rlt.models.deltaproduct import DeltaProductLayerState, DeltaProductState
from rlt.models.pdssm import PDSSMState
from rlt.models.state import KVCache, LSTMState, RLTState, TransformerState, WindowKV

FORMAT = "rlt-state/2"
UNVERIFIABLE = ("rlt-state/1",)  # earlier formats: no checksum, no weights' fingerprint
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
        DeltaProductState,
        DeltaProductLayerState,
        PDSSMState,
    )
}
# Config fields that only change training, not what a state means.
TRAINING_ONLY = ("init_std", "checkpoint_activations", "tbptt", "fused")
_TRANSIENT = ("tip",)  # KVCache bookkeeping, rebuilt on the first append


class StateFileError(ValueError):
    """A state that cannot be saved, or a state file that cannot be restored into this model
    (one line: what, why and the fix)."""


def describe(model: nn.Module) -> dict[str, Any]:
    """The model a state belongs to: its class and the config fields that shape the
    computation (RLT-2's chunk size B as the model runs it now)."""
    config = {k: v for k, v in dataclasses.asdict(model.config).items() if k not in TRAINING_ONLY}
    if "feedback_interval" in config:
        config["feedback_interval"] = model.feedback_interval
    return {"class": type(model).__name__, "config": config}


def fingerprint(model: nn.Module) -> str:
    """sha256 of the model's weights: every state_dict tensor's name, dtype, shape and bytes
    (one pass over the weights at each save and load; a cache could miss an in-place update)."""
    return _digest(model.state_dict()).hexdigest()


def save_state(model: nn.Module, state: Any, path: str | Path) -> None:
    """Write ``state`` (what ``model.prefill``/``step`` returned second) to ``path``, with the
    weights' fingerprint and a checksum, atomically; raises :class:`StateFileError` (one line,
    nothing written) for anything but this model's state or a directory that does not exist."""
    path = Path(path)
    expected = type(model.init_state(1))
    if not isinstance(state, expected):
        raise StateFileError(f"not saved to {path}: {_not_a_state(state, expected)}")
    if not path.parent.is_dir():
        raise StateFileError(
            f"not saved to {path}: directory {path.parent} does not exist; create it first"
        )
    blob = {
        "format": FORMAT,
        "model": describe(model),
        "weights": fingerprint(model),
        "state": _pack(state),
    }
    blob["sha256"] = _digest(blob).hexdigest()
    try:
        atomic_write(path, lambda f: torch.save(blob, f), mode="wb")
    except OSError as e:
        raise StateFileError(
            f"cannot write {path} ({e.strerror or e}); the file there, if any, is unchanged"
        ) from e


def _not_a_state(x: Any, expected: type) -> str:
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], expected):
        return (
            "got a (logits, state) pair: pass the state, the second element of prefill's "
            "(or step's) result"
        )
    return (
        f"expected this model's {expected.__name__}, got {type(x).__name__}: pass the state "
        "this model's prefill or step returned"
    )


def load_state(model: nn.Module, path: str | Path) -> Any:
    """The state saved at ``path``, on the model's device, for ``model``; raises
    :class:`StateFileError` (one line) for a file that is missing, damaged, truncated, not a
    state file, of the first format, or saved from a model of another configuration or with
    other weights."""
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
    fmt = blob.get("format") if isinstance(blob, dict) else None
    if fmt in UNVERIFIABLE:
        raise StateFileError(
            f"{path} is an {fmt} file, without a checksum or the weights' fingerprint, so it "
            f"cannot be checked: prefill the prompt and save it again ({FORMAT})"
        )
    if fmt != FORMAT:
        raise StateFileError(f"{path} is not an rlt state file ({FORMAT}); save it with save_state")
    checksum = blob.pop("sha256", None)
    if checksum != _digest(blob).hexdigest():
        raise StateFileError(f"{path} is damaged (checksum mismatch): save the state again")
    differences = _differences(blob.get("model") or {}, describe(model))
    if differences:
        raise StateFileError(
            f"{path} holds the state of another model ({'; '.join(differences)}, file -> this "
            "model); restore it into the model it was saved from"
        )
    here = fingerprint(model)
    if blob.get("weights") != here:
        raise StateFileError(
            f"{path} was made with other weights (fingerprint {str(blob.get('weights'))[:12]} "
            f"in the file, {here[:12]} here): load it into the model it was saved from"
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


def _digest(x: Any, h: Any = None) -> Any:
    """sha256 over a nest of dicts (keys in sorted order), lists, tensors (dtype, shape and
    bytes) and plain values (their repr): the same content gives the same digest wherever it
    was saved or loaded."""
    h = hashlib.sha256() if h is None else h
    if isinstance(x, dict):
        h.update(b"{")
        for k in sorted(x):
            h.update(repr(k).encode())
            _digest(x[k], h)
        h.update(b"}")
    elif isinstance(x, list | tuple):
        h.update(f"[{len(x)}".encode())
        for v in x:
            _digest(v, h)
    elif isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    else:
        h.update(f"{type(x).__name__}:{x!r};".encode())
    return h


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
