"""How a run's Lightning Trainer is set up around the model: torch threads, devices, Lightning's
own chatter, and the loggers (CSV always, W&B on request) with the summary they receive."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from rlt import rundir
from rlt.training.callbacks import (
    FeedbackDiagnostics,
    FeedbackScheduleCallback,
    PlainProgress,
    RunRecord,
    step_progress_bar,
)
from rlt.training.checkpoints import StopAtValAcc, run_checkpoints
from rlt.training.settings import Settings
from rlt.training.spec import RunSpec


def resolve_threads(settings: Settings) -> int:
    """``trainer.threads``: an integer, or ``auto``: one thread for small models (width < 256,
    where intra-op threads cost more than they give, badly so on a busy machine), else the
    cores divided by the jobs a parallel launcher runs side by side."""
    threads = settings.trainer.threads
    if threads in (None, "auto"):
        if settings.scale.d_model < 256:
            return 1
        n_jobs = 1
        with contextlib.suppress(Exception):
            from hydra.core.hydra_config import HydraConfig

            launcher = HydraConfig.get().launcher
            n_jobs = int(launcher.get("n_jobs", 1) or 1)
        threads = max(1, _cores() // max(1, n_jobs))
    return int(threads)


# trainer.compile=auto never compiles. Measured side by side on one host (BENCHMARKS.md, "C++
# token loop"), the C++ token loop (trainer.native) is faster than the compiled chunk step at
# the laptop shape, the small preset and the paper size (RLT-1 4.39 s against 4.81 s a step),
# gives the eager path's numbers exactly and compiles nothing per process (the compiled step:
# 56-124 s per process and shape). On another host the compiled step had beaten the eager
# Python loop at width >= 256 (the auto rule until then); the C++ loop was not yet measured
# there. on = compile whenever there is a recurrence to compile; on CUDA the GPU check
# measures both (docs/GPU.md).


def resolve_compile(setting: Any, model: torch.nn.Module, device_type: str) -> tuple[bool, str]:
    """``trainer.compile`` (auto | on | off) for this run: whether its RLT-1/RLT-2 model trains
    through the compiled chunk step, and why. ``auto`` does not compile (see above); ``on``
    does, and without a compiler is an error naming the fix; models without a recurrence to
    compile (RLT-0, the baselines, the plain autograd path, checkpointed activations) never
    compile."""
    from rlt.models.compiled import compiler_available
    from rlt.training.environment import no_compiler

    mode = _mode(setting)
    if mode == "off":
        return False, "trainer.compile=off"
    if not _fused_recurrence(model):
        return False, "no fused RLT-1/RLT-2 recurrence to compile"
    if mode == "auto":
        return False, "auto: the C++ token loop (trainer.native) measured faster; on compiles"
    ok, why = compiler_available(device_type)
    if not ok:
        raise no_compiler(why)
    return True, f"trainer.compile={mode}: {why}"


# trainer.native=auto: the C++ token loops (rlt/models/native.py) give the same numbers as the
# Python loops (bit for bit) and cost one build of ~30 s per machine and torch version, after
# which every process loads the cached library in ~0.05 s. auto uses them on the CPU once
# built, and builds them for a run of AUTO_NATIVE_MIN_STEPS steps or more: they save ~8 ms a
# step at the laptop shape, ~30 ms at the small preset, ~0.75 s at the paper size
# (BENCHMARKS.md, "C++ token loop"), and a grid's first run pays the build for all the others.
AUTO_NATIVE_MIN_STEPS = 1000


def resolve_native(
    setting: Any, model: torch.nn.Module, device_type: str, max_steps: int, compiled: bool
) -> tuple[bool, str]:
    """``trainer.native`` (auto | on | off) for this run: whether its RLT-1/RLT-2 model runs
    the fused recurrence's token loops in C++, and why; builds the library when the answer is
    yes. ``auto``: on the CPU, when the library is already built or the run has at least
    AUTO_NATIVE_MIN_STEPS steps, and it can be built. ``on`` where it cannot be built is an
    error naming the fix. Not for a compiled step (it replaces the loops) nor for models
    without a fused recurrence."""
    from rlt.models import native
    from rlt.training.environment import no_native

    mode = _mode(setting)
    if mode == "off":
        return False, "trainer.native=off"
    if not _fused_recurrence(model):
        return False, "no fused RLT-1/RLT-2 recurrence"
    if compiled:
        return False, "the compiled chunk step replaces the token loops"
    if mode == "auto":
        if device_type != "cpu":
            return False, f"auto: the C++ token loop is not yet measured on {device_type} (use on)"
        if not native.is_built() and max_steps < AUTO_NATIVE_MIN_STEPS:
            return (
                False,
                f"auto: not built yet, and {max_steps} steps < {AUTO_NATIVE_MIN_STEPS} are too "
                "few to repay the build",
            )
    ok, why = native.native_available()
    if ok:
        try:
            native.token_loop()
        except Exception as error:  # a broken toolchain: the build's own message
            ok, why = False, f"the build failed: {str(error).strip().splitlines()[-1]}"
    if not ok:
        if mode == "on":
            raise no_native(why)
        return False, f"auto fell back: {why}"
    return True, f"trainer.native={mode}"


def _mode(setting: Any) -> Any:
    """auto | on | off, with YAML's booleans (``compile: true``) read as on / off."""
    return {True: "on", False: "off"}[setting] if isinstance(setting, bool) else setting


