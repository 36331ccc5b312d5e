"""Results you can trust after anything (issue 23): labels follow the trained model, damaged
run files never pass as finished (or break one), an interrupted forced retrain leaves no stale
results, a command is checked cell by cell before Hydra writes anything, and no value places
files outside root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlt import rundir
from rlt.analysis.collect import collect
from rlt.sweep import cell_states
from rlt.training.hydra_support import precheck
from rlt.training.lifecycle import check
from rlt.training.run import run
from rlt.training.spec import ConfigError
from tests.training.helpers import REPO, compose_cfg, load_results

SHORT = ["task=parity", "model=rlt1", "split=1+1", "scale.max_steps=6", "scale.val_every=2"]


def tiny(root: Path, *overrides: str) -> list[str]:
    return ["experiment=tiny", f"root={root}", "print_table=false", *overrides]


def listing(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes (directories included as empty entries)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"")
        for p in sorted(root.rglob("*"))
    }


def refused_by_precheck(argv: list[str], capsys) -> str:
    """precheck's one-line refusal (exit status 2), as train.py calls it before Hydra."""
    with pytest.raises(SystemExit) as exc:
        precheck(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def train_py(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="disabled")
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# 1. Labels follow the configuration that trains ---------------------------------------------
@pytest.mark.parametrize(
    ("model", "interval", "fix"),
    [
        ("rlt1", "4", "model=rlt2 model.feedback_interval=4"),
        ("rlt0", "1", "model=rlt1"),
        ("rlt2", "1", "model=rlt1"),
        ("rlt1", "null", "model=rlt0"),
    ],
)
def test_a_model_whose_label_does_not_match_its_feedback_is_refused(
    tmp_path, capsys, model, interval, fix
):
    argv = tiny(tmp_path / "root", f"model={model}", f"model.feedback_interval={interval}")
    with pytest.raises(ConfigError, match=f"use {fix}"):
        check(compose_cfg(argv))
    assert f"use {fix}" in refused_by_precheck(argv, capsys)
    assert not (tmp_path / "root").exists()


def test_a_schedule_must_be_named_by_the_model_label(tmp_path):
    schedule = "model.feedback_schedule=[[0,4],[0.5,1]]"
    for model in ("rlt1", "rlt2"):
        with pytest.raises(ConfigError, match="does not name the feedback schedule"):
            check(compose_cfg(tiny(tmp_path, f"model={model}", schedule)))
    # the preset names its schedule; feedback_interval does not matter under a schedule
    spec = check(compose_cfg(tiny(tmp_path, "model=rlt2_sched_4to1", "model.feedback_interval=1")))
    assert spec.identity["label"] == "RLT-2 B=4→1" and spec.model_kwargs["feedback_interval"] == 4
    named = ["model.name=rlt2_sched_4to2", "model.label='RLT-2 B=4→2'"]
    spec = check(
        compose_cfg(tiny(tmp_path, "model=rlt2", "model.feedback_schedule=[[0,4],[3,2]]", *named))
    )
    assert "/rlt2_sched_4to2/" in str(spec.run_dir)


def test_precheck_leaves_moved_runs_and_slurm_grids_to_the_run(tmp_path, capsys):
    """hydra.run.dir moves a run away from root/...: the finished run at the default place
    is not the one asked for, so precheck does not hold it against the command; a grid for a
    SLURM launcher is not refused for the submitting machine's lack of CUDA."""
    root = tmp_path / "root"
    run(compose_cfg(tiny(root, *SHORT)))
    precheck(tiny(root, *SHORT, "scale.lr=0.5", f"hydra.run.dir={tmp_path / 'moved'}"))
    assert "scale.lr" in refused_by_precheck(tiny(root, *SHORT, "scale.lr=0.5"), capsys)
    if not torch.cuda.is_available():
        grid = tiny(tmp_path / "grid", *SHORT, "seed=42,43", "trainer=gpu")
        precheck(["-m", *grid, "hydra/launcher=slurm"])  # no SystemExit
        argv = ["-m", *grid]
        assert "needs CUDA" in refused_by_precheck(argv, capsys)


def test_the_directory_and_label_name_the_chunk_size_that_trains(tmp_path):
    spec = check(compose_cfg(tiny(tmp_path, "model=rlt2", "model.feedback_interval=2")))
    assert spec.identity["label"] == "RLT-2 B=2" and spec.identity["model"] == "rlt2_b2"
    assert spec.model_kwargs["feedback_interval"] == 2
    assert "/rlt2_b2/" in str(spec.run_dir)


# 2. A damaged status.json on a finished run -----------------------------------------------
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_damaged_status_of_a_finished_run_is_restored_from_its_results(tmp_path, damage):
    cfg = tiny(tmp_path, *SHORT, "logger=csv")
    run_dir = Path(run(compose_cfg(cfg))["run_dir"])
    before = (run_dir / rundir.RESULTS).read_bytes()
    metrics = run_dir / "csv" / "metrics.csv"
    assert metrics.exists()
    status = run_dir / rundir.STATUS
    status.write_text("" if damage == "empty" else status.read_text()[:25])

    [record] = cell_states(tmp_path / "tiny")
    assert record["state"] == "unreadable" and "repairs" in record["error"]
    assert run(compose_cfg(cfg))["state"] == "skipped"
    assert (run_dir / rundir.RESULTS).read_bytes() == before  # not re-evaluated
    assert metrics.exists()
    restored = json.loads(status.read_text())
    assert restored["state"] == "done" and restored["step"] == 6
    assert cell_states(tmp_path / "tiny")[0]["state"] == "done"


# 3. A damaged config.yaml never switches the identity guard off ---------------------------
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_run_whose_stored_config_is_unreadable_is_never_reused(tmp_path, capsys, damage):
    cfg = tiny(tmp_path, *SHORT)
    run_dir = Path(run(compose_cfg(cfg))["run_dir"])
    config = run_dir / rundir.CONFIG
    config.write_text("" if damage == "empty" else config.read_text()[:40])
    before = listing(tmp_path)
    for argv in (cfg, [*cfg, "scale.lr=0.5"]):
        with pytest.raises(ConfigError, match="force=true"):
            run(compose_cfg(argv))
        assert "cannot be told" in refused_by_precheck(argv, capsys)
    assert listing(tmp_path) == before
    assert run(compose_cfg([*cfg, "scale.lr=0.5", "force=true"]))["state"] == "done"


# 4. An interrupted force=true retrain -----------------------------------------------------
def test_an_interrupted_forced_retrain_leaves_no_stale_results_and_resumes(tmp_path):
    old = tiny(tmp_path / "runs", *SHORT)
    run_dir = Path(run(compose_cfg(old))["run_dir"])
    old_results = (run_dir / rundir.RESULTS).read_bytes()
    # As if the old training had been stopped and resumed once: its stop is not the retrain's.
    rundir.write_status(run_dir, "done", stops=[{"step": 4, "by": "SIGTERMException"}])
    new = [*old, "scale.lr=0.002", "force=true"]
    stop = compose_cfg([*new, "callbacks.inject_failure={kind: sigterm, step: 3}"])
    assert run(stop, raise_on_failure=False)["state"] == "interrupted"

    assert not (run_dir / rundir.RESULTS).exists()
    assert (run_dir / rundir.REPLACED_RESULTS).read_bytes() == old_results
    assert cell_states(tmp_path / "runs" / "tiny")[0]["state"] == "interrupted"
    collection = collect([tmp_path / "runs"], require_results=False)
    assert not collection.runs["has_results"].any()
    assert len(collection.incomplete) == 1  # the tables list it as incomplete
    # A results.json left by an older version beside an unfinished retrain is stale, not used.
    (run_dir / rundir.REPLACED_RESULTS).rename(run_dir / rundir.RESULTS)
    collection = collect([tmp_path / "runs"], require_results=False)
    assert list(collection.runs["state"]) == ["stale"] and len(collection.incomplete) == 1
    (run_dir / rundir.RESULTS).rename(run_dir / rundir.REPLACED_RESULTS)

    assert run(compose_cfg(new))["state"] == "resumed"  # the same command resumes it
    straight = load_results(
        run(compose_cfg(tiny(tmp_path / "straight", *SHORT, "scale.lr=0.002")))["run_dir"]
    )
    resumed = load_results(run_dir)
    assert resumed["val_curve"] == straight["val_curve"]
    assert resumed["test_by_policy"] == straight["test_by_policy"]
    status = json.loads((run_dir / rundir.STATUS).read_text())
    assert status.get("retrain") is None and "stopped_by" not in status
    assert [(s["step"], s["by"]) for s in status["stops"]] == [(2, "SIGTERMException")]


# 5. A grid is checked before its first cell trains ----------------------------------------
def test_a_grid_with_one_bad_cell_is_refused_before_any_cell_trains(tmp_path):
    proc = train_py(
        "-m", *tiny(tmp_path / "root", "model=rlt2", "model.feedback_interval=2,0,3"), cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "rlt2_b0" in proc.stderr and "feedback_interval must be >= 1" in proc.stderr
    assert "1 of 3 cells refused" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "root").exists()


# 6. No value places files outside root; refused values leave root as it was ----------------
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("seed=/../../escaped", "seed must be an integer"),
        ("sweep_name=../../escaped", "cannot name a directory"),
        ("sweep_name=a/b", "cannot name a directory"),
        ("seed=abc", "seed must be an integer"),
        ("seed=-1", "seed must be an integer"),
        ("seed=1.5", "seed must be an integer"),
        ("model.feedback_interval=0", "feedback_interval must be >= 1"),
        ("task.test_lengths=[4]", "must be odd"),
        ("trainer.threads=0", "trainer.threads"),
        ("trainer.threads=abc", "trainer.threads"),
        ("scale.warmup_steps=100", "warmup_steps"),
        ("trainer.compile=maybe", "trainer.compile must be auto, on or off"),
        ("trainer.native=maybe", "trainer.native must be auto, on or off"),
    ],
)
def test_refused_values_leave_root_as_it_was(tmp_path, capsys, override, message):
    root = tmp_path / "root"
    run(compose_cfg(tiny(root, *SHORT)))
    before = listing(tmp_path)
    extra = ["task=mod5_flat"] if "test_lengths" in override else []
    assert message in refused_by_precheck(tiny(root, *SHORT, *extra, override), capsys)
    assert listing(tmp_path) == before
    assert not (tmp_path / "escaped").exists()


