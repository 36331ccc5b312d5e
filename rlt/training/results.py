"""Evaluation and results: each checkpoint policy's weights evaluated on the test lengths,
assembled into results.json (schema: docs/DESIGN.md section 4) with the state probe of the
selected checkpoint, and the summaries printed, or logged to W&B, from it."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import time
from typing import Any

import torch

import rlt
from rlt import portable
from rlt.tasks import metrics as task_metrics
from rlt.training.callbacks import RunRecord
from rlt.training.checkpoints import (
    POLICIES,
    eval_interval,
    load_weights,
    restore,
    select_step,
)
from rlt.training.evaluate import evaluate_lengths


def evaluate_policies(
    spec, model: torch.nn.Module, dm, recorder: RunRecord
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every checkpoint policy's weights scored on the test lengths: results.json's
    ``test_by_policy`` (min_val_loss always among them: it is the selection), and per budget
    of ``callbacks.budgets`` the same for the checkpoints kept at that step
    (``test_by_budget``; empty without budgets). A step's weights are scored once."""
    s = spec.settings
    policies = [p for p in s.callbacks.policies if p in POLICIES] or ["min_val_loss"]
    if "min_val_loss" not in policies:
        policies.insert(0, "min_val_loss")
    loaders = dm.test_dataloaders(spec.test_lengths)
    with_exact = "exact" in getattr(spec.task, "metrics", ())
    by_step: dict[int, list[dict]] = {}

    def scored(path, policy: str, chosen: dict[str, Any], within: str) -> dict[str, Any]:
        """``path``'s weights scored, after checking they are of the step ``policy`` chose
        from the validation curve (``within`` says which part of it)."""
        ckpt = load_weights(path)
        step = int(ckpt["step"])
        if step != chosen["step"]:
            raise RuntimeError(
                f"{path} holds step {step}, but {policy} chose step {chosen['step']} {within}; "
                "rerun with force=true"
            )
        interval = eval_interval(spec, ckpt)  # the chunk size restore sets
        if step not in by_step:
            restore(model, ckpt, spec)
            say(f"  evaluating {path.stem} checkpoint (step {step}) on lengths {spec.test_lengths}")
            by_step[step] = evaluate_lengths(
                model, loaders, with_exact=with_exact, acc_mode=spec.task.acc_mode
            )
        return {
            "step": step,
            "feedback_interval": interval,
            "val": {k: v for k, v in chosen.items() if k != "step"},
            "rows": by_step[step],
        }

    d = spec.dir
    curve = recorder.val_curve
    by_policy = {
        p: scored(d.policy_file(p), p, select_step(curve, p), "from the validation curve")
        for p in policies
    }
    by_budget: dict[str, dict[str, Any]] = {}
    for budget in s.callbacks.budgets:
        if budget > curve[-1]["step"]:  # training ended (stopped early) before it: the run's
            by_budget[str(budget)] = by_policy  # own choices
            continue
        within = [r for r in curve if r["step"] <= budget]
        by_budget[str(budget)] = {
            p: scored(
                d.policy_file(p, budget), p, select_step(within, p), f"within {budget} steps"
            )  # fmt: skip
            for p in policies
        }
    return by_policy, by_budget


def check_probe(spec, model: torch.nn.Module) -> None:
    """``evaluate.probe=true`` where the probe cannot run (a task without a running target, a
    model without a final ``norm`` or ``head``): refused before training, not after it."""
    from rlt import state_probe
    from rlt.training.schema import ConfigError

    if spec.settings.probe is not True:
        return
    if not state_probe.has_target(spec.task):
        raise ConfigError(
            f"evaluate.probe=true: task {spec.task.name!r} has no running target to probe (probe "
            f"tasks: {', '.join(state_probe.REQUIRED)}); use evaluate.probe=auto or false"
        )
    if not state_probe.can_probe(model):
        raise ConfigError(
            "evaluate.probe=true: "
            + state_probe.NO_HOOK.format(name=type(model).__name__)
            + "; use evaluate.probe=auto or false"
        )


