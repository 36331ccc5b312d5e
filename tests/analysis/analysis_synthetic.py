"""Helpers for the analysis tests: a synthetic sweep in the results.json schema of docs/DESIGN.md section 4, with known values.

Every stored number is a pure function (`value`) of what it describes, so a test can recompute
any table cell by hand with the statistics module, independently of pandas.
"""

from __future__ import annotations

import json
import os
import platform
import zlib
from pathlib import Path

SEEDS = (42, 43, 44)
MODELS = (
    ("rlt1", "4+4"),
    ("rlt1", "5+3"),
    ("rlt0", "4+4"),
    ("rlt2_b4", "4+4"),
    ("transformer", "L8"),
)
LABELS = {
    ("rlt1", "4+4"): "RLT-1 4+4",
    ("rlt1", "5+3"): "RLT-1 5+3",
    ("rlt0", "4+4"): "RLT-0 4+4",
    ("rlt2_b4", "4+4"): "RLT-2 B=4 4+4",
    ("transformer", "L8"): "Transformer 8",
}
TASKS = {
    "parity": {
        "lengths": [8, 16, 64, 256],
        "train": [3, 40],
        "chance": 0.5,
        "metrics": ["acc", "token_acc", "seq_acc"],
    },
    "s5_swaps": {
        "lengths": [32, 48, 64, 512],
        "train": [32, 32],
        "chance": 1 / 120,
        "metrics": ["acc", "token_acc", "seq_acc"],
    },
}
MAX_STEPS = 500
POLICY_STEPS = {"min_val_loss": 300, "final": 500, "max_val_acc": 400}
SEC_PER_STEP = {
    "rlt1": 0.5,
    "rlt2_b4": 0.3,
    "rlt0": 0.25,
    "transformer": 0.2,
    "rlt2_sched_8to1": 0.35,
    "rlt2_sched_4to1": 0.4,
}
PARAMS = {
    ("rlt1", "4+4"): 28_730_000,
    ("rlt1", "5+3"): 28_000_000,
    ("rlt0", "4+4"): 28_730_000 - 787_968,
    ("rlt2_b4", "4+4"): 28_730_000,
    ("transformer", "L8"): 25_310_000,
}
# The report's divergent flat mod-5 seeds, planted where a test can see them.
PLANTED = {("parity", "rlt1", "4+4", 256, "min_val_loss"): {42: 0.1758, 43: 0.1953, 44: 0.9896}}

# The feedback-schedule sweep of issue 8 (make_schedule_sweep): every model at split 2+2.
SCHEDULES = {
    "rlt2_sched_8to1": [[0, 8], [250, 4], [375, 1]],
    "rlt2_sched_4to1": [[0, 4], [250, 1]],
}
SCHEDULE_MODELS = (
    ("rlt1", "2+2"),
    ("rlt2_b4", "2+2"),
    ("rlt0", "2+2"),
    ("rlt2_sched_8to1", "2+2"),
    ("rlt2_sched_4to1", "2+2"),
)
SCHEDULE_LABELS = {
    ("rlt1", "2+2"): "RLT-1 2+2",
    ("rlt2_b4", "2+2"): "RLT-2 B=4 2+2",
    ("rlt0", "2+2"): "RLT-0 2+2",
    ("rlt2_sched_8to1", "2+2"): "RLT-2 B=8→4→1 2+2",
    ("rlt2_sched_4to1", "2+2"): "RLT-2 B=4→1 2+2",
}
# Round numbers for parity at its longest length (256, min_val_loss) and training seconds, so
# the schedule view's cells are checkable by eye: acc 0.7/0.8/0.9 -> 80.00 ± 10.00 %.
SCHEDULE_ACC = {
    "rlt1": (0.90, 0.95, 1.00),  # 95 ± 5
    "rlt2_b4": (0.50, 0.55, 0.60),  # 55 ± 5
    "rlt0": (0.50, 0.50, 0.50),  # 50 ± 0
    "rlt2_sched_8to1": (0.70, 0.80, 0.90),  # 80 ± 10
    "rlt2_sched_4to1": (0.60, 0.80, 1.00),  # 80 ± 20
}
SCHEDULE_SECONDS = {
    "rlt1": (1200, 1260, 1320),  # 21 ± 1 min
    "rlt2_b4": (600, 600, 600),  # 10 ± 0 min
    "rlt0": (480, 540, 600),  # 9 ± 1 min
    "rlt2_sched_8to1": (720, 780, 840),  # 13 ± 1 min
    "rlt2_sched_4to1": (780, 900, 1020),  # 15 ± 2 min
}
for _m, _vals in SCHEDULE_ACC.items():
    PLANTED[("parity", _m, "2+2", 256, "min_val_loss")] = dict(zip(SEEDS, _vals))
