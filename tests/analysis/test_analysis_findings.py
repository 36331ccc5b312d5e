"""The verdict rule (rlt/analysis/findings.py, issue 20): each clause kind on synthetic cells
with known means and SDs, one case per verdict; the combination; and the verdict table read
from a synthetic sweep's tables, checked against statistics computed by hand."""

from __future__ import annotations

import json
import re
import shutil
import statistics

import pytest

from rlt.analysis import studies
from rlt.analysis.collect import collect
from rlt.analysis.findings import (
    NOT_TESTABLE,
    REPORT_VAL,
    Cell,
    Clause,
    Finding,
    Stat,
    combine,
    judge,
    learned_threshold,
    prerequisite,
    verdict_table,
)
from tests.analysis.analysis_synthetic import (
    PLANTED,
    POLICY_STEPS,
    SEEDS,
    make_sweep,
    val_value,
)
from tests.training.helpers import REPO

LAPTOP_FINDINGS = studies.load("laptop").FINDINGS  # docs/results/laptop/views.py


def stat(mean: float, sd: float, n: int = 3) -> Stat:
    return Stat(mean, sd, n, 3, (mean,) * n)


A, B = Cell("t", "A", 64), Cell("t", "B", 64)
# (clause kind, A, B or threshold, chance %, expected verdict)
CASES = [
    ("exact", stat(100, 0), None, 50, "reproduced"),
    ("exact", stat(90, 5), None, 50, "not observed"),
    ("exact", stat(98, 2), None, 50, "inconclusive"),  # 96..100 straddles 99
    ("chance", stat(52, 3), None, 50, "reproduced"),  # 55 <= 60
    ("chance", stat(80, 5), None, 50, "not observed"),  # 75 > 60
    ("chance", stat(58, 5), None, 50, "inconclusive"),  # 53..63 straddles 60
    ("above", stat(90, 5), stat(50, 2), 50, "reproduced"),  # 85 > 52 and 90 >= 60
    ("above", stat(51, 1), stat(50, 2), 50, "not observed"),  # A near chance
    ("above", stat(100, 0), stat(100, 0), 50, "not observed"),  # A not above B
    ("above", stat(70, 30), stat(50, 2), 50, "inconclusive"),  # 40..100 vs 48..52
    ("above", stat(15, 1), stat(1, 1), 1, "reproduced"),  # 14 > 2, 15 >= 11
    ("close", stat(98, 1), stat(100, 0), 50, "reproduced"),  # 97 >= 90
    ("close", stat(60, 5), stat(100, 0), 50, "not observed"),  # 65 < 90
    ("close", stat(85, 10), stat(100, 0), 50, "inconclusive"),  # 75..95 straddles 90
    ("below", stat(15, 2), 50.0, 10, "reproduced"),
    ("below", stat(80, 5), 50.0, 10, "not observed"),
    ("below", stat(45, 10), 50.0, 10, "inconclusive"),
]


@pytest.mark.parametrize(("kind", "a", "b", "chance", "expected"), CASES)
def test_each_clause_kind_gives_each_verdict(kind, a, b, chance, expected):
    if kind == "below":
        clause, b_stat = Clause(kind, A, threshold=b), None
    else:
        clause, b_stat = Clause(kind, A, B if b is not None else None), b
    verdict, reason = judge(clause, a, b_stat, chance)
    assert verdict == expected, reason
    assert reason


def test_missing_seeds_leave_a_clause_inconclusive():
    clause = Clause("above", A, B)
    assert judge(clause, stat(100, 0, n=2), stat(50, 0), 50)[0] == "inconclusive"
    assert judge(clause, stat(100, 0), None, 50) == ("inconclusive", "B @64: 0 of 3 seeds")


def test_a_finding_combines_its_clauses():
    yes, no, maybe = ("reproduced", "a"), ("not observed", "b"), ("inconclusive", "c")
    assert combine([yes, yes])[0] == "reproduced"
    assert combine([yes, maybe])[0] == "inconclusive"
    assert combine([maybe, no, yes]) == ("not observed", "b")


def _selected_val(task: str, model: str, split: str) -> float:
    """Hand mean of the synthetic validation accuracy (%) at the selected step."""
    sel = POLICY_STEPS["min_val_loss"]
    return statistics.mean(100 * val_value(task, model, split, s, sel, "acc") for s in SEEDS)


