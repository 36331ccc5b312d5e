"""Study views (rlt/analysis/studies.py): a study's tables load from beside its page in the
repository, print for the sweeps the study names only (its module is not run otherwise), and
no code beside the runs being read is ever run."""

from __future__ import annotations

import json
import shutil

import pytest

from rlt.analysis import build_tables, collect, studies
from tests.analysis.analysis_synthetic import make_sweep
from tests.training.helpers import REPO

LAPTOP_VIEWS = REPO / "docs" / "results" / "laptop" / "views.py"


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """An empty docs/results for studies.py to find views in, with nothing loaded yet."""
    root = tmp_path / "docs" / "results"
    root.mkdir(parents=True)
    monkeypatch.setattr(studies, "STUDIES", root)
    monkeypatch.setattr(studies, "_LOADED", {})
    return root


def _sweep(root, name):
    make_sweep(root)
    for path in root.rglob("results.json"):
        results = json.loads(path.read_text())
        results["run"]["sweep"] = name
        path.write_text(json.dumps(results))
    return root


def _planted(path, marker, sweeps=("laptop",)):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"open({str(marker)!r}, 'a').write('{path.parent.name} ')\nSWEEPS = {sweeps!r}\n"
        "def tables(c, policy, metric):\n    return {}\n"
    )


def test_the_laptop_study_judges_the_laptop_sweeps():
    # the sweeps whose findings the report's verdict table judged before the views moved
    assert studies.sweeps("laptop") == ("laptop", "laptop_long", "laptop_scout")
    with pytest.raises(FileNotFoundError, match="studies with views: .*laptop"):
        studies.load("no_such_study")


def test_a_study_prints_its_tables_for_its_sweeps_only(tmp_path):
    other = make_sweep(tmp_path / "synthetic")
    assert "verdicts" not in build_tables(collect([other]))
    for name in ("laptop", "laptop_long"):
        laptop = _sweep(tmp_path / name, name)
        tables = build_tables(collect([laptop]))
        assert list(tables)[:2] == ["verdicts", "beyond"]  # a study's views come first
        findings = [f.label for f in studies.load("laptop").FINDINGS]
        assert tables["verdicts"].display.index.tolist() == findings


def test_a_study_runs_only_for_its_own_sweeps(results_dir, tmp_path):
    marker = tmp_path / "ran"
    _planted(results_dir / "alpha" / "views.py", marker, sweeps=("alpha_grid",))
    _planted(results_dir / "beta" / "views.py", marker, sweeps=("beta_grid",))
    runs = _sweep(tmp_path / "alpha_grid", "alpha_grid")
    build_tables(collect([runs]))
    assert marker.read_text() == "alpha "  # beta's module never ran


def test_code_beside_the_runs_is_never_run(results_dir, tmp_path):
    (results_dir / "laptop").mkdir()
    shutil.copy(LAPTOP_VIEWS, results_dir / "laptop" / "views.py")
    runs = _sweep(results_dir / "laptop" / "runs" / "laptop", "laptop")
    marker = tmp_path / "ran"
    for place in (runs, runs / "parity", results_dir / "laptop" / "runs", tmp_path):
        _planted(place / "views.py", marker)
    tables = build_tables(collect([runs]))
    assert not marker.exists()
    assert "verdicts" in tables  # the study's own views, from its page's place


def test_a_views_module_must_declare_its_sweeps_and_tables(results_dir):
    (results_dir / "nosweeps").mkdir()
    (results_dir / "nosweeps" / "views.py").write_text(
        "def tables(c, policy, metric):\n    return {}\n"
    )
    with pytest.raises(ValueError, match="SWEEPS must be a literal tuple"):
        studies.sweeps("nosweeps")
    (results_dir / "computed").mkdir()
    (results_dir / "computed" / "views.py").write_text("SWEEPS = tuple(['a'])\n")
    with pytest.raises(ValueError, match="SWEEPS must be a literal tuple"):
        studies.sweeps("computed")
    (results_dir / "notables").mkdir()
    (results_dir / "notables" / "views.py").write_text("SWEEPS = ('a',)\n")
    with pytest.raises(AttributeError, match="defines no tables"):
        studies.load("notables")


def test_a_views_module_may_define_dataclasses(results_dir):
    (results_dir / "dc").mkdir()
    (results_dir / "dc" / "views.py").write_text(
        "from __future__ import annotations\nfrom dataclasses import dataclass\n"
        "SWEEPS = ('dc',)\n@dataclass\nclass Row:\n    x: int\n"
        "def tables(c, policy, metric):\n    return {'row': Row(1)}\n"
    )
    assert studies.load("dc").Row(2).x == 2


def test_without_the_repository_there_are_no_study_views(monkeypatch, tmp_path):
    monkeypatch.setattr(studies, "STUDIES", None)
    assert studies.names() == []
    runs = _sweep(tmp_path / "laptop", "laptop")
    tables = build_tables(collect([runs]))  # the general tables, as before
    assert "verdicts" not in tables and "table1" in tables
