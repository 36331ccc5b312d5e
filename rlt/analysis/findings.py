"""The report's findings, judged by a stated rule (issues 20 and 28): one verdict per finding and
training budget, from the same numbers the tables print.

A finding is a list of clauses about cells (task, model column, test length or the final
validation step); each clause gets a verdict from the cells' mean and sample SD over seeds,
and the finding's verdict is their combination. The rule, applied mechanically (percent; the
margin is 10 points, "exact" is 99%):

- prerequisite (issue 28): a clause about a model's accuracy at a test length is judged only on
  cells that learned the task in distribution: validation accuracy at the selected checkpoint
  (mean over seeds) at least the report's own validation figure for that task minus 10 points
  (SPEC section 4, "validation accuracy after 2,000 steps", by :func:`learned_threshold`: the
  Transformer takes the report's Transformer 8 figure; an RLT split takes the RLT-1 figure of
  the report split nearest in encoder share (1+1 and 2+2 -> 4+4, 3+1 -> 6+2, 1+3 -> 4+4); RLT-2,
  RLT-0, the LSTM and DeltaNet take the RLT-1 figure of their nearest split (4+4 for the
  depth-only baselines)). A clause on a cell that fails it is **not testable at this budget**.
  This holds for claims that a model fails beyond its training lengths too: failing to
  generalize is shown only by a model that learned. Clauses about the in-distribution figure
  itself (F9, F10's first half) are judged directly. Thresholds: parity 90 (Transformer 84.84),
  swaps-S5 90 (Transformer 89.09), addition 90, flat mod-5 35.36 at 4+4 (Transformer 54.02),
  bracketed mod-5 60.53 at 4+4 (Transformer 63.87), full S5 none (the report's figure is chance);
- a cell with fewer seeds than its grid expects (at least 3) leaves its clause inconclusive,
  before the prerequisite is judged (a cell that has not learned on its first seeds may on the
  rest); a clause on a cell its budget's grid does not hold is "not run", or not testable
  when a cell the grid does hold (with all its seeds) fails the prerequisite;
- exact(A): reproduced when mean - SD >= 99; not observed when mean + SD < 99;
- chance(A): reproduced when mean + SD <= chance + 10; not observed when mean - SD > chance + 10;
- above(A, B): reproduced when A's mean - SD > B's mean + SD and A's mean >= chance + 10; not
  observed when A's mean + SD <= B's mean + SD (A is not above B) or A's mean + SD <= chance +
  10 (A is near chance);
- close(A, B): reproduced when A's mean - SD >= B's mean - 10; not observed when A's mean +
  SD < B's mean - 10;
- below(A, x): reproduced when mean + SD < x; not observed when mean - SD >= x;
- anything else is inconclusive (the seeds disagree). A finding is not observed when any clause
  is, else not testable when any clause is, else not run or inconclusive when any clause is,
  else reproduced.

Each budget (a scale preset: 3,000 steps, and the report's example count at 16,000) is judged
on its own runs only; the verdict table shows one column per budget, never a comparison across
them. Beside each verdict: how many seeds of the cell meet each clause on their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from rlt.analysis.collect import Collection
from rlt.analysis.table_core import Table
from rlt.analysis.tables import length_table, val_table
from rlt.analysis.tiers import budget_label, by_preset

MARGIN = 10.0
EXACT = 99.0
MIN_SEEDS = 3
NOT_TESTABLE = "not testable at this budget"
VERDICTS = ("reproduced", "not observed", "inconclusive", NOT_TESTABLE, "not run")

# SPEC section 4, "validation accuracy after 2,000 steps" (means, %), by task kind and the
# report's column. The prerequisite's reference (learned_threshold); checked against SPEC by a test.
REPORT_VAL = {
    "addition": {"4+4": 100, "5+3": 100, "6+2": 100, "7+1": 100, "8+0": 100, "Transformer 8": 100},
    "parity": {
        "4+4": 100,
        "5+3": 100,
        "6+2": 100,
        "7+1": 100,
        "8+0": 98.83,
        "Transformer 8": 94.84,
    },
    "mod5_flat": {
        "4+4": 45.36,
        "5+3": 94.18,
        "6+2": 69.62,
        "7+1": 70.01,
        "8+0": 60.33,
        "Transformer 8": 64.02,
    },
    "mod5_brackets": {
        "4+4": 70.53,
        "5+3": 74.35,
        "6+2": 74.87,
        "7+1": 74.78,
        "8+0": 75.17,
        "Transformer 8": 73.87,
    },
    "s5_swaps": {
        "4+4": 100,
        "5+3": 100,
        "6+2": 100,
        "7+1": 99.35,
        "8+0": 99.61,
        "Transformer 8": 99.09,
    },
    "s5": {"4+4": 0.78, "5+3": 2.47, "6+2": 2.21, "7+1": 2.08, "8+0": 1.82, "Transformer 8": 0.52},
}
_REPORT_SPLITS = ("4+4", "5+3", "6+2", "7+1", "8+0")


def task_kind(task: str) -> str:
    """The report's task a task variant belongs to (``parity_3to16`` -> ``parity``)."""
    for kind in sorted(REPORT_VAL, key=len, reverse=True):
        if task == kind or task.startswith(kind + "_"):
            return kind
    raise KeyError(f"no report figure for task {task!r}")


