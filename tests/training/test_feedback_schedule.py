"""Issue 8: the chunk-size schedule over training, its resume, and the final evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlt.models import RLTConfig, build_model
from rlt.tasks.data import TaskDataModule
from rlt.training.callbacks import FeedbackScheduleCallback
from rlt.training.evaluate import evaluate_lengths
from rlt.training.run import run
from rlt.training.schedule import FeedbackSchedule
from rlt.training.spec import prepare
from tests.training.helpers import compose_cfg, load_results

SCHEDULE = "model.feedback_schedule=[[0, 4], [2, 2], [4, 1]]"


class _Fake:
    def __init__(self, step: int, model):
        self.global_step = step
        self.model = model


def test_callback_sets_the_b_in_force_at_every_step():
    model = build_model(RLTConfig(d_model=16, n_heads=2, n_enc=1, n_dec=1, feedback_interval=8))
    cb = FeedbackScheduleCallback(
        FeedbackSchedule.parse([[0, 8], [0.5, 4], [0.75, 1]], max_steps=8)
    )
    seen = []
    for step in range(8):
        module = _Fake(step, model)
        cb.on_train_batch_start(_Fake(step, None), module, None, 0)
        seen.append(model.feedback_interval)
    assert seen == [8, 8, 8, 8, 4, 4, 1, 1]


def tiny(root: Path, *extra: str) -> list[str]:
    return [
        "experiment=tiny",
        f"root={root}",
        "task=parity",
        "model=rlt2",
        "model.name=rlt2_sched_4to2to1",
        "model.label='RLT-2 B=4→2→1'",
        "split=1+1",
        "scale.max_steps=6",
        "scale.val_every=2",
        SCHEDULE,
        *extra,
    ]


def test_schedule_is_recorded_and_resume_continues_it(tmp_path):
    straight = json.loads(
        (Path(run(compose_cfg(tiny(tmp_path / "a")))["run_dir"]) / "results.json").read_text()
    )
    assert straight["feedback_schedule"] == [[0, 4], [2, 2], [4, 1]]
    # Validation at step s evaluates the weights after steps 0..s-1, with the B that trained them.
    assert [(r["step"], r["feedback_interval"]) for r in straight["val_curve"]] == [
        (2, 4),
        (4, 2),
        (6, 1),
    ]
    assert {b["feedback_interval"] for b in straight["test_by_policy"].values()} == {1}
    # the cost of each stage: steps 0-1 at B=4, 2-3 at B=2, 4-5 at B=1, core-seconds each
    timing = straight["timing"]
    assert {b: c["steps"] for b, c in timing["by_interval"].items()} == {"4": 2, "2": 2, "1": 2}
    assert all(c["cpu_seconds"] > 0 for c in timing["by_interval"].values())
    total = sum(c["cpu_seconds"] for c in timing["by_interval"].values())
    assert total == pytest.approx(timing["cpu_seconds"])

    crash = compose_cfg(tiny(tmp_path / "b", "callbacks.inject_failure={kind: error, step: 3}"))
    with pytest.raises(RuntimeError, match="injected failure"):
        run(crash)  # dies mid-schedule (stage B=2), last.ckpt at step 2
    out = run(compose_cfg(tiny(tmp_path / "b")))
    assert out["state"] == "resumed"
    resumed = load_results(Path(out["run_dir"]))
    assert resumed["val_curve"] == straight["val_curve"]
    # steps before the crash (restored from last.ckpt) and after the resume, each counted once
    assert {b: c["steps"] for b, c in resumed["timing"]["by_interval"].items()} == {
        "4": 2,
        "2": 2,
        "1": 2,
    }
    assert resumed["test_by_policy"] == straight["test_by_policy"]


def test_schedule_ending_at_one_evaluates_exactly_as_rlt1(tmp_path):
    cfg = compose_cfg(tiny(tmp_path))
    res = load_results(Path(run(cfg)["run_dir"]))
    spec = prepare(compose_cfg(tiny(tmp_path)))
    # An independently built RLT-1 (B=1 from its config) with the selected weights.
    kwargs = dict(spec.model_kwargs, feedback_interval=1)
    rlt1 = build_model(RLTConfig(**kwargs))
    ckpt = torch.load(Path(cfg.out_dir) / "checkpoints" / "min_val_loss.pt", weights_only=True)
    rlt1.load_state_dict(ckpt["state_dict"])
    dm = TaskDataModule(task=spec.task, micro_batch_size=4, global_batch_size=8, max_steps=6)
    rows = evaluate_lengths(
        rlt1, dm.test_dataloaders(spec.test_lengths), acc_mode=spec.task.acc_mode
    )
    assert rows == res["test"]  # bitwise-equal floats, not approximately
