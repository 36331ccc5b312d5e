"""The run directory, in one place: its layout, file names, checkpoint policies, run states,
how runs are found, and the one JSON reader/writer (atomic, so a crash never leaves half a
results file). Standard library only: training, ``python -m rlt.sweep`` and the analysis all
use it.

A run lives in ``<root>/<sweep or preset>/<task>/<model>/<arch>/seed<seed>/`` (``arch`` is the
split for the RLT family, ``L<n>`` for depth-only baselines) unless Hydra's ``hydra.run.dir`` /
``hydra.sweep.dir`` moves it (rlt.training.hydra_support.run_dir_for). It holds:

    config.yaml         the resolved config (the identity a rerun is checked against)
    status.json         state (RUN_STATES), step, max_steps, best_val_acc, error, traceback,
                        slurm (job id, queue id, restart count, node) inside a SLURM job,
                        portable and arithmetic (the CPU arithmetic it started in:
                        its three settings, rlt/portable/), added_tokens (its task's tokens past the shared
                        140, in id order)
    results.json        everything analysis needs (README "results.json")
    results.replaced.json  the results a force=true retrain replaces (moved aside at its start)
    eval_<policy>.json  test rows eval.py scored later from checkpoints/<policy>.pt, and
    probe.json          the state probe of ``python -m rlt.probe``: each records the config hash
                        and checkpoint it scored (:func:`scored_stamp`); set aside as
                        ``<name>.replaced.json`` with results.json by a retrain
    diagnostics.json    feedback-path diagnostics (callbacks.diagnostics_every), optional
    train.log           progress lines (and Hydra's log)
    csv/metrics.csv     Lightning's CSV log
    checkpoints/        last.ckpt (resume) and <policy>.pt for each of POLICIES (with
                        callbacks.budgets also <policy>@<step>.pt: its choice at that step)
    .lock               held by the process training the run ("<pid> <host>")
and a sweep directory holds grid.json (the cells a multirun expects; .grid.lock serialises
launches merging into it) and .jobs/<launch>/.

:class:`RunDir` is one run's directory as its run owns it (training, eval.py, the probe); the
functions read many runs at once (``rlt.sweep status``, the analysis).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlt import portable
from rlt.atomic import (  # noqa: F401 - rundir.<name>, as every caller spells them
    atomic_replace,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
)
from rlt.locks import (  # noqa: F401 - rundir.<name>, as every caller spells them
    LOCK,
    SWEEP_LOCK,
    live_state,
    lock_is_stale,
    run_lock,
    sweep_lock,
)

RESULTS = "results.json"
REPLACED_RESULTS = "results.replaced.json"  # a forced retrain's predecessor, set aside
STATUS = "status.json"
CONFIG = "config.yaml"
DIAGNOSTICS = "diagnostics.json"
TRAIN_LOG = "train.log"
CKPT_DIR = "checkpoints"
LAST_CKPT = "last.ckpt"
GRID = "grid.json"
GRID_FILES = (GRID, "sweep.json")  # sweep.json: the grid file of early versions
JOBS_DIR = ".jobs"

# Checkpoint policies: which validation row wins. min_val_loss is the report's.
POLICIES = ("min_val_loss", "final", "max_val_acc")

# States a run can be in. Written by training: running, done, failed, interrupted (stopped
# from outside: SIGTERM, scancel, Ctrl-C; the same command resumes it) and requeued (SLURM
# requeued its job, which resumes it). Told by readers from the files: pending (a directory
# without status), interrupted also for a running state that no live process holds (or whose
# SLURM job is gone), unreadable (done, but results.json does not parse), incomplete (done
# without results.json), missing (a cell of grid.json without a directory).
RUN_STATES = (
    "pending",
    "running",
    "done",
    "failed",
    "interrupted",
    "requeued",
    "unreadable",
    "incomplete",
    "missing",
)
_SEED_DIR = re.compile(r"^seed-?\d+$")


def cell_path(task: str, model: str, arch: str, seed: int) -> str:
    """``parity/rlt1/4+4/seed42``: a run's place inside its sweep directory."""
    return f"{task}/{model}/{arch}/seed{seed}"


