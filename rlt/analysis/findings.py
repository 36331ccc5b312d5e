"""The report's findings, judged by a stated rule (issue 20): one verdict per finding from the
same numbers the tables print.

A finding is a list of clauses about cells (task, model column, test length or the final
validation step); each clause gets a verdict from the cells' mean and sample SD over seeds,
and the finding's verdict is their combination. The rule, applied mechanically (percent; the
margin is 10 points, "exact" is 99%):

- a cell with fewer seeds than the grid expects, or none, leaves its clause inconclusive;
- exact(A): reproduced when mean - SD >= 99; not reproduced when mean + SD < 99;
- chance(A): reproduced when mean + SD <= chance + 10; not reproduced when mean - SD > chance + 10;
- above(A, B): reproduced when A's mean - SD > B's mean + SD and A's mean >= chance + 10; not
  reproduced when A's mean + SD <= B's mean + SD (A is not above B) or A's mean + SD <= chance +
  10 (A is near chance);
- close(A, B): reproduced when A's mean - SD >= B's mean - 10; not reproduced when A's mean +
  SD < B's mean - 10;
- below(A, x): reproduced when mean + SD < x; not reproduced when mean - SD >= x;
- anything else is inconclusive (the seeds disagree). A finding is reproduced when all its
  clauses are, not reproduced when any clause is not, else inconclusive.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from rlt.analysis.collect import Collection
from rlt.analysis.table_core import Table
from rlt.analysis.tables import length_table, scaled_accuracy_table, val_table

MARGIN = 10.0
EXACT = 99.0
VERDICTS = ("reproduced", "not reproduced", "inconclusive")


@dataclass(frozen=True)
class Cell:
    """A model's accuracy on a task: at a test length, or (length None) the validation
    accuracy at the final step (in distribution)."""

    task: str
    column: str
    length: int | None = None

    def name(self) -> str:
        where = "val" if self.length is None else f"@{self.length}"
        return f"{self.column} {where}"


@dataclass(frozen=True)
class Stat:
    mean: float
    sd: float
    n: int
    n_expected: int
    values: tuple[float, ...] = ()

    def seeds(self) -> str:
        return ", ".join(f"{v:.2f}" for v in self.values)


@dataclass(frozen=True)
class Clause:
    kind: str  # exact | chance | above | close | below
    a: Cell
    b: Cell | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class Finding:
    label: str
    claim: str
    report: str
    clauses: tuple[Clause, ...]


def judge(clause: Clause, a: Stat | None, b: Stat | None, chance: float) -> tuple[str, str]:
    """(verdict, one-line reason) of one clause; chance in percent."""
    for cell, stat in ((clause.a, a), (clause.b, b)):
        if cell is not None and (stat is None or stat.n < max(stat.n_expected, 3)):
            have = 0 if stat is None else stat.n
            return "inconclusive", f"{cell.name()}: {have} of 3 seeds"
    hi, lo = a.mean + a.sd, a.mean - a.sd
    floor = chance + MARGIN
    name = clause.a.name()
    if clause.kind == "exact":
        if lo >= EXACT:
            return "reproduced", f"{name} exact in every seed"
        if hi < EXACT:
            return "not reproduced", f"{name} below {EXACT:g}%"
        return "inconclusive", f"{name}: seeds disagree ({a.seeds()})"
    if clause.kind == "chance":
        if hi <= floor:
            return "reproduced", f"{name} within {MARGIN:g} points of chance"
        if lo > floor:
            return "not reproduced", f"{name} above chance + {MARGIN:g}"
        return "inconclusive", f"{name}: seeds disagree ({a.seeds()})"
    if clause.kind == "below":
        if hi < clause.threshold:
            return "reproduced", f"{name} below {clause.threshold:g}%"
        if lo >= clause.threshold:
            return "not reproduced", f"{name} not below {clause.threshold:g}%"
        return "inconclusive", f"{name}: seeds disagree ({a.seeds()})"
    other = clause.b.name()
    if clause.kind == "above":
        if lo > b.mean + b.sd and a.mean >= floor:
            return "reproduced", f"{name} above {other}"
        if hi <= floor:
            return "not reproduced", f"{name} near chance"
        if hi <= b.mean + b.sd:
            return "not reproduced", f"{name} not above {other}"
        return "inconclusive", f"{name} vs {other}: seeds disagree ({a.seeds()} vs {b.seeds()})"
    if clause.kind == "close":
        if lo >= b.mean - MARGIN:
            return "reproduced", f"{name} within {MARGIN:g} points of {other}"
        if hi < b.mean - MARGIN:
            return "not reproduced", f"{name} more than {MARGIN:g} points below {other}"
        return "inconclusive", f"{name} vs {other}: seeds disagree ({a.seeds()} vs {b.seeds()})"
    raise ValueError(f"unknown clause kind {clause.kind!r}")


def combine(verdicts: list[tuple[str, str]]) -> tuple[str, str]:
    """A finding's verdict from its clauses' (see the module's rule)."""
    for wanted in ("not reproduced", "inconclusive"):
        hits = [reason for v, reason in verdicts if v == wanted]
        if hits:
            return wanted, "; ".join(hits)
    return "reproduced", "; ".join(reason for _, reason in verdicts)


def _fmt(s: Stat | None) -> str:
    if s is None:
        return "not run"
    note = "" if s.n >= max(s.n_expected, 3) else f" (n={s.n}/{max(s.n_expected, 3)})"
    return f"{s.mean:.2f} ± {s.sd:.2f}{note}"


class _Cells:
    """Mean, SD and seed counts of cells, read from the tables the report prints."""

    def __init__(self, c: Collection, policy: str, metric: str):
        self.lengths = length_table(c, policy=policy, metric=metric).data
        self.val = val_table(c, metric=metric).data
        runs = c.runs[c.runs["has_results"].astype(bool)] if len(c.runs) else c.runs
        chance = runs.groupby("task")["chance"].first()  # first non-null per task
        self.chance = {task: 100 * float(x) for task, x in chance.fillna(0.0).items()}

    def __call__(self, cell: Cell) -> Stat | None:
        if cell.length is None:
            hit = self.val[(self.val["key"] == cell.task) & (self.val["column"] == cell.column)]
        else:
            row = f"{cell.task} / {cell.length}"
            hit = self.lengths[
                (self.lengths["row"] == row) & (self.lengths["column"] == cell.column)
            ]
        if hit.empty or pd.isna(hit.iloc[0]["mean"]):
            return None
        r = hit.iloc[0]
        sd = 0.0 if pd.isna(r["sd"]) else float(r["sd"])
        values = tuple(float(v) for v in r["values"])
        return Stat(float(r["mean"]), sd, int(r["n"]), int(r["n_expected"]), values)


def verdict_table(
    c: Collection, findings: tuple[Finding, ...], *, policy: str = "min_val_loss", metric="acc"
) -> Table:
    """One row per finding: the claim, the report's numbers, ours, the verdict and its reason."""
    stat = _Cells(c, policy, metric)
    rows, data = [], []
    for f in findings:
        verdicts = []
        for clause in f.clauses:
            chance = stat.chance.get(clause.a.task, 0.0)
            verdicts.append(judge(clause, stat(clause.a), clause.b and stat(clause.b), chance))
        verdict, reason = combine(verdicts)
        cells = dict.fromkeys(x for cl in f.clauses for x in (cl.a, cl.b) if x is not None)
        ours = "; ".join(f"{x.task} {x.name()}: {_fmt(stat(x))}" for x in cells)
        rows.append(
            {
                "finding": f.label,
                "claim": f.claim,
                "report": f.report,
                "ours (mean ± SD, 3 seeds)": ours,
                "verdict": verdict,
                "reason": reason,
            }
        )
        data.append({"finding": f.label, "verdict": verdict, "reason": reason})
    display = pd.DataFrame(rows).set_index("finding") if rows else pd.DataFrame()
    return Table(
        name="verdicts",
        title="Verdicts: the report's findings at laptop scale",
        display=display,
        data=pd.DataFrame(data),
        index_header="finding",
        notes=[
            "rule (rlt/analysis/findings.py): exact = mean - SD >= 99; chance = mean + SD <= "
            "chance + 10; A above B = A's mean - SD > B's mean + SD and A's mean >= chance + 10; "
            "close = A's mean - SD >= B's mean - 10; fewer than 3 seeds = inconclusive",
            f"test accuracy at the named length, checkpoint policy {policy}; 'val' = validation "
            "accuracy at the final step (in distribution)",
        ],
    )


def beyond_table(
    c: Collection, rlt1: dict[str, str], baselines: tuple[str, ...], *, policy="min_val_loss"
) -> Table:
    """Where the LSTM or DeltaNet [-1,1] matches or beats RLT-1: scaled accuracy over the
    lengths beyond training (the scaled table), per task; "beats" = its mean - SD above RLT-1's
    mean + SD, "matches" = the two mean +- SD ranges overlap."""
    scaled = scaled_accuracy_table(c, policy=policy).data
    rows = []
    for task, column in rlt1.items():
        here = scaled[scaled["key"] == task]
        ref = here[here["column"] == column]
        if ref.empty:
            continue
        r = ref.iloc[0]
        for base in baselines:
            hit = here[here["column"] == base]
            if hit.empty:
                continue
            b = hit.iloc[0]
            if b["mean"] - b["sd"] > r["mean"] + r["sd"]:
                relation = "beats"
            elif b["mean"] + b["sd"] < r["mean"] - r["sd"]:
                relation = "below"
            else:
                relation = "matches"
            rows.append(
                {
                    "task": task,
                    "baseline": base,
                    "baseline scaled acc": f"{b['mean']:.2f} ± {b['sd']:.2f} (n={int(b['n'])})",
                    "vs": column,
                    "RLT-1 scaled acc": f"{r['mean']:.2f} ± {r['sd']:.2f} (n={int(r['n'])})",
                    "relation": relation,
                }
            )
    display = pd.DataFrame(rows).set_index("task") if rows else pd.DataFrame()
    return Table(
        name="beyond",
        title="Beyond the report: LSTM and DeltaNet [-1,1] against RLT-1 (scaled accuracy x 100 "
        "over the lengths beyond training)",
        display=display,
        data=pd.DataFrame(rows),
        notes=[
            "beats = the baseline's mean - SD above RLT-1's mean + SD; below = the reverse; "
            "matches = the ranges overlap"
        ],
    )


def _above(task, a, b, length):
    return Clause("above", Cell(task, a, length), Cell(task, b, length))


# The laptop preset's cells (conf/sweep/laptop.yaml) for the report's findings (SPEC section 4).
_P, _W, _S, _A = "parity_3to16", "s5_swaps", "s5", "addition"
_MF, _MB = "mod5_flat_3to15", "mod5_brackets_3to16"  # trained on short lengths (deviation)
LAPTOP_FINDINGS: tuple[Finding, ...] = (
    Finding(
        "F1",
        "parity: RLT-1 exact at 256 bits, the Transformer at chance",
        "4+4/5+3/7+1 100 at 256 (5+3, 7+1: 100 ± 0); Transformer 8 50.07 ± 1.63",
        (
            Clause("exact", Cell(_P, "RLT-1 1+1", 256)),
            Clause("chance", Cell(_P, "Transformer 2", 256)),
        ),
    ),
    Finding(
        "F2",
        "parity: RLT-0 at chance (64 bits)",
        "RLT-0 4+4 50.23 ± 3.80 at 64",
        (Clause("chance", Cell(_P, "RLT-0 1+1", 64)),),
    ),
    Finding(
        "F3",
        "parity: RLT-2 B=4 close to RLT-1 at 64 bits, between RLT-0 and RLT-1 at 256",
        "4+4 at 64: RLT-2 98.99 ± 1.66, RLT-1 100; at 256: RLT-2 69.34 ± 24.17",
        (
            Clause("close", Cell(_P, "RLT-2 B=4 1+1", 64), Cell(_P, "RLT-1 1+1", 64)),
            _above(_P, "RLT-2 B=4 1+1", "RLT-0 1+1", 256),
            _above(_P, "RLT-1 1+1", "RLT-2 B=4 1+1", 256),
        ),
    ),
    Finding(
        "F4",
        "swaps-S5: RLT-1 extrapolates far beyond its 32 training operations, the Transformer "
        "at chance (256 operations)",
        "4+4 97.30 ± 2.76 at 256; Transformer 8 0.85 ± 0.30",
        (
            _above(_W, "RLT-1 2+2", "Transformer 4", 256),
            Clause("chance", Cell(_W, "Transformer 4", 256)),
        ),
    ),
    Finding(
        "F5",
        "swaps-S5: RLT-2 B=4 between RLT-0 and RLT-1 at 48 operations",
        "4+4 at 48: RLT-2 68.29 ± 8.75, RLT-0 7.26 ± 3.17, RLT-1 100 ± 0",
        (
            _above(_W, "RLT-2 B=4 2+2", "RLT-0 2+2", 48),
            _above(_W, "RLT-1 2+2", "RLT-2 B=4 2+2", 48),
        ),
    ),
    Finding(
        "F6",
        "swaps-S5: more decoder depth, longer extrapolation (256 operations; decoder depth 1 "
        "vs 3 at total depth 4)",
        "at 256: chance with one decoder block, 97% with four",
        (_above(_W, "RLT-1 1+3", "RLT-1 3+1", 256),),
    ),
    Finding(
        "F7",
        "flat mod-5: RLT well above the Transformer at length 63, with large seed spread",
        "6+2 93.36 ± 5.69 vs Transformer 8 33.20 ± 2.33 (5,000 steps)",
        (_above(_MF, "RLT-1 2+2", "Transformer 4", 63),),
    ),
    Finding(
        "F8",
        "bracketed mod-5: RLT above the Transformer at length 64",
        "5+3 67.97 ± 2.91 vs Transformer 8 46.71 ± 1.21 (5,000 steps)",
        (_above(_MB, "RLT-1 2+2", "Transformer 4", 64),),
    ),
    Finding(
        "F9",
        "full S5: every model near chance (32 operations, in distribution)",
        "validation 0.52-2.47 at every split and the Transformer",
        tuple(
            Clause("chance", Cell(_S, m, 32))
            for m in ("RLT-1 2+2", "Transformer 4", "LSTM 2", "DeltaNet [-1,1] 2")
        ),
    ),
    Finding(
        "F10",
        "addition: every model exact in distribution, far from it at 32 digits",
        "validation 100 for every model; ~15% teacher-forced at 32 digits",
        tuple(
            Clause("exact", Cell(_A, m))
            for m in ("RLT-1 2+2", "RLT-0 2+2", "Transformer 4", "LSTM 2")
        )
        + tuple(
            Clause("below", Cell(_A, m, 32), threshold=50.0)
            for m in ("RLT-1 2+2", "RLT-0 2+2", "Transformer 4", "LSTM 2")
        ),
    ),
)
LAPTOP_RLT1 = {
    _P: "RLT-1 1+1",
    _W: "RLT-1 2+2",
    _S: "RLT-1 2+2",
    _A: "RLT-1 2+2",
    _MF: "RLT-1 2+2",
    _MB: "RLT-1 2+2",
}
LAPTOP_BASELINES = ("LSTM 2", "DeltaNet [-1,1] 2")
