"""Sweep bookkeeping from the files on disk alone.

    python -m rlt.sweep status SWEEP_DIR [--json]
    python -m rlt.sweep export SWEEP_DIR DEST [--dry-run]

``status`` prints one line per cell of the sweep (its state, step / max steps, best validation
accuracy, and for runs of SLURM jobs the job id and its state in ``squeue``) and a count per
state. The expected cells come from ``grid.json``, which ``train.py -m`` writes when a multirun
starts; run directories found on disk but not in the grid are listed too, and cells of the grid
without a directory are ``missing``.

``export`` copies the small result files of every finished run (:data:`EXPORTED`: results,
config, status, the CSV log, diagnostics and the files scored later; never checkpoints or
logs) into DEST under the same cell paths, and merges those runs' cells of grid.json into
DEST/grid.json: a folder to commit, from which analysis rebuilds every table and which tells a
relaunch of the grid what is done. Runs that have not finished are listed and left out. A run
DEST already holds with other results is never overwritten: the export stops before copying
anything and names it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from rlt import rundir
from rlt.atomic import atomic_replace, atomic_write_json
from rlt.rundir import find_runs
from rlt.training import slurm


def cell_states(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One record per cell: cell, state, slurm ("<job> <squeue state>" or None), step,
    max_steps, best_val_acc, error."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        parent = sweep_dir.parent
        there = sorted(d.name for d in parent.iterdir() if d.is_dir()) if parent.is_dir() else []
        hint = (
            f"{parent} holds: {', '.join(there[:12])}"
            if there
            else f"{parent} does not exist either; sweeps live under root (runs/ by default)"
        )
        raise FileNotFoundError(
            f"{sweep_dir} is not a directory: pass a sweep's directory (runs/<sweep name>); {hint}"
        )
    expected: list[str] = []
    try:
        grid = rundir.read_grid(sweep_dir) or {}
        expected = [c["cell"] for c in grid.get("cells", []) if isinstance(c, dict) and "cell" in c]
    except rundir.UnreadableGrid as e:
        print(f"warning: {e}", file=sys.stderr)
    on_disk = {str(d.relative_to(sweep_dir)): d for d in find_runs(sweep_dir)}
    cells = list(dict.fromkeys(expected + sorted(on_disk)))
    statuses = {cell: _read(sweep_dir / cell / rundir.STATUS) or {} for cell in cells}
    queue_ids = [s["slurm"]["queue_id"] for s in statuses.values() if s.get("slurm")]
    queue = slurm.queue_states(queue_ids)
    on_cluster = bool(queue_ids) and slurm.squeue_available()
    records = []
    for cell in cells:
        d = sweep_dir / cell
        status = statuses[cell]
        job = (status.get("slurm") or {}).get("queue_id")
        state = status.get("state", "missing" if not d.exists() else "pending")
        if not status and (d / rundir.STATUS).exists():
            state = "unreadable"  # status.json does not parse: a relaunch repairs it
            status = {"error": f"{rundir.STATUS} does not parse; the same command repairs it"}
        if state == "done" and not (d / rundir.RESULTS).exists():
            state = "incomplete"
        elif state == "done" and _read(d / rundir.RESULTS) is None:
            state = "unreadable"  # results.json does not parse: a relaunch re-evaluates it
            status = {
                **status,
                "error": f"{rundir.RESULTS} does not parse; the same command evaluates the run "
                "again from its checkpoints",
            }
        state = rundir.live_state(d, state)  # killed: interrupted, the relaunch resumes it
        if state in ("running", "requeued") and on_cluster and job not in queue:
            state = "interrupted"  # its SLURM job has ended without finishing the run
        records.append(
            {
                "cell": cell,
                "state": state,
                "slurm": f"{job} {queue.get(job, '-')}" if job else None,
                "step": status.get("step"),
                "max_steps": status.get("max_steps"),
                "best_val_acc": status.get("best_val_acc"),
                "error": status.get("error"),
            }
        )
    return records


def _read(path: Path) -> dict | None:
    try:
        return rundir.read_json(path, corrupt_ok=True)
    except OSError:
        return None


def format_status(records: list[dict[str, Any]]) -> str:
    with_slurm = any(r.get("slurm") for r in records)
    slurm_head = f" {'slurm job':>18s}" if with_slurm else ""
    lines = [f"{'state':12s} {'step':>11s} {'best val acc':>12s}{slurm_head}  cell"]
    for r in records:
        step = f"{r['step']}/{r['max_steps']}" if r["step"] is not None else "-"
        acc = f"{100 * r['best_val_acc']:.2f}%" if r["best_val_acc"] is not None else "-"
        job = f" {r.get('slurm') or '-':>18s}" if with_slurm else ""
        line = f"{r['state']:12s} {step:>11s} {acc:>12s}{job}  {r['cell']}"
        if r["state"] in ("failed", "unreadable") and r["error"]:
            line += f"  ({rundir.error_line(r['error'], 160)})"
        lines.append(line)
    counts: dict[str, int] = {}
    for r in records:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    lines.append(
        f"{len(records)} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    )
    return "\n".join(lines)


# What export copies of a finished run: paths relative to the run directory, glob patterns
# allowed (the files eval.py, the probe and the state interventions score later); a set-aside
# ``*.replaced.json`` never.
EXPORTED = (
    rundir.RESULTS,
    rundir.CONFIG,
    rundir.STATUS,
    rundir.DIAGNOSTICS,
    "csv/metrics.csv",
    rundir.EVAL_GLOB,
    rundir.PROBE,
    "state_*.json",
)


class ExportConflict(RuntimeError):
    """DEST holds a run of the same cell whose results differ from the sweep's."""


