"""The Hydra-facing layer on top of rlt.training: the command precheck, grid files, job reports
and the sweep summary callback. It calls ``run``; ``run`` and ``spec`` never import it (they
use ``hydra_env``). Imported by ``train.py`` (and by tests that compose configs) before any
config is composed; importing it registers the config resolvers (``hydra_env``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlt import families
from rlt.rundir import JOBS_DIR
from rlt.training.hydra_env import (  # noqa: F401 - the Hydra-facing names, re-exported
    hydra_output_dir,
    is_multirun,
    register_resolvers,
    run_dir_for,
    save_hydra_files,
    slurm_cpus,
    slurm_gpus,
)

LAUNCH_ENV = "RLT_SWEEP_LAUNCH"


def _jobs_dir(sweep_dir: Path) -> Path:
    """This launch's job reports: ``<sweep_dir>/.jobs/<launch id>``."""
    import os

    return sweep_dir / JOBS_DIR / os.environ.get(LAUNCH_ENV, "default")


def precheck_overrides(argv: list[str]) -> None:
    """Catch a misspelled ``model.<key>=value`` before Hydra does: Hydra's own message does not
    list the valid keys. Prints one line naming them and exits with status 2."""
    import dataclasses

    from rlt.training.families import FAMILIES, MODEL_META

    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key in _REQUIRED_GROUPS and value in ("null", "None", "~", ""):
            options = sorted(p.stem for p in (_CONF_DIR / key).glob("*.yaml"))
            print(
                f"config error: {key}={value} leaves the run without a {key}; choose one of "
                + ", ".join(options),
                file=sys.stderr,
            )
            sys.exit(2)
    _check_keys(argv)
    meta = {*MODEL_META, "feedback_interval"}
    model = next((a.split("=", 1)[1] for a in argv if a.startswith("model=")), "rlt1")
    family = _model_family(model)
    if family not in FAMILIES:
        return  # an unknown model or family: Hydra and prepare() report it
    sized = {"d_model", "n_heads", "d_ff", "n_enc", "n_dec", "n_layers", "vocab_size"}
    try:
        fields = {f.name for f in dataclasses.fields(FAMILIES[family])}
    except (ImportError, AttributeError, TypeError, ValueError):
        return  # a family whose config class does not load: prepare() says which and why
    valid = sorted(fields - sized | meta)
    for arg in argv:
        key = arg.split("=", 1)[0]
        if key.startswith("model.") and "=" in arg and key[len("model.") :] not in valid:
            print(
                f"config error: {key} is not a model key (model={model}); valid keys: "
                + ", ".join(f"model.{k}" for k in valid),
                file=sys.stderr,
            )
            sys.exit(2)


def _check_keys(argv: list[str]) -> None:
    """A misspelled top-level key (``sed=43``) or fixed key of a schema group
    (``scale.max_step=10``): one line naming the key and the nearest valid one. Hydra's own
    message runs over lines and suggests ``+sed=43``, which the schema then refuses."""
    import difflib

    from rlt.training.schema import GROUPS, TOP_LEVEL

    groups = {p.name for p in _CONF_DIR.iterdir() if p.is_dir()}
    for arg in argv:
        if arg.startswith(("+", "~", "-")) or "=" not in arg:
            continue
        key = arg.split("=", 1)[0]
        top, _, rest = key.partition(".")
        if top == "hydra" or "." in rest or "/" in key:  # Hydra's own, or a group's path
            continue
        if not rest:
            valid = sorted(TOP_LEVEL | groups)
        elif top in GROUPS:
            valid = [f"{top}.{f.name}" for f in dataclasses.fields(GROUPS[top])]
        else:
            continue
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            print(
                f"config error: {key} is not a config key"
                + (f"; did you mean {close[0]}?" if close else "")
                + f" (valid: {', '.join(valid)})",
                file=sys.stderr,
            )
            sys.exit(2)


# Hydra's command-line flags that precheck understands; any other (--help, --cfg, -c, --info,
# --run, ...) leaves the command to Hydra unchecked.
_CHECKED_FLAGS = ("-m", "--multirun")
_CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# Config groups every run needs an option of (the others, e.g. experiment or sweep, are optional).
_REQUIRED_GROUPS = ("task", "model", "split", "scale", "trainer", "optim", "callbacks", "logger")


