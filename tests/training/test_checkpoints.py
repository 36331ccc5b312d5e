"""Selection and stopping by Lightning's own callbacks (rlt/training/checkpoints.py).

References: the rule written out in SPEC section 5 (lowest validation loss, earliest on ties)
applied by hand to the recorded curve, the files on disk, and an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from rlt import rundir
from rlt.rundir import RunDir
from rlt.training.checkpoints import PolicyCheckpoint, select_step
from rlt.training.run import run
from rlt.training.spec import ConfigError
from tests.training.helpers import compose_cfg, load_results


def tiny(root: Path, *overrides: str):
    return compose_cfg(["experiment=tiny", f"root={root}", "task=parity", *overrides])


def test_a_nan_never_wins_and_ties_keep_the_earliest():
    nan = float("nan")
    curve = [
        {"step": 2, "loss": nan, "acc": nan},
        {"step": 4, "loss": 0.5, "acc": 0.25},
        {"step": 6, "loss": 0.5, "acc": 0.75},
        {"step": 8, "loss": 0.7, "acc": 0.75},
    ]
    assert select_step(curve, "min_val_loss")["step"] == 4
    assert select_step(curve, "max_val_acc")["step"] == 6
    assert select_step(curve, "final")["step"] == 8
    assert math.isnan(select_step(curve[:1], "min_val_loss")["loss"])  # nothing else to take


def test_every_policy_file_holds_the_step_its_rule_picks_from_the_curve(tmp_path):
    cfg = tiny(tmp_path, "scale.max_steps=9", "scale.val_every=2")
    res = load_results(run(cfg)["run_dir"])
    curve = res["val_curve"]
    assert [r["step"] for r in curve] == [2, 4, 6, 8, 9]  # the last step, off the grid, too
    # the rule by hand: the earliest of the lowest losses, the earliest of the highest accuracies
    lowest = min(r["loss"] for r in curve)
    highest = max(r["acc"] for r in curve)
    by_hand = {
        "min_val_loss": next(r["step"] for r in curve if r["loss"] == lowest),
        "max_val_acc": next(r["step"] for r in curve if r["acc"] == highest),
        "final": 9,
    }
    ckpts = Path(cfg.out_dir) / rundir.CKPT_DIR
    for policy, step in by_hand.items():
        assert torch.load(ckpts / f"{policy}.pt", weights_only=True)["step"] == step, policy
        assert res["test_by_policy"][policy]["step"] == step, policy
    assert torch.load(ckpts / rundir.LAST_CKPT, weights_only=True)["global_step"] == 9


def test_a_resumed_choice_stands_where_the_run_directory_moved(tmp_path):
    """Lightning's ModelCheckpoint forgets its best score when the directory in last.ckpt is
    not its own; the run's policies keep it, so a run moved between a stop and its resume
    still selects from every validation."""
    old, new = RunDir(tmp_path / "old"), RunDir(tmp_path / "new")
    before = PolicyCheckpoint(old, "min_val_loss")
    best = str(Path(before.dirpath) / "min_val_loss.pt")
    state = {
        **before.state_dict(),
        "best_model_path": best,
        "best_model_score": torch.tensor(0.25, dtype=torch.float64),
        "best_k_models": {best: torch.tensor(0.25, dtype=torch.float64)},
        "kth_best_model_path": best,
        "kth_value": torch.tensor(0.25, dtype=torch.float64),
    }
    after = PolicyCheckpoint(new, "min_val_loss")
    after.load_state_dict(state)
    moved = str(Path(after.dirpath) / "min_val_loss.pt")
    assert after.best_model_score == 0.25 and after.best_k_models == {moved: 0.25}
    assert after.kth_best_model_path == moved == after.best_model_path


def test_a_run_moved_while_stopped_resumes_to_the_uninterrupted_results(tmp_path):
    common = ("scale.max_steps=8", "scale.val_every=2")
    straight = load_results(run(tiny(tmp_path / "a", *common))["run_dir"])
    crash = tiny(tmp_path / "b", *common, "callbacks.inject_failure={kind: error, step: 5}")
    with pytest.raises(RuntimeError, match="injected failure at step 5"):
        run(crash)
    shutil.move(tmp_path / "b", tmp_path / "c")
    out = run(tiny(tmp_path / "c", *common))
    assert out["state"] == "resumed"
    moved = load_results(out["run_dir"])
    for key in ("val_curve", "train_curve", "selection", "test_by_policy"):
        assert moved[key] == straight[key], key


def test_a_last_ckpt_of_the_earlier_callbacks_is_refused_with_the_fix(tmp_path):
    cfg = tiny(tmp_path, "callbacks.inject_failure={kind: error, step: 3}")
    with pytest.raises(RuntimeError):
        run(cfg)
    last = Path(cfg.out_dir) / rundir.CKPT_DIR / rundir.LAST_CKPT
    ckpt = torch.load(last, weights_only=True)
    ckpt["callbacks"] = {"SomeEarlierRecorder": ckpt["callbacks"].pop("RunRecord")}
    torch.save(ckpt, last)
    with pytest.raises(ConfigError, match="an earlier rlt wrote it.*force=true"):
        run(tiny(tmp_path))
    assert last.exists()  # nothing destroyed
    status = json.loads((Path(cfg.out_dir) / rundir.STATUS).read_text())
    assert status["state"] == "failed"


def test_early_stop_needs_patience_validations_in_a_row(tmp_path):
    """callbacks.early_stop: the last ``patience`` validations all at or above the threshold;
    one below resets the count (the reference: the recorded curve, read by hand)."""
    res = load_results(run(tiny(tmp_path, "scale.max_steps=12", "scale.val_every=2"))["run_dir"])
    accs = [r["acc"] for r in res["val_curve"]]
    # The highest level two validations in a row reach before the last step: the stop fires,
    # on any host's curve, at the first such pair (which the scan below finds by hand).
    threshold = max(min(accs[i - 1], accs[i]) for i in range(1, len(accs) - 1))
    expected = None
    for i in range(1, len(accs)):
        if accs[i - 1] >= threshold and accs[i] >= threshold:
            expected = res["val_curve"][i]["step"]
            break
    stop = ("callbacks.early_stop.val_acc=" + repr(threshold), "callbacks.early_stop.patience=2")
    out = run(tiny(tmp_path / "stop", "scale.max_steps=12", "scale.val_every=2", *stop))
    stopped = load_results(out["run_dir"])
    assert expected is not None and expected < 12, accs
    assert stopped["stopped_early"] == expected
    assert stopped["val_curve"] == res["val_curve"][: len(stopped["val_curve"])]
