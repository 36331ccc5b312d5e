import pytest

from rlt.training.checkpoints import select_step
from rlt.training.schedule import FeedbackSchedule


def test_selection_earliest_lowest_loss():
    losses = [0.9, 0.4, 0.55, 0.4, 0.38, 0.38, 0.6]
    accs = [0.1, 0.7, 0.9, 0.9, 0.8, 0.95, 0.95]
    curve = [
        {"step": 100 * (i + 1), "loss": lo, "acc": a} for i, (lo, a) in enumerate(zip(losses, accs))
    ]
    assert select_step(curve, "min_val_loss")["step"] == 500  # 0.38 first seen at step 500
    assert select_step(curve, "max_val_acc")["step"] == 600  # 0.95 first seen at step 600
    assert select_step(curve, "final")["step"] == 700


def test_selection_ties_at_start_keep_first():
    curve = [{"step": s, "loss": 0.5, "acc": 0.5} for s in (10, 20, 30)]
    assert select_step(curve, "min_val_loss")["step"] == 10
    assert select_step(curve, "max_val_acc")["step"] == 10


def test_selection_rejects_unknown_policy_and_empty_curve():
    with pytest.raises(ValueError, match="unknown checkpoint policy"):
        select_step([{"step": 1, "loss": 1.0, "acc": 0.0}], "best")
    with pytest.raises(ValueError, match="empty validation curve"):
        select_step([], "final")


def test_schedule_steps_and_fractions():
    s = FeedbackSchedule.parse([[0, 8], [0.5, 4], [150, 1]], max_steps=200)
    assert s.stages == ((0, 8), (100, 4), (150, 1))
    expected = {0: 8, 99: 8, 100: 4, 149: 4, 150: 1, 199: 1}
    assert {k: s.at(k) for k in expected} == expected
    assert s.final == 1
    assert s.to_list() == [[0, 8], [100, 4], [150, 1]]


@pytest.mark.parametrize(
    "spec, match",
    [
        ([], "empty schedule"),
        ([[10, 4]], "first stage must start at step 0"),
        ([[0, 4], [0, 2]], "strictly increase"),
        ([[0, 4], [1.5, 2]], r"fraction of the run"),
        ([[0, 0]], "integer >= 1"),
        ([[0, 4], [500, 1]], "outside the run"),
        ([[0, 4, 1]], r"\[start, B\]"),
    ],
)
def test_schedule_rejects_nonsense(spec, match):
    with pytest.raises(ValueError, match=match):
        FeedbackSchedule.parse(spec, max_steps=200)


def test_fractional_stages_that_collide_in_a_short_run_keep_the_later_one():
    s = FeedbackSchedule.parse([[0, 8], [0.5, 4], [0.75, 1]], max_steps=1)
    assert s.stages == ((0, 1),)
    s = FeedbackSchedule.parse([[0, 8], [0.5, 4], [0.75, 1]], max_steps=2)
    assert s.stages == ((0, 8), (1, 1))
