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