def report_column(column: str) -> str:
    """The report column whose validation figure a model column is held to: Transformer 8 for
    a Transformer; for an RLT split the report split nearest in encoder share (ties to the
    more balanced one); 4+4 for a model without a split (LSTM, DeltaNet)."""
    if column.startswith("Transformer"):
        return "Transformer 8"
    m = re.search(r"(\d+)\+(\d+)", column)
    if not m:
        return "4+4"
    share = int(m[1]) / (int(m[1]) + int(m[2]))
    return min(_REPORT_SPLITS, key=lambda s: (abs(int(s.split("+")[0]) / 8 - share), s))


def learned_threshold(task: str, column: str) -> tuple[float, str]:
    """(threshold %, what it is) of the prerequisite for a cell."""
    ref = report_column(column)
    figure = REPORT_VAL[task_kind(task)][ref]
    return figure - MARGIN, f"report {ref} {figure:g} - {MARGIN:g}"


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
    direct: bool = False  # about the in-distribution figure itself: no prerequisite


@dataclass(frozen=True)
class Finding:
    label: str
    claim: str
    report: str
    clauses: tuple[Clause, ...]
    mirrors: str = ""  # which report split our cells mirror, and why


def judge(clause: Clause, a: Stat | None, b: Stat | None, chance: float) -> tuple[str, str]:
    """(verdict, one-line reason) of one clause; chance in percent."""
    short = seed_shortfall(clause, a, b)
    if short:
        return "inconclusive", short
    hi, lo = a.mean + a.sd, a.mean - a.sd
    floor = chance + MARGIN
    name = clause.a.name()
    if clause.kind == "exact":
        if lo >= EXACT:
            return "reproduced", f"{name} exact in every seed"
        if hi < EXACT:
            return "not observed", f"{name} below {EXACT:g}%"
        return "inconclusive", f"{name}: seeds disagree ({a.seeds()})"
    if clause.kind == "chance":
        if hi <= floor:
            return "reproduced", f"{name} within {MARGIN:g} points of chance"
        if lo > floor:
            return "not observed", f"{name} above chance + {MARGIN:g}"
        return "inconclusive", f"{name}: seeds disagree ({a.seeds()})"
    if clause.kind == "below":
        if hi < clause.threshold:
            return "reproduced", f"{name} below {clause.threshold:g}%"
        if lo >= clause.threshold:
            return "not observed", f"{name} not below {clause.threshold:g}%"
        return "inconclusive", f"{name}: seeds disagree ({a.seeds()})"
    other = clause.b.name()
    if clause.kind == "above":
        if lo > b.mean + b.sd and a.mean >= floor:
            return "reproduced", f"{name} above {other}"
        if hi <= floor:
            return "not observed", f"{name} near chance"
        if hi <= b.mean + b.sd:
            return "not observed", f"{name} not above {other}"
        return "inconclusive", f"{name} vs {other}: seeds disagree ({a.seeds()} vs {b.seeds()})"
    if clause.kind == "close":
        if lo >= b.mean - MARGIN:
            return "reproduced", f"{name} within {MARGIN:g} points of {other}"
        if hi < b.mean - MARGIN:
            return "not observed", f"{name} more than {MARGIN:g} points below {other}"
        return "inconclusive", f"{name} vs {other}: seeds disagree ({a.seeds()} vs {b.seeds()})"
    raise ValueError(f"unknown clause kind {clause.kind!r}")


