"""One training run end to end: what its directory decides (skip, resume, retrain: see
lifecycle.py), the lock, training and evaluation, and a stop or failure recorded. The other
concerns live next to it:

    spec.py           the config, validated, as a RunSpec (prepare)
    lifecycle.py      what the run directory holds decides: skip, repair, refuse, resume
    trainer_setup.py  threads, devices, loggers; the module, step paths and callbacks
    callbacks.py      the run's record of each validation, progress, diagnostics
    checkpoints.py    checkpoint policies and early stopping (Lightning's own callbacks)
    results.py        evaluation of the policies and results.json
    slurm.py          what a run asks SLURM (requeued or cancelled, queue states)

``train.py`` is a thin Hydra wrapper around :func:`run`. Everything here reads a plain
composed config, so tests can call it without a command line.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import traceback
from typing import Any

import torch
from omegaconf import DictConfig

from rlt import rundir
from rlt.training import hydra_env, slurm
from rlt.training.callbacks import out_of_time
from rlt.training.lifecycle import FinishedMeanwhile, begin, check_writable, checked, finished
from rlt.training.results import (
    assemble,
    check_probe,
    evaluate_policies,
    log_results,
    print_table,
    probe,
    say,
    write_done,
)
from rlt.training.spec import RunSpec
from rlt.training.trainer_setup import (
    build_module,
    build_trainer,
    choose_step_paths,
    make_loggers,
    quiet_lightning,
    resolve_threads,
    run_callbacks,
)

# The exit status of a run stopped from outside (SIGTERM, a requeue): as the signal's own.
SIGTERM_EXIT = 143


def run(cfg: DictConfig, *, raise_on_failure: bool = True) -> dict[str, Any]:
    """Train, select, evaluate and record one run. Returns ``{"state", "run_dir", ...}`` where
    state is one of done / skipped / resumed / failed / interrupted / busy (a run SLURM
    requeued leaves with SystemExit, see :func:`_stopped`)."""
    spec, disk = checked(cfg)
    run_dir, d = spec.run_dir, spec.dir
    cell = spec.identity["cell"]
    s = spec.settings
    if finished(spec, disk):
        say(f"[skipped] {cell}: already done; results in {d.results_file} (force=true retrains)")
        if s.print_table and not hydra_env.is_multirun():
            with contextlib.suppress(Exception):
                print_table(d.results())
        return {"state": "skipped", "run_dir": str(run_dir)}

    check_writable(run_dir)
    with d.lock() as acquired:
        if not acquired:
            say(f"[busy] {cell}: another process is training this run ({_holder(run_dir)})")
            return {"state": "busy", "run_dir": str(run_dir)}
        try:
            resume_step = begin(spec)  # resumes last.ckpt, or starts: config and status written
        except FinishedMeanwhile:
            say(
                f"[skipped] {cell}: another process finished it meanwhile; results in {d.results_file}"
            )
            return {"state": "skipped", "run_dir": str(run_dir)}
        try:
            result = _train_and_evaluate(spec, resume_step)
        except BaseException as e:
            stop = _stop_reason(e)
            if stop is not None:
                return _stopped(spec, stop, e, raise_on_failure)
            return _failed(spec, e, raise_on_failure)
    state = "done" if resume_step is None else "resumed"
    say(f"[{state}] {cell}: results in {d.results_file}")
    return {"state": state, "run_dir": str(run_dir), "results": result}


def _holder(run_dir) -> str:
    """Who holds a run's lock, as its file says, and what to do where nobody does: only a
    file system without flock keeps a dead holder's lock (from another host: trusted)."""
    lock = run_dir / rundir.LOCK
    try:
        owner = lock.read_text().strip()
    except OSError:
        owner = None
    who = {None: "owner unreadable", "": "owner not written yet"}.get(
        owner, f"pid and host {owner!r}"
    )
    return f"{lock}: {who}; if no such process runs, delete that file and run again"


def _failed(spec: RunSpec, e: BaseException, raise_on_failure: bool) -> dict[str, Any]:
    """Record a run that raised as failed (error and traceback in status.json); re-raise
    unless the caller collects failures (a grid)."""
    d = spec.dir
    where = f"traceback in {d.status_file}"
    try:
        d.set_status(
            "failed",
            error=f"{type(e).__name__}: {e}",
            traceback=traceback.format_exc(),
        )
    except OSError as status_error:  # a full disk may refuse the status too: keep it short
        where = f"status.json not written either: {status_error.strerror}"
        with contextlib.suppress(OSError):
            d.status_file.write_text('{"state": "failed"}')
    say(f"[failed] {spec.identity['cell']}: {type(e).__name__}: {e} ({where})")
    if raise_on_failure or isinstance(e, KeyboardInterrupt):
        raise e
    return {"state": "failed", "run_dir": str(spec.run_dir), "error": str(e)}


