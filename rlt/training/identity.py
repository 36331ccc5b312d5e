"""Config identity: is the run on disk the configuration that was asked for (and, for a run
that resumes or is scored, does this process number its task's tokens as it did)?

A run directory holds one configuration. Before a finished run is skipped or a killed one is
resumed, the stored resolved config (``config.yaml``) is compared with the requested one over
every key that can change results; run-control keys (threads, progress output, printing,
resume/force, loggers, where the directory lives) are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from rlt import families, rundir
from rlt.tasks import vocab
from rlt.training import optim

# Keys (dotted prefixes) that never change a run's results.
RUN_CONTROL = (
    "root",
    "out_dir",
    "group",
    "cell",
    "sweep_name",
    "resume",
    "force",
    "print_table",
    "logger",
    "scale.eval_batch",
    "trainer.threads",
    "trainer.compile",
    "trainer.native",
    "trainer.progress_bar",
    "trainer.progress_every",
    "trainer.progress_seconds",
    "trainer.log_every_n_steps",
    "callbacks.inject_failure",
    "callbacks.diagnostics_every",
    "evaluate",
    "plugins",
)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def identity_view(config: dict[str, Any]) -> dict[str, Any]:
    """The result-changing keys of a resolved config, flattened."""
    flat = flatten(config)
    view = {
        k: v
        for k, v in flat.items()
        if not any(k == p or k.startswith(p + ".") for p in RUN_CONTROL)
    }
    if view.get("callbacks.budgets"):  # a set of steps: order and repeats change nothing
        view["callbacks.budgets"] = sorted(set(view["callbacks.budgets"]))
    if not view.get("callbacks.extra"):
        view.pop("callbacks.extra", None)  # none (runs before the key existed had none)
    if view.get("callbacks.early_stop.val_acc") is None:
        view.pop("callbacks.early_stop.patience", None)  # inert without a threshold
    if _depth_only(view.get("model.family")) and "split.n_enc" in view:
        # A depth-only model (Transformer, LSTM, DeltaNet) reads the split's total alone: 1+1
        # and 2+0 are the same two-layer run, which a grid over splits trains once.
        total = (view.pop("split.n_enc") or 0) + (view.pop("split.n_dec", 0) or 0)
        view.pop("split.name", None)
        view["split.n_layers"] = total
    return view


def _depth_only(family: Any) -> bool:
    """Whether runs of ``model.family`` are built by depth alone, as its entry in
    rlt/families.py says. A config without the key predates the other families (an RLT); a
    family no entry knows (a plugin not loaded) is taken as depth-only, as it always was."""
    if family is None:
        return False
    entry = families.find(family)
    return entry.depth_only if entry is not None else True


EARLY_STOP = "callbacks.early_stop."


def implied_keys(view: dict[str, Any]) -> dict[str, Any]:
    """What a stored config written before a key existed meant by its absence (the behaviour
    the code had then), for keys whose old meaning is not simply "unset": before conf/optim/
    and conf/scheduler/ were Hydra targets, every run trained with AdamW and the report's
    warmup + cosine over the scale's warmup steps down to its min_lr."""
    implied: dict[str, Any] = {}
    if "optim._target_" not in view:
        implied |= {"optim._target_": optim.LEGACY_OPTIMIZER, "optim._partial_": True}
    if not any(k.startswith("scheduler.") for k in view):
        implied |= {"scheduler._target_": optim.LEGACY_SCHEDULER, "scheduler._partial_": True}
        implied |= {
            f"scheduler.{key}": view[f"scale.{key}"]
            for key in ("warmup_steps", "min_lr")
            if f"scale.{key}" in view
        }
    return implied


def _with_implied(view: dict[str, Any]) -> dict[str, Any]:
    return {**implied_keys(view), **view}


def upgraded(config: dict[str, Any]) -> dict[str, Any]:
    """A stored config with the keys it predates filled in as it meant them (``implied_keys``),
    so code of today can rebuild a run written by an older version (eval.py, the probe)."""
    out = dict(config)
    for key, value in implied_keys(flatten(config)).items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node[p] = dict(node.get(p) or {})
            node = node[p]
        node.setdefault(last, value)
    return out


def config_differences(
    stored: dict[str, Any], requested: dict[str, Any], *, trained_to_end: bool = False
) -> list[str]:
    """``key: old -> new`` for every result-changing key that differs. A key that only one side
    has counts when its value is set (not null/false/empty): configs written by an older
    version lack keys added since, whose unset value means the old behaviour.

    ``trained_to_end``: the stored run finished every step without its early stop firing. Such
    a run is the fixed-step run, so an early-stop setting it had and the request lacks is no
    difference (the other way round it is: the requested stop might have fired)."""
    old, new = _with_implied(identity_view(stored)), _with_implied(identity_view(requested))
    if trained_to_end and new.get(EARLY_STOP + "val_acc") is None:
        old = {k: v for k, v in old.items() if not k.startswith(EARLY_STOP)}
        new = {k: v for k, v in new.items() if not k.startswith(EARLY_STOP)}
    unset = (None, False, [], {})
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if a == b:
            continue
        if (key not in old and b in unset) or (key not in new and a in unset):
            continue
        lines.append(f"{key}: {a!r} -> {b!r}")
    return lines


class UnreadableConfig(ValueError):
    """A run directory's config.yaml exists but does not hold a readable config."""


def stored_config(run_dir: Path) -> dict[str, Any] | None:
    """The resolved config saved in a run directory, or None if there is none. A file that is
    there but empty, truncated or not a mapping raises :class:`UnreadableConfig`: a run whose
    identity cannot be read must never be taken for the requested one."""
    path = rundir.RunDir(run_dir).config_file
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UnreadableConfig(f"{path} does not parse ({type(e).__name__})") from e
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise UnreadableConfig(f"{path} does not hold a run configuration")
    return data


def requested_config(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


# What a run's token ids are: a stopped run resumes, and a kept checkpoint is scored, only with
# the ids it trained with (plugins can add tokens and move a task's).
def added_tokens(spec: Any) -> list[str]:
    """The tokens past the shared 140 that this run's model reads, numbered as this process's
    plugins number them (status.json ``added_tokens``; [] for the built-in tasks)."""
    return vocab.added(spec.task.vocab_size)


def tokens_mismatch(spec: Any, status: dict[str, Any]) -> str | None:
    """How the token ids a run started with (``status``'s ``added_tokens``) differ from this
    process's, or None. A run started before the record resumes as it did then."""
    started = status.get("added_tokens")
    now = added_tokens(spec)
    if not isinstance(started, list) or started == now:
        return None

    def ids(table: list[str]) -> str:
        if not table:
            return "[] (none: a model of the shared 140)"
        first, last = vocab.VOCAB_SIZE, vocab.VOCAB_SIZE + len(table) - 1
        return f"{table} ({f'ids {first}-{last}' if last > first else f'id {first}'})"

    return f"its task's tokens past the shared 140 were {ids(started)}, and here {ids(now)}"


def plugins_override(names: Any) -> str:
    """``plugins=[a,b]`` as a command line gives it."""
    return "plugins=[" + ",".join(str(n) for n in (names or [])) + "]"
