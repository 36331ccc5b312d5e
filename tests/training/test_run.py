"""End-to-end runs at the tiny scale: every model on every task, resume, determinism,
failure reporting, W&B offline files."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from rlt import rundir
from rlt.tasks import metrics
from rlt.training.run import run
from rlt.training.spec import ConfigError, prepare
from tests.training.helpers import compose_cfg, group_options, load_results

TASKS = [t for t in group_options("task") if t != "parity_prefix"]
MODELS = group_options("model")


def tiny(tmp_path: Path, *overrides: str) -> list[str]:
    return ["experiment=tiny", f"root={tmp_path}", *overrides]


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_fast_dev_run_every_model_on_every_task(tmp_path, task):
    for model in MODELS:
        cfg = compose_cfg(
            tiny(tmp_path, f"task={task}", f"model={model}", "split=1+1", "debug=fast_dev_run")
        )
        cfg.root = str(tmp_path)  # debug presets write under runs/debug; keep tests in tmp
        out = run(cfg)
        assert out["state"] == "done"
        res = load_results(out["run_dir"])
        assert res["run"]["task"] == task and res["run"]["model"] == cfg.model.name
        metrics = {r["metric"] for r in res["test"]}
        assert {"loss", "acc", "token_acc", "seq_acc"} <= metrics
        if task == "addition":
            assert "exact" in metrics
        assert all(0.0 <= r["value"] <= 1.0 for r in res["test"] if r["metric"] != "loss")


def test_results_layout_and_skip_when_done(tmp_path, capsys):
    cfg = compose_cfg(tiny(tmp_path, "task=parity", "model=rlt2", "split=1+1"))
    out = run(cfg)
    run_dir = Path(out["run_dir"])
    assert run_dir == tmp_path / "tiny" / "parity" / "rlt2_b4" / "1+1" / "seed42"
    res = load_results(run_dir)
    assert [r["step"] for r in res["val_curve"]] == [2, 4]
    assert res["selection"]["step"] in (2, 4)
    assert set(res["test_by_policy"]) == {"min_val_loss", "final", "max_val_acc"}
    assert res["test_by_policy"]["final"]["step"] == 4
    assert res["test"] == res["test_by_policy"]["min_val_loss"]["rows"]
    assert res["params"] > 0 and res["timing"]["sec_per_step"] > 0
    assert res["metric_definitions"] == metrics.definitions()  # {} unless a plugin adds one
    assert json.loads((run_dir / rundir.STATUS).read_text())["state"] == "done"
    for name in ("min_val_loss.pt", "final.pt", "max_val_acc.pt", "last.ckpt"):
        assert (run_dir / "checkpoints" / name).exists()
    before = (run_dir / rundir.RESULTS).read_bytes()
    again = run(compose_cfg(tiny(tmp_path, "task=parity", "model=rlt2", "split=1+1")))
    assert again["state"] == "skipped"
    assert "already done" in capsys.readouterr().out
    assert (run_dir / rundir.RESULTS).read_bytes() == before


def test_selected_checkpoint_is_the_earliest_lowest_validation_loss(tmp_path):
    cfg = compose_cfg(tiny(tmp_path, "task=parity", "scale.max_steps=6", "scale.val_every=1"))
    res = load_results(run(cfg)["run_dir"])
    losses = [r["loss"] for r in res["val_curve"]]
    best = min(losses)
    assert res["selection"]["step"] == res["val_curve"][losses.index(best)]["step"]
    ckpt = torch.load(
        Path(res["run"]["run_dir"]) / "checkpoints" / "min_val_loss.pt", weights_only=True
    )
    assert ckpt["step"] == res["selection"]["step"]


def test_resume_after_a_crash_equals_an_uninterrupted_run(tmp_path):
    common = ["task=s5_swaps", "model=rlt1", "split=1+1", "scale.max_steps=6", "scale.val_every=2"]
    straight = load_results(run(compose_cfg(tiny(tmp_path / "a", *common)))["run_dir"])

    crash = compose_cfg(
        tiny(tmp_path / "b", *common, "callbacks.inject_failure={kind: error, step: 3}")
    )
    with pytest.raises(RuntimeError, match="injected failure at step 3"):
        run(crash)
    run_dir = Path(crash.out_dir)
    status = json.loads((run_dir / rundir.STATUS).read_text())
    assert status["state"] == "failed" and "injected failure" in status["traceback"]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2

    out = run(compose_cfg(tiny(tmp_path / "b", *common)))
    assert out["state"] == "resumed"
    resumed = load_results(run_dir)
    assert [r["step"] for r in resumed["val_curve"]] == [2, 4, 6]  # continued, not restarted
    assert resumed["val_curve"] == straight["val_curve"]
    assert resumed["test_by_policy"] == straight["test_by_policy"]
    assert resumed["train_curve"] == straight["train_curve"]


def test_same_seed_same_curves_and_data_independent_of_init_seed(tmp_path):
    a = load_results(run(compose_cfg(tiny(tmp_path / "a", "task=parity", "seed=7")))["run_dir"])
    b = load_results(run(compose_cfg(tiny(tmp_path / "b", "task=parity", "seed=7")))["run_dir"])
    c = load_results(run(compose_cfg(tiny(tmp_path / "c", "task=parity", "seed=8")))["run_dir"])
    assert a["val_curve"] == b["val_curve"]
    assert a["val_curve"] != c["val_curve"]  # a different init really differs
    from rlt.tasks.data import TaskDataModule

    batches = []
    for seed in (7, 8):
        spec = prepare(compose_cfg(tiny(tmp_path, "task=parity", f"seed={seed}")))
        dm = TaskDataModule(task=spec.task, micro_batch_size=4, global_batch_size=8, max_steps=4)
        batches.append([b["tokens"] for b in dm.train_dataloader(resume_step=0)])
    assert all(torch.equal(x, y) for x, y in zip(*batches))


def test_nan_loss_fails_with_its_step(tmp_path):
    cfg = compose_cfg(
        tiny(tmp_path, "task=parity", "callbacks.inject_failure={kind: nan, step: 1}")
    )
    out = run(cfg, raise_on_failure=False)
    assert out["state"] == "failed"
    status = json.loads((Path(cfg.out_dir) / rundir.STATUS).read_text())
    assert status["state"] == "failed"
    assert "non-finite training loss" in status["error"] and "at step 1" in status["error"]
    assert not (Path(cfg.out_dir) / rundir.RESULTS).exists()


def test_corrupt_checkpoint_is_a_clear_error_and_keeps_other_results(tmp_path):
    cfg = compose_cfg(
        tiny(tmp_path, "task=parity", "callbacks.inject_failure={kind: error, step: 3}")
    )
    with pytest.raises(RuntimeError):
        run(cfg)
    last = Path(cfg.out_dir) / "checkpoints" / "last.ckpt"
    last.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="Delete that file"):
        run(compose_cfg(tiny(tmp_path, "task=parity")))
    assert last.exists()  # nothing destroyed
    # A file that loads but holds no training step (e.g. weights saved by hand) is refused the
    # same way, before the run writes anything.
    status = (Path(cfg.out_dir) / rundir.STATUS).read_text()
    torch.save({"state_dict": {}, "loops": {}}, last)
    with pytest.raises(ConfigError, match="not a Lightning training checkpoint.*Delete that file"):
        run(compose_cfg(tiny(tmp_path, "task=parity")))
    assert last.exists() and (Path(cfg.out_dir) / rundir.STATUS).read_text() == status


def test_wandb_offline_run_leaves_config_and_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = compose_cfg(tiny(tmp_path, "task=parity", "logger=wandb"))
    run(cfg)
    runs = list((Path(cfg.out_dir) / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # wandb >= 0.19 keeps config and history inside the binary run log until `wandb sync`.
    # The W&B service writes the log in its own process; give it a moment to flush (a loaded CI
    # machine once read the file while it still held only its header).
    path = next(runs[0].glob("run-*.wandb"))
    keys = (b"data_seed", b"d_model", b"val/acc", b"length_generalization")
    deadline = time.monotonic() + 60
    while not all(k in path.read_bytes() for k in keys) and time.monotonic() < deadline:
        time.sleep(0.5)
    log = path.read_bytes()
    for key in keys:
        assert key in log, key
    assert (Path(cfg.out_dir) / "csv" / "metrics.csv").exists()
    # One W&B group per table cell (all seeds of sweep/task/model/split), the model label as
    # job_type, and the selected checkpoint's metrics as sortable per-length summary keys.
    assert f"tiny/parity/rlt1/{cfg.split.name}".encode() in log and b"RLT-1" in log
    results = load_results(cfg.out_dir)
    longest = max(results["test_lengths"])
    assert f"test/acc@{longest}".encode() in log


def test_sigterm_stops_a_run_as_interrupted_not_failed_and_it_resumes(tmp_path):
    """SIGTERM (kill, scancel, a preempting scheduler) is not a failure: the run is recorded as
    interrupted, keeps its last.ckpt, and the same command resumes it to the results of a run
    nobody stopped. Off SLURM, nothing can have requeued it."""
    common = ["task=parity", "model=rlt1", "split=1+1", "scale.max_steps=6", "scale.val_every=2"]
    common.append("logger=csv")
    straight = load_results(run(compose_cfg(tiny(tmp_path / "a", *common)))["run_dir"])

    stop = compose_cfg(
        tiny(tmp_path / "b", *common, "callbacks.inject_failure={kind: sigterm, step: 3}")
    )
    out = run(stop, raise_on_failure=False)
    run_dir = Path(stop.out_dir)
    status = json.loads((run_dir / rundir.STATUS).read_text())
    assert out["state"] == "interrupted" and status["state"] == "interrupted"
    assert status["error"] is None and status["stopped_by"] == "SIGTERMException"
    assert not (run_dir / rundir.LOCK).exists()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(compose_cfg(tiny(tmp_path / "b", *common)))["state"] == "resumed"
    # nor does it warn that the rows before the stop "will be deleted"
    assert not [w for w in caught if "will be deleted" in str(w.message)]
    # Done, the status no longer says the run is stopped, and keeps the stop in its history.
    status = json.loads((run_dir / rundir.STATUS).read_text())
    assert status["state"] == "done" and status["step"] == 6 and "stopped_by" not in status
    assert [(s["step"], s["by"], s["as"]) for s in status["stops"]] == [
        (2, "SIGTERMException", "interrupted")
    ]
    resumed = load_results(run_dir)
    assert resumed["val_curve"] == straight["val_curve"]
    assert resumed["test_by_policy"] == straight["test_by_policy"]

    # The per-step log keeps what came before the stop (Lightning's CSV writer would delete
    # it), without logging a step twice: the same rows as the run nobody stopped.
    def logged(root: Path) -> list[tuple]:
        table = pd.read_csv(next(root.rglob("metrics.csv")))
        return sorted(
            (int(r["step"]), k, round(float(r[k]), 5))
            for _, r in table.iterrows()
            for k in ("train/loss", "val/acc", "val/loss")
            if k in table and pd.notna(r[k])
        )

    assert logged(run_dir) == logged(tmp_path / "a")


def test_a_requeue_command_killed_by_its_own_requeue_is_a_stop_not_a_failure(monkeypatch):
    """submitit's time-out handler runs ``scontrol requeue`` inside the job, and the requeue
    stops the job's processes, that command among them: when it dies of the signal before it
    returns (or hangs past its timeout), the run was stopped from outside (requeued when SLURM
    did requeue it), not failed. ``scontrol requeue`` that fails on its own (an error code), or
    another command killed or timed out, is a failure as before."""
    import subprocess

    from rlt.training import run as run_module

    killed = subprocess.CalledProcessError(-15, ["scontrol", "requeue", "6"])
    monkeypatch.setattr(run_module.slurm, "was_requeued", lambda: True)
    assert run_module._stop_reason(killed) == "requeued"
    monkeypatch.setattr(run_module.slurm, "was_requeued", lambda: False)
    assert run_module._stop_reason(killed) == "interrupted"
    assert (
        run_module._stop_reason(subprocess.CalledProcessError(1, ["scontrol", "requeue", "6"]))
        is None
    )
    assert run_module._stop_reason(subprocess.CalledProcessError(-15, ["sleep", "9"])) is None
    # The controller did not answer within submitit's timeout: stopped all the same.
    hung = subprocess.TimeoutExpired(["scontrol", "requeue", "6"], 60)
    assert run_module._stop_reason(hung) == "interrupted"
    assert run_module._stop_reason(subprocess.TimeoutExpired(["sleep", "9"], 60)) is None
    assert run_module._stop_reason(RuntimeError("scontrol requeue")) is None


def test_a_job_out_of_requeues_leaves_its_run_interrupted_not_failed(tmp_path):
    """submitit raises UncompletedJobError at a time limit once the job has used its requeues
    (hydra.launcher.max_num_timeout): the run stopped at its limit, nothing failed; it keeps
    last.ckpt as interrupted, and launching the grid again resumes it."""
    from submitit.core.utils import UncompletedJobError

    from rlt.training import run as run_module

    out_of_requeues = UncompletedJobError("Job not requeued because: timed-out too many times.")
    assert run_module._stop_reason(out_of_requeues) == "interrupted"
    assert run_module._stop_reason(RuntimeError("timed-out too many times")) is None
    spec = prepare(compose_cfg(tiny(tmp_path, "task=parity", "model=rlt1", "split=1+1")))
    spec.run_dir.mkdir(parents=True)
    out = run_module._stopped(spec, "interrupted", out_of_requeues, raise_on_failure=False)
    assert out["state"] == "interrupted" and out["error"] == "UncompletedJobError"
    status = json.loads((spec.run_dir / rundir.STATUS).read_text())
    assert status["state"] == "interrupted" and status["stopped_by"] == "UncompletedJobError"


def test_a_run_whose_requeue_command_was_killed_leaves_as_a_stopped_run(tmp_path):
    """Carried through :func:`_stopped`, the killed ``scontrol requeue`` of the test above is
    recorded and left as any stop from outside: requeued, the job exits with SIGTERM's status
    and no result (submitit then waits for the job's next run); not requeued, a grid gets an
    interrupted run back and a single run exits with SIGTERM's status. The error is never
    re-raised as a failure."""
    import subprocess

    from rlt.training import run as run_module

    spec = prepare(compose_cfg(tiny(tmp_path, "task=parity", "model=rlt1", "split=1+1")))
    spec.run_dir.mkdir(parents=True)
    killed = subprocess.CalledProcessError(-15, ["scontrol", "requeue", "6"])

    def status() -> dict:
        return json.loads((spec.run_dir / rundir.STATUS).read_text())

    with pytest.raises(SystemExit) as left:
        run_module._stopped(spec, "requeued", killed, raise_on_failure=False)
    assert left.value.code == run_module.SIGTERM_EXIT
    assert status()["state"] == "requeued" and status()["stopped_by"] == "CalledProcessError"

    out = run_module._stopped(spec, "interrupted", killed, raise_on_failure=False)
    assert out == {
        "state": "interrupted",
        "run_dir": str(spec.run_dir),
        "error": "CalledProcessError",
    }
    assert status()["state"] == "interrupted"
    with pytest.raises(SystemExit) as left:
        run_module._stopped(spec, "interrupted", killed, raise_on_failure=True)
    assert left.value.code == run_module.SIGTERM_EXIT
