"""train.py's edges that issue 40 found silent or crashing: a SIGTERM exits non-zero, damaged
status files are repaired rather than crashing, plugins cannot swap token ids or share a metric
name, a ``-m`` command with ``hydra.searchpath`` is still checked cell by cell, and a scheduler
that needs a monitored metric is refused before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlt import rundir
from rlt.sweep import cell_states
from rlt.training.run import SIGTERM_EXIT, check
from rlt.training.spec import ConfigError
from tests.training.helpers import compose_cfg
from tests.training.test_trust import refused_by_precheck, tiny, train_py

SHORT = ["task=parity", "model=rlt1", "split=1+1", "scale.max_steps=6", "scale.val_every=2"]


def test_sigterm_exits_with_143_and_the_status_says_interrupted(tmp_path):
    """Lightning's SIGTERMException is a SystemExit without a code (exit 0), so
    ``train.py && tables.py`` went on after a stop."""
    stop = "callbacks.inject_failure={kind: sigterm, step: 3}"
    proc = train_py(*tiny(tmp_path / "r", *SHORT, stop), cwd=tmp_path)
    assert proc.returncode == SIGTERM_EXIT == 143, proc.stderr[-2000:]
    (status_path,) = (tmp_path / "r").rglob("status.json")
    assert json.loads(status_path.read_text())["state"] == "interrupted"


def test_a_status_json_that_is_not_an_object_is_read_as_damaged(tmp_path):
    run_dir = tmp_path / "sweep" / "parity" / "rlt1" / "1+1" / "seed42"
    run_dir.mkdir(parents=True)
    (run_dir / rundir.STATUS).write_text("[1, 2]")
    assert rundir.read_json(run_dir / rundir.STATUS, corrupt_ok=True) is None
    with pytest.raises(ValueError, match="JSON list, not an object"):
        rundir.read_json(run_dir / rundir.STATUS)
    (state,) = cell_states(tmp_path / "sweep")  # rlt.sweep status: no AttributeError
    assert "does not parse" in (state["error"] or "")


def test_a_damaged_stops_list_does_not_break_the_next_stop(tmp_path):
    rundir.atomic_write_json(tmp_path / rundir.STATUS, {"state": "running", "step": 5, "stops": 7})
    status = rundir.write_status(tmp_path, "interrupted", stopped_by="SIGTERMException")
    assert status["state"] == "interrupted"
    assert [(s["step"], s["by"]) for s in status["stops"]] == [(5, "SIGTERMException")]


def test_two_metrics_of_one_name_are_refused():
    from rlt.tasks import metrics

    @metrics.register_metric("issue40_clash")
    def first(logits, batch):
        return logits[:, 0, 0]

    try:
        with pytest.raises(ValueError, match="'issue40_clash' registered twice"):

            @metrics.register_metric("issue40_clash")
            def second(logits, batch):
                return logits[:, 0, 0]

        assert metrics.EXTRA["issue40_clash"] is first
    finally:
        metrics.EXTRA.pop("issue40_clash", None)


def test_the_order_plugins_are_listed_in_cannot_change_token_ids(tmp_path):
    """Two plugins that each add a token: the ids are the same whichever is listed first (a
    relaunch with the list reordered resumed with two ids swapped)."""
    for name, token in (("lab_a", "TOKA"), ("lab_b", "TOKB")):
        (tmp_path / f"{name}.py").write_text(
            f"from rlt.tasks import vocab\nvocab.add_tokens([{token!r}])\n"
        )
    show = (
        "import sys; from rlt import plugins; from rlt.tasks import vocab; "
        "assert not plugins.load(sys.argv[1:]); "
        "print(vocab.TOKEN_TO_ID['TOKA'], vocab.TOKEN_TO_ID['TOKB'])"
    )

    def ids(*order: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", show, *order], cwd=tmp_path, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert ids("lab_a", "lab_b") == ids("lab_b", "lab_a")


def test_a_grid_with_hydra_searchpath_is_still_prechecked(tmp_path, capsys):
    """With a plugin's config directory on the search path, a bad seed in the grid is refused
    before any cell trains (it used to train seed 42, write seed-1/, then fail)."""
    conf = tmp_path / "lab_conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("# @package _global_\nscale:\n  lr: 0.002\n")
    argv = [
        "-m",
        f"hydra.searchpath=[file://{tmp_path / 'lab_conf'}]",
        "experiment=mine",
        f"root={tmp_path / 'root'}",
        "seed=42,-1",
    ]
    err = refused_by_precheck(argv, capsys)
    assert "seed must be an integer >= 0, got -1" in err
    assert not (tmp_path / "root").exists()


def test_a_scheduler_that_needs_a_monitored_metric_is_refused(tmp_path):
    cfg = compose_cfg(
        tiny(
            tmp_path / "r",
            "scheduler=constant",
            "scheduler._target_=torch.optim.lr_scheduler.ReduceLROnPlateau",
            "~scheduler.warmup_steps",
        )
    )
    with pytest.raises(ConfigError, match="steps on a monitored metric"):
        check(cfg)
    assert not Path(tmp_path / "r").exists()