def seed_shortfall(clause: Clause, a: Stat | None, b: Stat | None) -> str | None:
    """Which of the clause's cells has fewer seeds than its grid expects (at least
    MIN_SEEDS), as "<cell>: k of n seeds", or None when every cell has them all."""
    for cell, stat in ((clause.a, a), (clause.b, b)):
        if cell is not None and (stat is None or stat.n < max(stat.n_expected, MIN_SEEDS)):
            have, want = (0, MIN_SEEDS) if stat is None else (stat.n, stat.n_expected)
            return f"{cell.name()}: {have} of {max(want, MIN_SEEDS)} seeds"
    return None


def seeds_meeting(clause: Clause, a: Stat | None, b: Stat | None, chance: float) -> str:
    """How many of A's seeds meet the clause on their own ("k/n"): exact >= 99, chance <= chance
    + 10, below < x, above > B's mean (and >= chance + 10), close >= B's mean - 10."""
    if a is None or not a.values or (clause.b is not None and b is None):
        return "-"
    tests = {
        "exact": lambda v: v >= EXACT,
        "chance": lambda v: v <= chance + MARGIN,
        "below": lambda v: v < (clause.threshold or 0.0),
        "above": lambda v: b is not None and v > b.mean and v >= chance + MARGIN,
        "close": lambda v: b is not None and v >= b.mean - MARGIN,
    }
    ok = sum(1 for v in a.values if tests[clause.kind](v))
    return f"{ok}/{len(a.values)}"


def prerequisite(clause: Clause, learned: dict[Cell, Stat | None]) -> str | None:
    """Why a clause is not testable (a cell that did not learn in distribution), or None."""
    if clause.direct:
        return None
    for cell in (clause.a, clause.b):
        if cell is None:
            continue
        stat = learned.get(cell)
        if stat is None:
            continue  # nothing ran: the seed count decides
        threshold, what = learned_threshold(cell.task, cell.column)
        if stat.mean < threshold:
            return (
                f"{cell.column} did not learn {cell.task} in distribution: validation "
                f"{stat.mean:.2f} at the selected checkpoint < {threshold:.2f} ({what})"
            )
    return None


def combine(verdicts: list[tuple[str, str]]) -> tuple[str, str]:
    """A finding's verdict from its clauses' (see the module's rule)."""
    for wanted in ("not observed", NOT_TESTABLE, "not run", "inconclusive"):
        hits = dict.fromkeys(reason for v, reason in verdicts if v == wanted)
        if hits:
            return wanted, "; ".join(hits)
    return "reproduced", "; ".join(dict.fromkeys(reason for _, reason in verdicts))


def _fmt(s: Stat | None) -> str:
    if s is None:
        return "not run"
    want = max(s.n_expected, MIN_SEEDS)
    n = f"n={s.n}" if s.n >= want else f"n={s.n}/{want}"
    return f"{s.mean:.2f} ± {s.sd:.2f} ({n})"


def _stat(hit: pd.DataFrame) -> Stat | None:
    if hit.empty or pd.isna(hit.iloc[0]["mean"]):
        return None
    r = hit.iloc[0]
    sd = 0.0 if pd.isna(r["sd"]) else float(r["sd"])
    values = tuple(float(v) for v in r["values"])
    return Stat(float(r["mean"]), sd, int(r["n"]), int(r["n_expected"]), values)