def probe(spec, model: torch.nn.Module) -> dict[str, Any] | None:
    """``evaluate.probe``: the linear state probe of the selected (min_val_loss) checkpoint, or
    None where it is off or the task has no running target."""
    from rlt import state_probe

    setting = spec.settings.probe
    if setting in (False, "off") or (setting == "auto" and not state_probe.has_target(spec.task)):
        return None
    if setting == "auto" and not state_probe.can_probe(model):
        say(
            "  state probe skipped: "
            + state_probe.NO_HOOK.format(name=type(model).__name__)
            + " (evaluate.probe=false silences this)"
        )
        return None
    ckpt = load_weights(spec.dir.policy_file("min_val_loss"))
    restore(model, ckpt, spec)  # as evaluated: the last training stage's chunk size
    start = time.perf_counter()
    block = state_probe.probe_model(
        model, spec.task, spec.test_lengths, n_test=spec.settings.scale.n_test
    )
    block = {"policy": "min_val_loss", "step": int(ckpt["step"]), **block}
    block["seconds"] = round(time.perf_counter() - start, 2)
    say(f"  state probe of the min_val_loss checkpoint ({block['seconds']:.1f} s):")
    say("  " + state_probe.format_probe(block).replace("\n", "\n  "))
    return block


def assemble(
    spec,
    recorder: RunRecord,
    by_policy: dict[str, dict[str, Any]],
    *,
    by_budget: dict[str, dict[str, Any]] | None = None,
    n_params: int,
    step_paths: dict[str, Any],
    probe: dict[str, Any] | None,
    fit_seconds: float,
) -> dict[str, Any]:
    """results.json, whole: the one place it is built (its schema: docs/DESIGN.md)."""
    s = spec.settings
    selected = by_policy["min_val_loss"]
    return {
        "schema_version": 1,
        "run": spec.identity,
        "params": n_params,
        # plugin tasks may add tokens: the embedding and the output layer grow with them
        "vocab_size": spec.task.vocab_size,
        "max_steps": s.scale.max_steps,
        "train_lengths": list(spec.task.train_lengths),
        "test_lengths": spec.test_lengths,
        "chance": getattr(spec.task, "chance", None),
        "selection": {"policy": "min_val_loss", "step": selected["step"], "val": selected["val"]},
        "val_curve": recorder.val_curve,
        "train_curve": recorder.train_curve,
        "test": selected["rows"],
        "test_by_policy": by_policy,
        # callbacks.budgets: each policy's checkpoint selected within each budget, scored
        **({"test_by_budget": by_budget} if by_budget else {}),
        "feedback_schedule": spec.schedule.to_list() if spec.schedule is not None else None,
        # which plugin code computed each registered metric: runs that share a metric's name
        # but not its definition are never averaged (rlt/analysis/definitions.py)
        "metric_definitions": task_metrics.definitions(),
        "versions": versions(),
        "arithmetic": portable.describe(),
        "config_hash": hashlib.sha1(s.config_yaml.encode()).hexdigest()[:12],
        **step_paths,  # compiled_step, native_loop: how the steps ran
        **({"probe": probe} if probe is not None else {}),
        "stopped_early": recorder.stopped_early,
        "timing": _timing(recorder, fit_seconds),
    }


def _timing(recorder: RunRecord, fit_seconds: float) -> dict[str, Any]:
    return {
        "sec_per_step": recorder.train_seconds / max(1, recorder.timed_steps),
        "train_seconds": recorder.train_seconds,
        "timed_steps": recorder.timed_steps,
        "fit_seconds_this_process": fit_seconds,
        # core-seconds (process CPU time) of the timed steps, in all and per chunk size B in
        # force ("None": no feedback; a feedback schedule has one entry per stage's B)
        "cpu_seconds": recorder.cpu_seconds,
        "cpu_sec_per_step": recorder.cpu_seconds / max(1, recorder.timed_steps),
        "by_interval": recorder.by_interval,
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
    }


