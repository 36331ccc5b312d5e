"""The six algorithmic tasks of the report, one shared vocabulary, and the data they serve.

```python
from rlt.tasks import get_task, TASKS
task = get_task("parity", supervision="final")     # options: see each task's docstring
ex = task.example("train", index=0)                 # pure function of (options, seed, split, i)
```
``TaskDataModule`` (``rlt.tasks.data``, the only part that needs Lightning) is imported lazily
so that ``import rlt.tasks`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlt.tasks import addition, mod5, parity, s5  # noqa: F401  (registers the tasks)
from rlt.tasks.base import IGNORE, TASKS, Example, Task, get_task

if TYPE_CHECKING:
    from rlt.tasks.data import TaskDataModule

__all__ = ["IGNORE", "TASKS", "Example", "Task", "TaskDataModule", "get_task"]


def __getattr__(name: str) -> Any:
    if name == "TaskDataModule":
        from rlt.tasks.data import TaskDataModule

        return TaskDataModule
    raise AttributeError(f"module 'rlt.tasks' has no attribute {name!r}")
