"""One run directory read into the analysis' record of it (rlt.analysis.collect gathers them):
results.json, status.json, its evaluation and probe files, each damage named, never a
traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlt.analysis import definitions as defs
from rlt.analysis.protocol import protocol_of
from rlt.analysis.rows import curve_rows, eval_rows, probe_rows, test_rows
from rlt.rundir import RESULTS, STATUS, is_seed, live_state, parse_cell

SCHEMA_VERSION = 1  # results.json's, as docs/DESIGN.md section 4 describes it

# Columns of Collection.runs, in order (the record of one run directory).
RUN_COLUMNS = (
    "run_id sweep_dir sweep preset task model model_dir family split arch n_enc n_dec n_layers "
    "feedback_interval feedback_schedule seed data_seed state has_results used step max_steps "
    "params vocab_size sec_per_step train_seconds chance train_len_min train_len_max selection_step "
    "stopped_early config_label protocol plugins schedule_steps "
    "detail path sweep_index"
).split()


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    if not path.exists():
        return None, None
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"{path.name} unreadable: {e}"
    if not isinstance(obj, dict):
        return None, f"{path.name} is not a JSON object"
    return obj, None


def read_run(
    run_dir: Path, sweep_dir: Path
) -> tuple[dict, list, list, list, list, list, list[str]]:
    """One run directory -> (run record, val rows, train rows, test rows, probe rows, metric
    definition rows, warnings). A results.json that parses but cannot be read as a run (a seed
    that is not an integer, no task, model or seed where the path has none either, a block of
    the wrong type, no validation or no test value) leaves the run unreadable, listed with what
    is wrong, never a traceback."""
    from_path = parse_cell(run_dir.resolve()) or {}
    rec: dict[str, Any] = dict.fromkeys(RUN_COLUMNS)
    rec.update(
        run_id=str(run_dir),
        path=str(run_dir),
        sweep_dir=str(sweep_dir),
        sweep=sweep_dir.resolve().name,
        task=from_path.get("task"),
        model=from_path.get("model"),
        model_dir=from_path.get("model"),
        arch=from_path.get("arch"),
        split=from_path.get("arch"),
        seed=from_path.get("seed"),
        has_results=False,
        used=False,
    )
    warnings: list[str] = []
    nothing: tuple[list, list, list, list, list] = ([], [], [], [], [])
    status = _read_status(run_dir, rec)
    results, err = _read_json(run_dir / RESULTS)
    if err:
        rec.update(state="unreadable", detail=err)
    if results is None:
        if err is None and status and status.get("state") == "done":
            rec.update(state="no results", detail=f"status says done but {RESULTS} is missing")
        return rec, *nothing, warnings
    if status and status.get("state") not in (None, "done"):
        # A run that is training again (or was stopped while retraining) next to an older
        # results.json: those results are not of the configuration the directory now holds.
        rec.update(
            state="stale",
            detail=f"{RESULTS} predates the run's current state {status.get('state')!r}; "
            "the same command finishes the run",
        )
        return rec, *nothing, warnings

    if results.get("schema_version") != SCHEMA_VERSION:
        warnings.append(
            f"{run_dir / RESULTS}: schema_version {results.get('schema_version')!r}, "
            f"expected {SCHEMA_VERSION}; read as version {SCHEMA_VERSION}"
        )
    rid = rec["run_id"]
    damage = _damage(results, rec)
    if damage is None:
        try:
            fields = _result_fields(results, rec)
            val = curve_rows(rid, results.get("val_curve"))
            train = curve_rows(rid, results.get("train_curve"))
            test = test_rows(rid, results)
            recorded = defs.recorded(rid, results.get("metric_definitions"))
        except (AttributeError, KeyError, TypeError, ValueError) as e:  # a block's wrong shape
            damage = f"{type(e).__name__}: {e}"
        else:
            damage = _missing(val, test)
    if damage is not None:
        rec.update(state="unreadable", detail=f"{RESULTS} damaged: {damage}")
        return rec, *nothing, warnings
    rec.update(fields)
    if results.get("test_by_budget"):  # callbacks.budgets: rlt/analysis/budgets.py reads it
        rec["test_by_budget"] = results["test_by_budget"]
    rec["protocol"] = protocol_of(run_dir)
    names = (results.get("run") or {}).get("plugins")
    if isinstance(names, list):
        rec["plugins"] = " ".join(map(str, names))
    warnings += defs.load_plugins(names, run_dir)
    if val:
        rec["step"] = max(r["step"] for r in val)
    known = {(r["policy"], r["length"]) for r in test}
    test += eval_rows(rid, run_dir, results, known, warnings)
    probe = probe_rows(rid, results, run_dir, warnings)
    return rec, val, train, test, probe, recorded, warnings


def _damage(results: dict, rec: dict[str, Any]) -> str | None:
    """What keeps a results.json that parses from naming its run, or None: its seed must be an
    integer, and task, model and seed must be known from its run block or from the run's
    <task>/<model>/<split>/seed<N> path (runs made with hydra.run.dir have no such path)."""
    run = results.get("run", {})
    if not isinstance(run, dict):
        return f"run is a JSON {type(run).__name__}, not an object"
    if run.get("seed") is not None and not is_seed(run["seed"]):
        return f"run.seed is {json.dumps(run['seed'])}, not an integer"
    unknown = [k for k in ("task", "model", "seed") if run.get(k) is None and rec[k] is None]
    if unknown:
        return (
            f"no run.{', run.'.join(unknown)}, and the directory is not "
            "<task>/<model>/<split>/seed<N> to tell"
        )
    return None


def _missing(val: list, test: list) -> str | None:
    """What a finished run always records and this results.json lacks (a file that parses but
    was cut short or emptied must not count as a run with results): a validation value, and a
    test value at some length."""
    lacking = [
        what for what, rows in (("val_curve", val), ("test_by_policy (or test)", test)) if not rows
    ]
    if not lacking:
        return None
    return "no numeric value in " + " or ".join(lacking)


def _read_status(run_dir: Path, rec: dict[str, Any]) -> dict | None:
    """Fill the run record's state, step and detail from status.json; return the status."""
    status, err = _read_json(run_dir / STATUS)
    if status:
        rec.update(
            state=live_state(run_dir, status.get("state")) or "unknown",
            step=status.get("step"),
            max_steps=status.get("max_steps"),
            detail=status.get("error"),
        )
    else:
        rec["state"] = "no status" if err is None else "unreadable"
        rec["detail"] = err
    return status


