"""The state probe (rlt/state_probe.py and `python -m rlt.probe`, issue 30): the fit recovers a state that is linearly there
and finds nothing in noise, the running targets are the tasks' own labels at the last position,
the representation is what the head reads, the fit never sees a test sequence, and a run and
a kept checkpoint both carry the probe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlt import state_probe as probe
from rlt.models import DeltaNetConfig, LSTMConfig, RLTConfig, TransformerConfig, build_model
from rlt.tasks import get_task, vocab
from tests.training.helpers import REPO, compose_cfg, load_results

TINY = dict(d_model=32, n_heads=4, d_ff=48, vocab_size=140)


def _held_out_accuracy(x: torch.Tensor, y: torch.Tensor, n_classes: int) -> float:
    half = len(y) // 2
    fitted = probe.fit_logistic(x[:half], y[:half], n_classes)
    return 100 * float((fitted.predict(x[half:]) == y[half:]).float().mean())


@pytest.mark.parametrize("n_classes", [2, 120])
def test_a_one_hot_state_plus_noise_is_read_almost_perfectly(n_classes):
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, n_classes, (6000,), generator=g)
    x = 3 * torch.nn.functional.one_hot(y, n_classes).float()
    x = torch.cat([x, torch.randn(len(y), 16, generator=g)], 1) + 0.3 * torch.randn(
        len(y), n_classes + 16, generator=g
    )
    assert _held_out_accuracy(x, y, n_classes) > 99.0


@pytest.mark.parametrize("n_classes", [2, 5])
def test_random_representations_give_chance(n_classes):
    """Held-out accuracy within 4 points of chance (3,000 test positions: the binomial SD at
    chance 50% is 0.9 points, at 20% 0.7)."""
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, n_classes, (6000,), generator=g)
    x = torch.randn(len(y), 32, generator=g)
    assert abs(_held_out_accuracy(x, y, n_classes) - 100 / n_classes) < 4.0


@pytest.mark.parametrize("kind", ["parity", "s5", "s5_swaps"])
def test_the_running_target_at_the_last_position_is_the_label(kind):
    """On every test length of the task (32 examples each): the running state at the last input
    position stands for the label there; parity's running targets are also the prefix labels."""
    task = get_task(kind, n_test=32)
    for length in task.test_lengths:
        for ex in task.test_set(length):
            targets = probe.running_targets(task, ex)
            assert probe.label_at_end(task, targets) == ex.labels[ex.length]
            assert all(len(v) == ex.length for v in targets.values())
    prefix = get_task("parity", supervision="prefix", n_test=8)
    for ex in prefix.test_set(64):
        bits = probe.running_targets(prefix, ex)["parity"].tolist()
        labels = [y - vocab.DIGIT_IDS[0] for y in ex.labels[1 : ex.length + 1]]
        assert labels == bits


def test_where_each_element_sits_follows_the_permutation():
    """Independent of the code: apply the operations to the list [0..4] by hand."""
    task = get_task("s5_swaps")
    ex = task.test_set(48, 4)[0]
    where = probe.running_targets(task, ex)["where"]
    perm = list(range(5))
    for t in range(ex.length):
        x = vocab.PERMUTATIONS[ex.tokens[t + 1] - vocab.PERM_OFFSET]
        perm = [perm[x[i]] for i in range(5)]  # state o x (right composition)
        assert [perm.index(j) for j in range(5)] == where[t].tolist()


