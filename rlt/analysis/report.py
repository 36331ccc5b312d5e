"""All tables of a set of sweeps as one Markdown report, plus CSV/LaTeX files on disk."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlt.analysis import render, studies
from rlt.analysis.collect import Collection, collect
from rlt.analysis.reference import compare_table, load_reference
from rlt.analysis.run_tables import cost_table, incomplete_table, params_table
from rlt.analysis.schedule_view import feedback_split, has_schedules, schedule_table
from rlt.analysis.table_core import Lengths, Table
from rlt.analysis.tables import (
    feedback_table,
    generalization_table,
    length_table,
    policy_table,
    probe_table,
    scaled_accuracy_table,
    val_table,
)


@dataclass
class ReportOptions:
    """What the tables CLI lets a user choose; defaults reproduce the report's tables."""

    step: int | None = None  # Table 1 step; None = each run's final validation step
    metric: str = "acc"
    policy: str = "min_val_loss"
    lengths: Lengths = None  # Table 2 length(s); None = longest tested per task
    split: str | None = None  # feedback table split; None = 4+4, else the best-covered split
    fb_lengths: Lengths = None
    compare_report: bool = False
    reference: str | Path | None = None
    per_seed: bool = True
    schedule_view: bool = False  # schedule table even without feedback-schedule runs


def protocol_notes(c: Collection) -> list[str]:
    """Deviations from the report's protocol that the runs carry, named under every table:
    early stopping (a data-dependent step count) and each task's training lengths."""
    used = c.runs[c.runs["used"].astype(bool)] if len(c.runs) else c.runs
    notes = []
    if "stopped_early" in used and used["stopped_early"].notna().any():
        n = int(used["stopped_early"].notna().sum())
        notes.append(
            f"{n} of {len(used)} runs stopped early on validation (callbacks.early_stop or "
            "a callback in callbacks.extra), not at a fixed step count as in the report"
        )
    for task, runs in used.groupby("task"):
        lo, hi = runs["train_len_min"].min(), runs["train_len_max"].max()
        if lo == lo and hi == hi:  # not NaN
            span = f"length {int(lo)}" if lo == hi else f"lengths {int(lo)}-{int(hi)}"
            notes.append(f"{task}: trained on {span}")
    return notes


def build_tables(c: Collection, opts: ReportOptions | None = None) -> dict[str, Table]:
    """Every table, keyed by role: table1, table2, feedback (when RLT-0 or RLT-2 runs exist,
    or a split is given), lengths, policies, params, cost, schedule (when a run trained with a
    feedback schedule, or with schedule_view), compare (with compare_report), incomplete."""
    o = opts or ReportOptions()
    c.check_metric(o.metric)  # MixedDefinitions: never one cell from two definitions
    tables = studies.tables(c, policy=o.policy, metric=o.metric)  # a study's own views first
    tables |= {
        "table1": val_table(c, step=o.step, metric=o.metric),
        "table2": generalization_table(c, policy=o.policy, lengths=o.lengths, metric=o.metric),
    }
    # Without RLT-0 or RLT-2 runs the feedback table would only repeat Table 2.
    has_feedback = any(k.variant in ("RLT-0", "RLT-2") for k in c.models.values())
    split = feedback_split(c, o.split)
    if split and (has_feedback or o.split):
        tables["feedback"] = feedback_table(
            c, split=split, policy=o.policy, lengths=o.fb_lengths, metric=o.metric
        )
    tables["lengths"] = length_table(c, policy=o.policy, metric=o.metric)
    tables["scaled"] = scaled_accuracy_table(c, policy=o.policy, metric=o.metric)
    tables["policies"] = policy_table(c, lengths=o.lengths, metric=o.metric)
    if not c.probe.empty:
        tables["probe"] = probe_table(c, metric=o.metric)
    tables["params"] = params_table(c)
    tables["cost"] = cost_table(c)
    if o.schedule_view or has_schedules(c):
        # Schedules pick their own split; --split only steers a view without schedules.
        tables["schedule"] = schedule_table(
            c,
            split=None if has_schedules(c) else o.split,
            policy=o.policy,
            metric=o.metric,
            lengths=o.lengths,
        )
    if o.compare_report:
        tables["compare"] = compare_table(c, load_reference(o.reference), metric=o.metric)
    notes = protocol_notes(c)
    for table in tables.values():
        table.notes.extend(notes)
    tables["incomplete"] = incomplete_table(c)
    return tables


