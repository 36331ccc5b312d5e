"""``plugins=[...]`` that does not import: a module that is not found says where to put it; a
module that is found but fails while importing names its error and the line of the plugin's
code (it was told to go on PYTHONPATH, where it already was)."""

from __future__ import annotations

import sys

import pytest

from rlt.training.spec import ConfigError, load_plugins


@pytest.mark.parametrize(
    "module, code, says",
    [
        ("lab_missing", None, "cannot find 'lab_missing' (No module named 'lab_missing'); run "
         "from its directory, put it on PYTHONPATH"),
        ("lab_bad_name", "x = 1\nfrom rlt.tasks.base import Rendred\n",
         "'lab_bad_name' failed while importing: ImportError: cannot import name 'Rendred'"),
        ("lab_syntax", "def f(:\n", "'lab_syntax' failed while importing: SyntaxError: "),
        ("lab_raises", "\n\nraise ValueError('task name x registered twice')\n",
         "'lab_raises' failed while importing: ValueError: task name x registered twice"),
        ("lab_needs", "import lab_dependency_nowhere\n",
         "'lab_needs' failed while importing: ModuleNotFoundError: No module named "
         "'lab_dependency_nowhere'"),
    ],
)  # fmt: skip
def test_a_plugin_that_does_not_import_says_why_in_one_line(
    tmp_path, monkeypatch, module, code, says
) -> None:
    if code is not None:
        (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ConfigError) as e:
        load_plugins([module])
    message = str(e.value)
    assert says in message and len(message.splitlines()) == 1, message
    if code is not None:  # found: where it failed, and no advice to put it on the path
        line = code.count("\n", 0, code.index(code.strip().splitlines()[-1])) + 1
        assert f"{tmp_path / module}.py, line {line})" in message
        assert "PYTHONPATH" not in message
