"""Every table cell against a hand computation (statistics module, not pandas) on known values."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

from rlt.analysis import ReportOptions, build_tables, collect, markdown_summary
from rlt.analysis.reference import compare_table, load_reference
from rlt.analysis.render import fmt_cell
from rlt.analysis.run_tables import params_table
from rlt.analysis.tables import (
    feedback_table,
    generalization_table,
    length_table,
    policy_table,
    val_table,
)
from tests.analysis.analysis_synthetic import (
    HOLES,
    LABELS,
    MODELS,
    PARAMS,
    POLICY_STEPS,
    SEEDS,
    TASKS,
    make_sweep,
    ood_value,
    val_value,
)


def done_seeds(task: str, model: str, split: str) -> list[int]:
    return [s for s in SEEDS if (task, model, split, s) not in HOLES]


def by_hand(values: list[float]) -> tuple[float, float]:
    """Mean and sample SD (ddof=1) in percent."""
    pct = [100 * v for v in values]
    return statistics.mean(pct), (statistics.stdev(pct) if len(pct) > 1 else math.nan)


def assert_cell(table, row: str, column: str, values: list[float], n_expected: int = 3) -> None:
    cell = table.cell(row, column)
    mean, sd = by_hand(values)
    assert cell["n"] == len(values)
    assert cell["n_expected"] == n_expected
    assert cell["mean"] == pytest.approx(mean, abs=1e-9)
    if len(values) > 1:
        assert cell["sd"] == pytest.approx(sd, abs=1e-9)
    shown = table.display.loc[row, column]
    assert shown == fmt_cell(mean, sd, len(values), n_expected)
    assert f"{mean:.2f}" in shown


@pytest.fixture(scope="module")
def c(sweep: Path):
    return collect([sweep])


@pytest.mark.parametrize("step", [None, 300])
def test_table1_cells_equal_hand_computed_mean_and_sample_sd(c, step) -> None:
    table = val_table(c, step=step)
    for task in TASKS:
        for model, split in MODELS:
            seeds = done_seeds(task, model, split)
            vals = [val_value(task, model, split, s, step or 500, "acc") for s in seeds]
            assert_cell(table, task, LABELS[(model, split)], vals)


@pytest.mark.parametrize("policy", list(POLICY_STEPS))
def test_table2_cells_at_longest_length_for_every_policy(c, policy) -> None:
    table = generalization_table(c, policy=policy)
    for task, spec in TASKS.items():
        longest = max(spec["lengths"])
        for model, split in MODELS:
            seeds = done_seeds(task, model, split)
            vals = [ood_value(task, model, split, s, policy, longest, "acc") for s in seeds]
            assert_cell(table, f"{task} ({longest})", LABELS[(model, split)], vals)


def test_table2_planted_seeds_reproduce_the_reports_divergent_cell(c) -> None:
    """17.58, 19.53, 98.96 -> 45.36 ± 46.43, and the per-seed view shows the raw values."""
    table = generalization_table(c)
    assert table.display.loc["parity (256)", "RLT-1 4+4"] == "45.36 ± 46.43"
    row = table.per_seed.loc["parity (256) · RLT-1 4+4"]
    assert [row["seed 42"], row["seed 43"], row["seed 44"]] == [17.58, 19.53, 98.96]
    assert table.markdown(per_seed=True).count("98.96") >= 1


def test_selectable_length_per_task_and_for_all(c) -> None:
    table = generalization_table(c, lengths={"parity": 64, "s5_swaps": 48})
    vals = [ood_value("parity", "rlt0", "4+4", s, "min_val_loss", 64, "acc") for s in SEEDS]
    assert_cell(table, "parity (64)", "RLT-0 4+4", vals)
    table = generalization_table(c, lengths=64)
    assert list(table.display.index) == ["parity (64)", "s5_swaps (64)"]
    table = generalization_table(c, lengths=1000)  # never tested: rows say so, cells stay empty
    assert any("no acc at length 1000" in n for n in table.notes)


def test_per_seed_view_shows_raw_values_for_every_cell(c) -> None:
    table = val_table(c)
    for task in TASKS:
        for model, split in MODELS:
            row = table.per_seed.loc[f"{task} · {LABELS[(model, split)]}"]
            for s in SEEDS:
                if (task, model, split, s) in HOLES:
                    assert math.isnan(row[f"seed {s}"])
                else:
                    expect = round(100 * val_value(task, model, split, s, 500, "acc"), 2)
                    assert row[f"seed {s}"] == pytest.approx(expect)


def test_split_names_with_plus_are_matched_literally(c) -> None:
    """'4+4' and '5+3' are names, not patterns: each feedback table holds only its own split."""
    assert {"RLT-1 4+4", "RLT-1 5+3"} <= set(c.labels)
    t44 = feedback_table(c, split="4+4")
    assert list(t44.display.columns) == [  # the one variant order of labels.py
        "RLT-1 4+4",
        "RLT-2 B=4 4+4",
        "RLT-0 4+4",
        "Transformer 8",
    ]
    t53 = feedback_table(c, split="5+3")
    assert list(t53.display.columns) == ["RLT-1 5+3", "Transformer 8"]
    assert any("no RLT-0 runs at split 5+3" in n for n in t53.notes)
    vals = [ood_value("s5_swaps", "rlt1", "5+3", s, "min_val_loss", 48, "acc") for s in SEEDS]
    assert_cell(t53, "s5_swaps / 48", "RLT-1 5+3", vals)
    assert c.runs.loc[c.runs["label"] == "RLT-1 5+3", "split"].eq("5+3").all()


def test_feedback_table_uses_the_reports_lengths(c) -> None:
    table = feedback_table(c)
    assert list(table.display.index) == ["parity / 64", "s5_swaps / 48"]
    seeds = done_seeds("parity", "transformer", "L8")
    vals = [ood_value("parity", "transformer", "L8", s, "min_val_loss", 64, "acc") for s in seeds]
    assert_cell(table, "parity / 64", "Transformer 8", vals)


def test_holes_render_with_n_below_expected_and_appear_in_incomplete(c) -> None:
    table = val_table(c)
    assert table.display.loc["parity", "RLT-1 5+3"].endswith("(n=2/3)")
    assert table.display.loc["s5_swaps", "RLT-0 4+4"].endswith("(n=2/3)")
    assert table.display.loc["parity", "Transformer 8"].endswith("(n=2/3)")
    assert "(n=" not in table.display.loc["parity", "RLT-1 4+4"]
    assert any("fewer seeds" in n for n in table.notes)

    inc = c.incomplete.set_index(["task", "label", "seed"])
    assert inc.loc[("parity", "RLT-1 5+3", 44), "state"] == "missing"
    assert inc.loc[("s5_swaps", "RLT-0 4+4", 43), "state"] == "failed"
    assert "NaN loss" in inc.loc[("s5_swaps", "RLT-0 4+4", 43), "detail"]
    assert inc.loc[("parity", "Transformer 8", 44), "state"] == "running"
    assert len(inc) == len(HOLES)

    tables = build_tables(c, ReportOptions(compare_report=True))
    for key, t in tables.items():
        assert not t.display.empty or key == "compare", key  # compare: not the report's preset
    assert "left out" in tables["compare"].notes[0]
    md = tables["incomplete"].markdown()
    assert "missing" in md and "failed" in md and "running" in md and "212/500" in md


def test_cell_expected_by_grid_but_without_any_run_shows_zero_of_n(tmp_path: Path) -> None:
    root = make_sweep(tmp_path / "s")
    for seed in SEEDS:
        shutil.rmtree(root / "parity" / "rlt2_b4" / "4+4" / f"seed{seed}")
    t = val_table(collect([root]))
    assert t.display.loc["parity", "RLT-2 B=4 4+4"] == "– (n=0/3)"
    assert t.cell("parity", "RLT-2 B=4 4+4")["n"] == 0


def test_length_and_policy_tables(c) -> None:
    lengths = length_table(c)
    for n in TASKS["s5_swaps"]["lengths"]:
        vals = [ood_value("s5_swaps", "rlt2_b4", "4+4", s, "min_val_loss", n, "acc") for s in SEEDS]
        assert_cell(lengths, f"s5_swaps / {n}", "RLT-2 B=4 4+4", vals)
    pol = policy_table(c)
    vals = [ood_value("parity", "rlt1", "4+4", s, "final", 256, "acc") for s in SEEDS]
    cell = pol.cell("parity (256) · final", "RLT-1 4+4")
    assert cell["max"] == pytest.approx(100 * max(vals))
    assert f"[max {100 * max(vals):.2f}]" in pol.display.loc["parity (256) · final", "RLT-1 4+4"]
    assert list(pol.display.index)[:3] == [
        "parity (256) · min_val_loss",
        "parity (256) · final",
        "parity (256) · max_val_acc",
    ]


def test_other_metrics_are_selectable(c) -> None:
    table = generalization_table(c, metric="seq_acc")
    vals = [ood_value("s5_swaps", "rlt1", "4+4", s, "min_val_loss", 512, "seq_acc") for s in SEEDS]
    assert_cell(table, "s5_swaps (512)", "RLT-1 4+4", vals)
    vals = [ood_value("parity", "rlt0", "4+4", s, "min_val_loss", 256, "token_acc") for s in SEEDS]
    assert_cell(generalization_table(c, metric="token_acc"), "parity (256)", "RLT-0 4+4", vals)


def test_params_and_cost(c) -> None:
    params = params_table(c)
    assert params.cell("RLT-0 4+4", "RLT-0 4+4")["delta_vs_rlt1"] == -787_968
    assert params.display.loc["RLT-1 4+4", "parameters"] == f"{PARAMS[('rlt1', '4+4')]:,}"
    assert params.display.loc["Transformer 8", "M"] == "25.31"
    cost = build_tables(c)["cost"]
    assert cost.display.loc["RLT-1 4+4", "× RLT-0"] == "2.00"  # 0.5 / 0.25
    assert cost.display.loc["RLT-1 4+4", "× Transformer"] == "2.50"  # 0.5 / 0.2
    assert cost.display.loc["RLT-2 B=4 4+4", "× RLT-0"] == "1.20"


def _with_vocab(sweep: Path, out: Path, bigger: dict[str, int]) -> Path:
    """A copy of a synthetic sweep where every run of the tasks in ``bigger`` has that many
    more parameters; vocab_size records 140 + 2 tokens for them when ``vocab`` (else 140)."""
    shutil.copytree(sweep, out)
    for path in out.rglob("results.json"):
        r = json.loads(path.read_text())
        extra = bigger.get(r["run"]["task"], 0)
        r["params"] += extra
        r["vocab_size"] = 142 if extra and out.name == "vocab" else 140
        path.write_text(json.dumps(r))
    return out


def test_params_differing_by_vocabulary_are_explained(sweep: Path, tmp_path: Path) -> None:
    """Issue 41: a plugin task that adds tokens made every model's row warn "parameter count
    differs ... check the config"; the note now names the vocabularies when they explain it,
    and still asks for a check when runs of one vocabulary differ."""
    d = 256  # two more tokens: two more embedding rows and two more output rows of width d
    explained = params_table(collect([_with_vocab(sweep, tmp_path / "vocab", {"parity": 4 * d})]))
    row = "RLT-1 4+4"
    (note,) = [n for n in explained.notes if n.startswith(f"{row}:")]
    low = PARAMS[("rlt1", "4+4")]
    assert f"({low:,}–{low + 4 * d:,}) only because" in note and "140 / 142 tokens" in note
    # The same counts with one vocabulary throughout: nothing explains them.
    odd = params_table(collect([_with_vocab(sweep, tmp_path / "same", {"parity": 4 * d})]))
    (note,) = [n for n in odd.notes if n.startswith(f"{row}:")]
    assert note.endswith("check the config of each run")
    # One task's runs of one vocabulary with two counts: also a check, not an explanation.
    shutil.copytree(tmp_path / "vocab", tmp_path / "mixed")
    one = next((tmp_path / "mixed").rglob("parity/rlt1/4+4/seed42/results.json"))
    r = json.loads(one.read_text())
    one.write_text(json.dumps({**r, "params": r["params"] + 1}))
    (note,) = [n for n in params_table(collect([tmp_path / "mixed"])).notes if row in n]
    assert note.endswith("check the config of each run")
    # Consistent runs: no note at all.
    assert not [n for n in params_table(collect([sweep])).notes if n.startswith(f"{row}:")]


def _as_preset(sweep: Path, out: Path, preset: str) -> Path:
    """A copy of a synthetic sweep whose runs claim another scale preset."""
    shutil.copytree(sweep, out)
    for path in out.rglob("results.json"):
        r = json.loads(path.read_text())
        r["run"]["preset"] = preset
        path.write_text(json.dumps(r))
    grid = out / "sweep.json"
    grid.write_text(json.dumps({**json.loads(grid.read_text()), "preset": preset}))
    return out


def test_compare_report_only_compares_the_reports_preset(c) -> None:
    """Issue 31: a width-16, 4-step run was matched against the report's RLT-1 4+4 with no
    warning; runs at another preset are now left out, and the table says so."""
    table = compare_table(c, load_reference())  # the synthetic sweep is preset "tiny"
    assert table.data.empty
    assert "runs at tiny are left out" in table.notes[0]


def test_compare_with_report(sweep: Path, tmp_path: Path) -> None:
    c = collect([_as_preset(sweep, tmp_path / "paper", "paper")])
    table = compare_table(c, load_reference())
    rows = table.data[(table.data["column"] == "RLT-1 4+4") & (table.data["at"] == "length 256")]
    rec = rows[rows["source"] == "Table 2"].iloc[0]
    assert rec["report_mean"] == 66.76 and rec["report_sd"] == 28.78
    assert rec["diff"] == pytest.approx(rec["mean"] - 66.76)
    assert rec["mean"] == pytest.approx(statistics.mean([17.58, 19.53, 98.96]))
    val500 = table.data[
        (table.data["at"] == "step 500") & (table.data["column"] == "Transformer 8")
    ]
    assert val500.iloc[0]["report_mean"] == 48.48


def test_reference_file_holds_spec_section_4() -> None:
    ref = load_reference()
    entries = {(e["table"], e["task"], e["model"]): e for e in ref["entries"]}
    assert entries[("table1", "mod5_flat", "RLT-1 4+4")]["mean"] == 45.36
    assert entries[("table1", "mod5_flat", "RLT-1 4+4")]["sd"] == 46.43
    assert entries[("table2", "s5_swaps", "RLT-1 4+4")]["length"] == 512
    assert entries[("feedback", "parity", "RLT-0 4+4")]["mean"] == 50.23
    assert sum(e["table"] == "table1" for e in ref["entries"]) == 36
    assert sum(e["table"] == "table2" for e in ref["entries"]) == 36
    assert sum(e["table"] == "feedback" for e in ref["entries"]) == 20


def test_markdown_summary_for_the_training_code(sweep: Path) -> None:
    text = markdown_summary(sweep)
    assert text.startswith("### Table 1")
    assert "parity / 256" in text and "45.36 ± 46.43" in text
    assert "Incomplete" in text


def test_latex_and_csv_files(c, tmp_path: Path) -> None:
    table = generalization_table(c)
    paths = table.write(tmp_path)
    tex = (tmp_path / f"{table.name}.tex").read_text()
    assert r"\begin{tabular}" in tex and r"45.36 $\pm$ 46.43" in tex
    assert r"s5\_swaps (512)" in tex
    data = pd.read_csv(tmp_path / f"{table.name}.csv")
    row = data[(data["row"] == "parity (256)") & (data["column"] == "RLT-1 4+4")].iloc[0]
    assert row["n"] == 3 and row["values"] == "17.58 19.53 98.96"
    assert len(paths) == 3


def test_scaled_accuracy_matches_a_hand_computation(c) -> None:
    from rlt.analysis.tables import scaled_accuracy_table

    table = scaled_accuracy_table(c)
    for task, spec in TASKS.items():
        window = [n for n in spec["lengths"] if 40 <= n <= 256 and n > spec["train"][1]]
        chance = spec["chance"]
        row = f"{task} ({', '.join(map(str, window))})"
        for model, split in MODELS:
            per_seed = []
            for s in done_seeds(task, model, split):
                accs = [ood_value(task, model, split, s, "min_val_loss", n, "acc") for n in window]
                per_seed.append(statistics.mean((a - chance) / (1 - chance) for a in accs))
            cell = table.cell(row, LABELS[(model, split)])
            mean, sd = by_hand(per_seed)
            assert cell["mean"] == pytest.approx(mean, abs=1e-9)
            assert cell["max"] == pytest.approx(100 * max(per_seed), abs=1e-9)
            if len(per_seed) > 1:
                assert cell["sd"] == pytest.approx(sd, abs=1e-9)


def test_metric_titles_say_which_accuracy_each_task_reports():
    """``acc`` is the final label on parity, mod-5 and S5 but the teacher-forced token accuracy
    on addition (SPEC section 3: addition is scored on every answer digit, teacher-forced);
    a title over both says so, and names the task that differs."""
    from rlt.analysis.labels import metric_words
    from rlt.tasks import get_task

    assert get_task("addition").acc_mode == "tokens" and get_task("parity").acc_mode == "last"
    assert metric_words("acc", ["parity", "s5_swaps"]) == "final-label accuracy"
    assert metric_words("acc", ["addition"]) == "teacher-forced token accuracy"
    both = metric_words("acc", ["parity_3to16", "addition"])
    assert "final label" in both and "addition: teacher-forced token accuracy" in both
    assert "whole-sequence" in metric_words("seq_acc", ["s5"])


def test_a_registered_family_is_its_own_column_with_its_own_style():
    """One entry in the family table (rlt/families.py) is all the analysis needs: a depth-only
    family is labelled by depth, ordered after the built-in ones, and drawn in its colours.
    In a fresh process, as the table is global."""
    import subprocess
    import sys

    script = """
from rlt import families
from rlt.analysis.labels import model_key, model_style
families.register(families.Family("gru", "x:C", "x:M", depth_only=True,
    variants=(families.Variant("GRU", ("gru",), "YlGn", "d"),)))
k = model_key(model="gru_small", family="gru", split="L4")
t = model_key(model="transformer", family="transformer", split="L4")
r = model_key(model="rlt1", family="rlt", split="2+2")
print(k.label, k.rank > t.rank > r.rank, model_style(k)["marker"], t.label, r.label)
try:
    families.register(families.Family("gru2", "x:C", "x:M", True, (families.Variant("GRU"),)))
except ValueError as e:
    print("refused:", e)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out[0] == "GRU 4 True d Transformer 4 RLT-1 2+2"
    assert out[1].startswith("refused:") and "GRU" in out[1]