def test_the_verdict_table_reads_the_tables_numbers(tmp_path):
    """On the synthetic sweep: the planted divergent seeds of parity RLT-1 4+4 at 256
    (17.58, 19.53, 98.96: mean + SD 91.8 < 99) make "exact" not observed when judged directly,
    and not testable under the prerequisite (the cell's validation at the selected step is below
    the report's 100 - 10); the table's numbers are the hand statistics of the planted values; a
    cell nobody ran is "not run"."""
    c = collect([make_sweep(tmp_path / "synthetic", holes=False)])
    planted = [100 * PLANTED[("parity", "rlt1", "4+4", 256, "min_val_loss")][s] for s in SEEDS]
    cell = Cell("parity", "RLT-1 4+4", 256)
    findings = (
        Finding("X1", "exact", "-", (Clause("exact", cell, direct=True),)),
        Finding("X2", "nobody", "-", (Clause("chance", Cell("parity", "LSTM 2", 256)),)),
        Finding("X3", "exact, learned first", "-", (Clause("exact", cell),)),
    )
    table = verdict_table(c, findings)
    assert list(table.data["verdict"]) == ["not observed", "not run", NOT_TESTABLE]
    ours = table.display.loc["X1"].filter(like="ours").iloc[0]
    assert f"{statistics.mean(planted):.2f} ± {statistics.stdev(planted):.2f} (n=3)" in ours
    assert table.data.loc[0, "reason"] == "RLT-1 4+4 @256 below 99%"
    assert table.data.loc[0, "seeds"] == "RLT-1 4+4 @256 exact: 0/3"  # 17.58, 19.53, 98.96 < 99
    assert table.data.loc[1, "reason"] == "LSTM 2 @256 not in this budget's grid"
    assert table.display.loc["X2"].filter(like="ours").iloc[0] == "not run"
    hand = _selected_val("parity", "rlt1", "4+4")
    assert hand < 90
    assert (
        f"validation {hand:.2f} at the selected checkpoint < 90.00" in table.data.loc[2, "reason"]
    )
    # Issue 38: the seeds column also counts the seeds that learned in distribution on their own.
    sel = POLICY_STEPS["min_val_loss"]
    per_seed = [100 * val_value("parity", "rlt1", "4+4", s, sel, "acc") for s in SEEDS]
    learned = sum(v >= 90 for v in per_seed)
    assert table.data.loc[2, "seeds"].endswith(f"(learned RLT-1 4+4 {learned}/3)")


@pytest.mark.parametrize("policy", ["final", "max_val_acc"])
def test_the_prerequisite_reads_the_checkpoint_of_the_policy_judged(tmp_path, policy):
    """With --policy final (or max_val_acc) the test numbers come from that policy's checkpoint,
    and so does the validation the prerequisite reads: the hand mean at the policy's own step,
    not at min_val_loss's."""
    c = collect([make_sweep(tmp_path / "synthetic", holes=False)])
    cell = Cell("parity", "RLT-1 4+4", 256)
    table = verdict_table(c, (Finding("X", "-", "-", (Clause("exact", cell),)),), policy=policy)
    step = POLICY_STEPS[policy]
    hand = statistics.mean(100 * val_value("parity", "rlt1", "4+4", s, step, "acc") for s in SEEDS)
    assert hand != pytest.approx(_selected_val("parity", "rlt1", "4+4"))
    assert hand < 90  # the planted cell did not learn at any policy's step
    assert f"validation {hand:.2f} at the selected checkpoint" in table.data.loc[0, "reason"]


