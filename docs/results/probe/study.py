"""The state-probe study (issue 30): which runs it reads, and the tables of its README.

    python docs/results/probe/study.py gather ROOT [ROOT ...]   # copy the result files of the
        # study's runs (those whose results.json carries a probe) from training roots into
        # runs/ here: runs/fixed (the laptop protocol, 3,000 fixed steps) and runs/early_stop
        # (the same cell stopped early, for the early-checkpoint question); no checkpoints
    python docs/results/probe/study.py                          # print the study's tables

The per-bucket probe table itself is `python analysis/tables.py docs/results/probe/runs/fixed`
("State probe"); the figure is `python analysis/figures.py docs/results/probe/runs/fixed`.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
FILES = ("results.json", "probe.json", "config.yaml", "status.json", "csv/metrics.csv")
# The study's cells (task/model/arch), as the issue lists them.
CELLS = (
    "parity_3to16/rlt1/1+1",
    "parity_3to16/rlt0/1+1",
    "parity_3to16/rlt2_b4/1+1",
    "parity_3to16/transformer/L2",
    "parity_3to16/lstm/L2",
    "parity_3to16/deltanet/L2",
    "s5_swaps/rlt1/1+3",
    "s5_swaps/rlt1/2+2",
    "s5_swaps/rlt1/3+1",
    "s5_swaps/transformer/L4",
    "s5_swaps/lstm/L2",
    "s5_swaps/deltanet/L2",
)
THRESHOLD = 99.0  # "encodes the running state": probe accuracy at least this in a bucket


def gather(roots: list[Path]) -> None:
    """Copy the study's runs that carry a probe; the first root holding a run wins."""
    for kind, sweep in (("fixed", "laptop"), ("early_stop", "laptop_early_stop")):
        for cell in CELLS:
            for root in roots:
                for run in sorted((root / sweep / cell).glob("seed*")):
                    out = RUNS / kind / cell / run.name
                    res = run / "results.json"
                    if out.exists() or not res.is_file() or _probe(run) is None:
                        continue
                    for name in FILES:
                        if (run / name).is_file():
                            (out / name).parent.mkdir(parents=True, exist_ok=True)
                            shutil.copy2(run / name, out / name)
                    print(f"{kind}: {cell}/{run.name} from {root}")


def _probe(run: Path) -> dict | None:
    """The run's probe: in results.json, or in the probe.json ``python -m rlt.probe`` wrote
    beside a run trained before the probe existed."""
    res = json.loads((run / "results.json").read_text())
    if "probe" in res:
        return res["probe"]
    return json.loads((run / "probe.json").read_text()) if (run / "probe.json").is_file() else None


def _runs(kind: str) -> list[tuple[str, dict]]:
    out = []
    for path in sorted((RUNS / kind).rglob("results.json")):
        res = json.loads(path.read_text())
        res["probe"] = _probe(path.parent)
        out.append((str(path.parent.relative_to(RUNS / kind)), res))
    return out


def _acc_at(res: dict, length: int) -> float | None:
    hits = [r["value"] for r in res["test"] if r["metric"] == "acc" and r["length"] == length]
    return 100 * hits[0] if hits else None


def _encoded_up_to(target: dict) -> str:
    """The last position bucket up to which the probe reads the state at >= THRESHOLD in every
    bucket from the start ("-" when not even the first)."""
    last = "-"
    for bucket, acc in target["by_bucket"].items():
        if acc < THRESHOLD:
            break
        last = bucket.split("-")[1]
    return last


def per_run_table(kind: str) -> str:
    lines = [
        "| cell | seed | val % (selected) | task acc % at the longest length | probe target | "
        f"probe acc % per position bucket | state read >= {THRESHOLD:g}% up to position | "
        "RMS norm, first -> last bucket |",
        "|---|---:|---:|---:|---|---|---:|---|",
    ]
    for cell, res in _runs(kind):
        run_cell, seed = cell.rsplit("/", 1)
        longest = max(res["test_lengths"])
        acc = _acc_at(res, longest)
        rms = list(res["probe"]["rms"]["by_bucket"].values())
        for name, target in res["probe"]["targets"].items():
            buckets = ", ".join(f"{b}: {v:.1f}" for b, v in target["by_bucket"].items())
            lines.append(
                f"| {run_cell} | {seed[4:]} | {100 * res['selection']['val']['acc']:.2f} | "
                f"{acc:.2f} (@{longest}) | {name} | {buckets} | {_encoded_up_to(target)} | "
                f"{rms[0]:.2f} -> {rms[-1]:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "gather":
        if len(argv) < 2:
            print("usage: study.py gather ROOT [ROOT ...]", file=sys.stderr)
            return 2
        gather([Path(a) for a in argv[1:]])
        return 0
    for kind in ("fixed", "early_stop"):
        if (RUNS / kind).is_dir():
            print(f"### Per run: {kind.replace('_', ' ')}\n")
            print(per_run_table(kind))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
