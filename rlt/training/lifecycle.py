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
    check_checkpoint   last.ckpt loads, and this version wrote it (the step it holds)
    check_writable     the run directory takes files

Whether the directory holds the run asked for (its config, and the arithmetic and token ids
it started with) is rlt/training/identity.py's to say. Refusals are :class:`ConfigError`
lines naming the fix; a finished run is only ever skipped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from rlt import rundir
from rlt.rundir import Snapshot
from rlt.training import hydra_env, identity, slurm
from rlt.training.callbacks import RunRecord
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
        identity.check_same_config(spec, disk)
        if spec.settings.resume and on_this_machine:  # a SLURM job checks on its own node
            identity.check_resumable(spec, disk)
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
        if not disk.has_last:
            raise ConfigError(
                f"{spec.dir.results_file} is unreadable and {spec.dir.last_ckpt} is gone, so "
                "the finished run cannot be evaluated again without training it anew. Nothing "
                "was changed: put back results.json (an export of the sweep keeps a copy) or "
                "last.ckpt, or rerun with force=true to retrain it (its files are set aside)"
            )
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


def continues_retrain(spec: RunSpec, disk: Snapshot) -> bool:
    """Whether ``force=true`` meets its own retrain, stopped part-way (status ``retrain``, no
    results yet, this configuration stored, in this arithmetic and token numbering): then it
    resumes instead of starting again."""
    status = disk.status or {}
    if not status.get("retrain") or disk.state in ("done", "failed"):
        return False  # a failed retrain starts again from scratch under force=true
    if not disk.has_last or disk.has_results:
        return False
    if not identity.same_run(spec, status):
        return False  # begun in another arithmetic, token numbering or config: started anew
    try:
        check_checkpoint(spec.dir.last_ckpt)
    except ConfigError:
        return False  # an unreadable checkpoint: force=true starts again
    return True


def check_checkpoint(path: Path) -> int:
    """The step ``last.ckpt`` holds; fail with the fix spelled out when it cannot be read."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(ckpt, dict) or not {"state_dict", "loops", "global_step"} <= set(ckpt):
            raise ValueError("not a Lightning training checkpoint")
        step = int(ckpt["global_step"])
    except Exception as e:
        raise ConfigError(
            f"cannot resume from {path}: {_why_unreadable(e)}. Delete that file to train this "
            "run again from step 0 (other runs are untouched), or rerun with force=true (which "
            "also sets aside any results it has)"
        ) from e
    if RunRecord.__qualname__ not in ckpt.get("callbacks", {}):
        raise ConfigError(
            f"cannot resume from {path}: an earlier rlt wrote it (before Lightning's "
            "ModelCheckpoint kept the checkpoint policies), and this version cannot carry its "
            "choices on. Finish the run with the rlt commit that started it, or rerun with "
            "force=true to retrain it."
        )
    return step


def _why_unreadable(e: Exception) -> str:
    """One line on why a checkpoint does not load: torch's own messages run over many lines
    and suggest loading with ``weights_only=False``, which a shared run directory must not."""
    text = str(e).strip()
    if "weights_only" in text or "Weights only" in text:
        return f"{type(e).__name__}: not a file of tensors and plain containers"
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first[:160]}" if first else type(e).__name__


class FinishedMeanwhile(Exception):
    """Another process finished the run after this one judged it (its snapshot is read before
    the lock): it is skipped, never trained again."""


def begin(spec: RunSpec) -> int | None:
    """With the run's lock held: the step from which the run resumes its last.ckpt (a stopped
    run, or a forced retrain stopped part-way), or None when it starts (``force=true`` first
    sets the old results aside); then what every start writes: config.yaml, Hydra's record,
    and the status (a retrain in progress; the arithmetic and token ids a fresh run starts
    with; its SLURM job). Raises :class:`FinishedMeanwhile` for a run done since it was
    judged."""
    s, d = spec.settings, spec.dir
    disk = d.snapshot()  # under the lock, as it stands now
    if not s.force and disk.state == "done" and disk.results is not None:
        raise FinishedMeanwhile(d.results_file)
    last = d.last_ckpt
    continuing = s.force and continues_retrain(spec, disk)
    resuming = s.resume and last.exists() and (not s.force or continuing)
    if s.force and not continuing:
        d.set_aside_results()
        last.unlink(missing_ok=True)
    resume_step = check_checkpoint(last) if resuming else None
    lost_record = resuming and disk.status is None  # status.json damaged or deleted
    d.write_config(s.config_yaml)
    hydra_env.save_hydra_files(s.unresolved_yaml, spec.run_dir)
    if s.force:
        # Marks a forced retrain in progress: stopped, the same command resumes it. A new
        # retrain starts without the stops of the training it replaces.
        fresh = {} if continuing else {"stops": []}
        d.set_status("running", retrain=True, **fresh)
    if not resuming:  # a run resumes in the arithmetic and with the token ids it started in
        d.set_status("running", **identity.started_with(spec))
    elif lost_record:
        say(
            f"[repair] {spec.identity['cell']}: {rundir.STATUS} was unreadable or missing, so "
            f"the arithmetic and token ids this run started with are not known; resuming at "
            f"step {resume_step} in this process's (recorded as unknown)"
        )
        d.set_status("running", **identity.UNKNOWN_START)
    if (job := slurm.job_info()) is not None:
        d.set_status("running", slurm=job)
    return resume_step


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
