"""``analysis/tables.py DIR --wandb``: a sweep's tables and figures as one W&B run.

Offline unless WANDB_MODE says otherwise (this project's machines reach no W&B server); the
run lands in ``<out>/wandb`` and uploads later with ``wandb sync``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd


def log_report(
    out: Path, sweep_dirs: list[Path], tables: list[Path], figures: list[Path], project: str = "rlt"
) -> Path:
    """Log every CSV table as a wandb.Table and every PNG figure as a wandb.Image to one run
    (job_type "analysis", grouped by the sweep); returns the run's local directory."""
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    name = "+".join(p.name for p in sweep_dirs)
    run = wandb.init(
        project=project,
        group=name,
        job_type="analysis",
        name=f"tables:{name}",
        dir=str(out),
        mode=os.environ.get("WANDB_MODE", "offline"),
        config={"sweep_dirs": [str(p) for p in sweep_dirs]},
    )
    payload = {}
    for path in tables:
        if path.suffix == ".csv":
            frame = pd.read_csv(path).fillna("")
            payload[f"tables/{path.stem}"] = wandb.Table(dataframe=frame.astype(str))
    for path in figures:
        if path.suffix == ".png":
            payload[f"figures/{path.stem}"] = wandb.Image(str(path))
    run.log(payload)
    run_dir = Path(run.dir).parent
    run.finish()
    return run_dir
