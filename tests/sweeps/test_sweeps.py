"""Grids through the real command line: train.py -m in a subprocess."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlt.sweep import cell_states
from rlt.training.hydra_support import configs_by_cell, expand_jobs
from tests.training.helpers import REPO, compose_cfg, group_options

CELLS = [
    f"{task}/rlt1/{split}/seed{seed}"
    for task in ("parity", "s5_swaps")
    for split in ("1+1", "2+0")
    for seed in (42, 43)
]


@functools.cache
def preset_cells(sweep: str):
    """(jobs, distinct cells, scale preset, composed configs) of ``sweep=<name>``, composed once
    per test session. A cell is task/model/arch/seed<seed> and the seed changes no other part of
    it, so each job is composed without its seed (a grid over 3 seeds composes a third of its
    jobs); the configs are those seed-less compositions."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"sweep={sweep}"], return_hydra_config=True)
        cfg.hydra.overrides.task = [f"sweep={sweep}"]
        jobs = expand_jobs(cfg)
        by_cell = configs_by_cell(cfg)
        composed = {id(c): c for c in by_cell.values()}
        cells = set(by_cell)
        return jobs, frozenset(cells), str(cfg.scale.name), list(composed.values())


def train(*args: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"train.py {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def results_bytes(sweep_dir: Path) -> dict[str, bytes]:
    return {cell: (sweep_dir / cell / "results.json").read_bytes() for cell in CELLS}


@pytest.mark.slow
def test_grid_runs_every_cell_then_skips_them(tmp_path):
    proc = train("-m", "sweep=tiny", f"root={tmp_path}")
    sweep_dir = tmp_path / "tiny"
    assert all((sweep_dir / c / "results.json").exists() for c in CELLS)
    assert "total: 8 done" in proc.stdout
    grid = json.loads((sweep_dir / "grid.json").read_text())
    assert sorted(c["cell"] for c in grid["cells"]) == sorted(CELLS)
    before = results_bytes(sweep_dir)

    again = train("-m", "sweep=tiny", f"root={tmp_path}")
    assert "total: 8 skipped" in again.stdout
    assert results_bytes(sweep_dir) == before  # byte-identical, nothing retrained
    assert {r["state"] for r in cell_states(sweep_dir)} == {"done"}


@pytest.mark.slow
def test_failed_cell_is_isolated_and_rerun_alone(tmp_path):
    bad = "s5_swaps/rlt1/2+0/seed43"
    proc = train(
        "-m",
        "sweep=tiny",
        f"root={tmp_path}",
        f"callbacks.inject_failure={{kind: nan, step: 1, cell: '{bad}'}}",
        check=False,
    )
    assert proc.returncode != 0
    assert "total: 7 done, 1 failed" in proc.stdout
    assert f"  {bad}: " in proc.stdout.split("failed cells")[1]
    status = json.loads((tmp_path / "tiny" / bad / "status.json").read_text())
    assert status["state"] == "failed" and "Traceback" in status["traceback"]
    assert "non-finite training loss" in status["error"]

    rerun = train("-m", "sweep=tiny", f"root={tmp_path}")
    assert "total: 1 done, 7 skipped" in rerun.stdout
    assert json.loads((tmp_path / "tiny" / bad / "status.json").read_text())["state"] == "done"


@pytest.mark.slow
def test_killed_sweep_resumes_to_the_same_results(tmp_path):
    steps = ["scale.max_steps=8", "scale.val_every=2"]
    train("-m", "sweep=tiny", f"root={tmp_path / 'straight'}", *steps)

    env = dict(os.environ, WANDB_MODE="disabled")
    proc = subprocess.Popen(
        [sys.executable, "train.py", "-m", "sweep=tiny", f"root={tmp_path / 'killed'}", *steps],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    killed_dir = tmp_path / "killed" / "tiny"
    deadline = time.time() + 300
    # Kill as soon as the third cell has a checkpoint: two cells done, one interrupted mid-run.
    while time.time() < deadline:
        done = [c for c in CELLS if (killed_dir / c / "results.json").exists()]
        mid = [
            c
            for c in CELLS
            if (killed_dir / c / "checkpoints" / "last.ckpt").exists() and c not in done
        ]
        if len(done) >= 2 and mid:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    states = {r["cell"]: r["state"] for r in cell_states(killed_dir)}
    assert "interrupted" in states.values() or "running" in states.values()

    train("-m", "sweep=tiny", f"root={tmp_path / 'killed'}", *steps)
    straight_dir = tmp_path / "straight" / "tiny"
    for cell in CELLS:
        a = json.loads((straight_dir / cell / "results.json").read_text())
        b = json.loads((killed_dir / cell / "results.json").read_text())
        for key in ("val_curve", "train_curve", "test_by_policy", "params"):
            assert a[key] == b[key], (cell, key)


@pytest.mark.slow
def test_joblib_launcher_runs_two_workers(tmp_path):
    proc = train(
        "-m",
        "sweep=tiny",
        f"root={tmp_path}",
        "hydra/launcher=parallel",
        "hydra.launcher.n_jobs=2",
        "trainer.threads=auto",
        "scale.d_model=256",  # auto gives small models one thread; this one gets cores / jobs
        "task=parity",  # 4 of the grid's cells, two per worker
    )
    assert "total: 4 done" in proc.stdout
    pids = set()
    for cell in [c for c in CELLS if c.startswith("parity/")]:
        res = json.loads((tmp_path / "tiny" / cell / "results.json").read_text())
        assert res["timing"]["threads"] == max(1, (os.cpu_count() or 1) // 2)
        pids.add(res["timing"]["pid"])
    assert len(pids) >= 2  # jobs really ran in more than one worker process


@pytest.mark.slow
def test_submitit_local_executor(tmp_path):
    proc = train(
        "-m",
        "sweep=tiny",
        f"root={tmp_path}",
        "hydra/launcher=local_submitit",
        "task=parity",
        "split=1+1",
        "seed=42",
    )
    assert "total: 1 done" in proc.stdout
    assert (tmp_path / "tiny" / "parity/rlt1/1+1/seed42" / "results.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sweep, distinct, jobs",
    [
        ("main", 108, 180),
        ("feedback", 180, 180),
        ("parity16", 10, 18),
        ("demo", 6, 6),
        ("main_small", 108, 180),
        ("feedback_small", 180, 180),
        ("parity16_small", 10, 18),
        ("tiny", 8, 8),
        ("schedule", 30, 30),
        ("laptop", 111, 111),
        ("laptop_seeds", 12, 12),
        ("laptop_long", 48, 48),
        ("laptop_long_cells", 12, 12),
        ("laptop_long_seeds", 12, 12),
        ("laptop_long_parity40", 9, 9),
        ("laptop_long_schedule", 9, 9),
        ("laptop_long_s5", 6, 6),
        ("probe_laptop", 18, 18),
        ("baselines_laptop", 36, 36),
        ("baselines", 72, 72),
        ("laptop_trackers", 24, 24),
        ("laptop_long_trackers", 24, 24),
        ("laptop_scout", 24, 24),
    ],
)
def test_presets_have_their_documented_cell_counts(sweep, distinct, jobs):
    job_list, cells, _, _ = preset_cells(sweep)
    assert len(job_list) == jobs
    assert len(cells) == distinct


def test_every_sweep_file_is_tested():
    assert set(group_options("sweep")) == {
        "main",
        "feedback",
        "parity16",
        "demo",
        "main_small",
        "feedback_small",
        "parity16_small",
        "tiny",
        "schedule",
        "laptop",
        "laptop_seeds",
        "laptop_long",
        "laptop_long_cells",
        "laptop_long_seeds",
        "laptop_long_parity40",
        "laptop_long_schedule",
        "laptop_long_s5",
        "probe_laptop",
        "baselines_laptop",
        "baselines",
        "laptop_trackers",
        "laptop_long_trackers",
        "laptop_scout",
    }


def test_user_grid_command_expands_to_twelve_runs():
    cfg = compose_cfg(["task=parity", "split=4+4", "seed=42"], hydra=True)
    cfg.hydra.overrides.task = ["task=parity,s5_swaps", "split=4+4,5+3", "seed=42,43,44"]
    assert len(expand_jobs(cfg)) == 12


@pytest.mark.slow
@pytest.mark.parametrize("full", ["main", "feedback", "parity16"])
def test_small_presets_have_the_cells_of_their_full_preset(full):
    _, full_cells, full_scale, _ = preset_cells(full)
    _, small_cells, small_scale, _ = preset_cells(f"{full}_small")
    assert small_cells == full_cells and len(full_cells) > 0
    assert (full_scale, small_scale) == ("paper", "small")


@pytest.mark.slow
def test_hydra_sweep_dir_moves_every_result_and_analysis_reads_it(tmp_path):
    sweep = tmp_path / "my_sweep"
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "-m", "task=parity", "split=1+1",
         "seed=42,43", "experiment=tiny", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("results.json"))
    assert [str(p) for p in results] == [
        "my_sweep/parity/rlt1/1+1/seed42/results.json",
        "my_sweep/parity/rlt1/1+1/seed43/results.json",
    ]
    assert (sweep / "grid.json").exists() and f"sweep summary ({sweep})" in proc.stdout
    assert not (tmp_path / "runs").exists()
    tables = subprocess.run(
        [sys.executable, str(REPO / "analysis" / "tables.py"), str(sweep), "--quiet"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert tables.returncode == 0, tables.stderr
    assert (sweep / "analysis" / "report.md").exists()


@pytest.mark.slow
def test_hydra_run_dir_moves_a_single_run(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "task=parity", "split=1+1", "experiment=tiny",
         "hydra.run.dir=one_run"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "one_run" / "results.json").read_text())
    assert res["run"]["run_dir"] == "one_run"


@pytest.mark.slow
def test_laptop_preset_holds_the_issue_cells_seed_major():
    """sweep=laptop (issue 20): every task's models as the issue lists them, seeds 42-44, every
    cell of seed 42 before any of seed 43."""
    job_list, _, _, configs = preset_cells("laptop")
    cells = {(c.task.name, c.model.label, c.model.arch_tag) for c in configs}
    expected = {
        ("parity_3to16", "RLT-1", "1+1"),
        ("parity_3to16", "RLT-2 B=4", "1+1"),
        ("parity_3to16", "RLT-0", "1+1"),
        ("parity_3to16", "Transformer 2", "L2"),
        ("parity_3to16", "LSTM 2", "L2"),
        ("parity_3to16", "DeltaNet [-1,1] 2", "L2"),
        ("parity_3to16", "RLT-2 B=4", "2+2"),
        ("parity_3to16", "RLT-1", "2+2"),
        ("s5_swaps", "RLT-1", "3+1"),
        ("s5_swaps", "RLT-1", "2+2"),
        ("s5_swaps", "RLT-1", "1+3"),
        ("s5_swaps", "RLT-2 B=4", "2+2"),
        ("s5_swaps", "RLT-0", "2+2"),
        ("s5_swaps", "Transformer 4", "L4"),
        ("s5_swaps", "LSTM 2", "L2"),
        ("s5_swaps", "DeltaNet [-1,1] 2", "L2"),
        ("s5", "RLT-1", "2+2"),
        ("s5", "Transformer 4", "L4"),
        ("s5", "LSTM 2", "L2"),
        ("s5", "DeltaNet [-1,1] 2", "L2"),
        ("addition", "RLT-1", "2+2"),
        ("addition", "RLT-0", "2+2"),
        ("addition", "Transformer 4", "L4"),
        ("addition", "LSTM 2", "L2"),
        ("addition", "DeltaNet [-1,1] 2", "L2"),
        *(
            (task, label, arch)
            for task in ("mod5_flat_3to15", "mod5_brackets_3to16")
            for label, arch in (
                ("RLT-1", "2+2"),
                ("RLT-2 B=4", "2+2"),
                ("RLT-0", "2+2"),
                ("Transformer 4", "L4"),
                ("LSTM 2", "L2"),
                ("DeltaNet [-1,1] 2", "L2"),
            )
        ),
    }
    assert len(expected) == 37
    assert cells == expected and len(job_list) == 3 * len(expected)
    seeds = [int(next(o for o in job if o.startswith("seed="))[5:]) for job in job_list]
    assert seeds == sorted(seeds) and set(seeds) == {42, 43, 44}
    assert {c.scale.name for c in configs} == {"laptop"}
    # The report's fixed step count: no early stop in a preset that feeds a verdict (issue 28).
    assert all(c.callbacks.early_stop.val_acc is None for c in configs)


@pytest.mark.slow
def test_a_grid_over_splits_trains_each_depth_only_model_once(tmp_path):
    """Issue 29 item 1: the Transformer at 1+1 and 2+0 is one two-layer run; the grid trains it
    once, reports the other job as skipped and ends with a summary; a relaunch skips both."""
    args = ("-m", "experiment=tiny", "model=transformer", "split=1+1,2+0", f"root={tmp_path}")
    first = train(*args)
    assert "total: 1 done, 1 skipped" in first.stdout
    assert "total: 2 skipped" in train(*args).stdout


@pytest.mark.slow
def test_a_second_launch_keeps_the_first_launchs_cells(tmp_path):
    """Issue 29 item 3: grid.json accumulates launches into one sweep, so a cell of an earlier
    launch that never ran stays expected (status and tables name it missing)."""
    sweep = tmp_path / "tiny"
    train("-m", "experiment=tiny", "seed=1", f"root={tmp_path}")
    (sweep / "grid.json").write_text(
        json.dumps(
            {
                **json.loads((sweep / "grid.json").read_text()),
                "cells": [
                    *json.loads((sweep / "grid.json").read_text())["cells"],
                    {
                        "cell": "parity_prefix/rlt1/2+2/seed3",
                        "task": "parity_prefix",
                        "model": "rlt1",
                        "label": "RLT-1",
                        "split": "2+2",
                        "arch_tag": "2+2",
                        "seed": 3,
                        "overrides": ["experiment=tiny", "seed=3"],
                    },
                ],
            }
        )
    )  # as a launch of seeds 1 and 3 killed before seed 3 started leaves it
    train("-m", "experiment=tiny", "seed=9", f"root={tmp_path}")
    grid = json.loads((sweep / "grid.json").read_text())
    assert [c["seed"] for c in grid["cells"]] == [1, 3, 9]
    assert len(grid["launches"]) == 2  # one record per launch
    states = {r["cell"]: r["state"] for r in cell_states(sweep)}
    assert states["parity_prefix/rlt1/2+2/seed3"] == "missing"
    assert states["parity_prefix/rlt1/2+2/seed9"] == "done"


def _merge_in_a_process(sweep: str, cell: str, pause_s: float, together) -> None:
    """One launch's merge, its read of grid.json slowed by ``pause_s`` (the race window), both
    launches starting it at once (``together``: a barrier)."""
    from rlt import rundir
    from rlt.training import hydra_support

    read = rundir.read_json

    def slow_read(*args, **kwargs):
        out = read(*args, **kwargs)
        time.sleep(pause_s)
        return out

    rundir.read_json = slow_read
    together.wait(timeout=60)
    hydra_support.merge_grid(Path(sweep), {cell: {"cell": cell, "seed": int(cell[-1])}}, 1)


def test_two_launches_merging_at_once_both_keep_their_cells(tmp_path):
    """Two launches into one sweep at once (two shells, two SLURM submissions): each reads
    grid.json, adds its cells, writes it back. Without the sweep's lock the second writer drops
    the first one's cells (both read before either wrote: the 0.5 s pause makes it certain)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    sweep = tmp_path / "sweep"
    together = ctx.Barrier(2)
    launches = [
        ctx.Process(target=_merge_in_a_process, args=(str(sweep), f"a/seed{i}", 0.5, together))
        for i in (1, 2)
    ]
    for p in launches:
        p.start()
    for p in launches:
        p.join(timeout=60)
        assert p.exitcode == 0
    grid = json.loads((sweep / "grid.json").read_text())
    assert sorted(c["cell"] for c in grid["cells"]) == ["a/seed1", "a/seed2"]
    assert len(grid["launches"]) == 2


def test_a_launch_that_cannot_take_the_sweep_lock_says_which_file(tmp_path):
    import fcntl

    from rlt import rundir

    (tmp_path / rundir.SWEEP_LOCK).touch()
    with open(tmp_path / rundir.SWEEP_LOCK) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's flock conflicts with this one
        with pytest.raises(RuntimeError, match=r"\.grid\.lock"):
            with rundir.sweep_lock(tmp_path, wait_s=0.2):
                pass


@pytest.mark.parametrize(
    "args",
    [
        ["seed=1,2", "task=parity,s5", "split=4+4"],
        ["seed=range(42,45)", "+task.options.n=3", "model=rlt1,transformer", "seed=7,8"],
        ["grid_cell=laptop/a,laptop/b", "~wandb", "scale.lr=choice(0.1,0.01)", "x=[1,2]"],
        ["++root=/tmp/r", "seed=1", "task=parity", "seed=2,3"],
    ],
)
def test_the_basic_sweep_expands_as_hydras_own_sweeper(args):
    """basic_sweep (public parser only) against Hydra's BasicSweeper itself, the reference: the
    same jobs in the same order (the grid order and grid.json depend on it)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rlt.training.hydra_support import basic_sweep

    parsed = OverridesParser.create().parse_overrides(args)
    hydras = [list(j) for batch in BasicSweeper.split_arguments(parsed, None) for j in batch]
    assert len(hydras) > 1  # every case sweeps something
    assert basic_sweep(args) == hydras


def test_the_basic_sweep_is_the_cross_product_in_order():
    from rlt.training.hydra_support import basic_sweep

    assert basic_sweep(["seed=1,2", "task=parity,s5", "split=4+4"]) == [
        ["seed=1", "task=parity", "split=4+4"],
        ["seed=1", "task=s5", "split=4+4"],
        ["seed=2", "task=parity", "split=4+4"],
        ["seed=2", "task=s5", "split=4+4"],
    ]


def test_an_interval_sweep_is_refused_in_one_line():
    from rlt.training.hydra_support import basic_sweep

    with pytest.raises(ValueError, match="interval\\(\\) needs an optimizing sweeper"):
        basic_sweep(["scale.lr=interval(0.1,1.0)"])


@pytest.mark.parametrize(
    ("sweep", "also"),
    [
        ("laptop_long_cells", ()),
        ("laptop_long_seeds", ()),
        ("laptop_long_parity40", ("task.",)),
        ("laptop_long_s5", ()),
    ],
)
def test_the_16000_step_cells_differ_from_their_3000_step_siblings_only_in_scale(sweep, also):
    """Issue 38: a cell of the verdict presets is its sweep=laptop sibling (the same grid cell;
    with parity_3to16 for the 3-40 cells) at scale=laptop_long; nothing else that decides
    results may differ."""
    from omegaconf import OmegaConf

    from rlt.training.identity import config_differences

    jobs, _, _, _ = preset_cells(sweep)
    cells = sorted({o for job in jobs for o in job if o.startswith("grid_cell=")})
    assert cells
    for cell in cells:
        new = compose_cfg([f"sweep={sweep}", cell])
        old = compose_cfg(["sweep=laptop", cell.replace("parity40_", "parity_")])
        diffs = config_differences(
            OmegaConf.to_container(old, resolve=True), OmegaConf.to_container(new, resolve=True)
        )
        assert all(d.startswith(("scale.", *also)) for d in diffs), (cell, diffs)
        assert "scale.max_steps: 3000 -> 16000" in diffs, (cell, diffs)
