"""What a run's directory holds decides what a command does with it, before anything is
written: skip it (done), repair it (a damaged status or results file), refuse it (another
configuration, another CPU arithmetic or token numbering, an unreadable checkpoint), resume it
from last.ckpt, continue a retrain stopped part-way, or start it. Each decision reads the
directory's state files once (:meth:`rlt.rundir.RunDir.snapshot`: status, results, which
checkpoints exist), and config.yaml or last.ckpt where it needs them; run.py carries it out.

    check              the config validated and the directory checked, writing nothing
                       (train.py's precheck of a whole grid calls it too); ``checked``: the
                       same, with the directory's snapshot it judged
    finished           a done run with readable results is skipped
    begin              with the lock held: resume or start, and write what a start writes
    continues_retrain  force=true meets its own retrain, stopped part-way
    check_checkpoint   last.ckpt loads, and this version wrote it
    check_writable     the run directory takes files

The token ids a run started with are compared by rlt/training/identity.py (``tokens_mismatch``).
Refusals are :class:`ConfigError` lines naming the fix; a finished run is only ever skipped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from rlt import portable, rundir
from rlt.rundir import Snapshot
from rlt.training import hydra_env, identity, slurm
from rlt.training.callbacks import RunRecord
from rlt.training.identity import added_tokens, plugins_override, tokens_mismatch
from rlt.training.results import say
from rlt.training.spec import ConfigError, RunSpec, check_writable_root, prepare


def check(cfg: DictConfig, *, where: bool = True, on_this_machine: bool = True) -> RunSpec:
    """Everything that refuses a run before it starts, reading the run directory but writing
    nothing: the validated config (:func:`~rlt.training.spec.prepare`: values, paths under
    root, model label, environment) and, unless ``force``, that the directory holds this
    configuration (and, resuming, the arithmetic and token ids the run started with).
    ``train.py`` calls it for every cell of a grid before Hydra creates any directory
    (:func:`rlt.training.hydra_support.precheck`). ``where=False`` skips what depends on the
    run directory (its identity, a writable root): precheck cannot know the directory when
    ``hydra.run.dir`` / ``hydra.sweep.dir`` move it, and the run checks it itself.
    ``on_this_machine=False``: the jobs train elsewhere (SLURM), no CUDA check here."""
    return checked(cfg, where=where, on_this_machine=on_this_machine)[0]


def checked(
    cfg: DictConfig, *, where: bool = True, on_this_machine: bool = True
) -> tuple[RunSpec, Snapshot | None]:
    """:func:`check`, and the snapshot of the run directory it judged (None with
    ``where=False``), from which the run then decides whether it is finished."""
    spec = prepare(cfg, on_this_machine=on_this_machine)
    if not where:
        return spec, None
    check_writable_root(spec.run_dir)
    disk = spec.dir.snapshot()
    if not spec.settings.force:
        _check_same_config(spec, disk)
        if spec.settings.resume and on_this_machine:  # a SLURM job checks on its own node
            _check_resumable(spec, disk)
    return spec, disk


# --------------------------------------------------------------------------------------------
# Skip or repair
# --------------------------------------------------------------------------------------------
def finished(spec: RunSpec, disk: Snapshot) -> bool:
    """Whether the run is done and its results readable (then it is skipped), from the
    directory's snapshot. A done run whose results.json does not parse is evaluated again from
    its checkpoints ("[repair]"); a run whose status.json is damaged but whose results.json is
    complete gets its status back."""
    force = spec.settings.force
    if disk.status_damaged and not force:
        curve = (disk.results or {}).get("val_curve") or []
        if curve and all(isinstance(r, dict) and {"step", "acc"} <= set(r) for r in curve):
            _restore_done_status(spec, disk.results)
            return True
    done = disk.has_results and disk.state == "done" and not force
    if done and disk.results is None:
        say(
            f"[repair] {spec.identity['cell']}: {spec.dir.results_file} is unreadable; evaluating "
            "the finished run again from its checkpoints"
        )
        return False
    return done


def _restore_done_status(spec: RunSpec, results: dict[str, Any]) -> None:
    """status.json rewritten from a complete results.json (the file that is written last
    before the done status, and only by a finished run of the stored configuration)."""
    curve = results["val_curve"]
    say(
        f"[repair] {spec.identity['cell']}: {rundir.STATUS} was unreadable; results.json is "
        "complete, so the status is restored as done"
    )
    spec.dir.set_status(
        "done",
        step=curve[-1]["step"],
        max_steps=results.get("max_steps"),
        best_val_acc=max(r["acc"] for r in curve),
        repaired="status.json was unreadable",
    )


# --------------------------------------------------------------------------------------------
# The same configuration
# --------------------------------------------------------------------------------------------
def _check_same_config(spec: RunSpec, disk: Snapshot) -> None:
    """Refuse to skip or resume a run directory that holds another configuration, or one whose
    stored configuration cannot be read. A directory that never trained (no results, no
    checkpoint: e.g. a run that failed before its first step) holds nothing to protect."""
    if not disk.trained:
        return
    try:
        stored = identity.stored_config(spec.run_dir)
    except identity.UnreadableConfig as e:
        raise ConfigError(
            f"{e}, so it cannot be told whether the run in {spec.run_dir} is the configuration "
            "asked for. Nothing was changed. Rerun with force=true to retrain it (its old "
            "results are set aside), or restore the file."
        ) from e
    if stored is None:
        return
    diffs = identity.config_differences(
        stored, spec.settings.resolved, trained_to_end=_trained_to_end(disk)
    )
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


# --------------------------------------------------------------------------------------------
# Resuming: what a stopped run shares with the process that continues it, beyond its config
# --------------------------------------------------------------------------------------------
def _resuming(disk: Snapshot) -> dict[str, Any] | None:
    """The status of a run that this command would continue from its last.ckpt, or None: no
    checkpoint, a status that does not parse (what it started with is not known), or a finished
    run (done, with readable results: it is skipped and its checkpoint never loaded)."""
    if not disk.has_last or disk.status is None:
        return None
    if disk.state == "done" and disk.results is not None:
        return None
    return disk.status


def _check_resumable(spec: RunSpec, disk: Snapshot) -> None:
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


def continues_retrain(spec: RunSpec) -> bool:
    """Whether ``force=true`` meets its own retrain, stopped part-way (status ``retrain``, no
    results yet, this configuration stored, in this arithmetic and token numbering): then it
    resumes instead of starting again."""
    disk = spec.dir.snapshot()
    status = disk.status or {}
    if not status.get("retrain") or disk.state in ("done", "failed"):
        return False  # a failed retrain starts again from scratch under force=true
    if not disk.has_last or disk.has_results:
        return False
    if portable.resume_mismatch(status.get("portable"), status.get("arithmetic")) is not None:
        return False  # begun in the other CPU arithmetic: force=true starts it anew
    try:
        check_checkpoint(spec.dir.last_ckpt)
    except ConfigError:
        return False  # an unreadable checkpoint: force=true starts again
    if tokens_mismatch(spec, status) is not None:
        return False  # begun with other token ids (another plugin set): started anew too
    try:
        stored = identity.stored_config(spec.run_dir)
    except identity.UnreadableConfig:
        return False  # an unreadable config: started anew too
    return stored is not None and not identity.config_differences(stored, spec.settings.resolved)


def check_checkpoint(path: Path) -> None:
    """Fail with the fix spelled out when ``last.ckpt`` cannot be read."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        if "state_dict" not in ckpt or "loops" not in ckpt:
            raise ValueError("not a Lightning training checkpoint")
    except Exception as e:
        raise ConfigError(
            f"cannot resume from {path}: {type(e).__name__}: {e}. Delete that file to restart "
            f"this run from scratch (finished results elsewhere are untouched), or rerun with "
            f"force=true."
        ) from e
    if RunRecord.__qualname__ not in ckpt.get("callbacks", {}):
        raise ConfigError(
            f"cannot resume from {path}: an earlier rlt wrote it (before Lightning's "
            "ModelCheckpoint kept the checkpoint policies), and this version cannot carry its "
            "choices on. Finish the run with the rlt commit that started it, or rerun with "
            "force=true to retrain it."
        )