class _Cells:
    """Mean, SD and seed counts of cells, read from the tables the report prints."""

    def __init__(self, c: Collection, policy: str, metric: str):
        self.c = c
        self.lengths = length_table(c, policy=policy, metric=metric).data
        self.val = val_table(c, metric=metric).data
        runs = c.runs[c.runs["has_results"].astype(bool)] if len(c.runs) else c.runs
        chance = runs.groupby("task")["chance"].first()  # first non-null per task
        self.chance = {task: 100 * float(x) for task, x in chance.fillna(0.0).items()}
        # Validation accuracy at the checkpoint each run's test numbers come from (the
        # policy's own step: min_val_loss, the report's, unless --policy says otherwise).
        t = c.test[c.test["policy"] == policy][["run_id", "policy_step"]]
        steps = t.dropna().drop_duplicates("run_id").merge(c.used[["run_id"]], on="run_id")
        v = c.val[c.val["metric"] == metric].merge(steps, on="run_id")
        self.selected = v[v["step"] == v["policy_step"]]
        self.expected = c.expected_n()

    def __call__(self, cell: Cell) -> Stat | None:
        if cell.length is None:
            hit = self.val[(self.val["key"] == cell.task) & (self.val["column"] == cell.column)]
        else:
            row = f"{cell.task} / {cell.length}"
            hit = self.lengths[
                (self.lengths["row"] == row) & (self.lengths["column"] == cell.column)
            ]
        return _stat(hit)

    def learned(self, cell: Cell) -> Stat | None:
        """The cell's validation accuracy (%) at the selected checkpoint, over seeds."""
        s = self.selected
        values = 100 * s[(s["task"] == cell.task) & (s["label"] == cell.column)]["value"]
        if values.empty:
            return None
        sd = float(values.std()) if len(values) > 1 else 0.0
        n_expected = self.expected.get((cell.task, cell.column), len(values))
        return Stat(float(values.mean()), sd, len(values), n_expected, tuple(values))

    def in_grid(self, cell: Cell) -> bool:
        """Whether this budget ran or asks for the cell at all."""
        return (cell.task, cell.column) in self.expected or self.learned(cell) is not None


def _learned_seeds(stat: _Cells, cell: Cell) -> str | None:
    """ "<column> k/n": how many of a cell's seeds learned the task in distribution on their
    own (validation at the selected checkpoint >= the prerequisite's threshold)."""
    s = stat.learned(cell)
    if s is None or not s.values:
        return None
    threshold, _ = learned_threshold(cell.task, cell.column)
    return f"{cell.column} {sum(v >= threshold for v in s.values)}/{len(s.values)}"


def _held_cell_not_learned(clause: Clause, held: list[Cell], stat: _Cells) -> str | None:
    """Why a clause whose budget lacks one of its cells is not testable all the same: a cell
    the budget holds, with all its seeds, did not learn in distribution (running the missing
    cell would not change that), or None."""
    learned = {x: stat.learned(x) for x in held}
    if clause.direct or any(
        s is None or s.n < max(s.n_expected, MIN_SEEDS) for s in learned.values()
    ):
        return None
    return prerequisite(clause, learned)


