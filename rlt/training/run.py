"""One training run end to end: validate the config, train (or resume, or skip), select the
checkpoint, evaluate length generalization, write the run directory.

``train.py`` is a thin Hydra wrapper around :func:`run`. Everything here reads a plain
composed config, so tests can call it without a command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

import rlt
from rlt import rundir
from rlt.models import DeltaNetConfig, LSTMConfig, RLTConfig, TransformerConfig
from rlt.tasks import get_task
from rlt.training import hydra_support, identity, slurm
from rlt.training.callbacks import (
    POLICIES,
    FeedbackDiagnostics,
    FeedbackScheduleCallback,
    PlainProgress,
    ValidationAndCheckpoints,
    load_weights,
    step_progress_bar,
)
from rlt.training.evaluate import evaluate_lengths, evaluate_loader
from rlt.training.schedule import FeedbackSchedule


class ConfigError(ValueError):
    """A configuration that cannot run; raised before any work starts."""


@dataclass
class RunSpec:
    """Everything a run needs, validated: built from the composed Hydra config."""

    cfg: DictConfig
    run_dir: Path
    family: str
    model_kwargs: dict[str, Any]
    task: Any
    test_lengths: list[int]
    accumulate: int
    schedule: FeedbackSchedule | None
    identity: dict[str, Any]


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------
def prepare(cfg: DictConfig) -> RunSpec:
    """Validate ``cfg`` and resolve it into a :class:`RunSpec`; raises :class:`ConfigError`
    naming the config key and the fix. Allocates no tensors."""
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # interpolation errors name the key already
        raise ConfigError(f"config does not resolve: {e}") from e
    _check_numbers(cfg)
    scale, model, split = cfg.scale, cfg.model, cfg.split
    for key in ("n_enc", "n_dec"):
        if not isinstance(split[key], int) or split[key] < 0:
            raise ConfigError(f"split.{key} must be a non-negative integer, got {split[key]!r}")
    if split.n_enc + split.n_dec < 1:
        raise ConfigError(f"split {split.name!r} has no layers; pick e.g. split=4+4")
    if scale.global_batch % scale.micro_batch != 0:
        raise ConfigError(
            f"scale.global_batch={scale.global_batch} is not a multiple of "
            f"scale.micro_batch={scale.micro_batch}"
        )
    if scale.max_steps < 1 or scale.val_every < 1:
        raise ConfigError("scale.max_steps and scale.val_every must be >= 1")
    if model.get("family") == "rlt" and str(model.get("name", "")).startswith("rlt2"):
        if model.get("feedback_interval") is None:
            raise ConfigError("RLT-2 needs a chunk size: set model.feedback_interval=B (e.g. 4)")
    family, _, kwargs = model_config(cfg)
    trainer_args(cfg)

    schedule = None
    if model.get("feedback_schedule"):
        if family != "rlt" or model.feedback_interval is None:
            raise ConfigError(
                "model.feedback_schedule needs an RLT model with feedback (model=rlt2 or rlt1)"
            )
        try:
            schedule = FeedbackSchedule.parse(
                OmegaConf.to_container(model.feedback_schedule), scale.max_steps
            )
        except ValueError as e:
            raise ConfigError(str(e)) from e
        if schedule.at(0) is None or any(b is None for _, b in schedule.stages):
            raise ConfigError("model.feedback_schedule: every stage needs a finite chunk size B")
        kwargs["feedback_interval"] = schedule.at(0)

    try:
        options = dict(cfg.task.options)
        if cfg.task.test_lengths:
            options["test_lengths"] = list(cfg.task.test_lengths)
        task = get_task(
            cfg.task.kind,
            data_seed=cfg.task.data_seed,
            n_val=scale.n_val,
            n_test=scale.n_test,
            **options,
        )
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"task {cfg.task.name!r}: {e}") from e
    run_dir = hydra_support.run_dir_for(cfg)
    lengths = list(task.test_lengths)
    if scale.test_lengths_limit:
        lengths = _spread(sorted(lengths), int(scale.test_lengths_limit))
    identity = {
        "task": cfg.task.name,
        "task_kind": cfg.task.kind,
        "model": model.name,
        "label": model.label,
        "family": family,
        "split": split.name if family == "rlt" else None,
        "n_enc": split.n_enc,
        "n_dec": split.n_dec,
        "n_layers": split.n_enc + split.n_dec,
        "feedback_interval": model.feedback_interval if family == "rlt" else None,
        "seed": cfg.seed,
        "data_seed": cfg.task.data_seed,
        "preset": scale.name,
        "sweep": cfg.sweep_name,
        "cell": cfg.cell,
        "run_dir": str(run_dir),
    }
    return RunSpec(
        cfg=cfg,
        run_dir=run_dir,
        family=family,
        model_kwargs=kwargs,
        task=task,
        test_lengths=[int(x) for x in lengths],
        accumulate=scale.global_batch // scale.micro_batch,
        schedule=schedule,
        identity=identity,
    )


# (key, kind, minimum, may be null): every numeric field a run reads, checked before any work.
_NUMBERS = (
    ("seed", int, 0, False),
    ("scale.d_model", int, 1, False),
    ("scale.n_heads", int, 1, False),
    ("scale.d_ff", int, 1, True),
    ("scale.global_batch", int, 1, False),
    ("scale.micro_batch", int, 1, False),
    ("scale.max_steps", int, 1, False),
    ("scale.val_every", int, 1, False),
    ("scale.warmup_steps", int, 0, False),
    ("scale.lr", float, 0, False),
    ("scale.min_lr", float, 0, False),
    ("scale.n_val", int, 1, True),
    ("scale.n_test", int, 1, True),
    ("scale.eval_batch", int, 1, False),
    ("scale.test_lengths_limit", int, 1, True),
    ("task.data_seed", int, 0, False),
    ("optim.weight_decay", float, 0, False),
    ("optim.grad_clip", float, 0, True),
    ("callbacks.early_stop.val_acc", float, 0, True),
    ("callbacks.early_stop.patience", int, 1, False),
    ("callbacks.diagnostics_every", int, 1, True),
    ("trainer.log_every_n_steps", int, 1, False),
    ("trainer.progress_every", int, 1, True),
    ("trainer.progress_seconds", float, 0, False),
)


_TOP_LEVEL = {
    "task", "model", "split", "scale", "trainer", "logger", "callbacks", "optim", "seed",
    "root", "sweep_name", "group", "cell", "out_dir", "resume", "force", "print_table",
    "debug_flags",
}  # fmt: skip


def _check_numbers(cfg: DictConfig) -> None:
    """No unknown top-level key (``+foo=1``), and every numeric field has the right type and
    range, with a message naming the key."""
    unknown = sorted(set(cfg.keys()) - _TOP_LEVEL)
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {unknown}; valid top-level keys: {sorted(_TOP_LEVEL)}"
        )
    for key, kind, minimum, nullable in _NUMBERS:
        value = OmegaConf.select(cfg, key, default="<missing>")
        if value == "<missing>":
            raise ConfigError(f"{key} is missing from the config; add it (see conf/)")
        if value is None and nullable:
            continue
        ok_type = not isinstance(value, bool) and (
            isinstance(value, int) if kind is int else isinstance(value, int | float)
        )
        if not ok_type or not math.isfinite(value) or value < minimum:
            what = "an integer" if kind is int else "a number"
            raise ConfigError(f"{key} must be {what} >= {minimum}, got {value!r}")
    if cfg.scale.lr <= 0:
        raise ConfigError(f"scale.lr must be > 0, got {cfg.scale.lr!r}")
    if cfg.scale.min_lr > cfg.scale.lr:
        raise ConfigError(
            f"scale.min_lr ({cfg.scale.min_lr}) must not exceed scale.lr ({cfg.scale.lr})"
        )
    es = cfg.callbacks.early_stop.val_acc
    if es is not None and es > 1:
        raise ConfigError(f"callbacks.early_stop.val_acc is a fraction in [0, 1], got {es!r}")


# Config-only keys of a model node (identity and grouping); every other key is a field of the
# family's config dataclass.
_MODEL_META = ("name", "family", "label", "arch_tag", "feedback_schedule")
# Fields that come from other groups: sizes from scale, depth from split.
_FROM_SCALE = ("d_model", "n_heads", "d_ff")
_FAMILIES = {
    "rlt": RLTConfig,
    "transformer": TransformerConfig,
    "lstm": LSTMConfig,
    "deltanet": DeltaNetConfig,
}


def model_config(cfg: DictConfig) -> tuple[str, type, dict[str, Any]]:
    """(family, config class, validated kwargs) of the model a config describes: every key of
    ``model`` but the meta keys is passed to the family's dataclass; sizes come from ``scale``
    and depth from ``split``. Unknown keys and bad values raise ConfigError naming the fix."""
    model, scale, split = cfg.model, cfg.scale, cfg.split
    family = model.get("family")
    if family not in _FAMILIES:
        raise ConfigError(
            f"model.family {family!r} is unknown; expected one of {sorted(_FAMILIES)}"
        )
    config_cls = _FAMILIES[family]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    settable = sorted(fields - set(_FROM_SCALE) - {"n_enc", "n_dec", "n_layers", "vocab_size"})
    # The baselines carry feedback_interval: null only so every model node has the same keys.
    meta = _MODEL_META if family == "rlt" else (*_MODEL_META, "feedback_interval")
    given = {k: v for k, v in model.items() if k not in meta}
    unknown = sorted(set(given) - set(settable))
    if unknown:
        raise ConfigError(
            f"model.{unknown[0]} is not a field of model family {family!r} "
            f"(unknown: {unknown}); valid keys: model.{', model.'.join(settable)}"
        )
    for f in dataclasses.fields(config_cls):
        if f.name in given:
            _check_type(f"model.{f.name}", given[f.name], f.default)
    kwargs = dict(given)
    kwargs.update({k: scale[k] for k in _FROM_SCALE if k in fields})
    if family == "deltanet" and scale.d_ff is not None:
        # The DeltaNet layer has one d x d matrix more than attention: narrow its FFN by d/3 so
        # its parameters match the Transformer of the same scale (rlt/models/deltanet.py).
        kwargs["d_ff"] = scale.d_ff - scale.d_model // 3
    if family == "rlt":
        kwargs.update(n_enc=split.n_enc, n_dec=split.n_dec)
    else:
        kwargs.update(n_layers=split.n_enc + split.n_dec)
    try:
        config_cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model config: {e}") from e
    return family, config_cls, kwargs


# Trainer arguments the run sets itself, and the config key that controls each.
_TRAINER_OWN = {
    "accelerator": "trainer.accelerator",
    "devices": "trainer.devices",
    "precision": "trainer.precision",
    "max_steps": "scale.max_steps",
    "accumulate_grad_batches": "scale.global_batch / scale.micro_batch",
    "gradient_clip_val": "optim.grad_clip",
    "gradient_clip_algorithm": "optim.grad_clip",
    "limit_val_batches": "scale.val_every (validation runs in ValidationAndCheckpoints)",
    "num_sanity_val_steps": "scale.val_every",
    "check_val_every_n_epoch": "scale.val_every",
    "enable_checkpointing": "callbacks.policies",
    "enable_progress_bar": "trainer.progress_bar",
    "enable_model_summary": "-",
    "logger": "logger=...",
    "callbacks": "callbacks.*",
    "log_every_n_steps": "trainer.log_every_n_steps",
    "overfit_batches": "debug=overfit",
    "default_root_dir": "hydra.run.dir / root",
}


def trainer_args(cfg: DictConfig) -> dict[str, Any]:
    """``trainer.args``: extra lightning.Trainer arguments, checked against its signature."""
    import inspect

    import lightning as L

    node = cfg.trainer.get("args")
    extra = {} if node is None else OmegaConf.to_container(node, resolve=True)
    valid = set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
    for key in extra:
        if key in _TRAINER_OWN:
            raise ConfigError(
                f"trainer.args.{key} is set by the run itself; use {_TRAINER_OWN[key]} instead"
            )
        if key not in valid:
            raise ConfigError(
                f"trainer.args.{key} is not a lightning.Trainer argument; valid: "
                + ", ".join(sorted(valid - set(_TRAINER_OWN)))
            )
    return extra


def _check_type(key: str, value: Any, default: Any) -> None:
    """A model field takes the type of its default (an int is fine where a float is)."""
    if default is None or default is dataclasses.MISSING or value is None:
        return
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int | float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and (isinstance(value, int) or not isinstance(default, int))
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(
            f"{key} must be of type {type(default).__name__} (default {default!r}), got {value!r}"
        )


def _spread(values: list[int], k: int) -> list[int]:
    """``k`` values spread over a sorted list, always keeping the first and the last."""
    if k >= len(values):
        return values
    if k == 1:
        return [values[-1]]
    idx = sorted({round(i * (len(values) - 1) / (k - 1)) for i in range(k)})
    return [values[i] for i in idx]


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
def run(cfg: DictConfig, *, raise_on_failure: bool = True) -> dict[str, Any]:
    """Train, select, evaluate and record one run. Returns ``{"state", "run_dir", ...}`` where
    state is one of done / skipped / resumed / failed / interrupted / busy (a run SLURM
    requeued leaves with SystemExit, see :func:`_stopped`)."""
    spec = prepare(cfg)
    run_dir = spec.run_dir
    cell = spec.identity["cell"]
    results_path = run_dir / rundir.RESULTS
    status = rundir.read_json(run_dir / rundir.STATUS, corrupt_ok=True) or {}
    if not cfg.force:
        _check_same_config(spec)
    finished = results_path.exists() and status.get("state") == "done" and not cfg.force
    if finished and rundir.read_json(results_path, corrupt_ok=True) is None:
        _say(
            f"[repair] {cell}: {results_path} is unreadable; evaluating the finished run again "
            "from its checkpoints"
        )
        finished = False
    if finished:
        _say(f"[skipped] {cell}: already done; results in {results_path} (force=true retrains)")
        if cfg.print_table and not hydra_support.is_multirun():
            with contextlib.suppress(Exception):
                print_table(rundir.read_json(results_path))
        return {"state": "skipped", "run_dir": str(run_dir)}

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write_test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"cannot write to the run directory {run_dir} ({e.strerror}); make it writable or "
            "put the run elsewhere with root=DIR"
        ) from e
    with _run_lock(run_dir) as acquired:
        if not acquired:
            _say(f"[busy] {cell}: another process is training this run ({run_dir / '.lock'})")
            return {"state": "busy", "run_dir": str(run_dir)}
        last = run_dir / rundir.CKPT_DIR / rundir.LAST_CKPT
        resuming = cfg.resume and last.exists() and not cfg.force
        if cfg.force and last.exists():
            last.unlink()
        if resuming:
            _check_checkpoint(last)
        rundir.atomic_write_text(run_dir / rundir.CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
        if (job := slurm.job_info()) is not None:
            rundir.write_status(run_dir, "running", slurm=job)
        try:
            result = _train_and_evaluate(spec, last if resuming else None)
        except BaseException as e:
            stop = _stop_reason(e)
            if stop is not None:
                return _stopped(spec, stop, e, raise_on_failure)
            rundir.write_status(
                run_dir,
                "failed",
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc(),
            )
            _say(
                f"[failed] {cell}: {type(e).__name__}: {e} (traceback in {run_dir / rundir.STATUS})"
            )
            if raise_on_failure or isinstance(e, KeyboardInterrupt):
                raise
            return {"state": "failed", "run_dir": str(run_dir), "error": str(e)}
    state = "resumed" if resuming else "done"
    _say(f"[{state}] {cell}: results in {results_path}")
    return {"state": state, "run_dir": str(run_dir), "results": result}


def _stop_reason(e: BaseException) -> str | None:
    """``requeued`` or ``interrupted`` when the run was stopped from outside rather than
    failing: SIGTERM (Lightning raises SIGTERMException at the next step: SLURM preemption,
    requeue, time limit, scancel, kill), submitit's exit after it requeued a timed-out job
    (SystemExit), Ctrl-C. ``requeued`` when SLURM requeued the job (it comes back and resumes
    from last.ckpt)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    if not isinstance(e, (SIGTERMException, SystemExit, KeyboardInterrupt)):
        return None
    return "requeued" if slurm.was_requeued() else "interrupted"


