"""``callbacks.budgets``: a shorter budget's verdict read from one longer run.

The reference is a separate, shorter run: with a constant learning rate the first N steps of a
longer run are the shorter run's steps exactly (same data stream, same updates), so the
checkpoint each policy selects within budget N, scored after the longer run, must equal the
shorter run's own selection and test scores, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

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
     ("[3]", "not a validation step"), ("[two]", "not a step inside the run")],
)  # fmt: skip
def test_a_budget_outside_the_run_or_between_validations_is_refused(tmp_path, budgets, says):
    with pytest.raises(ConfigError, match=says):
        prepare(tiny(tmp_path, "scale.max_steps=8", f"callbacks.budgets={budgets}"))


def test_the_tables_read_each_budget_as_its_own_tier(tmp_path):
    """rlt.analysis: a run with budgets is read once more per budget (preset ``<preset>@<step>``)
    with its curves cut at the step and the test rows of the checkpoints selected within it;
    the verdict tiers come in order of their steps and name the longer schedule."""
    from rlt.analysis import collect
    from rlt.analysis.findings import budget_label, budget_of, by_preset

    cfg = compose_cfg(
        ["experiment=tiny", f"root={tmp_path}", "scale.max_steps=8", "callbacks.budgets=[4]"]
    )
    out = run(cfg)
    res = load_results(out["run_dir"])
    c = collect([tmp_path / "tiny"])
    assert sorted(c.runs["preset"]) == ["tiny", "tiny@4"]
    view = c.runs[c.runs["preset"] == "tiny@4"].iloc[0]
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
    tiers = by_preset(c)
    assert [p for p, _ in tiers] == ["tiny@4", "tiny"]
    assert budget_label("tiny@4", tiers[0][1])[0] == "4 of 8 steps"
    assert budget_of("tiny@4; scheduler=constant") == ("tiny; scheduler=constant", 4)
