"""The long-format rows one run contributes to a Collection (rlt.analysis.collect): its
validation and training curves, its test rows (results.json per checkpoint policy, plus the
lengths ``eval.py`` scored later) and its state probe."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rlt import rundir

# Numbers in curve points that describe the evaluation rather than measure the model.
_NOT_METRICS = {"step", "feedback_interval", "epoch"}


def scored_block(path: Path, results: dict, warnings: list[str]) -> dict | None:
    """The JSON object of an eval_<policy>.json or probe.json when it was scored from the
    checkpoint and configuration results.json describes; otherwise None, and a warning naming
    the file, why it does not belong to the run, and how to score it again."""
    try:
        block = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        warnings.append(f"{path}: unreadable ({type(e).__name__}); ignored")
        return None
    why = rundir.scored_mismatch(block, results)
    if why is not None:
        again = "python -m rlt.probe" if path.name == rundir.PROBE else "python eval.py"
        warnings.append(f"{path}: ignored, {why}; score the run again with {again} {path.parent}")
        return None
    return block


def probe_rows(
    rid: str, results: dict, run_dir: Path | None = None, warnings: list[str] | None = None
) -> list[dict]:
    """The state probe of the selected checkpoint (results.json "probe", rlt/state_probe.py; for a run
    trained before the probe existed, the ``probe.json`` that ``python -m rlt.probe`` wrote
    beside it, when it scored this run's checkpoint): one row per (target, position bucket)
    with the probe accuracy as a fraction, and target "rms" with the representation's RMS norm
    per bucket."""
    block = results.get("probe") or {}
    path = run_dir / rundir.PROBE if run_dir is not None else None
    if not block and path is not None and path.is_file():
        block = scored_block(path, results, warnings if warnings is not None else []) or {}
    if not isinstance(block, dict):
        return []
    rows = [
        {"run_id": rid, "target": name, "bucket": b, "value": float(v) / 100}
        for name, t in (block.get("targets") or {}).items()
        if isinstance(t, dict)
        for b, v in (t.get("by_bucket") or {}).items()
        if is_number(v)
    ]
    rms = (block.get("rms") or {}).get("by_bucket") or {}
    return rows + [
        {"run_id": rid, "target": "rms", "bucket": b, "value": float(v)}
        for b, v in rms.items()
        if is_number(v)
    ]


def eval_rows(
    rid: str, run_dir: Path, results: dict, known: set[tuple[str, int]], warnings: list[str]
) -> list[dict]:
    """Test rows that ``eval.py`` scored after training (``eval_<policy>.json``) from the
    checkpoints results.json describes, at lengths results.json does not hold for that policy.
    They carry ``scored_later=True``: the analysis shows them as rows of their own, never in
    place of the run's own test lengths."""
    rows = []
    for path in rundir.scored_files(run_dir):
        if path.name == rundir.PROBE:
            continue
        data = scored_block(path, results, warnings)
        if data is None:
            continue
        policy, step = str(data.get("policy")), data.get("step")
        for r in data.get("rows") if isinstance(data.get("rows"), list) else []:
            if not isinstance(r, dict):
                continue
            length = r.get("length")
            if not isinstance(length, int) or isinstance(length, bool) or length < 1:
                continue
            if (policy, length) in known or not is_number(r.get("value")):
                continue
            rows.append(
                {
                    "run_id": rid,
                    "policy": policy,
                    "policy_step": step,
                    "length": int(length),
                    "metric": str(r.get("metric", "acc")),
                    "value": float(r["value"]),
                    "scored_later": True,
                }
            )
    return rows


def test_rows(rid: str, results: dict) -> list[dict]:
    """One row per (policy, length, metric) test value; results without per-policy blocks
    (older schema) count their `test` rows as the min_val_loss policy."""
    by_policy = dict(results.get("test_by_policy") or {})
    if "min_val_loss" not in by_policy and results.get("test"):
        step = (results.get("selection") or {}).get("step")
        by_policy["min_val_loss"] = {"step": step, "rows": results["test"]}
    return [
        {
            "run_id": rid,
            "policy": policy,
            "policy_step": block.get("step"),
            "length": int(r["length"]),
            "metric": str(r.get("metric", "acc")),
            "value": float(r["value"]),
            "scored_later": False,
        }
        for policy, block in by_policy.items()
        for r in (block or {}).get("rows") or []
        if is_number(r.get("value")) and r.get("length") is not None
    ]


def is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def curve_rows(run_id: str, curve: list | None) -> list[dict]:
    rows = []
    for point in curve or []:
        if not isinstance(point, dict) or point.get("step") is None:
            continue
        for metric, value in point.items():
            if metric not in _NOT_METRICS and is_number(value):
                rows.append(
                    {
                        "run_id": run_id,
                        "step": int(point["step"]),
                        "metric": metric,
                        "value": float(value),
                    }
                )
    return rows
