"""The Hydra facts a run needs, with no dependency on the rest of rlt.training: the config
resolvers, whether this process is a multirun job, where Hydra put the job, and Hydra's .hydra/
record of it. ``spec`` and ``run`` import this; the Hydra-facing layer on top of them
(``hydra_support``: precheck, grid files, the sweep summary) imports them, never the reverse.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def register_resolvers() -> None:
    """``rlt_sum`` (layer totals for the Transformer), ``rlt_first`` (first non-null) and the
    SLURM launcher's resources from the trainer (``rlt_slurm_gpus``, ``rlt_slurm_cpus``)."""
    if not OmegaConf.has_resolver("rlt_sum"):
        OmegaConf.register_new_resolver("rlt_sum", lambda *xs: sum(int(x) for x in xs))
    if not OmegaConf.has_resolver("rlt_first"):
        OmegaConf.register_new_resolver(
            "rlt_first", lambda *xs: next((x for x in xs if x not in (None, "None", "null")), None)
        )
    if not OmegaConf.has_resolver("rlt_slurm_gpus"):
        OmegaConf.register_new_resolver("rlt_slurm_gpus", slurm_gpus)
    if not OmegaConf.has_resolver("rlt_slurm_cpus"):
        OmegaConf.register_new_resolver("rlt_slurm_cpus", slurm_cpus)


def slurm_gpus(accelerator: str, devices: Any) -> int:
    """``hydra.launcher.gpus_per_node`` from the trainer: none for a CPU run."""
    return 0 if str(accelerator) == "cpu" else int(devices)


def slurm_cpus(threads: Any) -> int:
    """``hydra.launcher.cpus_per_task`` from ``trainer.threads`` (auto: 4, the report's)."""
    return 4 if threads in (None, "auto", "None", "null") else int(threads)


register_resolvers()


def is_multirun() -> bool:
    """Whether this process runs a job of ``train.py -m`` (False outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:  # HydraConfig not set: called without Hydra
        return False


def hydra_output_dir() -> str | None:
    """The job's output directory when running under Hydra (``hydra.run.dir`` for a single
    run, ``hydra.sweep.dir/subdir`` in a multirun), else None. Where a user moved Hydra's
    output, the run directory moves with it."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get().runtime.output_dir
    except (ValueError, AttributeError):
        return None


def save_hydra_files(config_yaml: str, run_dir: Path) -> None:
    """Hydra's record of the job (``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``),
    written by the run once it holds the run's lock; Hydra's own writing is off
    (``hydra.output_subdir: null``), so a second launch of the same run that finds it busy
    leaves the first one's record as it was. Nothing outside Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except ValueError:
        return
    from omegaconf import OmegaConf

    from rlt.rundir import atomic_write_text

    out = Path(run_dir) / ".hydra"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", config_yaml)
    atomic_write_text(out / "hydra.yaml", OmegaConf.to_yaml({"hydra": hc}))
    atomic_write_text(out / "overrides.yaml", OmegaConf.to_yaml(list(hc.overrides.task)))


def run_dir_for(cfg: DictConfig) -> Path:
    """The one place that decides where a run lives: Hydra's job directory when Hydra runs the
    job, else ``cfg.out_dir`` (root/group/cell). Kept relative when it is the default."""
    default = Path(cfg.out_dir)
    out = hydra_output_dir()
    if out is None or Path(out).resolve() == default.resolve():
        return default
    with contextlib.suppress(ValueError):
        return Path(out).resolve().relative_to(Path.cwd())
    return Path(out)