# (task, model, split) -> {seed: timing.train_seconds}; default SEC_PER_STEP * MAX_STEPS.
TRAIN_SECONDS = {
    ("parity", m, "2+2"): dict(zip(SEEDS, secs)) for m, secs in SCHEDULE_SECONDS.items()
}
SCHEDULE_HOLES = {("s5_swaps", "rlt2_sched_8to1", "2+2", 44): "failed"}

# Holes in the grid: (task, model, split, seed) -> what is on disk instead of a finished run.
HOLES = {
    ("parity", "rlt1", "5+3", 44): "missing",
    ("s5_swaps", "rlt0", "4+4", 43): "failed",
    ("parity", "transformer", "L8", 44): "running",
}


def value(*key: object) -> float:
    """A reproducible number in [0, 1] for anything: task, model, split, seed, what, ..."""
    return round((zlib.crc32(repr(key).encode()) % 10_000) / 10_000, 4)


def ood_value(
    task: str, model: str, split: str, seed: int, policy: str, length: int, metric: str
) -> float:
    planted = PLANTED.get((task, model, split, length, policy))
    if planted and metric == "acc":
        return planted[seed]
    return value(task, model, split, seed, policy, length, metric)


def val_value(task: str, model: str, split: str, seed: int, step: int, metric: str) -> float:
    return value(task, model, split, seed, "val", step, metric)


def train_seconds(task: str, model: str, split: str, seed: int) -> float:
    planted = TRAIN_SECONDS.get((task, model, split))
    return float(planted[seed]) if planted else SEC_PER_STEP[model] * MAX_STEPS


def b_at(model: str, step: int) -> int | None:
    """The chunk size B in force at `step` (a schedule's stage, else the model's fixed B)."""
    if model in SCHEDULES:
        return [b for start, b in SCHEDULES[model] if step >= start][-1]
    return {"rlt1": 1, "rlt0": None, "rlt2_b4": 4, "transformer": None}[model]


def run_fields(model: str, split: str) -> dict:
    """The architecture fields of results.json["run"] as rlt/training/results.py writes them."""
    if model == "transformer":  # the writer leaves split null; depth comes from the split sum
        return {
            "label": "Transformer 8",
            "family": "transformer",
            "split": None,
            "n_enc": 4,
            "n_dec": 4,
            "n_layers": 8,
            "feedback_interval": None,
        }
    n_enc, n_dec = map(int, split.split("+"))
    b = b_at(model, 0)
    labels = {
        "rlt1": "RLT-1",
        "rlt0": "RLT-0",
        "rlt2_b4": "RLT-2 B=4",
        "rlt2_sched_8to1": "RLT-2 B=8→4→1",
        "rlt2_sched_4to1": "RLT-2 B=4→1",
    }
    return {
        "label": labels[model],
        "family": "rlt",
        "split": split,
        "n_enc": n_enc,
        "n_dec": n_dec,
        "n_layers": n_enc + n_dec,
        "feedback_interval": b,
    }


