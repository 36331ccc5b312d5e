"""Identity: is the run on disk the one that was asked for? The same configuration; for a run
that resumes, the CPU arithmetic and token numbering it started with; for a kept checkpoint
that is scored, its token numbering.

A run directory holds one configuration. Before a finished run is skipped or a killed one is
resumed, the stored resolved config (``config.yaml``) is compared with the requested one over
every key that can change results; run-control keys (threads, progress output, printing,
resume/force, loggers, where the directory lives) are left out. What a run starts with beyond
its config (``started_with``: the arithmetic, the token ids past the shared 140) goes into its
status.json, and a stopped run resumes only where this process has the same.

    check_same_config  refuse a directory holding another (or an unreadable) configuration
    check_resumable    refuse to resume in another arithmetic or token numbering
    same_run           all three agree (a forced retrain stopped part-way continues then)
    started_with       the status fields a fresh run records
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig, OmegaConf

from rlt import families, portable, rundir
from rlt.rundir import Snapshot
from rlt.tasks import vocab
from rlt.training import optim
from rlt.training.settings import ConfigError

if TYPE_CHECKING:
    from rlt.training.spec import RunSpec

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
    "trainer.args.max_time",
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
def added_tokens(spec: RunSpec) -> list[str]:
    """The tokens past the shared 140 that this run's model reads, numbered as this process's
    plugins number them (status.json ``added_tokens``; [] for the built-in tasks)."""
    return vocab.added(spec.task.vocab_size)


def tokens_mismatch(spec: RunSpec, status: dict[str, Any]) -> str | None:
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


def started_with(spec: RunSpec) -> dict[str, Any]:
    """The status fields a fresh run records beyond its config: the CPU arithmetic it trains in
    (rlt/portable/) and its token ids past the shared 140. A stopped run resumes only in the
    same (:func:`check_resumable`)."""
    return {
        "portable": portable.active(),
        "arithmetic": portable.started_arithmetic(),
        "added_tokens": added_tokens(spec),
    }


# What a run records when its status.json was lost before it resumed: neither check applies
# (resume_mismatch and tokens_mismatch read only a bool and a list), where an absent record
# would read as "started before the record: portable arithmetic off".
UNKNOWN_START = {"portable": "unknown", "arithmetic": "unknown", "added_tokens": "unknown"}


# --------------------------------------------------------------------------------------------
# The refusals: a directory that holds another run is never skipped, resumed or overwritten
# --------------------------------------------------------------------------------------------
def check_same_config(spec: RunSpec, disk: Snapshot) -> None:
    """Refuse to skip or resume a run directory that holds another configuration, or one whose
    stored configuration cannot be read. A directory that never trained (no results, no
    checkpoint: e.g. a run that failed before its first step) holds nothing to protect."""
    if not disk.trained:
        return
    try:
        stored = stored_config(spec.run_dir)
    except UnreadableConfig as e:
        raise ConfigError(
            f"{e}, so it cannot be told whether the run in {spec.run_dir} is the configuration "
            "asked for. Nothing was changed. Rerun with force=true to retrain it (its old "
            "results are set aside), or restore the file."
        ) from e
    if stored is None:
        return
    diffs = config_differences(stored, spec.settings.resolved, trained_to_end=_trained_to_end(disk))
    if not diffs:
        return
    listing = "\n  ".join(diffs)
    raise ConfigError(
        f"{spec.run_dir} holds a run of another configuration; these keys differ "
        f"(stored -> requested):\n  {listing}\n"
        "Nothing was changed. Either rerun with force=true to retrain this directory with the "
        "new values (its old results are replaced), or keep both: "
        + (_variant_hint(diffs, spec.settings.resolved) or "give the new run its own place: ")
        + "root=DIR or sweep_name=NAME."
    )


def _trained_to_end(disk: Snapshot) -> bool:
    """Whether the run is done and trained its full step count (its early stop, if it had
    one, never fired)."""
    results = disk.results
    if not isinstance(results, dict) or results.get("stopped_early") is not None:
        return False
    return disk.state == "done" and (disk.status or {}).get("step") == results.get("max_steps")


def _variant_hint(diffs: list[str], requested: dict[str, Any]) -> str | None:
    """Where only model keys differ, the request is a variant of the stored model: the fix is
    its own name and label (its own directory and table column), not another root."""
    keys = [line.split(":", 1)[0] for line in diffs]
    if not all(k.startswith("model.") for k in keys) or "model.name" in keys:
        return None
    model = requested.get("model") or {}
    name, label = model.get("name"), model.get("label") or model.get("name")
    key = keys[0].removeprefix("model.")
    value = model.get(key)
    shown = value if isinstance(value, (int, float, str, bool)) else "X"
    suffix = f"{key}{shown}".replace(".", "").replace("-", "m").replace(" ", "")
    return (
        f"this is a variant of model {name}, so give it its own name and label (its own "
        f"directory and table column), e.g. model.name={name}_{suffix} "
        f"\"model.label='{label} {key}={shown}'\" (or a file conf/model/{name}_{suffix}.yaml, "
        "see docs/EXTENDING.md, to sweep both with -m model=...); or give the new run another "
        "place: "
    )


def _resuming(disk: Snapshot) -> dict[str, Any] | None:
    """The status of a run that this command would continue from its last.ckpt, or None: no
    checkpoint, a status that does not parse (what it started with is not known), or a finished
    run (done, with readable results: it is skipped and its checkpoint never loaded)."""
    if not disk.has_last or disk.status is None:
        return None
    if disk.state == "done" and disk.results is not None:
        return None
    return disk.status


def check_resumable(spec: RunSpec, disk: Snapshot) -> None:
    """Refuse to resume a stopped run in another CPU arithmetic than it started in
    (rlt/portable/: its numbers would change mid-run), or one whose task's tokens this process
    numbers otherwise (a plugin added whose tokens sort before the task's moves its ids: two
    swapped ids would resume silently with the embedding rows exchanged). A plugin that leaves
    the table as it was (a family, a metric, tokens after the task's) changes nothing."""
    status = _resuming(disk)
    if status is None:
        return
    why = portable.resume_mismatch(status.get("portable"), status.get("arithmetic"))
    if why is not None:
        raise ConfigError(
            f"cannot resume {spec.run_dir}: {why}. Nothing was changed; force=true retrains it "
            "from scratch in this process's arithmetic."
        )
    why = tokens_mismatch(spec, status)
    if why is None:
        return
    try:
        stored = stored_config(spec.run_dir) or {}
    except UnreadableConfig:
        stored = {}
    started = plugins_override(stored.get("plugins"))
    asked = plugins_override(spec.settings.plugins)
    raise ConfigError(
        f"cannot resume {spec.run_dir}: it started with {started} and this run asks for "
        f"{asked}; {why}, so its checkpoint's embedding and output rows would stand for other "
        f"tokens. Nothing was changed: resume it with {started}, train the new plugin set "
        "elsewhere (root=DIR or sweep_name=NAME), or retrain it here with force=true."
    )


def same_run(spec: RunSpec, status: dict[str, Any]) -> bool:
    """Whether the directory's run is the requested one in every respect a resume needs: this
    arithmetic, this token numbering, and this configuration stored (readable)."""
    if portable.resume_mismatch(status.get("portable"), status.get("arithmetic")) is not None:
        return False
    if tokens_mismatch(spec, status) is not None:
        return False
    try:
        stored = stored_config(spec.run_dir)
    except UnreadableConfig:
        return False
    return stored is not None and not config_differences(stored, spec.settings.resolved)