def parse_cell(path: str | Path) -> dict[str, Any] | None:
    """The inverse of :func:`cell_path` on the last four parts of a run directory's path:
    ``{task, model, arch, seed}``, or None when the path does not end in that layout."""
    parts = Path(path).parts
    if len(parts) < 4 or not _SEED_DIR.match(parts[-1]):
        return None
    task, model, arch, seed_dir = parts[-4:]
    return {"task": task, "model": model, "arch": arch, "seed": int(seed_dir[4:])}


def is_seed(value: Any) -> bool:
    """Whether a seed read from a run or grid file is one: an integer (JSON "5", 5.0 or true
    are a damaged or hand-edited file, never rounded into some run's seed)."""
    return isinstance(value, int) and not isinstance(value, bool)


def find_runs(root: str | Path) -> list[Path]:
    """Run directories under ``root`` (root itself may be one), in sorted depth-first order:
    a directory holding a results.json or status.json, or a config.yaml in a seed directory.
    Hidden directories (.hydra, .jobs) and everything below a run (checkpoints, csv) are
    skipped."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files = set(filenames)
        is_seed_dir = _SEED_DIR.match(Path(dirpath).name) is not None
        if RESULTS in files or STATUS in files or (CONFIG in files and is_seed_dir):
            dirnames[:] = []
            found.append(Path(dirpath))
    return found


def read_json(path: str | Path, *, corrupt_ok: bool = False) -> dict | None:
    """The JSON object at ``path``, or None when the file does not exist (or, with
    ``corrupt_ok``, when it does not parse)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        with open(path) as f:
            obj = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        if corrupt_ok:
            return None
        raise
    if not isinstance(obj, dict):  # valid JSON, but not the object every run file is
        if corrupt_ok:
            return None
        raise ValueError(f"{path} holds a JSON {type(obj).__name__}, not an object")
    return obj


class UnreadableGrid(ValueError):
    """A sweep's grid file exists but does not parse (a crash or a full disk while writing)."""


def read_grid(sweep_dir: str | Path, keys: tuple[str, ...] = ()) -> dict | None:
    """The sweep's grid file (grid.json, or sweep.json of early versions) as a dict, or None
    when there is none. A file that does not parse raises :class:`UnreadableGrid`, whose message
    names the file and the fix; readers report it and go on with the runs on disk. So does a
    cell lacking one of ``keys`` (what the reader needs of every cell), holding null there, or
    holding a seed that is not an integer."""
    path = next((Path(sweep_dir) / g for g in GRID_FILES if (Path(sweep_dir) / g).is_file()), None)
    if path is None:
        return None
    try:
        grid = read_json(path)
        if not isinstance(grid, dict) or not isinstance(grid.get("cells", []), list):
            raise ValueError("not a grid")
    except (OSError, ValueError) as e:
        raise UnreadableGrid(
            f"{path} is unreadable ({type(e).__name__}), so the cells it expects are unknown; "
            "relaunch the grid (the same train.py -m command) to rewrite it"
        ) from e
    for i, cell in enumerate(grid.get("cells", [])):
        why = _bad_cell(cell, keys)
        if why:
            raise UnreadableGrid(
                f"{path}: cell {i} {why}, so the cells it expects are unknown; "
                "relaunch the grid (the same train.py -m command) to rewrite it"
            )
    return grid


def _bad_cell(cell: Any, keys: tuple[str, ...]) -> str | None:
    """What keeps a grid cell from naming a run ("lacks seed", "has seed null"), or None."""
    lacks = [k for k in keys if not isinstance(cell, dict) or k not in cell]
    if lacks:
        return f"lacks {', '.join(lacks)}"
    for k in keys:
        if cell[k] is None:
            return f"has {k} null"
        if k == "seed" and not is_seed(cell[k]):
            return f"has seed {json.dumps(cell[k])}, not an integer"
    return None


