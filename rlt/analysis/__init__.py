"""Analysis: the report's tables and figures from run directories alone (never trains).

Usage::

    from rlt.analysis import collect, build_tables, markdown_summary
    c = collect(["runs/paper"])            # pandas frames: c.runs, c.val, c.test, c.incomplete
    print(markdown_summary(c))             # what a training run prints at the end
    tables = build_tables(c)               # Table objects: .display, .data, .per_seed
"""

from rlt.analysis.collect import Collection, NoResultsError, collect
from rlt.analysis.definitions import MixedDefinitions
from rlt.analysis.report import ReportOptions, build_tables, markdown_summary, write_report

__all__ = [
    "Collection",
    "MixedDefinitions",
    "NoResultsError",
    "ReportOptions",
    "build_tables",
    "collect",
    "markdown_summary",
    "write_report",
]
