"""Sweep bookkeeping from the files on disk alone.

    python -m rlt.sweep status SWEEP_DIR [--json]

prints one line per cell of the sweep (its state, step / max steps, best validation accuracy,
and for runs of SLURM jobs the job id and its state in ``squeue``) and a count per state. The expected cells come from ``grid.json``, which ``train.py -m``
writes when a multirun starts; run directories found on disk but not in the grid are listed
too, and cells of the grid without a directory are ``missing``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlt import rundir
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
        if r["state"] == "failed" and r["error"]:
            line += f"  ({r['error']})"
        lines.append(line)
    counts: dict[str, int] = {}
    for r in records:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    lines.append(
        f"{len(records)} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlt.sweep", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("status", help="state and progress of every cell of a sweep")
    p.add_argument("sweep_dir")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
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
