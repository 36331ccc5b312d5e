"""Config validation: bad values fail on construction with a message naming the field."""

from __future__ import annotations

import math

import pytest

from rlt.models import RLTConfig, TransformerConfig, parse_split
from tests.models.conftest import TINY, make_rlt


@pytest.mark.parametrize(
    ("split", "expected"), [("4+4", (4, 4)), ("16+0", (16, 0)), ("0+2", (0, 2)), (" 8+8 ", (8, 8))]
)
def test_parse_split(split: str, expected: tuple[int, int]) -> None:
    assert parse_split(split) == expected


@pytest.mark.parametrize("split", ["4-4", "4+", "+4", "0+0", "a+b", "4+4+4", "", "-1+2", "4 4"])
def test_parse_split_rejects_malformed(split: str) -> None:
    with pytest.raises(ValueError, match="split"):
        parse_split(split)


def test_from_split_rejects_malformed() -> None:
    with pytest.raises(ValueError, match="split"):
        RLTConfig.from_split("4-4")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("window", 0),
        ("window", -3),
        ("feedback_interval", 0),
        ("feedback_interval", -1),
        ("feedback_interval", 1.5),
        ("feedback_interval", "sometimes"),
        ("n_heads", 5),  # does not divide d_model=32
        ("d_model", 0),
        ("n_enc", -1),
        ("tbptt", 0),
        ("alpha", -0.1),
        ("alpha", math.nan),
        ("pos_encoding", "alibi"),
        ("init_std", 0.0),
    ],
)
def test_bad_rlt_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        RLTConfig(**{**TINY, field: value})


def test_empty_split_is_rejected() -> None:
    with pytest.raises(ValueError, match="n_enc"):
        RLTConfig(n_enc=0, n_dec=0)


def test_odd_head_dim_with_rope_is_rejected() -> None:
    with pytest.raises(ValueError, match="pos_encoding"):
        RLTConfig(d_model=12, n_heads=4)  # head dim 3
    RLTConfig(d_model=12, n_heads=4, pos_encoding="none")


def test_bad_transformer_config_names_the_field() -> None:
    with pytest.raises(ValueError, match="n_layers"):
        TransformerConfig(n_layers=0)
    with pytest.raises(ValueError, match="n_heads"):
        TransformerConfig(d_model=30, n_heads=4)


@pytest.mark.parametrize("value", [None, "inf", "INF", "none", math.inf])
def test_infinite_feedback_interval_means_rlt0(value: object) -> None:
    config = RLTConfig(feedback_interval=value)
    assert config.feedback_interval is None
    assert config.name == "rlt0"


def test_defaults_and_names() -> None:
    config = RLTConfig()
    assert (config.d_ff, config.window, config.alpha, config.tbptt) == (1365, 8, 0.1, 128)
    assert config.name == "rlt1" and config.split == "4+4"
    assert RLTConfig(feedback_interval=4.0).feedback_interval == 4
    assert RLTConfig(feedback_interval=4).name == "rlt2_b4"


def test_feedback_interval_is_settable_between_rlt1_and_rlt2() -> None:
    model = make_rlt(feedback_interval=4)
    model.feedback_interval = 1
    assert model.feedback_interval == 1 and model.config.feedback_interval == 1
    model.feedback_interval = 8
    assert model.feedback_interval == 8
    with pytest.raises(ValueError, match="feedback_interval"):
        model.feedback_interval = 0
    with pytest.raises(ValueError, match="feedback_interval"):
        model.feedback_interval = None  # RLT-0 has other parameters: build it instead


def test_rlt0_feedback_interval_cannot_be_set() -> None:
    model = make_rlt(feedback_interval=None)
    with pytest.raises(ValueError, match="feedback_interval"):
        model.feedback_interval = 1
    model.feedback_interval = "inf"
    assert model.feedback_interval is None