def results_json(task: str, model: str, split: str, seed: int, run_dir: Path) -> dict:
    spec = TASKS[task]
    steps = range(100, MAX_STEPS + 1, 100)
    val_metrics = ["loss", "acc", "token_acc"]
    by_policy = {
        policy: {
            "step": step,
            "feedback_interval": b_at(model, MAX_STEPS),
            "rows": [
                {
                    "length": n,
                    "metric": m,
                    "value": ood_value(task, model, split, seed, policy, n, m),
                }
                for n in spec["lengths"]
                for m in spec["metrics"]
            ],
        }
        for policy, step in POLICY_STEPS.items()
    }
    sel = POLICY_STEPS["min_val_loss"]
    return {
        "schema_version": 1,
        "run": {
            "task": task,
            "model": model,
            **run_fields(model, split),
            "seed": seed,
            "data_seed": 1234,
            "preset": "tiny",
            "sweep": "synthetic",
            "cell": f"{task}/{model}/{split}/seed{seed}",
            "run_dir": str(run_dir),
        },
        "params": PARAMS.get((model, split), 1_000_000),
        "max_steps": MAX_STEPS,
        "train_lengths": spec["train"],
        "test_lengths": spec["lengths"],
        "chance": spec["chance"],
        "selection": {
            "policy": "min_val_loss",
            "step": sel,
            "val": {m: val_value(task, model, split, seed, sel, m) for m in val_metrics},
        },
        "val_curve": [
            {
                "step": s,
                **{m: val_value(task, model, split, seed, s, m) for m in val_metrics},
                "feedback_interval": b_at(model, s),
            }
            for s in steps
        ],
        "train_curve": [
            {"step": s, "loss": 0.1 + value(task, model, split, seed, "train", s)}
            for s in range(10, MAX_STEPS + 1, 10)
        ],
        "test": by_policy["min_val_loss"]["rows"],
        "test_by_policy": by_policy,
        "feedback_schedule": SCHEDULES.get(model),
        "timing": {
            "sec_per_step": train_seconds(task, model, split, seed) / MAX_STEPS,
            "train_seconds": train_seconds(task, model, split, seed),
        },
        "versions": {"rlt": "0.1.0"},
    }


def write_run(
    root: Path, task: str, model: str, split: str, seed: int, state: str = "done"
) -> Path:
    run_dir = root / task / model / split / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(f"task: {task}\nseed: {seed}\n")
    status = {
        "state": state,
        "step": MAX_STEPS,
        "max_steps": MAX_STEPS,
        "best_val_acc": None,
        "error": None,
        "traceback": None,
        "updated": "2026-11-29T00:00:00",
    }
    if state == "failed":
        status.update(
            step=212,
            error="RuntimeError: NaN loss at step 212",
            traceback="Traceback ...\nRuntimeError: NaN loss at step 212",
        )
    if state == "running":  # held by a live process (this one), as a training run holds it
        status.update(step=250)
        (run_dir / ".lock").write_text(f"{os.getpid()} {platform.node()}")
    (run_dir / "status.json").write_text(json.dumps(status))
    if state == "done":
        res = results_json(task, model, split, seed, run_dir)
        (run_dir / "results.json").write_text(json.dumps(res))
    return run_dir


def make_sweep(root: Path, *, holes: bool = True, grid: bool = True) -> Path:
    cells = []
    for task in TASKS:
        for model, split in MODELS:
            for seed in SEEDS:
                cells.append({"task": task, "model": model, "split": split, "seed": seed})
                hole = HOLES.get((task, model, split, seed)) if holes else None
                if hole == "missing":
                    continue
                write_run(root, task, model, split, seed, state=hole or "done")
    if grid:
        (root / "sweep.json").write_text(json.dumps({"preset": "tiny", "cells": cells}))
    return root


def make_schedule_sweep(root: Path, *, holes: bool = True) -> Path:
    """Issue 8's sweep: RLT-1, RLT-2 B=4, RLT-0 and two schedules at 2+2, both tasks, 3 seeds.

    grid.json cells carry the config's label, as train.py -m writes them.
    """
    cells = []
    for task in TASKS:
        for model, split in SCHEDULE_MODELS:
            for seed in SEEDS:
                label = run_fields(model, split)["label"]
                cells.append(
                    {"task": task, "model": model, "split": split, "seed": seed, "label": label}
                )
                hole = SCHEDULE_HOLES.get((task, model, split, seed)) if holes else None
                write_run(root, task, model, split, seed, state=hole or "done")
    (root / "grid.json").write_text(json.dumps({"preset": "tiny", "cells": cells}))
    return root
