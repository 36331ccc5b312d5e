"""Command lines behind analysis/tables.py and analysis/figures.py (kept here to be testable)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rlt.analysis.collect import NoResultsError, collect
from rlt.analysis.definitions import MixedDefinitions
from rlt.analysis.reference import UnreadableReference, load_reference
from rlt.analysis.report import ReportOptions, write_report
from rlt.analysis.table_core import Lengths
from rlt.rundir import POLICIES


def _lengths(values: list[str] | None, flag: str) -> Lengths:
    """`--length 256` (every task) or repeated `--length parity=256 --length s5=512`."""
    if not values:
        return None
    out: dict[str, int] = {}
    for v in values:
        task, sep, num = v.rpartition("=")
        try:
            n = int(num)
        except ValueError:
            _usage_error(f"{flag} {v!r}: expected N or TASK=N, e.g. parity=256")
        if not sep:
            if len(values) > 1:
                _usage_error(f"{flag} {v!r}: give one N for all tasks or TASK=N each")
            return n
        out[task] = n
    return out


def _refused(*checks: tuple[str, str | None]) -> bool:
    """Print the first (flag, problem) that has a problem, in one line; whether one had."""
    for flag, problem in checks:
        if problem:
            print(f"error: {flag}: {problem}", file=sys.stderr)
            return True
    return False


def _usage_error(message: str):
    """A bad option value: one line, exit status 2 (as argparse's own errors)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _untested_lengths(c, lengths: Lengths) -> str | None:
    """A message when a requested Table 2 length was tested by no run (of its task)."""
    if lengths is None or c.test.empty:
        return None
    tested = c.test.groupby("task")["length"].apply(lambda s: sorted({int(x) for x in s}))
    wanted = lengths if isinstance(lengths, dict) else dict.fromkeys(tested.index, lengths)
    for task, n in wanted.items():
        if task not in tested.index:
            return f"no run of task {task!r}; tasks: {', '.join(tested.index)}"
        if n not in tested[task] and not (isinstance(lengths, int) and _any_tested(tested, n)):
            return f"{task} was not tested at length {n}; tested lengths: {tested[task]}"
    return None


def _unvalidated_step(c, step: int | None) -> str | None:
    """A message when no run was validated at ``step`` (Table 1 would be empty)."""
    steps = sorted({int(s) for s in c.val["step"]}) if not c.val.empty else []
    if step is None or not steps or step in steps:
        return None
    return f"no run was validated at step {step}; validations run from {steps[0]} to {steps[-1]}"


def _absent_split(c, split: str | None) -> str | None:
    """A message when no run has ``split`` (its tables would be empty)."""
    splits = sorted({str(s) for s in c.used["split"].dropna()}) if not c.used.empty else []
    if split is None or not splits or split in splits:
        return None
    return f"no run has split {split!r}; the runs' splits: {', '.join(splits)}"


def _any_tested(tested, n: int) -> bool:
    """One --length N for every task is fine when at least one task was tested at N."""
    return any(n in lengths for lengths in tested)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "sweep_dirs",
        nargs="+",
        type=Path,
        metavar="SWEEP_DIR",
        help="sweep directories (or single run directories) to read",
    )
    p.add_argument(
        "--policy",
        choices=POLICIES,
        default="min_val_loss",
        help="checkpoint whose test results are reported (report: min_val_loss)",
    )
    p.add_argument(
        "--metric",
        default="acc",
        help="metric name in results.json (acc, token_acc, seq_acc, exact)",
    )
    p.add_argument(
        "--schedule-view",
        action="store_true",
        help="feedback-schedule view (accuracy at the longest length vs training time) even "
        "when no run trained with a feedback_schedule (it is added automatically when one did)",
    )


def _collected(a: argparse.Namespace):
    """The sweeps' Collection, its --metric checked; None (the error said) where there is
    nothing to read or the metric's definitions differ."""
    # A sweep named twice (or through another path) is read once, not counted twice.
    unique: dict[Path, Path] = {}
    for d in a.sweep_dirs:
        unique.setdefault(d.resolve(), d)
    a.sweep_dirs = list(unique.values())
    try:
        c = collect(a.sweep_dirs)
        c.check_metric(a.metric)
    except (NoResultsError, MixedDefinitions) as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    recorded = set(c.val.get("metric", [])) | set(c.test.get("metric", []))
    if a.metric in NOT_A_PERCENTAGE:
        print(
            f"error: --metric {a.metric}: the tables and figures show accuracies in percent; "
            f"choose one of {', '.join(sorted(recorded - NOT_A_PERCENTAGE) or ['acc'])} "
            "(figures.py draws the training loss, train_loss_<task>)",
            file=sys.stderr,
        )
        return None
    if recorded and a.metric not in recorded:
        print(
            f"error: --metric {a.metric!r}: these runs record {', '.join(sorted(recorded))}",
            file=sys.stderr,
        )
        return None
    return c


# Metrics that results.json records but that are no fraction: the tables print every value
# times 100 with a "%".
NOT_A_PERCENTAGE = {"loss"}


def _unwritable(out: Path, e: OSError) -> int:
    print(
        f"error: cannot write to {out} ({e.strerror or e}); pass --out DIR to write elsewhere",
        file=sys.stderr,
    )
    return 2