# What eval.py and ``python -m rlt.probe`` write beside a finished run's results, scored from
# one kept checkpoint after training; a forced retrain sets them aside with results.json.
PROBE = "probe.json"
EVAL_GLOB = "eval_*.json"
REPLACED_SUFFIX = ".replaced.json"


def eval_path(run_dir: str | Path, policy: str) -> Path:
    return Path(run_dir) / f"eval_{policy}.json"


def scored_files(run_dir: str | Path) -> list[Path]:
    """The eval_<policy>.json files and probe.json of a run (not those a retrain set aside)."""
    run_dir = Path(run_dir)
    found = [p for p in sorted(run_dir.glob(EVAL_GLOB)) if not p.name.endswith(REPLACED_SUFFIX)]
    return found + ([run_dir / PROBE] if (run_dir / PROBE).is_file() else [])


def config_hash(run_dir: str | Path) -> str:
    """results.json's ``config_hash`` of the run's config.yaml as it is on disk now."""
    return hashlib.sha1((Path(run_dir) / CONFIG).read_bytes()).hexdigest()[:12]


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def scored_stamp(run_dir: str | Path, policy: str, step: int) -> dict[str, Any]:
    """What a file scored from a kept checkpoint records of it: the configuration (config.yaml's
    hash, as results.json has it), the checkpoint (policy, step, the file's sha256) and the
    arithmetic it was scored in (a later call in the other one starts the file anew)."""
    ckpt = Path(run_dir) / CKPT_DIR / f"{policy}.pt"
    return {
        "policy": policy,
        "step": int(step),
        "config_hash": config_hash(run_dir),
        "checkpoint": {"file": f"{CKPT_DIR}/{policy}.pt", "sha256": file_sha256(ckpt)},
        "portable": portable.active(),  # the arithmetic it was scored in (rlt/portable/)
        "arithmetic": portable.variables(),  # its three settings, portable or not
    }


def scored_mismatch(block: Any, results: dict) -> str | None:
    """Why a scored file (eval_<policy>.json, probe.json) does not describe the run that
    results.json describes, or None when it does: the same config hash, and the step of its
    policy's checkpoint in results.json."""
    if not isinstance(block, dict):
        return "it is not a JSON object"
    if block.get("config_hash") is None:
        return "it records no config_hash (written before outputs were tied to their run)"
    if block["config_hash"] != results.get("config_hash"):
        return (
            f"its config_hash {block['config_hash']} is not results.json's "
            f"{results.get('config_hash')} (the run was retrained with another config)"
        )
    policy = block.get("policy")
    kept = (results.get("test_by_policy") or {}).get(policy) or {}
    if policy == "min_val_loss" and not kept:
        kept = results.get("selection") or {}
    if kept.get("step") != block.get("step"):
        return (
            f"it scored the {policy} checkpoint of step {block.get('step')}, results.json's is "
            f"of step {kept.get('step')}"
        )
    return None


STOPPED_STATES = ("interrupted", "requeued")


def error_line(text: str, n: int = 100) -> str:
    """A status.json ``error`` as one line of a listing: its first line (a failed run's
    ``Type: message``, a refusal's summary), at most ``n`` characters, "…" where more was left
    out."""
    lines = str(text).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > n or len(lines) > 1:
        return first[: n - 1].rstrip() + "…"
    return first


