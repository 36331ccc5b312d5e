"""The verdict rule (rlt/analysis/findings.py, issue 20): each clause kind on synthetic cells
with known means and SDs, one case per verdict; the combination; and the verdict table read
from a synthetic sweep's tables, checked against statistics computed by hand."""

from __future__ import annotations

import statistics

import pytest

from rlt.analysis.collect import collect
from rlt.analysis.findings import (
    LAPTOP_FINDINGS,
    Cell,
    Clause,
    Finding,
    Stat,
    combine,
    judge,
    verdict_table,
)
from tests.analysis.analysis_synthetic import PLANTED, SEEDS, make_sweep


def stat(mean: float, sd: float, n: int = 3) -> Stat:
    return Stat(mean, sd, n, 3, (mean,) * n)


A, B = Cell("t", "A", 64), Cell("t", "B", 64)
# (clause kind, A, B or threshold, chance %, expected verdict)
CASES = [
    ("exact", stat(100, 0), None, 50, "reproduced"),
    ("exact", stat(90, 5), None, 50, "not reproduced"),
    ("exact", stat(98, 2), None, 50, "inconclusive"),  # 96..100 straddles 99
    ("chance", stat(52, 3), None, 50, "reproduced"),  # 55 <= 60
    ("chance", stat(80, 5), None, 50, "not reproduced"),  # 75 > 60
    ("chance", stat(58, 5), None, 50, "inconclusive"),  # 53..63 straddles 60
    ("above", stat(90, 5), stat(50, 2), 50, "reproduced"),  # 85 > 52 and 90 >= 60
    ("above", stat(51, 1), stat(50, 2), 50, "not reproduced"),  # A near chance
    ("above", stat(100, 0), stat(100, 0), 50, "not reproduced"),  # A not above B
    ("above", stat(70, 30), stat(50, 2), 50, "inconclusive"),  # 40..100 vs 48..52
    ("above", stat(15, 1), stat(1, 1), 1, "reproduced"),  # 14 > 2, 15 >= 11
    ("close", stat(98, 1), stat(100, 0), 50, "reproduced"),  # 97 >= 90
    ("close", stat(60, 5), stat(100, 0), 50, "not reproduced"),  # 65 < 90
    ("close", stat(85, 10), stat(100, 0), 50, "inconclusive"),  # 75..95 straddles 90
    ("below", stat(15, 2), 50.0, 10, "reproduced"),
    ("below", stat(80, 5), 50.0, 10, "not reproduced"),
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
    yes, no, maybe = ("reproduced", "a"), ("not reproduced", "b"), ("inconclusive", "c")
    assert combine([yes, yes])[0] == "reproduced"
    assert combine([yes, maybe])[0] == "inconclusive"
    assert combine([maybe, no, yes]) == ("not reproduced", "b")


def test_the_verdict_table_reads_the_tables_numbers(tmp_path):
    """On the synthetic sweep: the planted divergent seeds of parity RLT-1 4+4 at 256
    (17.58, 19.53, 98.96: mean + SD 91.8 < 99) make "exact" not reproduced, and the table's
    numbers are the hand statistics of the planted values; a cell nobody ran is inconclusive."""
    c = collect([make_sweep(tmp_path / "synthetic", holes=False)])
    planted = [100 * PLANTED[("parity", "rlt1", "4+4", 256, "min_val_loss")][s] for s in SEEDS]
    findings = (
        Finding("X1", "exact", "-", (Clause("exact", Cell("parity", "RLT-1 4+4", 256)),)),
        Finding("X2", "nobody", "-", (Clause("chance", Cell("parity", "LSTM 2", 256)),)),
    )
    table = verdict_table(c, findings)
    assert list(table.data["verdict"]) == ["not reproduced", "inconclusive"]
    ours = table.display.loc["X1", "ours (mean ± SD, 3 seeds)"]
    assert f"{statistics.mean(planted):.2f} ± {statistics.stdev(planted):.2f}" in ours
    assert table.data.loc[0, "reason"] == "RLT-1 4+4 @256 below 99%"
    assert table.data.loc[1, "reason"] == "LSTM 2 @256: 0 of 3 seeds"
    assert table.display.loc["X2", "ours (mean ± SD, 3 seeds)"].endswith("not run")


def test_the_laptop_findings_are_f1_to_f10():
    assert [f.label for f in LAPTOP_FINDINGS] == [f"F{i}" for i in range(1, 11)]


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
