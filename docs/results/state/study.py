"""The state-intervention study (issue 39): which part of the state carries the computation.

    python docs/results/state/study.py run RUN_DIR [RUN_DIR ...]   # score each run's kept
        # checkpoint with every intervention of INTERVENTIONS (eval.py, one thread), then copy
        # the small result files (state_*.json, results.json, config.yaml, status.json) into
        # runs/ here
    python docs/results/state/study.py                             # print the study's tables
    python docs/results/state/study.py figures                     # draw the page's figures
    python docs/results/state/study.py page                        # rewrite the page's tables

Every number and figure of the page is read from runs/ and the stream benchmark's JSON files
here by the last two commands; checkpoints are not committed, so the first needs the training
roots.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
RUNS = HERE / "runs"
FILES = ("results.json", "config.yaml", "status.json")
# (state.drop, state.at) pairs; the parts a family lacks are skipped for it.
INTERVENTIONS = (
    ("feedback", "8"),
    ("window", "8"),
    ("memory", "8"),
    ("all", "8"),
    ("feedback", "64"),
    ("memory", "64"),
    ("feedback", "every:1"),
    ("feedback", "every:4"),
    ("feedback", "every:16"),
    ("feedback", "every:64"),
    ("none", "none"),  # the streamed control, and the by-position baseline
)
BOUNDARY = (("feedback", "boundary"), ("window", "boundary"), ("memory", "boundary"))
BOUNDARY += (("all", "boundary"), ("none", "none"))  # tasks with a prompt (addition)
PARTS = {"rlt": ("feedback", "window", "memory")}  # other families: memory only


def _family(run: Path) -> str:
    return json.loads((run / "results.json").read_text())["run"]["family"]


def _task(run: Path) -> str:
    return json.loads((run / "results.json").read_text())["run"]["task"]


def score(runs: list[Path]) -> None:
    for run in runs:
        have = PARTS.get(_family(run), ("memory",))
        plan = BOUNDARY if _task(run) == "addition" else INTERVENTIONS
        cell = Path(*run.resolve().parts[-5:])  # sweep/task/model/arch/seed
        out = RUNS / cell
        out.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copy2(run / name, out / name)
        for drop, at in plan:
            if drop not in ("all", "none") and drop not in have:
                continue
            argv = [sys.executable, "eval.py", str(run), f"state.drop={drop}"]
            argv += [f"state.at={at}"] if drop != "none" else []
            proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{cell} {drop}@{at}: {proc.stderr.strip()}", file=sys.stderr)
                continue
            for f in run.glob("state_*.json"):
                shutil.copy2(f, out / f.name)
            print(f"{cell}: drop {drop} at {at}")


def _acc(rows: list[dict], metric: str = "acc") -> dict[int, float]:
    return {r["length"]: 100 * r["value"] for r in rows if r["metric"] == metric}


def _label(block: dict) -> str:
    """``feedback @ 8``, ``all @ boundary``, ``none (streamed)``."""
    drop, at = block["intervention"]["drop"], block["intervention"]["at"]
    if not drop:
        return "none (streamed)"
    return f"{drop[0] if len(drop) == 1 else 'all'} @ {at}"


def _blocks(run: Path) -> list[tuple[str, dict]]:
    return [
        (_label(b), b)
        for b in (json.loads(p.read_text()) for p in sorted(run.glob("state_*.json")))
    ]


def _cells() -> dict[str, list[Path]]:
    """sweep/task/model/arch -> its seeds' run directories under runs/."""
    cells: dict[str, list[Path]] = {}
    for res in sorted(RUNS.rglob("results.json")):
        run = res.parent
        cells.setdefault("/".join(run.relative_to(RUNS).parts[:4]), []).append(run)
    return cells


def table() -> str:
    """One row per cell (task/model/arch over its seeds) and intervention: accuracy (%) at
    each test length, mean over seeds, the seeds' values at the longest length. Addition adds
    the greedy exact-answer rate."""
    lines = []
    for cell, runs in _cells().items():
        metrics = ("acc", "exact") if cell.split("/")[1] == "addition" else ("acc",)
        for metric in metrics:
            groups: dict[str, dict[int, list[float]]] = {}
            for run in runs:
                results = json.loads((run / "results.json").read_text())
                for name, rows in [("none", results["test"])] + [
                    (n, b["rows"]) for n, b in _blocks(run)
                ]:
                    for length, value in _acc(rows, metric).items():
                        groups.setdefault(name, {}).setdefault(length, []).append(value)
            if not groups:
                continue
            ls = sorted({n for by_len in groups.values() for n in by_len})
            what = {"acc": "test accuracy", "exact": "greedy exact answers"}[metric]
            if metric == "acc" and len(metrics) > 1:
                what = "teacher-forced answer-token accuracy"
            lines += [
                f"\n**{cell}** ({what} %, mean over seeds; per seed at {ls[-1]})\n",
                "| state dropped | " + " | ".join(str(n) for n in ls) + f" | seeds at {ls[-1]} |",
                "|---|" + "---:|" * (len(ls) + 1),
            ]
            for name in sorted(groups, key=lambda n: (n != "none", n)):
                by_len = groups[name]
                means = " | ".join(
                    f"{statistics.mean(by_len[n]):.2f}" if n in by_len else "-" for n in ls
                )
                seeds = ", ".join(f"{v:.2f}" for v in by_len.get(ls[-1], []))
                lines.append(f"| {name} | {means} | {seeds} |")
    return "\n".join(lines) + "\n"