def tables_main(argv: Sequence[str] | None = None) -> int:
    """Print every table as Markdown and write CSV, LaTeX and report.md to --out."""
    a = _tables_parser().parse_args(argv)
    opts = ReportOptions(
        step=a.step,
        metric=a.metric,
        policy=a.policy,
        lengths=_lengths(a.length, "--length"),
        split=a.split,
        fb_lengths=_lengths(a.fb_length, "--fb-length"),
        compare_report=a.compare_report,
        reference=a.reference,
        per_seed=not a.no_per_seed,
        schedule_view=a.schedule_view,
    )
    if a.compare_report or a.reference is not None:
        try:
            load_reference(a.reference)
        except UnreadableReference as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if not a.compare_report:
            print("note: --reference is read with --compare-report only", file=sys.stderr)
    c = _collected(a)
    if c is None:
        return 2
    if _refused(
        ("--length", _untested_lengths(c, opts.lengths)),
        ("--fb-length", _untested_lengths(c, opts.fb_lengths)),
        ("--step", _unvalidated_step(c, a.step)),
        ("--split", _absent_split(c, a.split)),
    ):
        return 2
    out = a.out or a.sweep_dirs[0] / "analysis"
    try:
        text, paths = write_report(c, out, opts)
    except OSError as e:
        return _unwritable(out, e)
    if not a.quiet:
        print(text)
    print(f"wrote {len(paths)} files to {out} (report.md, CSV, LaTeX)", file=sys.stderr)
    if a.wandb:
        from rlt.analysis.figures import make_figures
        from rlt.analysis.wandb_log import log_report

        drawn = make_figures(c, out / "figures", policy=a.policy, metric=a.metric, formats=("png",))
        figures = [path for r in drawn for path in r.paths]
        run_dir = log_report(out, list(a.sweep_dirs), paths, figures)
        print(f"logged {len(paths)} tables and {len(figures)} figures to W&B: {run_dir}",
              file=sys.stderr)  # fmt: skip
    return 0


def _tables_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="analysis/tables.py",
        description="The report's tables from sweep directories: Markdown on stdout, CSV and "
        "LaTeX files in --out.",
    )
    _common(p)
    p.add_argument("--out", type=Path, help="output directory (default: SWEEP_DIR/analysis)")
    p.add_argument("--step", type=int, help="Table 1 validation step (default: each run's final)")
    p.add_argument(
        "--length",
        action="append",
        metavar="N|TASK=N",
        help="Table 2 test length (default: longest tested per task); repeatable",
    )
    p.add_argument(
        "--split",
        help="split of the feedback-interval table (default 4+4), and of the schedule view "
        "when no run trained with a schedule",
    )
    p.add_argument(
        "--fb-length",
        action="append",
        metavar="N|TASK=N",
        help="feedback-table length (default: the report's, else longest)",
    )
    p.add_argument(
        "--compare-report",
        action="store_true",
        help="add ours vs the report's numbers (analysis/reference/report.json)",
    )
    p.add_argument("--reference", type=Path, help="reference JSON for --compare-report")
    p.add_argument("--no-per-seed", action="store_true", help="omit per-seed detail on stdout")
    p.add_argument("--quiet", action="store_true", help="write files only")
    p.add_argument(
        "--wandb",
        action="store_true",
        help="also draw the figures and log tables and figures to one W&B run (offline unless "
        "WANDB_MODE says otherwise; in OUT/wandb, upload with `wandb sync`)",
    )
    return p


def figures_main(argv: Sequence[str] | None = None) -> int:
    """Write every figure as PNG and PDF to --out."""
    p = argparse.ArgumentParser(
        prog="analysis/figures.py",
        description="The report's figures from sweep directories (PNG and PDF).",
    )
    _common(p)
    p.add_argument(
        "--out", type=Path, help="output directory (default: SWEEP_DIR/analysis/figures)"
    )
    p.add_argument(
        "--format",
        action="append",
        choices=["png", "pdf", "svg"],
        help="file format(s) (default: png and pdf); repeatable",
    )
    p.add_argument(
        "--length",
        action="append",
        metavar="N|TASK=N",
        help="test length of the schedule view (default: longest tested per task); repeatable",
    )
    p.add_argument("--split", help="split of the schedule view when no run trained with a schedule")
    a = p.parse_args(argv)
    lengths = _lengths(a.length, "--length")
    c = _collected(a)
    if c is None:
        return 2
    if _refused(
        ("--length", _untested_lengths(c, lengths)), ("--split", _absent_split(c, a.split))
    ):
        return 2
    from rlt.analysis.figures import make_figures  # matplotlib only when drawing

    out = a.out or a.sweep_dirs[0] / "analysis" / "figures"
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write_test").write_text("")
        (out / ".write_test").unlink()
    except OSError as e:
        return _unwritable(out, e)
    results = make_figures(
        c,
        out,
        policy=a.policy,
        metric=a.metric,
        formats=a.format or ("png", "pdf"),
        schedule_view=a.schedule_view,
        split=a.split,
        lengths=lengths,
    )
    for r in results:
        print("  ".join(str(p) for p in r.paths))
    if len(c.incomplete):
        print(
            f"note: {len(c.incomplete)} incomplete cell(s)/run(s) are not in the figures; "
            "analysis/tables.py lists them",
            file=sys.stderr,
        )
    return 0