def test_a_clause_missing_a_cell_is_not_testable_when_a_held_cell_did_not_learn(tmp_path):
    """A budget that lacks one of a clause's cells (a scout tier runs only the cells that had
    not learned) says "not run", unless a cell it holds, with all its seeds, failed the
    prerequisite: then running the missing cell could not make the clause testable. A direct
    clause has no prerequisite, and a held cell short of seeds decides nothing yet."""
    root = make_sweep(tmp_path / "synthetic", holes=False)
    held, missing = Cell("parity", "RLT-1 4+4", 256), Cell("parity", "LSTM 2", 256)
    findings = (
        Finding("X4", "above a missing cell", "-", (Clause("above", held, missing),)),
        Finding("X5", "below a missing cell", "-", (Clause("above", missing, held),)),
        Finding("X6", "direct", "-", (Clause("above", held, missing, direct=True),)),
    )
    table = verdict_table(collect([root]), findings)
    assert list(table.data["verdict"]) == [NOT_TESTABLE, NOT_TESTABLE, "not run"]
    hand = _selected_val("parity", "rlt1", "4+4")  # below the report's 100 - 10
    reason = table.data.loc[0, "reason"]
    assert f"RLT-1 4+4 did not learn parity in distribution: validation {hand:.2f}" in reason
    assert reason.endswith("(LSTM 2 @256 not in this budget's grid)")
    assert table.data.loc[2, "reason"] == "LSTM 2 @256 not in this budget's grid"
    shutil.rmtree(root / "parity" / "rlt1" / "4+4" / f"seed{SEEDS[-1]}")
    table = verdict_table(collect([root]), findings[:1])
    assert list(table.data["verdict"]) == ["not run"]


def test_the_prerequisite_waits_for_the_grids_seeds(tmp_path):
    """A cell that has not learned on its first seeds may on the rest: with one of parity RLT-1
    4+4's three seeds not yet run, the clause that is not testable on all three (previous test)
    is inconclusive and names the seed count, not "not testable" on part of the grid."""
    root = make_sweep(tmp_path / "synthetic", holes=False)
    shutil.rmtree(root / "parity" / "rlt1" / "4+4" / f"seed{SEEDS[-1]}")
    cell = Cell("parity", "RLT-1 4+4", 256)
    table = verdict_table(
        collect([root]), (Finding("X3", "learned first", "-", (Clause("exact", cell),)),)
    )
    assert table.data.loc[0, "verdict"] == "inconclusive"
    assert table.data.loc[0, "reason"] == f"RLT-1 4+4 @256: {len(SEEDS) - 1} of {len(SEEDS)} seeds"


def test_each_budget_is_judged_on_its_own_runs(tmp_path):
    """Two sweeps at different presets (budgets): one verdict column each, from its own runs
    only. The second sweep's RLT-1 4+4 seeds are made exact at 256: only its column changes."""
    a = make_sweep(tmp_path / "short", holes=False)
    b = make_sweep(tmp_path / "long", holes=False)
    for results in b.rglob("results.json"):
        r = json.loads(results.read_text())
        r["run"]["preset"] = "tiny_long"
        if r["run"]["model"] == "rlt1" and r["run"]["split"] == "4+4":
            for row in r["test_by_policy"]["min_val_loss"]["rows"]:
                if row["length"] == 256 and row["metric"] == "acc":
                    row["value"] = 1.0
            r["test"] = r["test_by_policy"]["min_val_loss"]["rows"]
        results.write_text(json.dumps(r))
    grid = json.loads((b / "sweep.json").read_text())
    (b / "sweep.json").write_text(json.dumps({**grid, "preset": "tiny_long"}))
    f = Finding(
        "X", "exact", "-", (Clause("exact", Cell("parity", "RLT-1 4+4", 256), direct=True),)
    )
    table = verdict_table(collect([a, b]), (f,))
    assert list(table.data["preset"]) == ["tiny", "tiny_long"]
    assert list(table.data["verdict"]) == ["not observed", "reproduced"]
    assert len([c for c in table.display.columns if c.startswith("verdict, ")]) == 2


def test_the_prerequisite_each_way():
    """A cell at the report's figure - 10 or above is testable; below it is not, with the
    validation figure and the threshold named; a direct clause has no prerequisite."""
    cell = Cell("parity_3to16", "RLT-1 1+1", 256)
    clause = Clause("exact", cell)
    assert prerequisite(clause, {cell: Stat(90.0, 5.0, 3, 3)}) is None
    why = prerequisite(clause, {cell: Stat(89.5, 5.0, 3, 3)})
    assert why and "89.50" in why and "90.00" in why and "report 4+4 100 - 10" in why
    assert prerequisite(Clause("exact", cell, direct=True), {cell: Stat(10, 0, 3, 3)}) is None
    # both cells of a comparison must have learned
    b = Cell("parity_3to16", "Transformer 2", 256)
    pair = Clause("above", cell, b)
    assert "Transformer 2" in prerequisite(pair, {cell: Stat(100, 0, 3, 3), b: Stat(60, 2, 3, 3)})