@pytest.mark.parametrize(
    "config",
    [
        RLTConfig.from_split("1+1", feedback_interval=1, window=4, **TINY),
        RLTConfig.from_split("1+1", feedback_interval=None, window=4, **TINY),
        TransformerConfig(n_layers=2, **TINY),
        LSTMConfig(n_layers=2, **{k: v for k, v in TINY.items() if k in ("d_model", "vocab_size")}),
        DeltaNetConfig(n_layers=2, **TINY),
    ],
    ids=["rlt1", "rlt0", "transformer", "lstm", "deltanet"],
)
def test_the_representation_is_what_the_head_reads(config):
    """For every family: head(norm(rep)) (the LSTM: head(rep)) is the model's own logits at the
    probed positions, so the representation is the last block's output before the final norm."""
    torch.manual_seed(0)
    model = build_model(config).eval()
    task = get_task("parity", n_test=4)
    examples = task.test_set(20)
    reps = probe.representations(model, examples)
    with torch.no_grad():
        logits = model(torch.tensor([ex.tokens for ex in examples]))
        norm = getattr(model, "norm", None)
        for j, rep in enumerate(reps):
            again = model.head(norm(rep) if norm is not None else rep)
            torch.testing.assert_close(again, logits[j, 1 : examples[j].length + 1])