def begin(spec: RunSpec) -> bool:
    """With the run's lock held: whether the run resumes from its last.ckpt (a stopped run, or
    a forced retrain stopped part-way) or starts (``force=true`` first sets the old results
    aside); then what every start writes: config.yaml, Hydra's record, and the status (a retrain
    in progress; the arithmetic and token ids a fresh run starts with; its SLURM job)."""
    s, d = spec.settings, spec.dir
    last = d.last_ckpt
    continuing = s.force and continues_retrain(spec)
    resuming = s.resume and last.exists() and (not s.force or continuing)
    if s.force and not continuing:
        d.set_aside_results()
        last.unlink(missing_ok=True)
    if resuming:
        check_checkpoint(last)
    d.write_config(s.config_yaml)
    hydra_env.save_hydra_files(s.unresolved_yaml, spec.run_dir)
    if s.force:
        # Marks a forced retrain in progress: stopped, the same command resumes it. A new
        # retrain starts without the stops of the training it replaces.
        fresh = {} if continuing else {"stops": []}
        d.set_status("running", retrain=True, **fresh)
    if not resuming:  # a run resumes in the arithmetic and with the token ids it started in
        d.set_status(
            "running",
            portable=portable.active(),
            arithmetic=portable.variables(),
            added_tokens=added_tokens(spec),
        )
    if (job := slurm.job_info()) is not None:
        d.set_status("running", slurm=job)
    return resuming


def check_writable(run_dir: Path) -> None:
    """The run directory exists and takes a file, or a one-line refusal naming the fix."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write_test.{os.getpid()}"  # one per process: starts may race
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"cannot write to the run directory {run_dir} ({e.strerror}); make it writable or "
            "put the run elsewhere with root=DIR"
        ) from e