@pytest.mark.parametrize(
    ("task", "column", "threshold"),
    [
        ("parity_3to16", "RLT-1 1+1", 90.0),  # 4+4: 100
        ("parity_3to16", "Transformer 2", 84.84),  # Transformer 8: 94.84
        ("s5_swaps", "RLT-1 3+1", 90.0),  # 6+2: 100
        ("mod5_flat_3to15", "RLT-1 3+1", 59.62),  # 6+2: 69.62
        ("mod5_flat_3to15", "RLT-1 1+3", 35.36),  # nearest is 4+4: 45.36
        ("mod5_brackets_3to16", "LSTM 2", 60.53),  # no split: 4+4 70.53
        ("mod5_brackets_3to16", "RLT-2 B=4 2+2", 60.53),
        ("mod5_brackets_3to16", "Transformer 4", 63.87),
    ],
)
def test_learned_thresholds_follow_the_nearest_report_split(task, column, threshold):
    assert learned_threshold(task, column)[0] == pytest.approx(threshold)


QUOTE = REPO / "tests" / "reference" / "spec_section4.md"  # SPEC section 4, quoted verbatim


def _spec_section_4() -> str:
    """SPEC section 4 (the report's numbers): from ../shared/SPEC.md where the workplace puts
    it beside the checkout, which the committed quote must then equal; else the quote, so a
    plain clone checks the figures too."""
    spec = REPO.parent / "shared" / "SPEC.md"
    if spec.exists():
        text = spec.read_text()
        section = text[text.index("## 4.") : text.index("## 5.")]
        assert QUOTE.read_text() == section, f"{QUOTE} no longer quotes {spec} section 4"
        return section
    return QUOTE.read_text()


def test_the_report_figures_are_quoted_from_the_spec():
    """Every number in a finding's "report" column and every validation figure the
    prerequisite uses stands in SPEC section 4 (issue 28: the table once misquoted F1)."""
    section = _spec_section_4()
    in_spec = set(re.findall(r"\d+(?:\.\d+)?", section.replace(",", "")))
    for f in LAPTOP_FINDINGS:
        for number in re.findall(r"\d+(?:\.\d+)?", f.report.replace(",", "")):
            assert number in in_spec, f"{f.label}: {number} is not in SPEC section 4"
    val_rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in section[: section.index("Best-checkpoint")].splitlines()
        if line.startswith("| ") and "task" not in line
    }
    columns = ("4+4", "5+3", "6+2", "7+1", "8+0", "Transformer 8")
    for task, figures in REPORT_VAL.items():
        spec_means = [float(x.split("+-")[0]) for x in val_rows[task]]
        assert [figures[c] for c in columns] == spec_means, task


def test_the_laptop_findings_are_f1_to_f10():
    labels = [f"F{i}" for i in range(1, 11)]
    assert [f.label for f in LAPTOP_FINDINGS] == [*labels[:3], "F3 at 3-40", "F3b", *labels[3:]]
    assert all(f.mirrors for f in LAPTOP_FINDINGS)  # every row says which report split it mirrors


def test_the_findings_are_judged_on_the_report_models_only():
    """Issue 38: the LSTM and DeltaNet are not models of the report; they appear in the
    "beyond the report" table, never in a finding's clauses."""
    columns = {
        x.column for f in LAPTOP_FINDINGS for cl in f.clauses for x in (cl.a, cl.b) if x is not None
    }
    assert all(col.startswith(("RLT-1 ", "RLT-2 ", "RLT-0 ", "Transformer ")) for col in columns)
    assert {"RLT-1 2+2", "RLT-0 2+2", "Transformer 4"} <= columns


