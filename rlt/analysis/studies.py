"""A study's own views: the tables that belong to one study (its findings judged, its
comparisons), kept beside the study's page as ``docs/results/<study>/views.py`` rather than
here, where rlt/analysis keeps what every sweep uses. The tables CLI adds a study's tables
(first in the report) whenever the runs it reads include one of the sweeps the study names.

A views module defines

    SWEEPS = (...)              the sweep names (results.json ``run.sweep``) it judges: a
                                literal tuple, read without running the module
    tables(c, policy, metric)   its tables, ``{role: Table}``

Views load from the repository rlt itself runs from (``<repository>/docs/results/*/views.py``,
code of the same checkout as rlt's own), never from beside the runs being read: reading a
downloaded sweep runs no code. A study's module runs only when the runs include its sweeps.
An installation outside its repository (a wheel) has no study views; every general table is
printed as before.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_REPO = Path(__file__).resolve().parents[2]
# Only inside rlt's own repository (its pyproject.toml beside the package), never a docs/ that
# happens to sit beside an installed package.
STUDIES: Path | None = (
    _REPO / "docs" / "results"
    if (_REPO / "pyproject.toml").is_file() and (_REPO / "rlt" / "analysis").is_dir()
    else None
)
_LOADED: dict[str, ModuleType] = {}


def names() -> list[str]:
    """The studies that have views, by directory name (``laptop``)."""
    if STUDIES is None or not STUDIES.is_dir():
        return []
    return sorted(p.parent.name for p in STUDIES.glob("*/views.py"))


def _path(name: str) -> Path:
    path = STUDIES / name / "views.py" if STUDIES is not None else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"no study views {path or name}; studies with views: {', '.join(names()) or 'none'}"
        )
    return path


def sweeps(name: str) -> tuple[str, ...]:
    """The sweeps study ``name`` judges: its module's literal ``SWEEPS``, read from the source
    without running it."""
    path = _path(name)
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "SWEEPS" for t in targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                break
            if isinstance(value, tuple | list) and all(isinstance(v, str) for v in value):
                return tuple(value)
            break
    raise ValueError(f"{path}: SWEEPS must be a literal tuple of sweep names, e.g. ('laptop',)")


def load(name: str) -> ModuleType:
    """The views module of study ``name`` (run once per process)."""
    if name not in _LOADED:
        path = _path(name)
        module_name = f"rlt_study_views_{name}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up while defined
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        if not callable(getattr(module, "tables", None)):
            raise AttributeError(f"{path} defines no tables(c, policy, metric) function")
        _LOADED[name] = module
    return _LOADED[name]


def tables(c: Any, *, policy: str, metric: str) -> dict[str, Any]:
    """The tables of every study whose sweeps are among the runs of ``c`` (a Collection); the
    other studies' modules are not run."""
    swept = set(c.used["sweep"].dropna()) if len(c.used) else set()
    out: dict[str, Any] = {}
    for name in names():
        if swept & set(sweeps(name)):
            out |= load(name).tables(c, policy=policy, metric=metric)
    return out