def write_done(spec, step: int, recorder: RunRecord, results: dict) -> None:
    """results.json, then status.json ``done`` (results first: a done status always has them)."""
    spec.dir.write_results(results)
    spec.dir.set_status(
        "done",
        step=step,
        max_steps=spec.settings.scale.max_steps,
        best_val_acc=max(r["acc"] for r in recorder.val_curve),
        retrain=None,
    )


def log_results(loggers: list, results: dict[str, Any]) -> None:
    """The results to the W&B run (its length table, probe table and summary), if one logs."""
    for logger in loggers:
        if type(logger).__name__ != "WandbLogger":
            continue
        import wandb

        rows = [
            [policy, r["length"], r["metric"], r["value"]]
            for policy, block in results["test_by_policy"].items()
            for r in block["rows"]
        ]
        logger.experiment.log(
            {
                "test/length_generalization": wandb.Table(
                    columns=["policy", "length", "metric", "value"], data=rows
                )
            }
        )
        probe_table = probe_rows(results)
        if probe_table:
            logger.experiment.log(
                {
                    "probe/by_position": wandb.Table(
                        columns=["target", "length", "bucket", "acc"], data=probe_table
                    )
                }
            )
        logger.experiment.summary.update(
            {
                "params": results["params"],
                "best_step": results["selection"]["step"],
                "sec_per_step": results["timing"]["sec_per_step"],
                **summary_by_length(results),
                **{f"probe/{t}/{b}": v for t, length, b, v in probe_table if length == "all"},
            }
        )
        wandb.finish()


def probe_rows(results: dict[str, Any]) -> list[list[Any]]:
    """The results.json probe as rows (target, test length or "all", bucket, accuracy %)."""
    block = results.get("probe") or {}
    rows = []
    for name, t in (block.get("targets") or {}).items():
        rows += [[name, "all", b, v] for b, v in t.get("by_bucket", {}).items()]
        for length, rec in t.get("by_length", {}).items():
            rows += [[name, length, b, v] for b, v in rec.get("buckets", {}).items()]
    return rows


def versions() -> dict[str, str]:
    import lightning

    return {
        "rlt": rlt.__version__,
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# --------------------------------------------------------------------------------------------
# Logging and printing
# --------------------------------------------------------------------------------------------


def summary_by_length(results: dict[str, Any]) -> dict[str, float]:
    """``{"test/acc@256": 0.98, ...}``: the selected checkpoint's test metrics as flat summary
    keys, so W&B's runs table can sort and filter by them."""
    return {f"test/{r['metric']}@{r['length']}": r["value"] for r in results["test"]}


def print_table(results: dict[str, Any]) -> None:
    """The length-generalization table of the selected checkpoint, on the terminal."""
    from rich.console import Console
    from rich.table import Table

    rows = results["test"]
    metrics = list(dict.fromkeys(r["metric"] for r in rows if r["metric"] != "loss"))
    lengths = sorted({r["length"] for r in rows})
    value = {(r["length"], r["metric"]): r["value"] for r in rows}
    run = results["run"]
    lo, hi = results["train_lengths"]
    table = Table(
        title=f"{run['label']} {run['split'] or ''} on {run['task']}, seed {run['seed']}: "
        f"checkpoint of step {results['selection']['step']} (lowest val loss); "
        f"trained on lengths {lo}-{hi}",
    )
    table.add_column("length", justify="right")
    for m in metrics:
        table.add_column(f"{m} %", justify="right")
    for length in lengths:
        mark = "" if lo <= length <= hi else " *"
        table.add_row(f"{length}{mark}", *[f"{100 * value[(length, m)]:.2f}" for m in metrics])
    Console(width=120).print(table)
    print("* beyond the training lengths", flush=True)


def say(msg: str) -> None:
    """A progress line, flushed (logs of SLURM jobs and nohup see it at once)."""
    print(msg, file=sys.stdout, flush=True)