def _header(c: Collection) -> list[str]:
    used = c.used
    states = Counter(c.incomplete["state"])
    views = int(used["schedule_steps"].notna().sum())  # a run again at a shorter budget
    also = f" (and {views} shorter budget(s) of them: callbacks.budgets)" if views else ""
    lines = [
        "Sweeps: " + ", ".join(f"`{d}`" for d in c.sweep_dirs),
        "",
        f"{len(used) - views} run(s) with results{also} over {used['task'].nunique()} task(s), "
        f"{used['label'].nunique()} model(s), seeds "
        + ", ".join(str(s) for s in sorted(used["seed"].dropna().unique()))
        + ".",
    ]
    if states:
        lines.append(
            "Incomplete: "
            + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
            + " (listed at the end)."
        )
    lines.append(
        "Accuracies in %, mean ± sample SD (ddof=1) over seeds; "
        "(n=a/b) marks cells with fewer seeds than the grid expects."
    )
    lines += [f"- warning: {w}" for w in c.warnings]
    return lines


def render_report(c: Collection, tables: dict[str, Table], *, per_seed: bool = True) -> str:
    """The whole report as Markdown: header, each table, incomplete cells, per-seed detail."""
    parts = ["# Results", "", *_header(c), ""]
    for key, table in tables.items():
        if key != "incomplete":
            parts.append(table.markdown(level=2))
    inc = tables["incomplete"]
    if inc.data.empty:
        parts.append("## Incomplete\n\nnone: every expected cell has results.\n")
    else:
        parts.append(inc.markdown(level=2))
    if per_seed:
        parts.append("## Per-seed detail\n")
        for key in ("table1", "table2", "feedback", "schedule"):
            t = tables.get(key)
            if t is not None and t.per_seed is not None and not t.per_seed.empty:
                parts.append(f"### {t.title.split(':')[0]} ({t.name})\n")
                parts.append(render.markdown(t.per_seed.fillna(""), "cell") + "\n")
    return "\n".join(parts)


def write_report(
    c: Collection, out_dir: str | Path, opts: ReportOptions | None = None
) -> tuple[str, list[Path]]:
    """Build every table, write CSV/LaTeX/per-seed files, report.md and the raw frames.

    Returns the Markdown report and the written paths.
    """
    o = opts or ReportOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = build_tables(c, o)
    paths: list[Path] = []
    for table in tables.values():
        paths += table.write(out)
    text = render_report(c, tables, per_seed=o.per_seed)
    (out / "report.md").write_text(text)
    paths.append(out / "report.md")
    for name in ("runs", "val", "train", "test"):
        path = out / f"{name}.csv"
        getattr(c, name).to_csv(path, index=False)
        paths.append(path)
    _remove_stale(out, paths)
    return text, paths


# The files the last report wrote into its directory, one name a line: what a report of other
# runs into the same --out does not write again (a probe table, a schedule view) is removed,
# never a file a report did not write.
MANIFEST = ".report_files"


def _remove_stale(out: Path, paths: list[Path]) -> None:
    """Remove the files an earlier report wrote to ``out`` that this one did not (they would sit
    beside report.md as if they were its own), and record this report's."""
    written = {p.name for p in paths}
    manifest = out / MANIFEST
    earlier = set(manifest.read_text().split()) if manifest.is_file() else set()
    stale = sorted(n for n in earlier - written if "/" not in n and (out / n).is_file())
    for name in stale:
        (out / name).unlink()
    if stale:
        print(
            f"note: removed {len(stale)} file(s) an earlier report wrote to {out} that this one "
            f"does not: {', '.join(stale)}",
            file=sys.stderr,
        )
    manifest.write_text("".join(f"{n}\n" for n in sorted(written)))


def markdown_summary(
    source: Collection | str | Path | Sequence[str | Path],
    *,
    policy: str = "min_val_loss",
    metric: str = "acc",
) -> str:
    """A short Markdown summary for the end of a training run or demo grid.

    Final validation accuracy, test accuracy at every tested length and anything incomplete,
    from the run directories alone; the training code prints it.
    """
    if isinstance(source, Collection):
        c = source
    else:
        paths = [source] if isinstance(source, str | Path) else list(source)
        c = collect(paths)
    parts = [
        val_table(c, metric=metric).markdown(),
        length_table(c, policy=policy, metric=metric).markdown(),
    ]
    if len(c.incomplete):
        parts.append(incomplete_table(c).markdown())
    return "\n".join(parts)
