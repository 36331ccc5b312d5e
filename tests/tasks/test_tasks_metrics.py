"""rlt.tasks.metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rlt.tasks import IGNORE, get_task, vocab
from rlt.tasks.data import collate
from rlt.tasks.metrics import batch_metrics, example_losses, example_metrics, greedy_exact, loss

V = vocab.VOCAB_SIZE


def oracle_logits(batch: dict[str, torch.Tensor], wrong: dict[tuple[int, int], int] | None = None):
    """Logits that put all mass on the label (or on ``wrong[(b, t)]``) at supervised positions."""
    b, t = batch["labels"].shape
    logits = torch.zeros(b, t, V)
    for i in range(b):
        for j in range(t):
            y = int(batch["labels"][i, j])
            if y != IGNORE:
                logits[i, j, (wrong or {}).get((i, j), y)] = 20.0
    return logits


def test_perfect_and_wrong_predictions_s5():
    task = get_task("s5")
    batch = collate([task.example("test", i, 4) for i in range(3)])
    m = batch_metrics(oracle_logits(batch), batch)
    assert m["acc"] == m["token_acc"] == m["seq_acc"] == 1.0 and m["loss"] < 1e-6
    # example 0: last state wrong; example 1: one middle state wrong; example 2 right
    m = example_metrics(oracle_logits(batch, {(0, 4): 5, (1, 2): 5}), batch)
    assert m["acc"].tolist() == [0.0, 1.0, 1.0]
    assert m["token_acc"].tolist() == [0.75, 0.75, 1.0]
    assert m["seq_acc"].tolist() == [0.0, 0.0, 1.0]
    assert 0 < m["loss"][0] == pytest.approx(m["loss"][1]) and m["loss"][2] < 1e-6


def test_per_example_loss_is_mean_over_supervised_positions_then_examples():
    task = get_task("addition")
    exs = [task.make_example((5, 5)), task.make_example((12345, 67890))]  # 3 and 7 labels
    batch = collate(exs)
    logits = torch.randn(*batch["tokens"].shape, V, generator=torch.Generator().manual_seed(0))
    per = example_losses(logits, batch["labels"])
    for i, ex in enumerate(exs):
        terms = [
            -torch.log_softmax(logits[i, t], -1)[y].item()
            for t, y in enumerate(ex.labels)
            if y != IGNORE
        ]
        assert per[i].item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    assert loss(logits, batch["labels"]).item() == pytest.approx(per.mean().item())


def test_padding_does_not_change_metrics():
    task = get_task("parity", supervision="prefix")
    short, long = task.example("test", 0, 5), task.example("test", 0, 30)
    together = collate([short, long])
    logits = torch.randn(*together["tokens"].shape, V, generator=torch.Generator().manual_seed(1))
    joint = example_metrics(logits, together)
    alone = collate([short])
    single = example_metrics(logits[:1, : alone["tokens"].shape[1]], alone)
    for k in joint:
        assert joint[k][0].item() == pytest.approx(single[k][0].item())


def test_addition_acc_is_teacher_forced_token_accuracy():
    task = get_task("addition")
    ex = task.make_example((57, 68))  # answer 5 2 1 <eos> at positions 6..9
    batch = collate([ex])
    m = example_metrics(oracle_logits(batch, {(0, 9): vocab.DIGIT_IDS[0]}), batch, task.acc_mode)
    assert m["acc"].item() == m["token_acc"].item() == 0.75  # EOS counts
    assert m["seq_acc"].item() == 0.0
    last = example_metrics(oracle_logits(batch, {(0, 9): vocab.DIGIT_IDS[0]}), batch, "last")
    assert last["acc"].item() == 0.0


def test_acc_mode_is_validated():
    batch = collate([get_task("parity").example("test", 0, 4)])
    with pytest.raises(ValueError, match="acc_mode"):
        example_metrics(torch.zeros(1, 6, V), batch, "first")


def test_chance_level_loss_is_log_vocab():
    batch = collate([get_task("parity").example("test", 0, 4)])
    assert loss(torch.zeros(1, 6, V), batch["labels"]).item() == pytest.approx(math.log(V))


class ScriptedGenerator:
    """Stands in for ``model.generate``: continues each prompt from a lookup of answers."""

    def __init__(self, answers: dict[tuple[int, ...], list[int]], stop_early: bool = False):
        self.answers, self.stop_early, self.calls = answers, stop_early, []

    def __call__(self, prompt: torch.Tensor, max_new_tokens: int, eos_id: int | None = None):
        self.calls.append((prompt.shape, max_new_tokens, eos_id))
        rows = []
        for p in prompt.tolist():
            new = (self.answers[tuple(p)] + [vocab.EOS] * max_new_tokens)[:max_new_tokens]
            rows.append(p + new)
        out = torch.tensor(rows)
        if self.stop_early:  # every row reached EOS: a model may return fewer columns
            ends = [r.index(vocab.EOS) + 1 if vocab.EOS in r else len(r) for r in out.tolist()]
            out = out[:, : max(ends)]
        return out


def test_greedy_exact_groups_prompts_and_compares_answer_and_eos():
    task = get_task("addition")
    exs = [task.make_example(p) for p in [(57, 68), (1, 2), (999, 1), (40, 2)]]
    batch = collate(exs)
    right = {tuple(ex.prompt): ex.response for ex in exs}
    gen = ScriptedGenerator(right)
    assert greedy_exact(gen, batch).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert sorted(c[0][1] for c in gen.calls) == [5, 6, 7]  # one call per prompt length
    assert all(c[2] == vocab.EOS for c in gen.calls)

    wrong = dict(right)
    wrong[tuple(exs[0].prompt)] = exs[0].response[:-1] + [vocab.DIGIT_IDS[3]]  # no EOS
    wrong[tuple(exs[1].prompt)] = [vocab.EOS]  # EOS one step early
    wrong[tuple(exs[3].prompt)] = exs[3].response + [vocab.DIGIT_IDS[7]]  # extra after EOS: fine
    assert greedy_exact(ScriptedGenerator(wrong), batch).tolist() == [0.0, 0.0, 1.0, 1.0]
    assert greedy_exact(ScriptedGenerator(wrong, stop_early=True), batch).tolist() == [0, 0, 1, 1]


def test_a_registered_metric_records_its_function_and_a_hash_of_its_code(tmp_path, monkeypatch):
    """Issue 55: results.json records which code computed each plugin metric, so the analysis
    can refuse to average two definitions of one name. Comments and layout do not change the
    record; the code does."""
    import importlib.util

    from rlt.tasks import metrics

    monkeypatch.setattr(metrics, "EXTRA", {})

    def load(module: str, body: str):
        path = tmp_path / f"{module}.py"
        path.write_text(f"def first(logits, batch):\n{body}")
        spec = importlib.util.spec_from_file_location(module, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.first

    same = "    return logits[:, 0, 0]  # the first logit\n"
    relaid = "    # a comment and a blank line more\n\n    return logits[:,0,0]\n"
    other = "    return logits[:, 0, 1]\n"
    for name, module, body in (("m_a", "issue55_a", same), ("m_b", "issue55_b", relaid),
                               ("m_c", "issue55_c", other)):  # fmt: skip
        metrics.register_metric(name)(load(module, body))
    d = metrics.definitions()
    assert d["m_a"]["function"] == "issue55_a.first" and d["m_c"]["function"] == "issue55_c.first"
    assert d["m_a"]["source_sha1"] == d["m_b"]["source_sha1"] != d["m_c"]["source_sha1"]