class _Renamed(torch.nn.Module):
    """A family of one's own whose last layers are not called ``norm`` and ``head``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(140, 8)
        self.out = torch.nn.Linear(8, 140)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(tokens))


def test_a_model_without_norm_or_head_skips_the_auto_probe_and_refuses_a_forced_one(capsys):
    from types import SimpleNamespace

    from rlt.training import results
    from rlt.training.schema import ConfigError

    model, task = _Renamed(), get_task("parity", n_test=4)
    assert not probe.can_probe(model)
    assert probe.can_probe(build_model(TransformerConfig(n_layers=1, **TINY)))
    with pytest.raises(ValueError, match="final `norm` .* and _Renamed has neither"):
        probe.representations(model, task.test_set(20))

    def spec(setting, task_name="parity"):
        return SimpleNamespace(settings=SimpleNamespace(probe=setting), task=get_task(task_name))

    assert results.probe(spec("auto"), model) is None  # before any checkpoint is read
    assert "state probe skipped" in capsys.readouterr().out
    results.check_probe(spec("auto"), model)  # auto never refuses
    with pytest.raises(ConfigError, match="_Renamed has neither; use evaluate.probe=auto"):
        results.check_probe(spec(True), model)
    with pytest.raises(ConfigError, match="task 'addition' has no running target"):
        results.check_probe(
            spec(True, "addition"), build_model(TransformerConfig(n_layers=1, **TINY))
        )


def test_the_fit_never_reads_a_test_sequence():
    task = get_task("parity", n_test=4)
    model = build_model(TransformerConfig(n_layers=1, **TINY))
    with pytest.raises(ValueError, match="training-length sequences only"):
        probe.fit_probe(task, model, task.test_set(20))
    fit_set = probe.fit_examples(task, 16)
    assert {ex.split for ex in fit_set} == {"train"}
    lo, hi = task.train_lengths
    assert all(lo <= ex.length <= hi for ex in fit_set)


def test_a_run_carries_the_probe_and_the_command_probes_a_kept_checkpoint(tmp_path):
    from rlt.training.run import run

    out = run(compose_cfg(["experiment=tiny", f"root={tmp_path}", "print_table=false"]))
    res = load_results(out["run_dir"])
    block = res["probe"]
    assert block["policy"] == "min_val_loss" and block["step"] == res["selection"]["step"]
    assert set(block["targets"]) == {"parity"}
    assert set(block["targets"]["parity"]["by_length"]) == {str(n) for n in res["test_lengths"]}
    assert all(0 <= v <= 100 for v in block["targets"]["parity"]["by_bucket"].values())
    proc = subprocess.run(
        [sys.executable, "-m", "rlt.probe", out["run_dir"]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((tmp_path / out["run_dir"] / "probe.json").read_text())
    assert again["targets"] == block["targets"]  # deterministic: the same numbers
    assert "parity" in proc.stdout and "1-16" in proc.stdout
    off = run(
        compose_cfg(
            [
                "experiment=tiny",
                f"root={tmp_path / 'off'}",
                "print_table=false",
                "evaluate.probe=false",
            ]
        )
    )
    assert "probe" not in load_results(off["run_dir"])


def test_tables_and_figures_show_the_probe(tmp_path):
    """A probe block planted in a synthetic sweep's results: the probe table's cells are the
    hand mean ± SD over seeds, the task accuracy beside a bucket averages the test lengths in
    it, and the figure is drawn with one line per model."""
    import statistics

    from rlt.analysis.collect import collect
    from rlt.analysis.figures import probe_curves
    from rlt.analysis.tables import probe_table
    from tests.analysis.analysis_synthetic import SEEDS, make_sweep

    sweep = make_sweep(tmp_path / "s", holes=False)
    planted = {}
    for path in sweep.rglob("results.json"):
        r = json.loads(path.read_text())
        seed = r["run"]["seed"]
        acc = {"1-16": 100.0, "17-32": 90.0 + seed % 3, "33-64": 50.0 + seed % 5}
        planted[(r["run"]["task"], r["run"]["model"], r["run"]["split"], seed)] = acc
        r["probe"] = {
            "targets": {"parity": {"by_bucket": acc}},
            "rms": {"by_bucket": {"1-16": 1.0, "17-32": 1.5, "33-64": 2.0}},
        }
        path.write_text(json.dumps(r))
    c = collect([sweep])
    table = probe_table(c)
    cell = table.cell("parity / 33-64 / parity", "RLT-1 4+4")
    hand = [planted[("parity", "rlt1", "4+4", s)]["33-64"] for s in SEEDS]
    assert cell["mean"] == pytest.approx(statistics.mean(hand))
    assert cell["sd"] == pytest.approx(statistics.stdev(hand))
    t = c.test[(c.test["policy"] == "min_val_loss") & (c.test["metric"] == "acc")]
    t = t[(t["row"] == "parity") & (t["label"] == "RLT-1 4+4") & t["length"].between(33, 64)]
    per_seed = 100 * t.groupby("seed")["value"].mean()
    acc_cell = table.cell("parity / 33-64 / task acc", "RLT-1 4+4")
    assert acc_cell["mean"] == pytest.approx(per_seed.mean())
    assert table.cell("parity / 17-32 / rms", "RLT-1 4+4")["mean"] == pytest.approx(1.5)
    figures = probe_curves(c, tmp_path / "fig", formats=("png",))
    assert [f.name for f in figures] == ["probe_parity", "probe_s5_swaps"]
    assert figures[0].paths[0].stat().st_size > 10_000
    drawn = figures[0].data[figures[0].data["panel"] == "parity"]
    assert set(drawn["label"]) == set(c.labels)


def test_eval_scores_a_kept_checkpoint_at_new_lengths_and_the_tables_read_it(tmp_path):
    """Issue 31: eval.py on a finished tiny run at new lengths writes eval_min_val_loss.json,
    leaves results.json byte-identical, and the length table gains the new length; a key it
    does not take is refused."""
    from rlt.analysis.collect import collect
    from rlt.analysis.tables import length_table
    from rlt.training.run import run

    out = run(compose_cfg(["experiment=tiny", f"root={tmp_path}", "print_table=false"]))
    run_dir = Path(out["run_dir"])
    before = (run_dir / "results.json").read_bytes()

    def eval_py(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "eval.py", str(run_dir), *args]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)

    proc = eval_py("task.test_lengths=[20,300]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run_dir / "results.json").read_bytes() == before
    scored = json.loads((run_dir / "eval_min_val_loss.json").read_text())
    assert {r["length"] for r in scored["rows"]} == {20, 300}
    assert scored["step"] == json.loads(before)["selection"]["step"]
    table = length_table(collect([tmp_path / "tiny"]))
    assert "parity_prefix / 300 (eval.py)" in set(table.data["row"])
    refused = eval_py("scale.lr=1")
    assert refused.returncode == 2 and "eval.py takes" in refused.stderr