def _stopped(spec: RunSpec, state: str, e: BaseException, raise_on_failure: bool) -> dict[str, Any]:
    """Record a run stopped from outside (see :func:`_stop_reason`); its last.ckpt stays, so
    the requeued job, or a relaunch of the same command, resumes it."""
    cell = spec.identity["cell"]
    status = rundir.write_status(spec.run_dir, state, stopped_by=type(e).__name__)
    step = status.get("step")
    at = f" at step {step}" if step is not None else ""
    if state == "requeued":
        _say(
            f"[requeued] {cell}: stopped{at}; SLURM requeued the job, which resumes from "
            f"{rundir.CKPT_DIR}/{rundir.LAST_CKPT}"
        )
        # Leave without a result: submitit then writes none, and the launcher waits for the
        # job's next run instead of taking this one as its outcome.
        if isinstance(e, SystemExit):
            raise e
        raise SystemExit(143) from e
    _say(f"[interrupted] {cell}: stopped{at} ({type(e).__name__}); the same command resumes it")
    # A grid job stopped by SIGTERM reports to the sweep summary; Ctrl-C and any other exit
    # (SIGTERMException is a SystemExit too) end the process.
    if raise_on_failure or type(e).__name__ != "SIGTERMException":
        raise e
    return {"state": "interrupted", "run_dir": str(spec.run_dir), "error": type(e).__name__}


