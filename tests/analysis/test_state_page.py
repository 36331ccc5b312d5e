"""The state page (docs/results/state/README.md, issue 39) rebuilds from committed files: every
table it shows is what ``study.py`` prints from runs/ now, and ``study.py figures`` draws its
figures from the same files."""

from __future__ import annotations

import importlib.util

from tests.training.helpers import REPO

STATE = REPO / "docs" / "results" / "state"


def _study():
    spec = importlib.util.spec_from_file_location("state_study", STATE / "study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_on_the_page_is_what_the_committed_runs_give():
    study = _study()
    printed = study.tables(study.table() + study.position_table())
    shown = study.tables((STATE / "README.md").read_text())
    assert shown, "the page shows no study table"
    for header, table in shown.items():
        assert header in printed, f"{header}: study.py prints no such table now"
        assert table == printed[header], f"{header}: the page differs from study.py's output"


def test_the_figures_draw_from_the_committed_files(tmp_path):
    written = _study().figures(tmp_path, dpi=30)
    assert {p.name for p in written} == {"accuracy_after_drop.png", "stream_cost.png"}
    assert all(p.stat().st_size > 5_000 for p in written)


def test_page_rewrites_a_stale_table_and_leaves_the_prose(tmp_path):
    """``study.py page`` puts back what the committed runs give into a table that no longer
    shows it, and changes nothing else."""
    study = _study()
    page = tmp_path / "README.md"
    original = (STATE / "README.md").read_text()
    header, table = next(iter(study.tables(original).items()))
    row = table.splitlines()[2]  # the first data row: its last cell changed
    stale = original.replace(row, row.rsplit("|", 2)[0] + "| 0.01 |", 1)
    assert stale != original
    page.write_text(stale)
    assert study.rewrite_page(page) == [header]
    assert page.read_text() == original
