"""A run's training protocol beyond the model and task: how its optimizer or scheduler differs
from the defaults (issue 41), so tables keep such runs apart and say so."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

# The defaults a run's optimizer and scheduler are compared with (conf/optim, conf/scheduler);
# keys whose default is an interpolation of the scale (warmup_steps, min_lr) are not compared.
_CONF = Path(__file__).resolve().parents[2] / "conf"
_DEFAULT_GROUPS = {"optim": "adamw", "scheduler": "warmup_cosine"}


def protocol_of(run_dir: Path) -> str:
    """How the run's optimizer or scheduler differs from the defaults ("" where it does not,
    or where config.yaml cannot say): e.g. "optim=SGD" or "optim weight_decay=0.0"."""
    import yaml

    try:
        cfg = _safe_load((run_dir / "config.yaml").read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""
    if not isinstance(cfg, dict):
        return ""
    tags = []
    for group, name in _DEFAULT_GROUPS.items():
        run, default = cfg.get(group), _default_group(group, name)
        if not isinstance(run, dict) or not default:
            continue
        # configs written before the optimizer became a group name no _target_: AdamW then
        target = str(run.get("_target_", default.get("_target_")))
        if target != default.get("_target_"):
            tags.append(f"{group}={target.rsplit('.', 1)[-1]}")
            continue
        changed = [
            f"{k}={run.get(k)}"
            for k, v in default.items()
            if not k.startswith("_") and not (isinstance(v, str) and "${" in v) and run.get(k) != v
        ]
        if changed:
            tags.append(f"{group} " + " ".join(changed))
    return "; ".join(tags)


def _safe_load(text: str):
    """yaml.safe_load through libyaml where PyYAML has it: the same safe loader, about ten times
    faster, which matters when a table reads the config of every run of a collection."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _default_group(group: str, name: str) -> dict:
    import yaml

    try:
        return yaml.safe_load((_CONF / group / f"{name}.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def separate_protocols(runs: pd.DataFrame, expected: pd.DataFrame, warnings: list[str]) -> None:
    """Runs trained with another optimizer or scheduler than the defaults are another protocol:
    their preset gains what differs, "laptop; optim=SGD", so their row is apart and says so
    (a table never averages them with, or labels them like, default runs)."""
    tagged = runs["protocol"].fillna("").astype(bool) & runs["preset"].notna()
    if not tagged.any():
        return
    renamed = [f"{p}; {tag}" for p, tag in runs.loc[tagged, ["preset", "protocol"]].values]
    moved = dict(zip(map(tuple, runs.loc[tagged, ["task", "label", "seed"]].values), renamed))
    for preset in sorted(set(runs.loc[tagged, "preset"])):
        cells = expected["preset"] == preset
        expected.loc[cells, "preset"] = [
            moved.get((t, lab, seed), preset)
            for t, lab, seed in expected.loc[cells, ["task", "label", "seed"]].values
        ]
    runs.loc[tagged, "preset"] = renamed
    for name in sorted(set(renamed)):
        warnings.append(
            f"runs of preset {name.split('; ', 1)[0]} trained with {name.split('; ', 1)[1]}: tabulated apart"
        )