def _fused_recurrence(model: torch.nn.Module) -> bool:
    """Whether the model trains through the fused RLT-1/RLT-2 recurrence."""
    config = getattr(model, "config", None)
    return (
        getattr(model, "merge", None) is not None
        and getattr(config, "fused", False)
        and not getattr(config, "checkpoint_activations", False)
    )


def _cores() -> int:
    """The cores this process may use: SLURM's allocation inside a job (not the node's), else
    the CPU affinity mask."""
    with contextlib.suppress(KeyError, ValueError):
        return max(1, int(os.environ["SLURM_CPUS_PER_TASK"]))
    with contextlib.suppress(AttributeError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def devices_for(settings: Settings):
    """Lightning's ``devices``: one GPU per job, chosen by the job number, when several GPUs
    are visible and the launcher runs jobs side by side (SLURM jobs see only their own)."""
    if settings.trainer.accelerator != "gpu" or not torch.cuda.is_available():
        return settings.trainer.devices
    n = torch.cuda.device_count()
    if n <= 1 or settings.trainer.devices != 1:
        return settings.trainer.devices
    job = 0
    with contextlib.suppress(Exception):
        from hydra.core.hydra_config import HydraConfig

        job = HydraConfig.get().job.num
    return [job % n]


def quiet_lightning() -> None:
    """Keep the terminal for what matters: progress, the per-run line and the final table."""
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    for message in (
        ".*val_dataloader.*validation_step.*",
        ".*does not have many workers.*",
        ".*LeafSpec.*",
        # Lightning's hint on any machine with SLURM installed, also for local runs; jobs of
        # hydra/launcher=slurm run under srun already.
        ".*The `srun` command is available on your system but is not used.*",
        # the run's checkpoint files have fixed names, overwritten in place (a resume finds them)
        ".*Checkpoint directory .* exists and is not empty.*",
    ):
        warnings.filterwarnings("ignore", message=message)


def make_loggers(spec: RunSpec, resume_step: int | None = None) -> list:
    """The run's loggers; ``resume_step``: the step a resumed run continues from, whose
    csv/metrics.csv keeps the rows logged before it (Lightning's CSV writer deletes the file
    when it starts)."""
    from lightning.pytorch.loggers import CSVLogger

    s, run_dir = spec.settings, spec.run_dir
    loggers = []
    if s.csv:
        path = run_dir / "csv" / "metrics.csv"
        kept = _csv_rows_before(path, resume_step) if resume_step else None
        csv_logger = CSVLogger(save_dir=str(run_dir), name="", version="csv")
        if kept is not None:
            header, rows = kept
            with warnings.catch_warnings():
                # its warning that the old rows "will be deleted" is not true here
                warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
                writer = csv_logger.experiment  # starting it deletes metrics.csv: write it back
            _write_csv(path, header, rows)
            writer.metrics_keys = list(header)  # new rows append under the same header
        loggers.append(csv_logger)
    if s.wandb:
        from lightning.pytorch.loggers import WandbLogger

        w = s.wandb
        os.environ.setdefault("WANDB_SILENT", "true")
        loggers.append(
            WandbLogger(
                project=w["project"],
                entity=w["entity"],
                group=w["group"],
                job_type=w.get("job_type"),
                tags=list(w["tags"]),
                name=spec.identity["cell"],
                id=hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16],
                resume="allow",
                mode=w["mode"],
                save_dir=str(run_dir),
                config=s.resolved,
            )
        )
    return loggers


def _csv_rows_before(path: Path, step: int) -> tuple[list[str], list[dict]] | None:
    """metrics.csv's header and the rows a resumed run will not log again: training rows of
    earlier steps, validation rows up to the checkpoint's step (its validation is done)."""
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header, rows = list(reader.fieldnames or []), list(reader)
    train = [k for k in header if k.startswith("train/")]

    def kept(row: dict) -> bool:
        at = int(float(row.get("step") or 0))
        return at < step or (at == step and not any(row.get(k) for k in train))

    return header, [row for row in rows if kept(row)]


