"""What a stopped run must share with the process that resumes it, beyond its config (which
rlt/training/identity.py compares): the CPU arithmetic it started in (rlt/portable/) and the ids
of its task's tokens (plugins can add tokens). Each check refuses in one line, before anything is
written; a finished run is only skipped and never refused."""

from __future__ import annotations

from typing import Any

from rlt import portable
from rlt.tasks import vocab
from rlt.training import identity
from rlt.training.spec import ConfigError, RunSpec


def _resuming(spec: RunSpec) -> dict[str, Any] | None:
    """The status of a run that this command would continue from its last.ckpt, or None: no
    checkpoint, a status that does not parse (what it started with is not known), or a finished
    run (done, with readable results: it is skipped and its checkpoint never loaded). The one
    rule of both resume checks below."""
    d = spec.dir
    if not d.last_ckpt.exists():
        return None
    status = d.status()
    if status is None:
        return None
    if status.get("state") == "done" and d.results() is not None:
        return None
    return status


def check_same_arithmetic(spec: RunSpec) -> None:
    """Refuse to resume a stopped run in another CPU arithmetic than it started in
    (rlt/portable/): its numbers would change mid-run. A finished run is only skipped."""
    status = _resuming(spec)
    if status is None:
        return
    why = portable.resume_mismatch(status.get("portable"), status.get("arithmetic"))
    if why is not None:
        raise ConfigError(
            f"cannot resume {spec.run_dir}: {why}. Nothing was changed; force=true retrains it "
            "from scratch in this process's arithmetic."
        )


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


def check_same_tokens(spec: RunSpec) -> None:
    """Refuse to resume a stopped run whose task's tokens this process numbers otherwise than
    the run started with: a plugin added whose tokens sort before the task's moves the task's
    ids (two swapped ids resume silently and train on with the embedding rows exchanged; a
    larger table fails to load). A plugin that leaves the table as it was (a family, a metric,
    tokens after the task's) changes nothing and is accepted. A finished run is only skipped."""
    status = _resuming(spec)
    if status is None:
        return
    why = tokens_mismatch(spec, status)
    if why is None:
        return
    try:
        stored = identity.stored_config(spec.run_dir) or {}
    except identity.UnreadableConfig:
        stored = {}
    started = plugins_override(stored.get("plugins"))
    asked = plugins_override(spec.settings.plugins)
    raise ConfigError(
        f"cannot resume {spec.run_dir}: it started with {started} and this run asks for "
        f"{asked}; {why}, so its checkpoint's embedding and output rows would stand for other "
        f"tokens. Nothing was changed: resume it with {started}, train the new plugin set "
        "elsewhere (root=DIR or sweep_name=NAME), or retrain it here with force=true."
    )


def plugins_override(names: Any) -> str:
    """``plugins=[a,b]`` as a command line gives it."""
    return "plugins=[" + ",".join(str(n) for n in (names or [])) + "]"