# Accuracy by position after a drop (tasks that label every position: S5) ---------------------
AFTER = (-1, 0, 1, 3, 7, 15, 31, 63)  # positions relative to the drop at P


def _by_position(run: Path, length: int) -> dict[str, dict[int, float]]:
    """Intervention label -> {position: accuracy %} at ``length``, for files that hold it."""
    out = {}
    for name, block in _blocks(run):
        for entry in block.get("by_position") or []:
            if entry["length"] == length:
                out[name] = {p: 100 * a for p, a in zip(entry["position"], entry["acc"])}
    return out


def position_table(length: int = 128) -> str:
    """Per cell whose state files hold positions: accuracy (%) at positions P-1 ... P+63 around
    a one-time drop at P (8, 64), beside the streamed control at the same positions."""
    lines = []
    for cell, runs in _cells().items():
        per_seed = [_by_position(run, length) for run in runs]
        names = sorted({n for seed in per_seed for n in seed if "@" in n and "every" not in n})
        names = [n for n in names if n.split(" @ ")[1].isdigit()]
        if not names or not all("none (streamed)" in seed for seed in per_seed):
            continue
        lines += [
            f"\n**{cell}** (accuracy % at each position of the length-{length} test set, mean "
            f"over {len(runs)} seeds; a drop before input position P)\n",
            "| state dropped | " + " | ".join(f"P{d:+d}" if d else "P" for d in AFTER) + " |",
            "|---|" + "---:|" * len(AFTER),
        ]
        for name in names:
            at = int(name.split(" @ ")[1])
            for label in (name, "none (streamed)"):
                cells = []
                for d in AFTER:
                    vals = [seed[label].get(at + d) for seed in per_seed if label in seed]
                    vals = [v for v in vals if v is not None]
                    cells.append(f"{statistics.mean(vals):.1f}" if vals else "-")
                shown = label if label == name else f"(none, same positions as {name})"
                lines.append(f"| {shown} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figures(out_dir: Path = HERE, dpi: int = 110) -> list[Path]:
    """accuracy_after_drop.png (per cell: accuracy against position, each one-time drop and the
    control) and stream_cost.png (decode latency and state bytes against position per family,
    from the stream benchmark's JSON files here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    cells = {c: r for c, r in _cells().items() if _drawable(c, r)}
    if cells:
        fig, axes = plt.subplots(
            len(cells), 1, figsize=(8, 2.6 * len(cells)), squeeze=False, sharex=False
        )
        for ax, (cell, runs) in zip(axes[:, 0], cells.items()):
            _draw_cell(ax, cell, runs)
        fig.tight_layout()
        written.append(out_dir / "accuracy_after_drop.png")
        fig.savefig(written[-1], dpi=dpi)
        plt.close(fig)
    files = sorted(HERE.glob("stream_*.json"))
    if files:
        fig, axes = plt.subplots(len(files), 2, figsize=(11, 3.2 * len(files)), squeeze=False)
        for (lat, mem), f in zip(axes, files):
            bench = json.loads(f.read_text())
            c = bench["config"]
            for fam, row in bench["stream"]["rows"].items():
                pos = sorted(int(k) for k in row["decode_s"])
                kb = [row["state_bytes_per_seq"][str(k)] / 1024 for k in pos]
                (line,) = lat.plot(pos, [1e3 * row["decode_s"][str(k)] for k in pos], marker="o")
                line.set_label(fam)
                mem.plot(pos, kb, marker="o", color=line.get_color(), label=f"{fam} (all)")
                bounded = [row["recurrent_state_bytes_per_seq"][str(k)] / 1024 for k in pos]
                if bounded != kb and any(bounded):  # the bounded part of a state that grows
                    mem.plot(
                        pos, bounded, ls="--", color=line.get_color(), label=f"{fam} (bounded)"
                    )
            # what a linear growth looks like, through the first Transformer point
            first = bench["stream"]["rows"].get("transformer")
            if first:
                k0 = min(int(k) for k in first["state_bytes_per_seq"])
                b0 = first["state_bytes_per_seq"][str(k0)] / 1024
                ends = [k0, max(int(k) for k in first["state_bytes_per_seq"])]
                mem.plot(
                    ends, [b0, b0 * ends[1] / k0], color="black", lw=0.6, ls=":", label="linear"
                )
            title = f"{c['preset']} (d={c['d_model']}, {c['split']}), batch {c['stream_batch']}"
            lat.set(xscale="log", yscale="log", xlabel="position (tokens so far)")
            lat.set(ylabel="decode latency per token (ms)", title=title)
            mem.set(xscale="log", yscale="log", xlabel="position (tokens so far)")
            mem.set(ylabel="state per sequence (KB)", title=title)
            _plain_ticks(lat)
            _plain_ticks(mem)
            lat.legend(fontsize=7)
            mem.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        written.append(out_dir / "stream_cost.png")
        fig.savefig(written[-1], dpi=dpi)
        plt.close(fig)
    return written


FIG_LENGTH = {"s5_swaps": 128}  # the by-position view's length; other tasks: per length


def _plain_ticks(ax) -> None:
    """Plain numbers on log axes (matplotlib's 10^x labels are mathtext: slow and busy)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "log":
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())


def _drawable(cell: str, runs: list[Path]) -> bool:
    return any(_blocks(run) for run in runs)


def _draw_cell(ax, cell: str, runs: list[Path]) -> None:
    task = cell.split("/")[1]
    one_time = ("feedback @ 8", "window @ 8", "memory @ 8", "all @ 8", "feedback @ 64")
    one_time += ("memory @ 64",)
    boundary = ("feedback @ boundary", "window @ boundary", "memory @ boundary", "all @ boundary")
    if task == "addition":  # a prompt: the drops are at its end
        one_time = boundary
    if task in FIG_LENGTH:  # every position labelled: accuracy along one test length
        length = FIG_LENGTH[task]
        per_seed = [_by_position(run, length) for run in runs]
        for name in ("none (streamed)", *one_time):
            got = [seed[name] for seed in per_seed if name in seed]
            if not got:
                continue
            pos = sorted(got[0])
            ax.plot(pos, [statistics.mean(g[p] for g in got) for p in pos], label=name, lw=1)
        ax.set(xlabel=f"input position (test length {length})", ylabel="accuracy %")
    else:  # one label per sequence: accuracy at each test length
        groups: dict[str, dict[int, list[float]]] = {}
        for run in runs:
            results = json.loads((run / "results.json").read_text())
            for name, rows in [("none", results["test"])] + [
                (n, b["rows"]) for n, b in _blocks(run)
            ]:
                for length, value in _acc(rows).items():
                    groups.setdefault(name, {}).setdefault(length, []).append(value)
        for name in ("none", *one_time):
            if name in groups:
                ls = sorted(groups[name])
                ax.plot(ls, [statistics.mean(groups[name][n]) for n in ls], marker=".", label=name)
        xlabel = "sequence length (label at the last position)"
        if task == "addition":
            xlabel = "operand digits (teacher-forced answer-token accuracy)"
        ax.set(xscale="log", xlabel=xlabel)
        ax.set(ylabel="accuracy %")
    ax.set_ylim(0, 102)
    where = "at the prompt/response boundary" if task == "addition" else "before position 8 or 64"
    if task != "addition":
        for p in (8, 64):
            ax.axvline(p, color="grey", lw=0.6, ls=":")
    _plain_ticks(ax)
    ax.set_title(f"{cell} ({len(runs)} seeds): drop {where}", fontsize=9)
    ax.legend(fontsize=6, ncol=2)


TABLE = re.compile(r"^(\*\*laptop[^\n]*\*\*[^\n]*)\n\n((?:\|[^\n]*\n?)+)", re.M)


def tables(text: str) -> dict[str, str]:
    """``**sweep/task/model/arch** (...)`` header line -> the table under it, verbatim."""
    return {m.group(1): m.group(2).rstrip("\n") for m in TABLE.finditer(text)}


def rewrite_page(page: Path = HERE / "README.md") -> list[str]:
    """Replace every table of the page by what the committed runs give now (matched by its
    header line); the prose around them is left as it is. Returns the headers it changed; a
    header study.py no longer prints is named on stderr and left alone."""
    printed = tables(table() + position_table())
    text, changed = page.read_text(), []
    for header, shown in tables(text).items():
        if header not in printed:
            print(f"{header}: study.py prints no such table now; left as it is", file=sys.stderr)
        elif printed[header] != shown:
            text = text.replace(f"{header}\n\n{shown}", f"{header}\n\n{printed[header]}", 1)
            changed.append(header)
    page.write_text(text)
    return changed


def main(argv: list[str]) -> int:
    if argv and argv[0] == "run":
        if len(argv) < 2:
            print("usage: study.py run RUN_DIR [RUN_DIR ...]", file=sys.stderr)
            return 2
        score([Path(a) for a in argv[1:]])
        return 0
    if argv and argv[0] == "figures":
        for path in figures():
            print(f"wrote {path.relative_to(REPO)}")
        return 0
    if argv and argv[0] == "page":
        for header in rewrite_page():
            print(f"updated {header}")
        return 0
    print(table())
    print(position_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