@contextlib.contextmanager
def _run_lock(run_dir: Path):
    """An exclusive lock file so two jobs of a sweep never train the same run directory (the
    Transformer of a grid over splits maps several cells to one run)."""
    lock = run_dir / rundir.LOCK
    acquired = False
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, f"{os.getpid()} {platform.node()}".encode())
            os.close(fd)
            acquired = True
            break
        except FileExistsError:
            if rundir.lock_is_stale(lock):
                lock.unlink(missing_ok=True)
                continue
            break
    try:
        yield acquired
    finally:
        if acquired:
            lock.unlink(missing_ok=True)


def _check_same_config(spec: RunSpec) -> None:
    """Refuse to skip or resume a run directory that holds another configuration."""
    stored = identity.stored_config(spec.run_dir)
    if stored is None:
        return
    diffs = identity.config_differences(stored, identity.requested_config(spec.cfg))
    if not diffs:
        return
    listing = "\n  ".join(diffs)
    raise ConfigError(
        f"{spec.run_dir} holds a run of another configuration; these keys differ "
        f"(stored -> requested):\n  {listing}\n"
        "Nothing was changed. Either rerun with force=true to retrain this directory with the "
        "new values (its old results are replaced), or keep both by giving the new run its own "
        "place: root=DIR or sweep_name=NAME."
    )


