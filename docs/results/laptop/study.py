"""Build the study table of docs/results/laptop/README.md from the committed run files.

    python docs/results/laptop/study.py            # Markdown table on stdout, figure to study_curves.png

Each study configuration is a directory under study/ (one run per seed below it, as train.py
writes them). A run that was stopped by hand has no results.json; its validation curve comes
from csv/metrics.csv and its row says where it stopped.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STUDY = HERE / "study"

# name -> (what it changes relative to scale=small's RLT-1, train lengths)
# Early stopping (callbacks.early_stop, val acc >= 99%) ended a run after `patience`
# validations in a row; the first configurations used 2, the later ones 5 (the test accuracy of
# a run stopped right at the jump is lower than after 500 more steps), `a03` none.
CONFIGS = {
    "a03": ("RLT-1 2+2 w64, alpha 0.3, cosine over 4,000 steps, no early stop", "3-40"),
    "lstm2_r40": ("LSTM 2 w64 (control), cosine over 4,000 steps, patience 2", "3-40"),
    "w32_11_r16_a01": ("RLT-1 1+1 w32, alpha 0.1, 3,000 steps, patience 2", "3-16"),
    "w64_22_r16_a03": ("RLT-1 2+2 w64, alpha 0.3, 3,000 steps, patience 2", "3-16"),
    "w64_22_r16_const": ("RLT-1 2+2 w64, constant lr 3e-3, 3,000 steps, patience 5", "3-16"),
    "lstm2_r16": ("LSTM 2 w64 (control), 3,000 steps, patience 5", "3-16"),
    "w64_11_r16_a01": ("RLT-1 1+1 w64, alpha 0.1, 3,000 steps, patience 5", "3-16"),
    "w64_11_r24": ("RLT-1 1+1 w64, alpha 0.1, 4,000 steps, patience 5", "3-24"),
    "w64_11_r32": ("RLT-1 1+1 w64, alpha 0.1, 4,000 steps, patience 5", "3-32"),
    "w64_11_r40": ("RLT-1 1+1 w64, alpha 0.1, 4,000 steps, patience 5", "3-40"),
}


def val_curve(run: Path) -> list[tuple[int, float]]:
    results = run / "results.json"
    if results.exists():
        return [(r["step"], r["acc"]) for r in json.loads(results.read_text())["val_curve"]]
    rows = list(csv.DictReader(open(run / "csv" / "metrics.csv")))
    return [(int(r["step"]), float(r["val/acc"])) for r in rows if r.get("val/acc")]


def run_row(run: Path) -> dict:
    curve = val_curve(run)
    status = json.loads((run / "status.json").read_text())
    results = run / "results.json"
    res = json.loads(results.read_text()) if results.exists() else None
    first = next((s for s, a in curve if a >= 0.99), None)
    acc256 = None
    sec = None
    if res:
        acc256 = next(
            (r["value"] for r in res["test"] if r["metric"] == "acc" and r["length"] == 256), None
        )
        sec = res["timing"]["sec_per_step"]
    return {
        "seed": int(run.name.removeprefix("seed")),
        "last_step": curve[-1][0] if curve else 0,
        "final_val": curve[-1][1] if curve else None,
        "first99": first,
        "acc256": acc256,
        "sec_per_step": sec,
        "stopped_by_hand": res is None,
        "state": status.get("state"),
        "curve": curve,
    }


def rows() -> list[tuple[str, str, str, list[dict]]]:
    out = []
    for name, (what, lengths) in CONFIGS.items():
        runs = sorted(p.parent.parent for p in (STUDY / name).rglob("csv/metrics.csv"))
        if runs:
            out.append((name, what, lengths, [run_row(r) for r in runs]))
    return out


def fmt(x, pattern="{:.2f}"):
    return "-" if x is None else pattern.format(x)


def markdown(table) -> str:
    lines = [
        "| config | train lengths | seed | s/step | steps run | final val acc % | first step val acc >= 99% | test acc % at 256 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, what, lengths, runs in table:
        for r in runs:
            steps = f"{r['last_step']}" + (" (stopped by hand)" if r["stopped_by_hand"] else "")
            lines.append(
                f"| `{name}`: {what} | {lengths} | {r['seed']} | {fmt(r['sec_per_step'])} | "
                f"{steps} | {fmt(r['final_val'] and 100 * r['final_val'])} | "
                f"{fmt(r['first99'], '{}')} | {fmt(r['acc256'] and 100 * r['acc256'])} |"
            )
    return "\n".join(lines)


def figure(table, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(table)
    fig, axes = plt.subplots((n + 2) // 3, 3, figsize=(13, 3 * ((n + 2) // 3)), squeeze=False)
    for ax, (name, _what, lengths, runs) in zip(axes.flat, table):
        for r in runs:
            steps, accs = zip(*r["curve"]) if r["curve"] else ((), ())
            ax.plot(steps, [100 * a for a in accs], label=f"seed {r['seed']}")
        ax.axhline(99, color="grey", lw=0.5, ls=":")
        ax.set_title(f"{name} ({lengths})", fontsize=9)
        ax.set_ylim(30, 102)
        ax.set_xlabel("step")
        ax.set_ylabel("val acc %")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def diagnostics_figure(names: list[str], path: Path) -> None:
    """Val acc, the state's share of u_t and the gradient norm reaching W_s and s*, per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(names), 3, figsize=(13, 3 * len(names)), squeeze=False)
    for row, name in zip(axes, names):
        for run in sorted(p.parent for p in (STUDY / name).rglob("diagnostics.json")):
            diag = json.loads((run / "diagnostics.json").read_text())
            curve = val_curve(run)
            label = run.name
            row[0].plot(*zip(*[(s, 100 * a) for s, a in curve]), label=label)
            row[1].plot([d["step"] for d in diag], [d["state_share"] for d in diag], label=label)
            (line,) = row[2].semilogy(
                [d["step"] for d in diag], [d["grad_W_s"] for d in diag], label=label
            )
            row[2].semilogy(
                [d["step"] for d in diag],
                [max(d["grad_s_star"], 1e-8) for d in diag],
                ls=":",
                color=line.get_color(),
            )
        row[0].set_ylabel(f"{name}\nval acc %")
        row[1].set_ylabel("|alpha g W_s r| / |e|")
        row[2].set_ylabel("grad norm: W_s (solid), s* (dotted)")
        for ax in row:
            ax.set_xlabel("step")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    table = rows()
    print(markdown(table))
    if "--no-figure" not in sys.argv:
        figure(table, HERE / "study_curves.png")
        diagnostics_figure(["w64_11_r16_a01", "w64_22_r16_a03"], HERE / "study_diagnostics.png")
