"""summary.json of a GPU check (scripts/gpu_check.sh): the tests' counts, the bench's s/step,
ratios and peak memory, the two runs' validation accuracy and s/step, and the wall time of
``sweep=main`` on one such device estimated from the runs' s/step.

    python scripts/gpu_summary.py OUT --mode cuda|cpu --elapsed SECONDS
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def tests_summary(path: Path) -> dict[str, Any]:
    """Counts and the failing tests' names from pytest's JUnit XML."""
    if not path.exists():
        return {"error": "no pytest.xml (the tests did not run)"}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    failed = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return {
        "tests": int(suite.get("tests", 0)),
        "failures": int(suite.get("failures", 0)),
        "errors": int(suite.get("errors", 0)),
        "skipped": int(suite.get("skipped", 0)),
        "failed": failed,
    }


def bench_summary(path: Path) -> dict[str, Any]:
    """Median s/step and peak memory per variant, and the ratios, of one bench JSON."""
    if not path.exists():
        return {"error": f"no {path.name} (the bench failed or timed out; see gpu_check.log)"}
    data = json.loads(path.read_text())
    if "skipped" in data:
        return data
    rows = data["train"]["rows"]
    return {
        "sec_per_step": {name: row["wall_s"]["median"] for name, row in rows.items()},
        "peak_mib": {
            name: None if row.get("peak_bytes") is None else row["peak_bytes"] / 2**20
            for name, row in rows.items()
        },
        "ratios": data.get("ratios"),
        "compile_s": {name: row.get("compile_s") for name, row in rows.items()},
        "device": data["machine"].get("device"),
        "torch": data["machine"].get("torch"),
    }


def stack_summary(path: Path) -> dict[str, Any]:
    """Per variant: one seed's s/step and K seeds' stacked step (and the floor, one step at K
    times the batch) against K single steps, from bench_stack.json."""
    if not path.exists():
        return {"error": f"no {path.name} (the bench failed or timed out; see gpu_check.log)"}
    data = json.loads(path.read_text())["stack"]
    keys = ("single_s", "stack_vs_k_singles", "batch_vs_k_singles", "why_not")
    return {
        "k": data["k"],
        "rows": {n: {k: r.get(k) for k in keys} for n, r in data["rows"].items()},
    }


def run_summary(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"error": f"no {path.name} (the run failed or timed out; see gpu_check.log)"}
    results = json.loads(path.read_text())
    last = results["val_curve"][-1]
    return {
        "label": results["run"]["label"],
        "arch": results["run"].get("split") or f"L{results['run']['n_layers']}",
        "step": last["step"],
        "val_acc_pct": 100 * last["acc"],
        "sec_per_step": results["timing"]["sec_per_step"],
        "train_seconds": results["timing"]["train_seconds"],
    }


def main_sweep_estimate(sec_per_step: dict[str, float]) -> dict[str, Any]:
    """Hours of sweep=main's distinct runs at the measured s/step: RLT cells at RLT-1 6+2's
    (an upper bound for RLT-0 and RLT-2, which cost less), Transformer cells at Transformer
    8's; validation and test evaluation not included."""
    from hydra import compose, initialize_config_dir

    sys.path.insert(0, str(REPO))
    from rlt.training.hydra_support import configs_by_cell

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["sweep=main"], return_hydra_config=True)
        cfg.hydra.overrides.task = ["sweep=main"]
        cells = {
            cell: (c.model.family, int(c.scale.max_steps))
            for cell, c in configs_by_cell(cfg).items()
        }
    seconds = 0.0
    for family, steps in cells.values():
        seconds += steps * sec_per_step["rlt1" if family == "rlt" else "transformer"]
    return {
        "distinct_runs": len(cells),
        "hours": seconds / 3600,
        "basis": "sum over sweep=main's distinct runs of max_steps x measured s/step (RLT cells "
        "at RLT-1 6+2's, an upper bound; Transformer cells at Transformer 8's); evaluation "
        "excluded; one run at a time on one device",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--mode", choices=["cuda", "cpu"], required=True)
    p.add_argument("--elapsed", type=float)
    a = p.parse_args(argv)
    summary: dict[str, Any] = {"mode": a.mode, "elapsed_s": a.elapsed}
    summary["tests"] = tests_summary(a.out / "pytest.xml")
    for name in ("fp32", "bf16", "graph", "compile", "native"):
        summary[f"bench_{name}"] = bench_summary(a.out / f"bench_{name}.json")
    summary["bench_stack"] = stack_summary(a.out / "bench_stack.json")
    runs = {name: run_summary(a.out / f"run_{name}.json") for name in ("rlt1", "transformer")}
    summary["runs"] = runs
    summary["report"] = {"parity_val_step500": {"rlt1_6+2": 99.44, "transformer_8": 48.48}}
    measured = {k: v["sec_per_step"] for k, v in runs.items() if "sec_per_step" in v}
    if len(measured) == 2:
        try:
            summary["sweep_main_estimate"] = main_sweep_estimate(measured)
        except Exception as e:  # noqa: BLE001 - the summary is still written
            summary["sweep_main_estimate"] = {"error": f"{type(e).__name__}: {e}"}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