def _check_checkpoint(path: Path) -> None:
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


def _resolve_threads(cfg: DictConfig) -> int:
    """``trainer.threads``: an integer, or ``auto``: one thread for small models (width < 256,
    where intra-op threads cost more than they give, badly so on a busy machine), else the
    cores divided by the jobs a parallel launcher runs side by side."""
    threads = cfg.trainer.threads
    if threads in (None, "auto"):
        if cfg.scale.d_model < 256:
            return 1
        n_jobs = 1
        with contextlib.suppress(Exception):
            from hydra.core.hydra_config import HydraConfig

            launcher = HydraConfig.get().launcher
            n_jobs = int(launcher.get("n_jobs", 1) or 1)
        threads = max(1, _cores() // max(1, n_jobs))
    return int(threads)


def _cores() -> int:
    """The cores this process may use: SLURM's allocation inside a job (not the node's), else
    the CPU affinity mask."""
    with contextlib.suppress(KeyError, ValueError):
        return max(1, int(os.environ["SLURM_CPUS_PER_TASK"]))
    with contextlib.suppress(AttributeError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _devices(cfg: DictConfig):
    """Lightning's ``devices``: one GPU per job, chosen by the job number, when several GPUs
    are visible and the launcher runs jobs side by side (SLURM jobs see only their own)."""
    if cfg.trainer.accelerator != "gpu" or not torch.cuda.is_available():
        return cfg.trainer.devices
    n = torch.cuda.device_count()
    if n <= 1 or cfg.trainer.devices != 1:
        return cfg.trainer.devices
    job = 0
    with contextlib.suppress(Exception):
        from hydra.core.hydra_config import HydraConfig

        job = HydraConfig.get().job.num
    return [job % n]


def _quiet_lightning() -> None:
    """Keep the terminal for what matters: progress, the per-run line and the final table."""
    import logging
    import warnings

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    for message in (
        ".*val_dataloader.*validation_step.*",
        ".*does not have many workers.*",
        ".*LeafSpec.*",
    ):
        warnings.filterwarnings("ignore", message=message)


def _train_and_evaluate(spec: RunSpec, ckpt_path: Path | None) -> dict[str, Any]:
    import lightning as L

    from rlt.tasks.data import TaskDataModule
    from rlt.training.module import MODULES

    cfg, run_dir = spec.cfg, spec.run_dir
    _quiet_lightning()
    torch.set_num_threads(_resolve_threads(cfg))
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    dm = TaskDataModule(
        task=spec.task,
        micro_batch_size=cfg.scale.micro_batch,
        global_batch_size=cfg.scale.global_batch,
        max_steps=cfg.scale.max_steps,
        eval_batch_size=cfg.scale.eval_batch,
    )
    failure = (
        OmegaConf.to_container(cfg.callbacks.inject_failure)
        if cfg.callbacks.inject_failure
        else None
    )
    if failure and failure.get("cell") not in (None, cfg.cell):
        failure = None  # the injected failure targets another cell of the sweep
    module = MODULES[spec.family](
        model_cfg=spec.model_kwargs,
        optim_cfg=OmegaConf.to_container(cfg.optim),
        schedule_cfg={
            "lr": cfg.scale.lr,
            "min_lr": cfg.scale.min_lr,
            "warmup_steps": cfg.scale.warmup_steps,
            "max_steps": cfg.scale.max_steps,
        },
        failure=failure,
    )
    n_params = module.model.num_parameters()

    recorder = ValidationAndCheckpoints(
        run_dir=run_dir,
        val_loader_fn=dm.val_dataloader,
        evaluate_fn=lambda m, loader: evaluate_loader(m.model, loader, spec.task.acc_mode),
        val_every=cfg.scale.val_every,
        max_steps=cfg.scale.max_steps,
        policies=list(cfg.callbacks.policies),
        train_log_every=cfg.trainer.log_every_n_steps,
        stop_at_val_acc=cfg.callbacks.early_stop.val_acc,
        stop_patience=cfg.callbacks.early_stop.patience,
    )
    callbacks: list[L.Callback] = [recorder]
    if cfg.callbacks.diagnostics_every and spec.family == "rlt":
        n = 64

        def diagnostic_batch():
            return next(iter(dm.val_dataloader()))["tokens"][:n]

        callbacks.append(
            FeedbackDiagnostics(run_dir, diagnostic_batch, cfg.callbacks.diagnostics_every)
        )
    if spec.schedule is not None:
        callbacks.append(FeedbackScheduleCallback(spec.schedule))
    live_bar = bool(cfg.trainer.progress_bar) and sys.stdout.isatty()
    if live_bar:
        callbacks.append(step_progress_bar())
    elif cfg.trainer.progress_every:
        callbacks.append(
            PlainProgress(
                cell=spec.identity["cell"],
                recorder=recorder,
                log_path=run_dir / rundir.TRAIN_LOG,
                every_steps=cfg.trainer.progress_every,
                every_seconds=cfg.trainer.progress_seconds,
            )
        )
    loggers = _make_loggers(cfg, spec, run_dir)

    trainer = L.Trainer(
        **{"deterministic": False, **trainer_args(cfg)},
        accelerator=cfg.trainer.accelerator,
        devices=_devices(cfg),
        precision=cfg.trainer.precision,
        max_steps=cfg.scale.max_steps,
        accumulate_grad_batches=spec.accumulate,
        gradient_clip_val=cfg.optim.grad_clip,
        gradient_clip_algorithm="norm",
        limit_val_batches=0,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        enable_checkpointing=False,
        enable_progress_bar=live_bar,
        enable_model_summary=False,
        logger=loggers or False,
        callbacks=callbacks,
        log_every_n_steps=cfg.trainer.log_every_n_steps,
        overfit_batches=cfg.debug_flags.overfit_batches,
        default_root_dir=str(run_dir),
    )
    fit_start = time.perf_counter()
    trainer.fit(
        module,
        datamodule=dm,
        ckpt_path=str(ckpt_path) if ckpt_path else None,
        weights_only=True,  # tensors and plain containers only: a shared run dir runs no code
    )
    if trainer.interrupted or (
        trainer.global_step < cfg.scale.max_steps and recorder.stopped_early is None
    ):
        raise RuntimeError(
            f"training stopped at step {trainer.global_step} of {cfg.scale.max_steps} "
            "(interrupted); rerun the same command to resume from last.ckpt"
        )
    if not recorder.val_curve or recorder.val_curve[-1]["step"] != trainer.global_step:
        recorder.validate(trainer, module, trainer.global_step)
    fit_seconds = time.perf_counter() - fit_start

    results = _evaluate_policies(spec, module, dm, recorder, n_params)
    results["stopped_early"] = recorder.stopped_early
    results["timing"] = {
        "sec_per_step": recorder.train_seconds / max(1, recorder.timed_steps),
        "train_seconds": recorder.train_seconds,
        "timed_steps": recorder.timed_steps,
        "fit_seconds_this_process": fit_seconds,
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
    }
    rundir.atomic_write_json(run_dir / rundir.RESULTS, results)
    best_acc = max(r["acc"] for r in recorder.val_curve)
    rundir.write_status(
        run_dir,
        "done",
        step=trainer.global_step,
        max_steps=cfg.scale.max_steps,
        best_val_acc=best_acc,
    )
    _log_results(loggers, results)
    if cfg.print_table:
        print_table(results)
    return results


def _evaluate_policies(
    spec, module, dm, recorder: ValidationAndCheckpoints, n_params: int
) -> dict[str, Any]:
    cfg = spec.cfg
    model = module.model
    policies = [p for p in cfg.callbacks.policies if p in POLICIES] or ["min_val_loss"]
    if "min_val_loss" not in policies:
        policies.insert(0, "min_val_loss")
    loaders = dm.test_dataloaders(spec.test_lengths)
    with_exact = "exact" in getattr(spec.task, "metrics", ())
    by_step: dict[int, list[dict]] = {}
    by_policy: dict[str, dict[str, Any]] = {}
    for policy in policies:
        ckpt = load_weights(spec.run_dir / rundir.CKPT_DIR / f"{policy}.pt")
        step = int(ckpt["step"])
        # Evaluate with the chunk size of the last training stage (SPEC: inference must use it).
        fb = spec.schedule.final if spec.schedule is not None else ckpt["feedback_interval"]
        if step not in by_step:
            model.load_state_dict(ckpt["state_dict"])
            if spec.family == "rlt" and fb != model.feedback_interval:
                model.feedback_interval = fb
            _say(f"  evaluating {policy} checkpoint (step {step}) on lengths {spec.test_lengths}")
            by_step[step] = evaluate_lengths(
                model, loaders, with_exact=with_exact, acc_mode=spec.task.acc_mode
            )
        by_policy[policy] = {
            "step": step,
            "feedback_interval": fb if spec.family == "rlt" else None,
            "val": {k: v for k, v in recorder.best[policy].items() if k != "step"},
            "rows": by_step[step],
        }
    selected = by_policy["min_val_loss"]
    return {
        "schema_version": 1,
        "run": spec.identity,
        "params": n_params,
        "max_steps": cfg.scale.max_steps,
        "train_lengths": list(spec.task.train_lengths),
        "test_lengths": spec.test_lengths,
        "chance": getattr(spec.task, "chance", None),
        "selection": {"policy": "min_val_loss", "step": selected["step"], "val": selected["val"]},
        "val_curve": recorder.val_curve,
        "train_curve": recorder.train_curve,
        "test": selected["rows"],
        "test_by_policy": by_policy,
        "feedback_schedule": spec.schedule.to_list() if spec.schedule is not None else None,
        "versions": _versions(),
        "config_hash": hashlib.sha1(OmegaConf.to_yaml(cfg, resolve=True).encode()).hexdigest()[:12],
    }


def _versions() -> dict[str, str]:
    import lightning

    return {
        "rlt": rlt.__version__,
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# --------------------------------------------------------------------------------------------
# Logging and printing
# --------------------------------------------------------------------------------------------
def _make_loggers(cfg: DictConfig, spec: RunSpec, run_dir: Path) -> list:
    from lightning.pytorch.loggers import CSVLogger

    loggers = []
    if cfg.logger.csv:
        loggers.append(CSVLogger(save_dir=str(run_dir), name="", version="csv"))
    if cfg.logger.wandb:
        from lightning.pytorch.loggers import WandbLogger

        w = cfg.logger.wandb
        os.environ.setdefault("WANDB_SILENT", "true")
        loggers.append(
            WandbLogger(
                project=w.project,
                entity=w.entity,
                group=w.group,
                job_type=w.get("job_type"),
                tags=list(w.tags),
                name=spec.identity["cell"],
                id=hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16],
                resume="allow",
                mode=w.mode,
                save_dir=str(run_dir),
                config=OmegaConf.to_container(cfg, resolve=True),
            )
        )
    return loggers


def _log_results(loggers: list, results: dict[str, Any]) -> None:
    for logger in loggers:
        if type(logger).__name__ != "WandbLogger":
            continue
        import wandb

        rows = [
            [policy, r["length"], r["metric"], r["value"]]
            for policy, block in results["test_by_policy"].items()
            for r in block["rows"]
        ]
        logger.experiment.log(
            {
                "test/length_generalization": wandb.Table(
                    columns=["policy", "length", "metric", "value"], data=rows
                )
            }
        )
        logger.experiment.summary.update(
            {
                "params": results["params"],
                "best_step": results["selection"]["step"],
                "sec_per_step": results["timing"]["sec_per_step"],
                **summary_by_length(results),
            }
        )
        wandb.finish()


def summary_by_length(results: dict[str, Any]) -> dict[str, float]:
    """``{"test/acc@256": 0.98, ...}``: the selected checkpoint's test metrics as flat summary
    keys, so W&B's runs table can sort and filter by them."""
    return {f"test/{r['metric']}@{r['length']}": r["value"] for r in results["test"]}


def print_table(results: dict[str, Any]) -> None:
    """The length-generalization table of the selected checkpoint, on the terminal."""
    from rich.console import Console
    from rich.table import Table

    rows = results["test"]
    metrics = list(dict.fromkeys(r["metric"] for r in rows if r["metric"] != "loss"))
    lengths = sorted({r["length"] for r in rows})
    value = {(r["length"], r["metric"]): r["value"] for r in rows}
    run = results["run"]
    lo, hi = results["train_lengths"]
    table = Table(
        title=f"{run['label']} {run['split'] or ''} on {run['task']}, seed {run['seed']}: "
        f"checkpoint of step {results['selection']['step']} (lowest val loss); "
        f"trained on lengths {lo}-{hi}",
    )
    table.add_column("length", justify="right")
    for m in metrics:
        table.add_column(f"{m} %", justify="right")
    for length in lengths:
        mark = "" if lo <= length <= hi else " *"
        table.add_row(f"{length}{mark}", *[f"{100 * value[(length, m)]:.2f}" for m in metrics])
    Console(width=120).print(table)
    print("* beyond the training lengths", flush=True)


def _say(msg: str) -> None:
    print(msg, file=sys.stdout, flush=True)