def precheck(argv: list[str]) -> None:
    """Check every cell a ``train.py`` command would run before Hydra creates any directory:
    the model keys (:func:`precheck_overrides`), then each job's composed config through
    :func:`rlt.training.lifecycle.check` (values, names that stay under root, label, environment,
    the identity of a finished run). A refused cell prints one line per refused cell naming
    the fix and exits with status 2; nothing is written and no cell of a grid has started.
    A command Hydra itself cannot compose is left for Hydra to report."""
    precheck_overrides(argv)
    flags = [a for a in argv if a.startswith("-")]
    if any(f not in _CHECKED_FLAGS for f in flags):
        return
    args = [a for a in argv if not a.startswith("-")]
    import copy
    import time

    from hydra import initialize_config_dir

    from rlt.training.lifecycle import check
    from rlt.training.spec import ConfigError

    refused: list[str] = []
    start = time.perf_counter()
    hydra_args = [a for a in args if _is_hydra_arg(a)]
    if any(a.lstrip("+~").startswith("hydra.job.config") for a in hydra_args):
        return  # Hydra's job config changed: composing here would not see it
    # A plugin's config directory (docs/EXTENDING.md): each job is composed with it, as Hydra will.
    searchpath = [a for a in hydra_args if a.lstrip("+~").startswith("hydra.searchpath")]
    moved = any(a.lstrip("+~").startswith(("hydra.run.dir", "hydra.sweep.")) for a in hydra_args)
    with initialize_config_dir(config_dir=str(_CONF_DIR), version_base="1.3", job_name="train"):
        try:
            jobs, remote = _command_jobs(args, multirun=bool(flags))
            if len(jobs) > 20:
                print(
                    f"checking the {len(jobs)} jobs of this grid ...", file=sys.stderr, flush=True
                )
            configs = [compose_job([*job, *searchpath]) for job in jobs]
        except Exception:  # noqa: BLE001 - Hydra reports what it cannot compose, before writing
            return
        for cfg in configs:
            try:
                check(copy.deepcopy(cfg), where=not moved, on_this_machine=not remote)
            except (ConfigError, OSError) as e:
                message = e if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
                refused.append(f"{cfg.cell}: {message}" if len(configs) > 1 else str(message))
    if len(jobs) > 20 and not refused:
        print(f"checked {len(jobs)} jobs in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if refused:
        for line in refused:
            print(f"config error: {line}", file=sys.stderr)
        if len(configs) > 1:
            print(
                f"{len(refused)} of {len(configs)} cells refused; nothing was started or "
                "written. Fix the values above and run the command again.",
                file=sys.stderr,
            )
        sys.exit(2)


# Composed job configs by their override list: precheck composes every job of a grid before
# Hydra starts, and write_grid (in the same process) would compose them all again.
_COMPOSED: dict[tuple[str, ...], DictConfig] = {}


def compose_job(job: list[str]) -> DictConfig:
    """The composed config of one job's overrides (composed once per process; the caller must
    not change it)."""
    key = tuple(job)
    if key not in _COMPOSED:
        from hydra import compose

        _COMPOSED[key] = compose(config_name="config", overrides=list(job))
    return _COMPOSED[key]


def _is_hydra_arg(arg: str) -> bool:
    return arg.lstrip("+~").startswith(("hydra.", "hydra/"))


def _command_jobs(args: list[str], *, multirun: bool) -> tuple[list[list[str]], bool]:
    """The override list of every job a command runs (one for a single run), and whether a
    launcher runs them on other machines (SLURM through submitit)."""
    hydra_args = [a for a in args if _is_hydra_arg(a)]
    task_args = [a for a in args if a not in hydra_args]
    if not multirun:
        return [task_args], False
    from hydra import compose

    first = basic_sweep(task_args)[0]
    cfg = compose(config_name="config", overrides=[*first, *hydra_args], return_hydra_config=True)
    cfg.hydra.overrides.task = task_args
    launcher = str(cfg.hydra.launcher.get("_target_", ""))
    return expand_jobs(cfg), "Slurm" in launcher


def _model_family(model: str) -> str | None:
    """The ``family`` a model file (conf/model/<model>.yaml) declares; RLT models inherit it
    from conf/model_base/rlt.yaml, so a file without the key is the rlt family. None for a
    model this repository's conf/ lacks (a plugin's, found on hydra.searchpath): prepare()
    checks its keys once the plugin is imported."""
    path = Path(__file__).resolve().parents[2] / "conf" / "model" / f"{model}.yaml"
    if not path.is_file():
        return None
    return str(OmegaConf.load(path).get("family", "rlt"))


class SweepSummary(Callback):
    """Prints one line per cell of a multirun and a final count; exits non-zero when any cell
    failed, was refused (a check that needs its run directory, after the grid started) or was
    interrupted. Jobs report through small files in ``<sweep_dir>/.jobs`` because the joblib and
    submitit launchers run them in other processes."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        import os
        import time

        sweep_dir = Path(config.hydra.sweep.dir)
        # Each launch reports into its own folder, so two launches of one grid at once never
        # mix their summaries; jobs (also in other processes) find it through the environment.
        launch = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        os.environ[LAUNCH_ENV] = launch
        jobs = sweep_dir / JOBS_DIR / launch
        jobs.mkdir(parents=True, exist_ok=True)
        write_grid(config, sweep_dir)
        if "SlurmLauncher" in str(config.hydra.launcher.get("_target_", "")):
            from rlt.training import slurm

            if slurm.quiet_polling():
                print("SLURM accounting (sacct) is off on this cluster: following jobs with squeue")
            print(f"follow the sweep with: python -m rlt.sweep status {sweep_dir}", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if print_summary(Path(config.hydra.sweep.dir)):
            sys.exit(1)


def print_summary(sweep_dir: Path) -> bool:
    """Print the launch's summary from its jobs' reports; whether a cell failed, was refused or
    was interrupted."""
    jobs = _jobs_dir(sweep_dir)
    reports = []
    for f in sorted(jobs.glob("*.json"), key=lambda p: int(p.stem)):
        reports.append(json.loads(f.read_text()))
    counts: dict[str, int] = {}
    for r in reports:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    print("\nsweep summary (" + str(sweep_dir) + ")")
    width = max([8, *(len(r["state"]) for r in reports)])
    for r in reports:
        print(f"  {r['state']:{width}s} {r['cell']}")
    print("  total: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no jobs")
    failed = [r for r in reports if r["state"] == "failed"]
    if failed:
        print("failed cells (see status.json in each run directory):")
        for r in failed:
            print(f"  {r['cell']}: {r.get('error', '')}")
    refused = [r for r in reports if r["state"] == "refused"]
    if refused:
        print("refused cells (nothing of theirs was changed; each line names the fix):")
        for r in refused:
            print(f"  {r['cell']}: {r.get('error', '')}")
    if any(r["state"] == "interrupted" for r in reports):
        print(
            "interrupted cells were stopped from outside (SIGTERM, scancel, Ctrl-C) or by "
            "trainer.args.max_time; "
            "launching the same command again resumes them from their last.ckpt"
        )
    sys.stdout.flush()
    return bool(failed or refused or any(r["state"] == "interrupted" for r in reports))


def stops_the_grid(outcome: dict[str, Any]) -> bool:
    """Whether a job's outcome ends the whole launch: a SIGTERM to a grid that runs its jobs in
    this process (Hydra's basic launcher) is meant for the grid, not for its current cell (a
    SLURM or joblib job is a process of its own, stopped alone)."""
    from hydra.core.hydra_config import HydraConfig

    if outcome.get("state") != "interrupted" or outcome.get("error") != "SIGTERMException":
        return False
    return str(HydraConfig.get().launcher.get("_target_", "")).endswith("BasicLauncher")


def report_job(cfg: DictConfig, outcome: dict[str, Any]) -> None:
    """Record one multirun job's outcome for :class:`SweepSummary`."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    jobs = _jobs_dir(Path(hc.sweep.dir))
    jobs.mkdir(parents=True, exist_ok=True)
    payload = {"cell": cfg.cell, "state": outcome["state"], "error": outcome.get("error")}
    (jobs / f"{hc.job.num}.json").write_text(json.dumps(payload))


def basic_sweep(args: list[str]) -> list[list[str]]:
    """The jobs Hydra's basic sweeper makes of command-line overrides, in its order: the cross
    product of each key's values (a key given twice keeps its first place and its last values),
    the last key varying fastest. Written with Hydra's public override parser;
    tests/sweeps/test_sweeps.py holds it equal to Hydra's own sweeper."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    axes: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(args):
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            axes[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise ValueError(
                f"{override.input_line}: the basic sweeper takes lists, range() and choice(); an "
                "interval() needs an optimizing sweeper (hydra/sweeper=...)"
            )
    return [list(job) for job in itertools.product(*axes.values())]


def expand_jobs(config: DictConfig) -> list[list[str]]:
    """The override lists of every job of a multirun, as Hydra's basic sweeper expands them."""
    params = config.hydra.sweeper.get("params") or {}
    return basic_sweep([f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task))


def configs_by_cell(config: DictConfig) -> dict[str, DictConfig]:
    """Each distinct cell of a composed multirun (inside an initialized config directory) with
    its job's config composed without the seed: a cell's seed is the last part of its name and
    changes nothing else, so a grid over 3 seeds composes a third of its jobs."""
    from hydra import compose

    composed: dict[tuple[str, ...], DictConfig] = {}
    cells: dict[str, DictConfig] = {}
    for job in expand_jobs(config):
        rest = tuple(o for o in job if not o.startswith("seed="))
        seed = next((o.split("=", 1)[1] for o in job if o.startswith("seed=")), config.seed)
        if rest not in composed:
            composed[rest] = compose("config", overrides=list(rest))
        cells[f"{composed[rest].cell.rsplit('/seed', 1)[0]}/seed{seed}"] = composed[rest]
    return cells


def _split_name(cfg: DictConfig) -> str | None:
    """The split a cell records: its name for a split family (the RLT), else None."""
    family = families.find(cfg.model.get("family"))
    return family.split_name(cfg.split.name) if family is not None else None


def write_grid(config: DictConfig, sweep_dir: Path) -> None:
    """``grid.json``: the distinct cells this multirun will produce (analysis and
    ``python -m rlt.sweep status`` use it to name missing cells). Each job is composed with the
    command's ``hydra.searchpath`` (a plugin's config directory, docs/EXTENDING.md), which Hydra
    files among its own overrides, not the job's."""
    cells: dict[str, dict[str, Any]] = {}
    hydra_args = list(config.hydra.overrides.get("hydra") or [])
    searchpath = [a for a in hydra_args if a.lstrip("+~").startswith("hydra.searchpath")]
    for job in expand_jobs(config):
        cfg = compose_job([*job, *searchpath])
        cells.setdefault(
            cfg.cell,
            {
                "cell": cfg.cell,
                "task": cfg.task.name,
                "model": cfg.model.name,
                "label": cfg.model.label,
                "split": _split_name(cfg),
                "arch_tag": cfg.model.arch_tag,
                "seed": cfg.seed,
                "overrides": job,
            },
        )
    merge_grid(sweep_dir, cells, len(expand_jobs(config)))


def merge_grid(sweep_dir: Path, cells: dict[str, dict[str, Any]], n_jobs: int) -> None:
    """Add a launch's cells to ``grid.json``: the cells of earlier launches (a stopped grid's
    unstarted ones among them) stay expected. Under the sweep's lock, so two launches into one
    sweep at once both keep their cells (read, merge and write are one step)."""
    from rlt.rundir import GRID, atomic_write_json, read_json, sweep_lock

    with sweep_lock(sweep_dir):
        earlier = read_json(sweep_dir / GRID, corrupt_ok=True) or {}
        merged = {
            c["cell"]: c for c in earlier.get("cells", []) if isinstance(c, dict) and "cell" in c
        }
        merged.update(cells)
        atomic_write_json(
            sweep_dir / GRID,
            {
                "n_jobs": n_jobs,
                "launches": [*earlier.get("launches", []), {"n_jobs": n_jobs, "cells": len(cells)}],
                "cells": list(merged.values()),
            },
        )