def write_status(run_dir: str | Path, state: str, **fields: Any) -> dict:
    """Update ``status.json`` (a state of RUN_STATES plus progress fields), keeping old fields.

    Fields that describe the current state only are cleared when it changes: ``error`` and
    ``traceback`` outside ``failed``, ``stopped_by`` outside the stopped states. A stop (a
    stopped state written with ``stopped_by``) is also appended to ``stops`` (the step last
    recorded, the cause, the state, the time), which outlives the resume."""
    path = Path(run_dir) / STATUS
    status = read_json(path, corrupt_ok=True) or {}  # a damaged status is replaced
    status.update(fields)
    status["state"] = state
    status["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if state != "failed":
        status["error"] = None
        status["traceback"] = None
    if state not in STOPPED_STATES:
        status.pop("stopped_by", None)
    elif "stopped_by" in fields:
        stop = {"step": status.get("step"), "by": fields["stopped_by"], "as": state}
        earlier = status.get("stops")
        earlier = earlier if isinstance(earlier, list) else []  # a damaged list starts anew
        status["stops"] = [*earlier, {**stop, "at": status["updated"]}]
    atomic_write_json(path, status)
    return status


@dataclass(frozen=True)
class Snapshot:
    """What a run directory holds, read at once: what decides whether a run is skipped,
    repaired, refused, resumed or started (rlt/training/lifecycle.py, and identity.py for the
    refusals of another run)."""

    status: dict | None  # status.json; None where missing or damaged
    status_damaged: bool  # status.json is there but does not parse
    results: dict | None  # results.json; None where missing or damaged
    has_results: bool  # results.json is there (readable or not)
    has_last: bool  # checkpoints/last.ckpt: a stopped run resumes from it
    trained: bool  # results or any checkpoint: something a rerun could reuse

    @property
    def state(self) -> str | None:
        return (self.status or {}).get("state")


class RunDir:
    """One run's directory as its run owns it: where each file is, its lock, its status and
    results, the weights file of each checkpoint policy, and the results a forced retrain
    sets aside. (The functions above read many runs: sweeps, ``rlt.sweep status``, the
    analysis.)"""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.results_file = self.path / RESULTS
        self.status_file = self.path / STATUS
        self.config_file = self.path / CONFIG
        self.ckpt_dir = self.path / CKPT_DIR
        self.last_ckpt = self.ckpt_dir / LAST_CKPT

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def status(self) -> dict | None:
        """status.json, or None where it is missing or damaged."""
        return read_json(self.status_file, corrupt_ok=True)

    def results(self) -> dict | None:
        """results.json, or None where it is missing or damaged."""
        return read_json(self.results_file, corrupt_ok=True)

    def snapshot(self) -> Snapshot:
        """The directory's :class:`Snapshot`. A results.json this process may not read counts
        as damaged, and a checkpoints/ it may not list as holding weights (a shared run
        directory of another user: refused rather than taken for an empty one)."""
        status, has_results = self.status(), self.results_file.exists()
        try:
            results = self.results() if has_results else None
        except OSError:
            results = None
        try:
            weights = self.ckpt_dir.is_dir() and any(
                p.suffix in (".ckpt", ".pt") for p in self.ckpt_dir.iterdir()
            )
        except OSError:
            weights = True
        return Snapshot(
            status=status,
            status_damaged=status is None and self.status_file.exists(),
            results=results,
            has_results=has_results,
            has_last=self.last_ckpt.exists(),
            trained=has_results or weights,
        )

    def set_status(self, state: str, **fields: Any) -> dict:
        """:func:`write_status` of this run."""
        return write_status(self.path, state, **fields)

    def write_results(self, results: dict) -> None:
        atomic_write_json(self.results_file, results)

    def write_config(self, yaml_text: str) -> None:
        atomic_write_text(self.config_file, yaml_text)

    def lock(self):
        """:func:`run_lock` of this run (a context manager yielding whether it was taken)."""
        return run_lock(self.path)

    def policy_file(self, policy: str, step: int | str | None = None) -> Path:
        """``checkpoints/<policy>.pt``, or ``<policy>@<step>.pt``: its choice within a budget."""
        return self.ckpt_dir / (f"{policy}.pt" if step is None else f"{policy}@{step}.pt")

    def set_aside_results(self) -> None:
        """A forced retrain first moves the old results.json to results.replaced.json (and what
        eval.py and the probe scored of the old run to ``<name>.replaced.json``), so a retrain
        stopped part-way never leaves the old results next to the new configuration."""
        if self.results_file.exists():
            os.replace(self.results_file, self.path / REPLACED_RESULTS)
        for scored in scored_files(self.path):  # eval.py's and the probe's: of the old run
            os.replace(scored, scored.with_name(scored.stem + REPLACED_SUFFIX))