def _judge_finding(f: Finding, stat: _Cells) -> tuple[str, str, str, str]:
    """(verdict, reason, ours, seeds meeting) of one finding on one budget's cells."""
    verdicts, meeting = [], []
    for clause in f.clauses:
        cells = [x for x in (clause.a, clause.b) if x is not None]
        missing = [x for x in cells if not stat.in_grid(x)]
        if missing:
            gap = f"{missing[0].name()} not in this budget's grid"
            why = _held_cell_not_learned(clause, [x for x in cells if x not in missing], stat)
            verdicts.append((NOT_TESTABLE, f"{why} ({gap})") if why else ("not run", gap))
            continue
        a, b = stat(clause.a), clause.b and stat(clause.b)
        chance = stat.chance.get(clause.a.task, 0.0)
        # The prerequisite waits for the grid's seeds: on part of them it would decide early.
        short = seed_shortfall(clause, a, b)
        why = None if short else prerequisite(clause, {x: stat.learned(x) for x in cells})
        verdicts.append((NOT_TESTABLE, why) if why else judge(clause, a, b, chance))
        what = f"{clause.kind} {clause.b.column}" if clause.b else clause.kind
        met = f"{clause.a.name()} {what}: {seeds_meeting(clause, a, b, chance)}"
        learned = [] if clause.direct else [_learned_seeds(stat, x) for x in cells]
        if any(learned):
            met += " (learned " + ", ".join(x for x in learned if x) + ")"
        meeting.append(met)
    verdict, reason = combine(verdicts)
    if len({v for v, _ in verdicts}) > 1:  # say what every clause found, the deciding ones first
        ranked = sorted(verdicts, key=lambda vr: vr[0] != verdict)
        reason = "; ".join(dict.fromkeys(f"{v}: {r}" for v, r in ranked))
    cells = dict.fromkeys(x for cl in f.clauses for x in (cl.a, cl.b) if x is not None)
    ours = "; ".join(f"{x.task} {x.name()}: {_fmt(stat(x))}" for x in cells if stat.in_grid(x))
    return verdict, reason, ours or "not run", "; ".join(meeting)


def verdict_table(
    c: Collection, findings: tuple[Finding, ...], *, policy: str = "min_val_loss", metric="acc"
) -> Table:
    """One row per finding: the claim, the report's numbers, which report split ours mirror, and
    per budget (scale preset) our numbers, the verdict, its reason and the seeds meeting each
    clause. ``data`` has one row per finding and budget."""
    budgets = [(p, sub, _Cells(sub, policy, metric)) for p, sub in by_preset(c)]
    rows, data, meanings = [], [], {}
    for f in findings:
        row = {"finding": f.label, "claim": f.claim, "report": f.report, "mirrors": f.mirrors}
        for preset, sub, stat in budgets:
            verdict, reason, ours, meeting = _judge_finding(f, stat)
            at, meaning = budget_label(preset, sub)
            meanings[at] = meaning
            row |= {
                f"ours, {at}": ours,
                f"verdict, {at}": verdict,
                f"why, {at}": reason,
                f"seeds meeting, {at}": meeting,
            }
            data.append(
                {
                    "finding": f.label,
                    "preset": preset,
                    "budget": at,
                    "verdict": verdict,
                    "reason": reason,
                    "seeds": meeting,
                }
            )
        rows.append(row)
    display = pd.DataFrame(rows).set_index("finding") if rows else pd.DataFrame()
    if not any(f.mirrors for f in findings) and len(display):
        display = display.drop(columns="mirrors")
    return Table(
        name="verdicts",
        title="Verdicts: the report's findings at laptop scale, one column per training budget",
        display=display,
        data=pd.DataFrame(data),
        index_header="finding",
        notes=[
            "rule (rlt/analysis/findings.py): a cell must first have learned the task in "
            "distribution (validation at the selected checkpoint >= the report's figure - 10), "
            "else its clause is not testable at this budget; exact = mean - SD >= 99; chance = "
            "mean + SD <= chance + 10; A above B = A's mean - SD > B's mean + SD and A's mean >= "
            f"chance + 10; close = A's mean - SD >= B's mean - 10; fewer seeds than the grid "
            f"expects (at least {MIN_SEEDS}) = inconclusive",
            f"test accuracy at the named length, checkpoint policy {policy}; 'val' = validation "
            "accuracy at the final step (in distribution); each budget judged on its own runs",
            "budgets: " + "; ".join(f"{k} = {v}" for k, v in meanings.items()),
            "ours = mean ± SD over n seeds; seeds meeting = how many of the cell's seeds meet "
            "each clause on their own (exact >= 99, chance <= chance + 10, above > B's mean), "
            "and in brackets how many of each cell's seeds learned the task in distribution on "
            "their own (the prerequisite's threshold)",
        ],
    )