# Issue 29 items 5-7: values that once failed with a traceback, some after writing status
# failed, or trained a whole run and then failed: one line naming the key, nothing written.
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("scale.max_steps=10000000000000000000", "scale.max_steps must be at most"),
        ("seed=4294967296", "seed must be at most 4,294,967,295"),
        ("trainer.precision=bogus", "trainer.precision='bogus' is not a precision"),
        ("optim.betas=[1.5,0.99]", "optim.betas must be two numbers in [0, 1)"),
        ("trainer.devices=0", "trainer.devices must be an integer >= 1"),
        ("task=null", "task=null leaves the run without a task"),
        ("+trainer.args.max_epochs=0", "trainer.args.max_epochs=0 would end training"),
        ("callbacks.policies=[final]", "must keep min_val_loss"),
        ("callbacks.policies=[]", "must keep min_val_loss"),
        ("callbacks.policies=[min_val_loss,fnal]", "each must be one of"),
        ("evaluate.probe=maybe", "evaluate.probe='maybe': use auto"),
    ],
)
def test_values_that_failed_late_are_refused_first(tmp_path, capsys, override, message):
    root = tmp_path / "root"
    assert message in refused_by_precheck(tiny(root, *SHORT, override), capsys)
    assert not root.exists()


def test_a_root_that_is_a_file_or_null_is_refused(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("keep")
    short = ["experiment=tiny", "print_table=false", *SHORT]
    assert "is a file, not a directory" in refused_by_precheck([*short, f"root={a_file}"], capsys)
    assert a_file.read_text() == "keep"
    assert "root is null" in refused_by_precheck([*short, "root=null"], capsys)
    assert not (Path.cwd() / "None").exists()


@pytest.mark.parametrize("option", ["compile", "native"])
def test_on_without_a_compiler_is_refused_before_any_work(tmp_path, capsys, monkeypatch, option):
    monkeypatch.setattr("shutil.which", lambda name: None)
    root = tmp_path / "root"
    message = refused_by_precheck(tiny(root, *SHORT, f"trainer.{option}=on"), capsys)
    assert "no C++ compiler" in message and f"trainer.{option}=auto" in message
    assert not root.exists()


def test_train_py_refuses_before_hydra_creates_a_directory(tmp_path):
    proc = train_py(*tiny(tmp_path / "root", "sweep_name=../escaped"), cwd=tmp_path)
    assert proc.returncode == 2 and "cannot name a directory" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# 7. A refused change does not rewrite the run's .hydra files ------------------------------
def test_a_refused_change_leaves_the_finished_run_untouched(tmp_path):
    args = tiny(tmp_path / "root", *SHORT)
    assert train_py(*args, cwd=tmp_path).returncode == 0
    before = listing(tmp_path / "root")
    assert any(".hydra/config.yaml" in k for k in before)
    proc = train_py(*args, "scale.val_every=3", cwd=tmp_path)
    assert proc.returncode == 2 and "scale.val_every: 2 -> 3" in proc.stderr
    assert listing(tmp_path / "root") == before


# 8. Environment errors are refused up front; a run that never trained locks nothing -------
@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_a_gpu_trainer_without_cuda_is_refused_before_writing(tmp_path, capsys):
    err = refused_by_precheck(tiny(tmp_path / "root", *SHORT, "trainer=gpu"), capsys)
    assert "needs CUDA" in err and "trainer=cpu" in err
    assert not (tmp_path / "root").exists()


def test_a_run_that_never_trained_does_not_lock_its_configuration(tmp_path):
    cfg = tiny(tmp_path, *SHORT)
    failed = compose_cfg([*cfg, "callbacks.inject_failure={kind: error, step: 0}"])
    assert run(failed, raise_on_failure=False)["state"] == "failed"
    run_dir = Path(failed.out_dir)
    assert not (run_dir / rundir.CKPT_DIR / rundir.LAST_CKPT).exists()
    assert run(compose_cfg([*cfg, "scale.lr=0.002"]))["state"] == "done"


# 9. The smaller ones fixed: command-line values and the learning rate in metrics.csv -------
@pytest.mark.parametrize(
    "argv",
    [
        ["--threads", "0"],
        ["--repeats", "0"],
        ["--batch", "0"],
        ["--split", "3x3"],
        ["--d-model", "18", "--n-heads", "4"],
    ],
)
def test_bench_refuses_bad_values_with_a_usage_line(argv, capsys):
    from rlt.bench import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and "error: --" in capsys.readouterr().err


def test_params_refuses_heads_that_do_not_divide_the_width(capsys):
    from rlt.models.__main__ import main

    with pytest.raises(SystemExit):
        main(["params", "--d-model", "18", "--n-heads", "4"])
    assert "must divide --d-model" in capsys.readouterr().err


def test_tables_refuse_a_length_no_run_was_tested_at(tmp_path, capsys):
    from rlt.analysis.cli import tables_main

    run(compose_cfg(tiny(tmp_path / "runs", *SHORT)))
    assert (
        tables_main([str(tmp_path / "runs"), "--length", "9999", "--out", str(tmp_path / "a")]) == 2
    )
    assert "not tested at length 9999" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()


def test_metrics_csv_logs_the_learning_rate(tmp_path):
    run_dir = Path(run(compose_cfg(tiny(tmp_path, *SHORT, "logger=csv")))["run_dir"])
    header = (run_dir / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "train/lr" in header


def test_a_file_size_limit_names_the_file_and_leaves_the_run_failed(tmp_path):
    """Issue 29 item 6: a checkpoint that cannot be written (here a file-size limit, as a full
    disk or a read-only checkpoints/ would) fails the run with one line naming the file and
    the fix, status failed, instead of torch's "enforce fail at inline_container.cc"."""
    root = tmp_path / "root"
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f'ulimit -f 100; exec "{sys.executable}" train.py experiment=tiny root={root}',
        ],
        cwd=REPO,
        env=dict(os.environ, WANDB_MODE="disabled"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: cannot write ") and "last.ckpt (File too large)" in line
    assert "Traceback" not in proc.stderr
    status = json.loads(next(root.rglob("status.json")).read_text())
    assert status["state"] == "failed" and "last.ckpt" in status["error"]