def run_files(run_dir: Path) -> list[Path]:
    """The files of a run directory that :data:`EXPORTED` names, relative to it."""
    found = {p for pattern in EXPORTED for p in run_dir.glob(pattern) if p.is_file()}
    kept = (p for p in found if not p.name.endswith(rundir.REPLACED_SUFFIX))
    return sorted(p.relative_to(run_dir) for p in kept)


def export(sweep_dir: str | Path, dest: str | Path, *, dry_run: bool = False) -> dict[str, list]:
    """Copy the finished runs of ``sweep_dir`` into ``dest`` (see the module's text).

    Returns ``{"copied": [cell, ...], "unchanged": [...], "skipped": [(cell, state), ...]}``.
    Raises :class:`ExportConflict` before writing anything when ``dest`` holds one of the cells
    with a results.json that differs from the sweep's."""
    sweep_dir, dest = Path(sweep_dir), Path(dest)
    if dest.resolve() == sweep_dir.resolve():
        raise ValueError(f"DEST is the sweep directory itself ({dest}): name another folder")
    if dest.resolve().is_relative_to(sweep_dir.resolve()):
        raise ValueError(
            f"DEST {dest} is inside the sweep directory {sweep_dir} (its copies would become "
            "cells of the sweep): name a folder outside it"
        )
    blocked = next((p for p in (dest, *dest.parents) if p.exists()), None)
    if blocked is not None and not blocked.is_dir():
        raise ValueError(f"DEST {dest}: {blocked} is a file, not a folder; name a folder")
    states = cell_states(sweep_dir)
    done = [r["cell"] for r in states if r["state"] == "done"]
    skipped = [(r["cell"], r["state"]) for r in states if r["state"] != "done"]
    conflicts = []
    for cell in done:
        theirs = dest / cell / rundir.RESULTS
        if (
            theirs.exists()
            and theirs.read_bytes() != (sweep_dir / cell / rundir.RESULTS).read_bytes()
        ):
            conflicts.append(cell)
    if conflicts:
        raise ExportConflict(
            f"{dest} already holds {len(conflicts)} of these runs with other results "
            f"({', '.join(conflicts[:3])}{' ...' if len(conflicts) > 3 else ''}); nothing was "
            "copied. Export into another folder, or remove those run directories from it if "
            "the sweep's runs are meant to replace them"
        )
    copied, unchanged = [], []
    for cell in done:
        src = sweep_dir / cell
        files = run_files(src)
        same = all(
            (dest / cell / f).is_file() and (dest / cell / f).read_bytes() == (src / f).read_bytes()
            for f in files
        )
        (unchanged if same else copied).append(cell)
        if dry_run or same:
            continue
        for f in files:  # byte for byte (Lightning's CSV ends its lines in CRLF)
            atomic_replace(dest / cell / f, lambda tmp, p=src / f: shutil.copyfile(p, tmp))
    if not dry_run and done:
        _merge_grid(sweep_dir, dest, set(done))
    return {"copied": copied, "unchanged": unchanged, "skipped": skipped}


