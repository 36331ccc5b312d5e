"""A plugin's model family is checked when the config is (rlt/training/families.py), before a run
directory exists: its "module:Class" paths load, its config has vocab_size, its model has
forward, init_state, prefill and step. Each was a traceback: from the config check (a bad
path), or after training (a model without prefill, failing at the first greedy evaluation;
a config without vocab_size)."""

from __future__ import annotations

import dataclasses

import pytest
from torch import nn

from rlt import families
from rlt.models.base import SequenceModel
from rlt.models.transformer import DecoderOnlyTransformer
from rlt.training.spec import ConfigError
from tests.training.helpers import compose_cfg

HERE = __name__


@dataclasses.dataclass
class NoVocabConfig:
    d_model: int = 16
    n_layers: int = 1


class ForwardOnly(SequenceModel):
    def __init__(self, config) -> None:
        super().__init__()
        self.head = nn.Linear(1, 1)

    def forward(self, tokens):
        return self.head(tokens.float()[..., None])


@pytest.mark.parametrize(
    "config, model, says",
    [
        ("rlt.models.config:TransformerConfg", None, "class 'rlt.models.config:TransformerConfg' "
         "does not load (AttributeError"),
        (None, "no_such_lab.models:Net", "does not load (ModuleNotFoundError"),
        (f"{HERE}:NoVocabConfig", None, "its config NoVocabConfig has no vocab_size field"),
        (None, f"{HERE}:ForwardOnly", "its model ForwardOnly lacks init_state, prefill, step"),
    ],
)  # fmt: skip
def test_a_family_that_cannot_serve_a_run_is_refused_with_the_config(
    monkeypatch, tmp_path, config, model, says
) -> None:
    from rlt.training.lifecycle import check

    entry = families.get("transformer")
    broken = dataclasses.replace(entry, config=config or entry.config, model=model or entry.model)
    monkeypatch.setitem(families._TABLE, "transformer", broken)
    cfg = compose_cfg(["model=transformer", "task=parity", "experiment=tiny", f"root={tmp_path}"])
    with pytest.raises(ConfigError, match="model family 'transformer': ") as e:
        check(cfg)
    assert says in str(e.value) and len(str(e.value).splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_the_built_in_families_provide_what_a_run_reads() -> None:
    for entry in families.families():
        assert dataclasses.is_dataclass(families.checked(entry.name)[1])
    assert all(callable(getattr(DecoderOnlyTransformer, m)) for m in families.MODEL_METHODS)
