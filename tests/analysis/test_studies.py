"""Study views (rlt/analysis/studies.py): a study's tables load from beside its page in the
checkout, print for the sweeps the study names only, and no code beside the runs being read is
ever run."""

from __future__ import annotations

import json

import pytest

from rlt.analysis import build_tables, collect, studies
from tests.analysis.analysis_synthetic import make_sweep


def _rename_sweep(root, name):
    for path in root.rglob("results.json"):
        results = json.loads(path.read_text())
        results["run"]["sweep"] = name
        path.write_text(json.dumps(results))


def test_the_laptop_views_live_beside_the_laptop_page():
    assert "laptop" in studies.names()
    views = studies.load("laptop")
    assert views.__file__ == str(studies.STUDIES / "laptop" / "views.py")
    assert "laptop_long" in views.SWEEPS
    with pytest.raises(FileNotFoundError, match="studies with views: .*laptop"):
        studies.load("no_such_study")


def test_a_study_prints_its_tables_for_its_sweeps_only(tmp_path):
    other = make_sweep(tmp_path / "synthetic")
    assert "verdicts" not in build_tables(collect([other]))
    laptop = make_sweep(tmp_path / "laptop")
    _rename_sweep(laptop, "laptop")
    tables = build_tables(collect([laptop]))
    assert list(tables)[:2] == ["verdicts", "beyond"]  # a study's views come first
    # the table judges the study's own findings, as its module declares them
    findings = [f.label for f in studies.load("laptop").FINDINGS]
    assert tables["verdicts"].display.index.tolist() == findings


def test_code_beside_the_runs_is_never_run(tmp_path):
    laptop = make_sweep(tmp_path / "results" / "laptop" / "runs" / "laptop")
    _rename_sweep(laptop, "laptop")
    marker = tmp_path / "ran"
    for place in (tmp_path / "results" / "laptop", laptop):
        (place / "views.py").write_text(
            f"open({str(marker)!r}, 'w').write('x')\nSWEEPS = ('laptop',)\n"
            "def tables(c, policy, metric):\n    return {'planted': None}\n"
        )
    tables = build_tables(collect([laptop]))
    assert not marker.exists() and "planted" not in tables and "verdicts" in tables