def _result_fields(results: dict, rec: dict[str, Any]) -> dict[str, Any]:
    """The run record's fields from a results.json (its run block wins over the path)."""
    run = results.get("run") or {}
    timing = results.get("timing") or {}
    train_lengths = results.get("train_lengths") or []
    fields = {
        key: run[key] for key in ("task", "model", "split", "seed") if run.get(key) is not None
    }
    fields.update(
        {k: run.get(k) for k in ("family", "n_enc", "n_dec", "n_layers", "data_seed")},
        feedback_interval=run.get("feedback_interval"),
        feedback_schedule=results.get("feedback_schedule"),
        preset=run.get("preset"),
        state="done",
        has_results=True,
        used=True,
        max_steps=results.get("max_steps", rec["max_steps"]),
        params=results.get("params"),
        vocab_size=results.get("vocab_size"),
        sec_per_step=timing.get("sec_per_step"),
        train_seconds=timing.get("train_seconds"),
        chance=results.get("chance"),
        train_len_min=min(train_lengths) if train_lengths else None,
        train_len_max=max(train_lengths) if train_lengths else None,
        selection_step=(results.get("selection") or {}).get("step"),
        stopped_early=results.get("stopped_early"),
        config_label=run.get("label"),
        detail=None,
    )
    if run.get("sweep"):
        fields["sweep"] = run["sweep"]
    split = fields.get("split", rec["split"])
    fields["seed"] = fields.get("seed", rec["seed"])  # an integer: _damage has checked it
    fields["split"] = None if split is None else str(split)
    return fields
