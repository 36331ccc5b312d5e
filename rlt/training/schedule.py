"""The feedback-interval (chunk size B) schedule over training steps (issue 8).

The report proposes pretraining RLT-2 with large chunks (cheap, parallel) and shrinking B
toward 1 later, since every B uses the same parameters; it never ran it. A schedule is a list
of ``[start, B]`` stages; ``start`` is an optimizer step (int) or a fraction of the run
(float in [0, 1)). ``B`` is a chunk size >= 1, or null / "inf" for no feedback (RLT-0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def _parse_interval(value) -> int | None:
    if value is None or (isinstance(value, str) and value.lower() in ("inf", "none", "null")):
        return None
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(
            f"model.feedback_schedule: chunk size {value!r} must be an integer >= 1 or 'inf'"
        )
    return int(value)


@dataclass(frozen=True)
class FeedbackSchedule:
    """Stages as ``(start_step, B)`` sorted by start; the first starts at step 0."""

    stages: tuple[tuple[int, int | None], ...]

    @classmethod
    def parse(cls, spec: Sequence[Sequence], max_steps: int) -> FeedbackSchedule:
        if not spec:
            raise ValueError("model.feedback_schedule: empty schedule; use null for a fixed B")
        stages: list[tuple[int, int | None, bool]] = []
        for item in spec:
            if len(item) != 2:
                raise ValueError(
                    f"model.feedback_schedule: each stage is [start, B], got {list(item)!r}"
                )
            start, b = item
            fractional = isinstance(start, float)
            if fractional:
                if not 0.0 <= start < 1.0:
                    raise ValueError(
                        f"model.feedback_schedule: a float start is a fraction of the run and "
                        f"must be in [0, 1); got {start} (write steps as integers)"
                    )
                start = min(round(start * max_steps), max(0, max_steps - 1))
            start = int(start)
            if start < 0 or start >= max(1, max_steps):
                raise ValueError(
                    f"model.feedback_schedule: stage start {start} outside the run's steps "
                    f"[0, {max_steps})"
                )
            stages.append((start, _parse_interval(b), fractional))
        # In a very short run two fractional starts can round to the same step: the later
        # stage then supersedes the earlier one (so a 1-step debug run uses the final B).
        merged: list[tuple[int, int | None, bool]] = []
        for start, b, fractional in stages:
            if merged and merged[-1][0] == start and (fractional or merged[-1][2]):
                merged[-1] = (start, b, fractional)
            else:
                merged.append((start, b, fractional))
        starts = [s for s, _, _ in merged]
        if starts != sorted(starts) or len(set(starts)) != len(starts):
            raise ValueError(
                f"model.feedback_schedule: stage starts {starts} must strictly increase"
            )
        if starts[0] != 0:
            raise ValueError("model.feedback_schedule: the first stage must start at step 0")
        stages = [(s, b) for s, b, _ in merged]
        return cls(tuple(stages))

    def at(self, step: int) -> int | None:
        """The chunk size in force for the optimizer step ``step`` (0-based)."""
        current = self.stages[0][1]
        for start, b in self.stages:
            if step >= start:
                current = b
        return current

    @property
    def final(self) -> int | None:
        """The last stage's B: what inference and the final evaluation must use."""
        return self.stages[-1][1]

    def to_list(self) -> list[list]:
        return [[s, b] for s, b in self.stages]
