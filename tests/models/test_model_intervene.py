"""State interventions (issue 39, rlt/models/intervene.py), checked against independent
references: streaming with no part dropped is the training forward; dropping every part at P
is the model run from scratch on the tokens from P on (attention is relative, so only the
state can tell the positions apart); dropping RLT-0's feedback changes nothing."""

from __future__ import annotations

import pytest
import torch

from rlt.models import intervene
from tests.models.test_model_state_lifecycle import FAMILIES, make, tokens


def double(family: str):
    return make(family).double().eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_streaming_with_cuts_but_nothing_dropped_is_the_forward(family):
    model = double(family)
    x = tokens(2, 13, 1)
    with torch.no_grad():
        got, _ = intervene.stream(model, x, [3, 8, 9], ())
        want = model(x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
def test_dropping_every_part_at_p_starts_the_model_afresh_from_p(family):
    """After ``all`` is dropped before position 8 the outputs from 8 on are the model's on
    tokens[8:] alone (8 is a multiple of RLT-2's B=4, so its chunks line up); before 8
    nothing changes."""
    model = double(family)
    x = tokens(2, 14, 2)
    how = intervene.parse(model, "all", "8")
    with torch.no_grad():
        got, _ = intervene.stream(model, x, how.cuts(14, 14), how.parts)
        torch.testing.assert_close(got[:, 8:], model(x[:, 8:]), rtol=0, atol=1e-9)
        torch.testing.assert_close(got[:, :8], model(x)[:, :8], rtol=0, atol=1e-10)


def test_rlt0_has_no_fed_back_state_so_dropping_it_changes_nothing():
    model = double("rlt0")
    x = tokens(2, 12, 3)
    how = intervene.parse(model, "feedback", "every:3")
    with torch.no_grad():
        dropped, _ = intervene.stream(model, x, how.cuts(12, 12), how.parts)
        kept, _ = intervene.stream(model, x, how.cuts(12, 12), ())
    assert torch.equal(dropped, kept)


@pytest.mark.parametrize("part", ["feedback", "window", "memory"])
def test_each_part_of_rlt1_changes_the_outputs_after_the_drop_only(part):
    model = double("rlt1")
    x = tokens(2, 12, 4)
    how = intervene.parse(model, part, "6")
    with torch.no_grad():
        got, _ = intervene.stream(model, x, how.cuts(12, 12), how.parts)
        want = model(x)
    torch.testing.assert_close(got[:, :6], want[:, :6], rtol=0, atol=1e-10)
    assert (got[:, 6:] - want[:, 6:]).abs().max() > 1e-6


def test_generation_with_an_intervention_equals_streaming_its_own_output():
    """Greedy generation with the state dropped at the boundary picks, at every step, the
    argmax of streaming prompt + generated tokens with the same drop."""
    model = double("rlt1")
    prompt = tokens(2, 6, 5)
    how = intervene.parse(model, "feedback,window", "boundary")
    with torch.no_grad():
        seq = intervene.generate(model, prompt, 7, how)
        logits, _ = intervene.stream(model, seq, how.cuts(seq.shape[1], 6), how.parts)
    assert torch.equal(seq[:, 6:], logits[:, 5:-1].argmax(-1))


@pytest.mark.parametrize(
    ("family", "drop", "at", "says"),
    [
        (
            "lstm",
            "window",
            "8",
            "LSTMModel has no such part; its parts are memory (or all, or none)",
        ),
        ("transformer", "feedback", "8", "its parts are memory (or all, or none)"),
        ("rlt1", "", "8", "state.drop is empty"),
        ("rlt1", "feedback", "every:0", "every:K with K >= 1"),
        ("rlt1", "feedback", "soon", "give boundary, a position P >= 1"),
        ("rlt1", "none,feedback", "8", "none drops nothing; give it alone"),
    ],
)
def test_a_drop_or_a_place_that_does_not_apply_is_one_line(family, drop, at, says):
    with pytest.raises(intervene.InterventionError) as e:
        intervene.parse(make(family), drop, at)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_dropping_none_streams_without_a_cut():
    model = make("rlt1")
    how = intervene.parse(model, "none", "8")
    assert how.parts == () and how.cuts(40, 6) == [] and how.name == "drop-none"