def _merge_grid(sweep_dir: Path, dest: Path, cells: set[str]) -> None:
    """DEST/grid.json gains the sweep grid's cells of the exported runs (those it already holds
    are kept as they are); a sweep without a grid file leaves DEST's alone."""
    try:
        grid = rundir.read_grid(sweep_dir) or {}
    except rundir.UnreadableGrid:  # cell_states has said so
        print(f"warning: so {dest}'s grid.json is left as it was", file=sys.stderr)
        return
    new = [c for c in grid.get("cells", []) if isinstance(c, dict) and c.get("cell") in cells]
    merged = rundir.read_grid(dest) or {k: v for k, v in grid.items() if k != "cells"}
    held = {c.get("cell") for c in merged.get("cells", []) if isinstance(c, dict)}
    added = [c for c in new if c["cell"] not in held]
    if added:
        merged["cells"] = [*merged.get("cells", []), *added]
        atomic_write_json(dest / rundir.GRID, merged)


def _export_main(args: argparse.Namespace) -> int:
    try:
        done = export(args.sweep_dir, args.dest, dry_run=args.dry_run)
    except (FileNotFoundError, ValueError, ExportConflict, rundir.UnreadableGrid) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    verb = "would copy" if args.dry_run else "copied"
    for cell in done["copied"]:
        print(f"{verb:10s}  {cell}")
    for cell, state in done["skipped"]:
        print(f"{'left out':10s}  {cell}  ({LEFT_OUT.get(state, f'{state}: {_WHEN_DONE}')})")
    if not (done["copied"] or done["unchanged"] or done["skipped"]):
        print(f"no runs under {args.sweep_dir}: launch the sweep first (python train.py -m ...)")
        return 1
    copied = "to copy (dry run)" if args.dry_run else "copied"
    print(
        f"{len(done['copied'])} run(s) {copied}, {len(done['unchanged'])} already in "
        f"{args.dest}, {len(done['skipped'])} left out"
    )
    return 0


# Why export leaves a cell out, and what makes it exportable (by its state in cell_states).
_WHEN_DONE = "export again when it is done"
_RERUN = "rerun the sweep's train.py command"
LEFT_OUT = {
    "missing": f"not started: {_RERUN}, then export",
    "failed": f"failed: {_RERUN} (it retries the cell), then export",
    "unreadable": f"a file of it does not parse: {_RERUN} (it repairs it), then export",
    "incomplete": f"done without results.json: {_RERUN} (it evaluates the run again), then export",
    "interrupted": f"stopped part-way: {_RERUN} (it resumes the run), then export",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlt.sweep", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("status", help="state and progress of every cell of a sweep")
    p.add_argument("sweep_dir")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p = sub.add_parser(
        "export", help="copy the finished runs' result files into a folder to commit"
    )
    p.add_argument("sweep_dir")
    p.add_argument("dest")
    p.add_argument("--dry-run", action="store_true", help="list what would be copied, copy nothing")
    args = parser.parse_args(argv)
    if args.command == "export":
        return _export_main(args)
    try:
        records = cell_states(args.sweep_dir)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not records:
        print(f"no runs under {args.sweep_dir}: launch the sweep first (python train.py -m ...)")
        return 1
    print(json.dumps(records, indent=2) if args.json else format_status(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
