"""``python -m rlt.probe RUN_DIR``: the linear state probe (rlt/state_probe.py) of a finished
run's kept checkpoint, written to ``RUN_DIR/probe.json`` and printed. A command above training,
beside eval.py: it rebuilds the run with ``rlt.training.kept``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

from rlt import rundir
from rlt.portable import kernels
from rlt.state_probe import REQUIRED, format_probe, has_target, probe_model
from rlt.training.kept import load_kept

kernels.install()  # the probe's arithmetic as in the training process that probes


def probe_run_dir(run_dir: Path, policy: str = "min_val_loss") -> dict[str, Any]:
    """Rebuild a finished run's model from its config.yaml, load the ``policy`` checkpoint and
    probe it at the run's test lengths."""
    kept = load_kept(run_dir, policy)
    if not has_target(kept.spec.task):
        raise ValueError(
            f"task {kept.spec.task.name!r} has no running target (probe tasks: "
            f"{', '.join(REQUIRED)})"
        )
    block = probe_model(
        kept.model, kept.spec.task, kept.spec.test_lengths, n_test=kept.spec.settings.scale.n_test
    )
    return {"policy": policy, "step": kept.step, **block}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlt.probe", description="Linear probe of a kept checkpoint's state."
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--policy",
        default="min_val_loss",
        help=f"checkpoint policy to probe: {', '.join(rundir.POLICIES)} (default min_val_loss)",
    )
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: give 1 or more")
    torch.set_num_threads(args.threads)
    out = args.run_dir / rundir.PROBE
    try:
        if args.run_dir.is_dir():
            _check_writable(args.run_dir)  # before the probe's work, not after it
        block = probe_run_dir(args.run_dir, args.policy)
        block = {**rundir.scored_stamp(args.run_dir, args.policy, block["step"]), **block}
        rundir.atomic_write_json(out, block)  # replaces a symlink there, never writes through it
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"state probe of the {args.policy} checkpoint (step {block['step']}): accuracy (%) by position"
    )
    print(format_probe(block))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _check_writable(run_dir: Path) -> None:
    """PermissionError naming the fix when ``run_dir`` does not take the probe's file."""
    test = run_dir / f".write_test.{os.getpid()}"
    try:
        test.write_text("")
        test.unlink()
    except OSError as e:
        raise PermissionError(
            f"cannot write {run_dir / rundir.PROBE} ({e.strerror}); make {run_dir} writable, or "
            "probe a copy of the run"
        ) from e


if __name__ == "__main__":
    raise SystemExit(main())
