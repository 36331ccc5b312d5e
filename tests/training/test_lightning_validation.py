"""Validation is Lightning's own loop: a user's callbacks (``callbacks.extra``) see it.

The references are the run's results.json (what the run recorded and selected on) and the
checkpoint files a user's ModelCheckpoint writes, compared step for step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlt.training.run import run
from rlt.training.spec import ConfigError, prepare
from tests.training.helpers import SeenValidations, compose_cfg, load_results


def tiny(tmp_path: Path, *overrides: str):
    return compose_cfg(["experiment=tiny", f"root={tmp_path}", "task=parity", *overrides])


def test_a_users_callbacks_see_every_validation_and_model_checkpoint_monitors_val_loss(
    tmp_path,
):
    SeenValidations.seen = []
    ckpt_dir = tmp_path / "user_ckpt"
    extra = (
        "callbacks.extra=[{_target_: tests.training.helpers.SeenValidations},"
        "{_target_: lightning.pytorch.callbacks.ModelCheckpoint, monitor: val/loss, mode: min,"
        f" save_top_k: 1, dirpath: '{ckpt_dir}', filename: 'best-{{step}}'}}]"
    )
    cfg = tiny(tmp_path, "scale.max_steps=6", "scale.val_every=2", extra)
    res = load_results(run(cfg)["run_dir"])
    curve = res["val_curve"]
    assert [r["step"] for r in curve] == [2, 4, 6]
    # every validation reached the user's callback under val/<metric>, with the run's values
    assert [step for step, _ in SeenValidations.seen] == [2, 4, 6]
    for (_, seen), row in zip(SeenValidations.seen, curve, strict=True):
        assert set(seen) == {"val/loss", "val/acc", "val/token_acc", "val/seq_acc"}
        for name in ("loss", "acc"):
            assert seen[f"val/{name}"] == pytest.approx(row[name], rel=1e-6)
    # the user's ModelCheckpoint kept the step the report's selection (min_val_loss) chose
    (kept,) = list(ckpt_dir.glob("best-*.ckpt"))
    assert torch.load(kept, weights_only=False)["global_step"] == res["selection"]["step"]


def test_a_users_early_stopping_ends_the_run_as_stopped_early(tmp_path):
    stop = (
        "callbacks.extra=[{_target_: lightning.pytorch.callbacks.EarlyStopping,"
        " monitor: val/acc, mode: max, stopping_threshold: -1.0}]"
    )
    out = run(tiny(tmp_path, "scale.max_steps=8", "scale.val_every=2", stop))
    res = load_results(out["run_dir"])
    assert out["state"] == "done"
    assert res["stopped_early"] == 2 and [r["step"] for r in res["val_curve"]] == [2]


def test_the_last_step_is_validated_when_max_steps_is_not_a_multiple_of_val_every(tmp_path):
    res = load_results(run(tiny(tmp_path, "scale.max_steps=5", "scale.val_every=2"))["run_dir"])
    assert [r["step"] for r in res["val_curve"]] == [2, 4, 5]
    assert res["test_by_policy"]["final"]["step"] == 5


@pytest.mark.parametrize(
    "bad, says",
    [
        ("5", "give a list"),
        ("[lightning.pytorch.callbacks.ModelCheckpoint]", "give a list"),
        ("[{a: 1}]", "give a list"),
        ("[{_target_: nope.Nope}]", "cannot import 'nope.Nope'"),
        ("[{_target_: collections.OrderedDict}]", "is not a lightning Callback"),
    ],
)
def test_callbacks_extra_must_be_lightning_callbacks(tmp_path, bad, says):
    with pytest.raises(ConfigError, match=says) as err:
        prepare(tiny(tmp_path, f"callbacks.extra={bad}"))
    assert "\n" not in str(err.value) and "callbacks.extra" in str(err.value)
    assert not (tmp_path / "tiny").exists()  # refused before anything is written


def test_a_progress_line_at_a_validation_step_reports_that_steps_validation(tmp_path):
    from rlt import rundir

    out = run(tiny(tmp_path, "scale.max_steps=4", "scale.val_every=2", "trainer.progress_every=2"))
    lines = (Path(out["run_dir"]) / rundir.TRAIN_LOG).read_text().splitlines()
    at = {int(x.split("step ")[1].split("/")[0]): x for x in lines if "val_acc" in x}
    assert set(at) == {2, 4}
    for step, line in at.items():
        assert line.endswith(f"(step {step})") or f"(step {step})," in line, line
