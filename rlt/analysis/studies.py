"""A study's own views: the tables that belong to one study (its findings judged, its
comparisons), kept beside the study's page as ``docs/results/<study>/views.py`` rather than
here, where rlt/analysis keeps what every sweep uses. The tables CLI adds a study's tables
(first in the report) whenever the runs it reads include one of the sweeps the study names.

A views module defines

    SWEEPS                      the sweep names (results.json ``run.sweep``) it judges
    tables(c, policy, metric)   its tables, ``{role: Table}``

Views load from the checkout rlt itself runs from (``<repository>/docs/results/*/views.py``,
the same code as rlt's own), never from beside the runs being read: reading a downloaded sweep
runs no code. An installation without the repository's docs/ (a wheel) has no study views;
every general table is printed as before.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

STUDIES = Path(__file__).resolve().parents[2] / "docs" / "results"
_LOADED: dict[str, ModuleType] = {}


def names() -> list[str]:
    """The studies that have views, by directory name (``laptop``)."""
    if not STUDIES.is_dir():
        return []
    return sorted(p.parent.name for p in STUDIES.glob("*/views.py"))


def load(name: str) -> ModuleType:
    """The views module of study ``name`` (loaded once per process)."""
    if name not in _LOADED:
        path = STUDIES / name / "views.py"
        if not path.is_file():
            raise FileNotFoundError(
                f"no study views {path}; studies with views: {', '.join(names()) or 'none'}"
            )
        spec = importlib.util.spec_from_file_location(f"rlt_study_views_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for attr in ("SWEEPS", "tables"):
            if not hasattr(module, attr):
                raise AttributeError(f"{path} defines no {attr} (see rlt/analysis/studies.py)")
        _LOADED[name] = module
    return _LOADED[name]


def tables(c: Any, *, policy: str, metric: str) -> dict[str, Any]:
    """The tables of every study whose sweeps are among the runs of ``c`` (a Collection)."""
    swept = set(c.used["sweep"].dropna()) if len(c.used) else set()
    out: dict[str, Any] = {}
    for name in names():
        views = load(name)
        if swept & set(views.SWEEPS):
            out |= views.tables(c, policy=policy, metric=metric)
    return out
