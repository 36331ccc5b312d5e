"""The state page (docs/results/state/README.md, issue 39) rebuilds from committed files: every
table it shows is what ``study.py`` prints from runs/ now, and ``study.py figures`` draws its
figures from the same files."""

from __future__ import annotations

import importlib.util
import re

from tests.training.helpers import REPO

STATE = REPO / "docs" / "results" / "state"


def _study():
    spec = importlib.util.spec_from_file_location("state_study", STATE / "study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tables(text: str) -> dict[str, str]:
    """``**sweep/task/model/arch** (...)`` header line -> the table under it, verbatim."""
    out = {}
    for m in re.finditer(r"^(\*\*laptop[^\n]*\*\*[^\n]*)\n\n((?:\|[^\n]*\n?)+)", text, re.M):
        out[m.group(1)] = m.group(2).rstrip("\n")
    return out


def test_every_table_on_the_page_is_what_the_committed_runs_give():
    study = _study()
    printed = _tables(study.table() + study.position_table())
    shown = _tables((STATE / "README.md").read_text())
    assert shown, "the page shows no study table"
    for header, table in shown.items():
        assert header in printed, f"{header}: study.py prints no such table now"
        assert table == printed[header], f"{header}: the page differs from study.py's output"


def test_the_figures_draw_from_the_committed_files(tmp_path):
    written = _study().figures(tmp_path, dpi=30)
    assert {p.name for p in written} == {"accuracy_after_drop.png", "stream_cost.png"}
    assert all(p.stat().st_size > 5_000 for p in written)
