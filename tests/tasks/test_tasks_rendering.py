"""A task's rendering is checked before a run starts (rlt.tasks.base.check_rendering): a plugin
task whose ``render`` breaks the contract trained to "done" on nothing (every label IGNORE,
labels one short, <pad>/<bos> as labels) or failed mid-run with a traceback (a tuple, numpy
arrays, a string token, an id past the vocabulary, None)."""

from __future__ import annotations

import numpy as np
import pytest

from rlt.tasks.base import IGNORE, TASKS, Rendered, check_rendering, get_task
from rlt.tasks.parity import ParityTask


def broken(bug: str) -> ParityTask:
    """The parity task with one thing wrong in what its render returns."""

    class Broken(ParityTask):
        def render(self, instance):
            r = super().render(instance)
            tokens, labels = list(r.tokens), list(r.labels)
            if bug == "tuple":
                return (tokens, labels, r.prompt_len, r.length)
            if bug == "none":
                return None
            if bug == "numpy":
                return r._replace(tokens=np.array(tokens), labels=np.array(labels))
            if bug == "string token":
                return r._replace(tokens=["<bos>", *tokens[1:]])
            if bug == "id past the vocabulary":
                return r._replace(tokens=[*tokens[:-1], 500])
            if bug == "labels one short":
                return r._replace(labels=labels[:-1])
            if bug == "nothing scored":
                return r._replace(labels=[IGNORE] * len(labels))
            if bug == "pad as label":
                return r._replace(labels=[0 if y != IGNORE else y for y in labels])
            if bug == "prompt past the end":
                return r._replace(prompt_len=len(tokens) + 1)
            if bug == "raises":
                raise KeyError("digit")
            return r

    return Broken()


@pytest.mark.parametrize(
    "bug, says",
    [
        ("tuple", "render returned a tuple"),
        ("none", "render returned a NoneType"),
        ("numpy", "tokens must be a list of int token ids, got ndarray"),
        ("string token", "tokens must be a list of int token ids"),
        ("id past the vocabulary", "token ids [500] outside the vocabulary's 0-139"),
        ("labels one short", "labels for"),
        ("nothing scored", "no position is scored"),
        ("pad as label", "labels [0] are no token a model predicts"),
        ("prompt past the end", "prompt_len"),
        ("raises", "render raised KeyError"),
    ],
)
def test_a_broken_rendering_is_named(bug: str, says: str) -> None:
    with pytest.raises(ValueError, match="Broken.render: ") as e:
        check_rendering(broken(bug))
    assert says in str(e.value)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_registered_task_renders_by_the_contract(name: str) -> None:
    task = get_task(name)
    check_rendering(task)
    assert isinstance(task.render(task.sample_train(task.rng("train", 0))), Rendered)


def test_a_run_of_a_broken_task_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from rlt.training.lifecycle import check
    from rlt.training.spec import ConfigError
    from tests.training.helpers import compose_cfg

    monkeypatch.setitem(TASKS, "parity", type(broken("nothing scored")))
    cfg = compose_cfg(["task=parity", "experiment=tiny", f"root={tmp_path}"])
    with pytest.raises(ConfigError, match="task 'parity': Broken.render: .* no position is scored"):
        check(cfg)
    assert not any(tmp_path.iterdir())