def _stop_reason(e: BaseException) -> str | None:
    """``requeued`` or ``interrupted`` when the run was stopped from outside rather than
    failing: SIGTERM (Lightning raises SIGTERMException at the next step: SLURM preemption,
    requeue, time limit, scancel, kill), submitit's exit after it requeued a timed-out job
    (SystemExit) or its requeue command that never returned (killed by the requeue itself, or
    past submitit's timeout for it), Ctrl-C. ``requeued`` when SLURM requeued the job (it comes
    back and resumes from last.ckpt). A job out of requeues (submitit's UncompletedJobError at
    its last time limit) is ``interrupted``: launching the grid again resumes it."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    if isinstance(e, TimeLimit):
        return "interrupted"
    if type(e).__name__ == "UncompletedJobError":
        # submitit's time-out handler with the requeues (hydra.launcher.max_num_timeout) used
        # up: stopped at its time limit once more, not failing; the run keeps last.ckpt
        return "interrupted"
    signalled = isinstance(e, (SIGTERMException, SystemExit, KeyboardInterrupt))
    if not signalled and not _requeue_command_lost(e):
        return None
    return "requeued" if slurm.was_requeued() else "interrupted"


class TimeLimit(Exception):
    """Training stopped by Lightning's Timer (``trainer.args.max_time``): a stop to resume with
    more time, not a failure."""


def _requeue_command_lost(e: BaseException) -> bool:
    """submitit's time-out handler runs ``scontrol requeue`` inside the job, with a timeout; the
    requeue stops the job's processes, that command among them, which may die of it before it
    returns (CalledProcessError with a negative code), or the controller may not answer in
    time (TimeoutExpired): the job is being stopped from outside either way, not failing (and
    whether SLURM requeued it is asked of the controller)."""
    cmd = getattr(e, "cmd", None)
    if not (isinstance(cmd, (list, tuple)) and list(cmd[:2]) == ["scontrol", "requeue"]):
        return False
    if isinstance(e, subprocess.TimeoutExpired):
        return True
    return isinstance(e, subprocess.CalledProcessError) and e.returncode < 0


def _stopped(spec: RunSpec, state: str, e: BaseException, raise_on_failure: bool) -> dict[str, Any]:
    """Record a run stopped from outside (see :func:`_stop_reason`); its last.ckpt stays, so
    the requeued job, or a relaunch of the same command, resumes it. ``stopped_by`` in the
    status names the stop while the run stays stopped; ``stops`` keeps every stop after the
    run resumes and finishes (:func:`rlt.rundir.write_status`)."""
    cell = spec.identity["cell"]
    status = spec.dir.set_status(state, stopped_by=type(e).__name__)
    step = status.get("step")
    at = f" at step {step}" if step is not None else ""
    if state == "requeued":
        say(
            f"[requeued] {cell}: stopped{at}; SLURM requeued the job, which resumes from "
            f"{rundir.CKPT_DIR}/{rundir.LAST_CKPT}"
        )
        # Leave without a result: submitit then writes none, and the launcher waits for the
        # job's next run instead of taking this one as its outcome.
        if isinstance(e, SystemExit):
            raise e
        raise SystemExit(SIGTERM_EXIT) from e
    if isinstance(e, TimeLimit):
        say(f"[interrupted] {cell}: {e}")
    else:
        say(f"[interrupted] {cell}: stopped{at} ({type(e).__name__}); the same command resumes it")
    # A grid job stopped by SIGTERM (or its requeue) reports to the sweep summary; Ctrl-C and
    # any other exit (SIGTERMException is a SystemExit too) end the process.
    if isinstance(e, (KeyboardInterrupt, SystemExit)) and type(e).__name__ != "SIGTERMException":
        raise e
    if raise_on_failure:
        # Lightning's SIGTERMException is a SystemExit without a code, which would exit 0:
        # a stopped run exits as a process killed by SIGTERM does (128 + 15).
        raise SystemExit(SIGTERM_EXIT) from e
    return {"state": "interrupted", "run_dir": str(spec.run_dir), "error": type(e).__name__}


def _train_and_evaluate(spec: RunSpec, resume_step: int | None) -> dict[str, Any]:
    """Train (from last.ckpt, at ``resume_step``, when resuming), evaluate every checkpoint
    policy, write results.json and the done status; returns the results."""
    import lightning as L

    s = spec.settings
    quiet_lightning()
    torch.set_num_threads(resolve_threads(s))
    L.seed_everything(s.seed, workers=True, verbose=False)
    dm = spec.datamodule()
    module = build_module(spec)
    check_probe(spec, module.model)
    step_paths = choose_step_paths(spec, module.model)
    live_bar = s.trainer.progress_bar and sys.stdout.isatty()
    recorder, callbacks = run_callbacks(spec, dm, live_bar)
    loggers = make_loggers(spec, resume_step)
    trainer = build_trainer(spec, callbacks, loggers, live_bar)
    fit_start = time.perf_counter()
    trainer.fit(
        module,
        datamodule=dm,
        ckpt_path=None if resume_step is None else str(spec.dir.last_ckpt),
        weights_only=True,  # tensors and plain containers only: a shared run dir runs no code
    )
    short = trainer.global_step < s.scale.max_steps and recorder.stopped_early is None
    if short and out_of_time(trainer):
        raise TimeLimit(
            f"trainer.args.max_time ran out at step {trainer.global_step} of "
            f"{s.scale.max_steps}; rerun with a larger trainer.args.max_time (it counts the "
            "training before each resume too) or without it to resume from last.ckpt"
        )
    if trainer.interrupted or short:
        raise RuntimeError(
            f"training stopped at step {trainer.global_step} of {s.scale.max_steps} "
            "(interrupted); rerun the same command to resume from last.ckpt"
        )
    if not recorder.val_curve or recorder.val_curve[-1]["step"] != trainer.global_step:
        raise RuntimeError(  # Lightning validates a stop and the last step: not expected
            f"training ended at step {trainer.global_step} without validating it; rerun the "
            "same command to resume from last.ckpt"
        )
    fit_seconds = time.perf_counter() - fit_start

    by_policy, by_budget = evaluate_policies(spec, module.model, dm, recorder)
    probed = probe(spec, module.model)  # the state probe of the selected checkpoint, if asked
    results = assemble(
        spec,
        recorder,
        by_policy,
        by_budget=by_budget,
        n_params=module.model.num_parameters(),
        step_paths=step_paths,
        probe=probed,
        fit_seconds=fit_seconds,
    )
    write_done(spec, trainer.global_step, recorder, results)
    log_results(loggers, results)
    if s.print_table:
        print_table(results)
    return results