def test_the_laptop_page_shows_what_the_tables_print():
    """docs/results/laptop/README.md's verdict and grid tables are the output of
    analysis/tables.py on the committed runs (update_tables.py --check)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs/results/laptop/update_tables.py"
    spec = importlib.util.spec_from_file_location("update_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    old, new = module.rendered()
    assert old == new, "run python docs/results/laptop/update_tables.py"
    assert "| F1 |" in old and "| F10 |" in old


def test_the_beyond_table_judges_only_cells_with_a_spread():
    """Issue 57: a baseline cell of one seed has no SD; it is shown as ``mean (n=1)`` and not
    judged (a NaN SD used to make every comparison false and read as "matches")."""
    import pandas as pd

    from rlt.analysis.beyond import _beyond_rows

    scaled = pd.DataFrame(
        [
            {"key": "s5_swaps", "column": "RLT-1 2+2", "mean": 56.51, "sd": 25.10, "n": 5},
            {"key": "s5_swaps", "column": "PD-SSM 2", "mean": 0.34, "sd": float("nan"), "n": 1},
            {"key": "s5_swaps", "column": "LSTM 2", "mean": 10.0, "sd": 2.0, "n": 3},
            {"key": "s5_swaps", "column": "DeltaNet [-1,1] 2", "mean": 98.9, "sd": 1.6, "n": 3},
        ]
    )
    rows = _beyond_rows(
        scaled, {"s5_swaps": "RLT-1 2+2"}, ("PD-SSM 2", "LSTM 2", "DeltaNet [-1,1] 2"), "3,000"
    )
    got = {r["baseline"]: (r["relation"], r["baseline scaled acc"]) for r in rows}
    assert got["PD-SSM 2"] == ("not judged (one seed)", "0.34 (n=1)")
    assert got["LSTM 2"][0] == "below" and got["DeltaNet [-1,1] 2"][0] == "beats"
    assert rows[0]["RLT-1 scaled acc"] == "56.51 ± 25.10 (n=5)"


def _learning_curves():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs/results/laptop/learning_curves.py"
    spec = importlib.util.spec_from_file_location("learning_curves", path)
    lc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lc)
    return lc


def test_the_learning_curve_table_names_the_first_step_at_the_prerequisite(tmp_path):
    """Issue 54: per seed of a scouted cell, the first validation at or above its prerequisite
    (the report's figure - 10: 90 for RLT-0 on parity), or "not by" the last step."""
    import json

    lc = _learning_curves()
    curves = {42: [0.5, 0.89, 0.9, 0.7], 43: [0.5, 0.6, 0.8, 0.85]}
    for seed, accs in curves.items():
        run = tmp_path / "parity_3to16" / "rlt0" / "1+1" / f"seed{seed}"
        run.mkdir(parents=True)
        rows = [{"step": 100 * (i + 1), "acc": a, "loss": 1.0} for i, a in enumerate(accs)]
        (run / "results.json").write_text(json.dumps({"val_curve": rows}))
    lc.TIERS = (("400 steps", tmp_path),)
    lc.SCOUTED = (("F2", "parity_3to16", "rlt0/1+1", "RLT-0 1+1"),)
    lines = lc.table().splitlines()[2:]
    assert [line.split(" | ")[5] for line in lines] == ["300", "not by 400"]
    assert "val >= 90.00 (report 4+4 100 - 10)" in lines[0]
    assert lines[0].endswith("| 90.00 (300) | 70.00 |")


def test_a_cell_is_testable_from_the_budget_whose_selected_checkpoints_meet_the_prerequisite():
    """Issue 54 item 4: the budget B from which a cell's seeds would meet its prerequisite is
    judged on the checkpoints the report's rule (lowest validation loss) selects within B, not
    on the best accuracy seen: seed a's best accuracy (99 at step 300) is not its selection."""
    lc = _learning_curves()
    rows = lambda *r: [{"step": s, "loss": lo, "acc": a} for s, lo, a in r]  # noqa: E731
    a = rows((100, 1.0, 0.5), (200, 0.5, 0.95), (300, 0.6, 0.99))
    b = rows((100, 1.0, 0.5), (200, 0.9, 0.80), (300, 0.4, 0.90))
    # selected within 200: 95 and 80 (87.5); within 300: 95 (step 200) and 90 (92.5)
    assert lc.testable_from([a, b], 90.0) == (300, 92.5)
    assert lc.testable_from([a, b], 93.0) == (None, 92.5)  # the best accuracies' mean is 94.5
    assert lc.testable_from([a, b], 50.0) == (100, 50.0)