def _write_csv(path: Path, header: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def build_trainer(spec: RunSpec, callbacks: list, loggers: list, live_bar: bool):
    """The Lightning Trainer of a run: optimizer steps, accumulation, clipping and precision
    from the config; Lightning's validation loop every ``scale.val_every`` steps, whose
    results the run's callbacks record, select on and checkpoint."""
    import lightning as L

    s = spec.settings
    return L.Trainer(
        **{"deterministic": False, **s.trainer_args},
        accelerator=s.trainer.accelerator,
        devices=devices_for(s),
        precision=s.trainer.precision,
        max_steps=s.scale.max_steps,
        accumulate_grad_batches=spec.accumulate,
        gradient_clip_val=s.grad_clip,
        gradient_clip_algorithm="norm",
        # Lightning's validation loop every val_every optimizer steps (counted in batches,
        # over the whole run: check_val_every_n_epoch=None); no sanity check before training
        val_check_interval=s.scale.val_every * spec.accumulate,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        # the run's ModelCheckpoints are among the callbacks (rlt/training/checkpoints.py)
        enable_checkpointing=True,
        enable_progress_bar=live_bar,
        enable_model_summary=False,
        logger=loggers or False,
        callbacks=callbacks,
        log_every_n_steps=s.trainer.log_every_n_steps,
        overfit_batches=s.overfit_batches,
        default_root_dir=str(spec.run_dir),
    )


# --------------------------------------------------------------------------------------------
# The run's module, its step paths and its callbacks
# --------------------------------------------------------------------------------------------


def choose_step_paths(spec: RunSpec, model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """``trainer.compile`` and ``trainer.native`` resolved for this run and set on the model,
    each said on the console; returns their results.json records."""
    s, cell = spec.settings, spec.identity["cell"]
    device_type = "cuda" if s.trainer.accelerator in ("gpu", "cuda") else "cpu"
    compiled, compile_why = resolve_compile(s.trainer.compile, model, device_type)
    model.compiled_step = compiled
    if compiled:
        print(f"[rlt] {cell}: compiled chunk step ({compile_why})", flush=True)
    native, native_why = resolve_native(
        s.trainer.native, model, device_type, s.scale.max_steps, compiled
    )
    model.native_step = native
    if native:
        print(f"[rlt] {cell}: C++ token loop ({native_why})", flush=True)
    elif native_why.startswith("auto fell back"):
        print(
            f"[rlt] warning: {cell}: the C++ token loop is off ({native_why}); training with "
            "the Python loop (the same numbers, slower)",
            flush=True,
        )
    return {
        "compiled_step": {"on": compiled, "why": compile_why},
        "native_loop": {"on": native, "why": native_why},
    }


def build_module(spec: RunSpec):
    """The family's LightningModule with the run's model, optimizer and schedule."""
    from rlt.training.module import module_for

    s = spec.settings
    module = module_for(spec.entry)(
        model_cfg=spec.model_kwargs,
        optim_cfg=s.optim,
        scheduler_cfg=s.scheduler,
        lr=s.scale.lr,
        max_steps=s.scale.max_steps,
        failure=dict(s.failure) if s.failure else None,  # the module marks a sent SIGTERM
    )
    module.acc_mode = spec.task.acc_mode  # validation's accuracy, as the test lengths score it
    return module


def run_callbacks(spec: RunSpec, dm, live_bar: bool) -> tuple[RunRecord, list]:
    """The run's record of itself and every callback of its Trainer, in the order they run:
    what may stop training (``callbacks.early_stop``, the user's ``callbacks.extra``) before
    the record, so it sees a stop at the validation it follows; diagnostics, the feedback
    schedule and progress output as the config asks; the checkpoints last."""
    s, run_dir = spec.settings, spec.run_dir
    keep = run_checkpoints(run_dir, s.callbacks.policies, s.callbacks.budgets)
    stops = []
    if s.callbacks.early_stop.val_acc is not None:
        stops.append(StopAtValAcc(s.callbacks.early_stop.val_acc, s.callbacks.early_stop.patience))
    if s.callbacks.extra:
        from hydra.utils import instantiate

        stops += [instantiate(node) for node in s.callbacks.extra]
    record = RunRecord(
        run_dir=run_dir,
        val_every=s.scale.val_every,
        max_steps=s.scale.max_steps,
        train_log_every=s.trainer.log_every_n_steps,
        records_interval=spec.entry.feedback,
    )
    callbacks = [*stops, record]
    if s.callbacks.diagnostics_every and spec.entry.feedback:

        def diagnostic_batch():
            return next(iter(dm.val_dataloader()))["tokens"][:64]

        callbacks.append(
            FeedbackDiagnostics(run_dir, diagnostic_batch, s.callbacks.diagnostics_every)
        )
    if spec.schedule is not None:
        callbacks.append(FeedbackScheduleCallback(spec.schedule))
    if live_bar:
        callbacks.append(step_progress_bar())
    elif s.trainer.progress_every:
        callbacks.append(
            PlainProgress(
                cell=spec.identity["cell"],
                recorder=record,
                log_path=run_dir / rundir.TRAIN_LOG,
                every_steps=s.trainer.progress_every,
                every_seconds=s.trainer.progress_seconds,
            )
        )
    return record, callbacks + keep
