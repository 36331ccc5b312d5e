"""``callbacks.budgets``: a shorter budget's verdict read from one longer run.

The reference is a separate, shorter run: with a constant learning rate the first N steps of a
longer run are the shorter run's steps exactly (same data stream, same updates), so the
checkpoint each policy selects within budget N, scored after the longer run, must equal the
shorter run's own selection and test scores, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlt.training.run import run
from rlt.training.spec import ConfigError, prepare
from tests.training.helpers import compose_cfg, load_results


def tiny(root: Path, *overrides: str):
    return compose_cfg(
        ["experiment=tiny", f"root={root}", "task=parity", "scheduler=constant", *overrides]
    )


def test_a_budget_of_a_longer_run_is_the_shorter_run(tmp_path):
    long = load_results(
        run(tiny(tmp_path / "long", "scale.max_steps=8", "callbacks.budgets=[4]"))["run_dir"]
    )
    short = load_results(run(tiny(tmp_path / "short", "scale.max_steps=4"))["run_dir"])
    assert [r["step"] for r in long["val_curve"]] == [2, 4, 6, 8]
    assert long["val_curve"][:2] == short["val_curve"]  # the shared steps: the same run
    budget = long["test_by_budget"]["4"]
    assert set(budget) == set(short["test_by_policy"])
    for policy, scored in short["test_by_policy"].items():
        assert budget[policy] == scored, policy
    assert "test_by_budget" not in short  # without budgets results.json is as before


@pytest.mark.parametrize(
    "budgets, says",
    [("[8]", "not a step inside the run"), ("[0]", "not a step inside the run"),
     ("[3]", "not a validation step"), ("[two]", "not a step inside the run"),
     ("4", "must be a list of steps")],
)  # fmt: skip
def test_a_budget_outside_the_run_or_between_validations_is_refused(tmp_path, budgets, says):
    with pytest.raises(ConfigError, match=says):
        prepare(tiny(tmp_path, "scale.max_steps=8", f"callbacks.budgets={budgets}"))


def test_the_tables_read_each_budget_as_its_own_tier(tmp_path):
    """rlt.analysis: a run with budgets is read once more per budget (preset ``<preset>@<step>``)
    with its curves cut at the step and the test rows of the checkpoints selected within it;
    the verdict tiers come in order of their steps and name the longer schedule."""
    from rlt.analysis import collect
    from rlt.analysis.budgets import budget_of
    from rlt.analysis.tiers import budget_label, by_preset

    out = run(tiny(tmp_path, "scale.max_steps=8", "callbacks.budgets=[4]"))
    res = load_results(out["run_dir"])
    c = collect([tmp_path / "tiny"])
    base = "tiny; scheduler=constant"  # the protocol suffix stays with the budget's tier
    assert sorted(c.runs["preset"]) == [base, f"{base}@4"]
    assert sorted(c.expected["preset"]) == [base, f"{base}@4"]  # each tier expects the cell
    view = c.runs[c.runs["preset"] == f"{base}@4"].iloc[0]
    assert (
        view["max_steps"] == 4
        and view["selection_step"] == res["test_by_budget"]["4"]["min_val_loss"]["step"]
    )
    assert set(c.val[c.val["run_id"] == view["run_id"]]["step"]) == {2, 4}
    test = c.test[(c.test["run_id"] == view["run_id"]) & (c.test["policy"] == "min_val_loss")]
    expected = {
        (r["length"], r["metric"]): r["value"]
        for r in res["test_by_budget"]["4"]["min_val_loss"]["rows"]
    }
    assert {(r.length, r.metric): r.value for r in test.itertuples()} == expected
    assert pd.isna(view["sec_per_step"])  # no training cost of its own
    tiers = by_preset(c)
    assert [p for p, _ in tiers] == [f"{base}@4", base]
    assert budget_label(f"{base}@4", tiers[0][1])[0] == f"4 of 8 steps ({base}@4)"
    assert budget_of(f"{base}@4") == (base, 4)


def test_a_budget_with_a_feedback_schedule_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="feedback_schedule"):
        prepare(
            tiny(tmp_path, "model=rlt2_sched_4to1", "scale.max_steps=8", "callbacks.budgets=[4]")
        )


# stops at the first validation (step 2): every validation accuracy is >= 0
STOP_AT_FIRST = ("callbacks.early_stop.val_acc=0.0", "callbacks.early_stop.patience=1")


def test_a_run_stopped_before_a_budget_reports_its_own_choice_there(tmp_path):
    """Early stop at step 2 of 8 with a budget at 6: nothing was validated after step 2, so
    the checkpoints selected within 6 steps are the run's own."""
    cfg = tiny(tmp_path, "scale.max_steps=8", "callbacks.budgets=[6]", *STOP_AT_FIRST)
    res = load_results(run(cfg)["run_dir"])
    assert res["stopped_early"] == 2
    assert res["test_by_budget"]["6"] == res["test_by_policy"]


def test_a_forced_retrain_never_scores_the_earlier_trainings_budget_checkpoints(tmp_path):
    first = run(tiny(tmp_path, "scale.max_steps=8", "callbacks.budgets=[6]"))
    kept = Path(first["run_dir"]) / "checkpoints" / "min_val_loss@6.pt"
    assert kept.exists()
    run(tiny(tmp_path, "scale.max_steps=8", "callbacks.budgets=[6]", *STOP_AT_FIRST, "force=true"))
    assert not kept.exists()  # the retrain stopped at step 2: no step-6 checkpoint of its own
