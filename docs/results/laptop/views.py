"""The laptop study's views (rlt/analysis/studies.py): the report's ten findings (and F3b) as
clauses about the laptop grids' cells (sweeps/laptop.yaml, laptop_long.yaml, laptop_seeds.yaml,
laptop_scout.yaml), judged by rlt/analysis/findings.py, and the recurrent baselines beside
RLT-1 ("beyond the report"). `python analysis/tables.py` prints both first whenever it reads
runs of these sweeps. Every number in a finding's ``report`` text is quoted from SPEC section 4
(checked by tests/analysis/test_analysis_findings.py); ``mirrors`` says which report split our
cells stand for and why.
"""

from __future__ import annotations

from rlt.analysis.beyond import beyond_table
from rlt.analysis.findings import Cell, Clause, Finding, verdict_table

# The sweeps whose runs these views judge (results.json run.sweep).
SWEEPS = ("laptop", "laptop_long", "laptop_scout")


def _above(task, a, b, length):
    return Clause("above", Cell(task, a, length), Cell(task, b, length))


def _f3_clauses(task):
    """F3 on a parity task: RLT-2 B=4 2+2 close to RLT-1 2+2, above RLT-0 1+1, at 64 bits."""
    return (
        Clause("close", Cell(task, "RLT-2 B=4 2+2", 64), Cell(task, "RLT-1 2+2", 64)),
        _above(task, "RLT-2 B=4 2+2", "RLT-0 1+1", 64),
    )


