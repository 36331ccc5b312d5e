"""Plugins: a lab's own modules that register tasks (rlt.tasks.base.register), model families
(rlt.families.register) and metrics (rlt.tasks.metrics.register_metric). A run names them in
``plugins=[...]``; training imports them before the config is checked, and the analysis imports
the ones a run's results.json lists. Found in the current directory or on PYTHONPATH
(docs/EXTENDING.md)."""

from __future__ import annotations

import importlib
import os
import sys


class NameClash(ValueError):
    """Two plugins register one name: which kind and name, and the two definitions that claim
    it (dotted paths), so a reader can tell which runs used which."""

    def __init__(self, kind: str, name: str, first: str, second: str) -> None:
        super().__init__(
            f"{kind} name {name!r} registered twice ({first} and {second}); rename one of them"
        )
        self.kind, self.name, self.first, self.second = kind, name, first, second


def import_from_cwd() -> None:
    """Make modules in the current directory importable (a script's own directory is on
    sys.path, the directory it is run from is not)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())


def load(names) -> list[tuple[str, Exception]]:
    """Import each module, in sorted order: the ids of the tokens a plugin task adds follow the
    import order, and the order a run lists its plugins in is not part of its identity, so
    ``plugins=[a,b]`` and ``plugins=[b,a]`` must give one vocabulary. Returns the modules that
    failed, with their error."""
    import_from_cwd()
    failed = []
    for name in sorted(set(names)):
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a user's module may fail in any way
            failed.append((name, e))
    return failed


def where(e: Exception) -> str:
    """``Type: message`` of an error a plugin's import raised, with the file and line of the
    plugin's code it came from (the innermost frame outside the import machinery)."""
    import traceback

    text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if isinstance(e, SyntaxError) and e.filename:
        return f"SyntaxError: {e.msg} ({e.filename}, line {e.lineno}); fix the plugin"
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "importlib" not in f.filename]
    at = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"{text}{at}; fix the plugin"