# The laptop presets' cells (sweeps/laptop.yaml, laptop_long.yaml) for the report's findings
# (SPEC section 4). Every number in `report` is quoted from SPEC section 4 (checked by a test).
_P, _W, _S, _A = "parity_3to16", "s5_swaps", "s5", "addition"
_P40 = "parity"  # the report's training lengths, 3-40 bits (F3 at 3-40)
_MF, _MB = "mod5_flat_3to15", "mod5_brackets_3to16"  # trained on short lengths (deviation)
# A finding of the report is judged on the report's models (the RLT family and the Transformer);
# the extra baselines (LSTM, DeltaNet) are compared in the "beyond the report" table.
_REPORT_MODELS = ("RLT-1 2+2", "Transformer 4")
_ADDITION_MODELS = ("RLT-1 2+2", "RLT-0 2+2", "Transformer 4")
FINDINGS: tuple[Finding, ...] = (
    Finding(
        "F1",
        "parity: RLT-1 exact at 256 bits, the Transformer at chance",
        "RLT-1 at 256: 5+3 and 7+1 100 ± 0 (4+4 66.76 ± 28.78, 6+2 84.05 ± 27.63); "
        "Transformer 8 50.07 ± 1.63",
        (
            Clause("exact", Cell(_P, "RLT-1 1+1", 256)),
            Clause("chance", Cell(_P, "Transformer 2", 256)),
        ),
        "RLT-1 1+1 (one decoder block, as the report's 7+1, exact at 256); Transformer 2 at "
        "the same depth",
    ),
    Finding(
        "F2",
        "parity: RLT-0 at chance (64 bits)",
        "RLT-0 4+4 50.23 ± 3.80 at 64",
        (Clause("chance", Cell(_P, "RLT-0 1+1", 64)),),
        "RLT-0 1+1 (the report: near chance at every split)",
    ),
    Finding(
        "F3",
        "parity at a depth-balanced split: RLT-2 B=4 close to RLT-1 and above RLT-0 at 64 bits",
        "4+4 at 64: RLT-2 B=4 98.99 ± 1.66, RLT-1 100 ± 0, RLT-0 50.23 ± 3.80",
        _f3_clauses(_P),
        "2+2 mirrors the report's 4+4 (half the blocks in the decoder); RLT-0 at 1+1, the only "
        "RLT-0 parity cell (the report's RLT-0 is near chance at every split). At 256 bits the "
        "report's RLT-2 4+4 (69.34 ± 24.17) is not below its RLT-1 (66.76 ± 28.78), so no clause",
    ),
    Finding(
        "F3 at 3-40",
        "F3 at the report's parity lengths: trained on 3-40 bits, RLT-2 B=4 close to RLT-1 and "
        "above RLT-0 at 64 bits",
        "4+4 at 64: RLT-2 B=4 98.99 ± 1.66, RLT-1 100 ± 0, RLT-0 50.23 ± 3.80",
        _f3_clauses(_P40),
        "F3's cells on the report's own training lengths (the parity task, final label, 3-40 "
        "bits; sweep=laptop_long_parity40): at 3-16, four chunks of four bits can be fitted "
        "without carrying anything across chunks, at 3-40 they cannot",
    ),
    Finding(
        "F3b",
        "parity: chunk-4 feedback with one decoder block near chance at 64 bits",
        "RLT-2 B=4 at 7+1 and 8+0 near chance on 64-bit parity",
        (Clause("chance", Cell(_P, "RLT-2 B=4 1+1", 64)),),
        "1+1 has one decoder block, as the report's 7+1",
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
        "2+2 mirrors 4+4; Transformer 4 at the same depth",
    ),
    Finding(
        "F5",
        "swaps-S5: RLT-2 B=4 between RLT-0 and RLT-1 at 48 operations",
        "4+4 at 48: RLT-2 68.29 ± 8.75, RLT-0 7.26 ± 3.17, RLT-1 100 ± 0",
        (
            _above(_W, "RLT-2 B=4 2+2", "RLT-0 2+2", 48),
            _above(_W, "RLT-1 2+2", "RLT-2 B=4 2+2", 48),
        ),
        "2+2 mirrors 4+4 for all three models",
    ),
    Finding(
        "F6",
        "swaps-S5: more decoder depth, longer extrapolation (256 operations; decoder depth 1 "
        "vs 3 at total depth 4)",
        "at 256: chance with one decoder block, 97% with four",
        (_above(_W, "RLT-1 1+3", "RLT-1 3+1", 256),),
        "3+1 has one decoder block (the report's 7+1); 1+3 the most decoder depth at 4 blocks",
    ),
    Finding(
        "F7",
        "flat mod-5: RLT well above the Transformer at length 63, with large seed spread",
        "6+2 93.36 ± 5.69 vs Transformer 8 33.20 ± 2.33 (5,000 steps)",
        (_above(_MF, "RLT-1 2+2", "Transformer 4", 63),),
        "2+2 (the best split of the laptop mod-5 study; the report's best is 6+2); trained on "
        "lengths 3-15 (deviation)",
    ),
    Finding(
        "F8",
        "bracketed mod-5: RLT above the Transformer at length 64",
        "5+3 67.97 ± 2.91 vs Transformer 8 46.71 ± 1.21 (5,000 steps)",
        (_above(_MB, "RLT-1 2+2", "Transformer 4", 64),),
        "2+2 (the laptop mod-5 study's best; the report quotes 5+3); trained on lengths 3-16 "
        "(deviation)",
    ),
    Finding(
        "F9",
        "full S5: every model near chance (32 operations, in distribution)",
        "validation 0.52-2.47 at every split and the Transformer",
        tuple(Clause("chance", Cell(_S, m, 32), direct=True) for m in _REPORT_MODELS),
        "2+2 mirrors 4+4; judged directly (a claim about the in-distribution figure); the "
        "report's models only (the LSTM and DeltaNet: the 'beyond the report' table)",
    ),
    Finding(
        "F10",
        "addition: every model exact in distribution, far from it at 32 digits",
        "validation 100 for every model; at 32 digits 4+4 15.30 ± 0.44, Transformer 8 16.84 ± 1.45",
        tuple(Clause("exact", Cell(_A, m), direct=True) for m in _ADDITION_MODELS)
        + tuple(Clause("below", Cell(_A, m, 32), threshold=50.0) for m in _ADDITION_MODELS),
        "2+2 mirrors 4+4; the in-distribution half judged directly; the report's models only "
        "(the LSTM and DeltaNet: the 'beyond the report' table)",
    ),
)
RLT1 = {
    _P: "RLT-1 1+1",
    _W: "RLT-1 2+2",
    _S: "RLT-1 2+2",
    _A: "RLT-1 2+2",
    _MF: "RLT-1 2+2",
    _MB: "RLT-1 2+2",
}
# the recurrent baselines beside RLT-1, two blocks each (DeltaProduct and PD-SSM: issue 57)
BASELINES = ("LSTM 2", "DeltaNet [-1,1] 2", "DeltaProduct [-1,1] 2", "PD-SSM 2")


def tables(c, *, policy: str, metric: str) -> dict:
    """The verdict table (each finding judged on the cells it names) and the baselines beside
    RLT-1, first in the tables CLI's report."""
    return {
        "verdicts": verdict_table(c, FINDINGS, policy=policy, metric=metric),
        "beyond": beyond_table(c, RLT1, BASELINES, policy=policy),
    }
