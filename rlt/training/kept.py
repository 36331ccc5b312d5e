"""A finished run's kept checkpoint, rebuilt for scoring after training: the model of its
config.yaml with the weights of one checkpoint policy (``checkpoints/<policy>.pt``), as the run
evaluated it (RLT-2 with the chunk size it was evaluated at). Used by ``eval.py`` and
``python -m rlt.probe``; nothing here writes to the run directory."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from torch import nn

from rlt import portable, rundir
from rlt.training import identity
from rlt.training.checkpoints import load_weights, restore
from rlt.training.spec import ConfigError, RunSpec, prepare


@dataclass
class Kept:
    spec: RunSpec
    model: nn.Module
    step: int


def require_finished(run_dir: Path) -> None:
    """Refuse a run that is not done (its kept checkpoints may still change), in one line."""
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"{run_dir} is not a directory: give a run directory train.py wrote"
        )
    run = rundir.RunDir(run_dir)
    status = run.status()
    for name, path, parsed in (
        (rundir.STATUS, run.status_file, status),
        (rundir.RESULTS, run.results_file, run.results()),
    ):
        if path.is_file() and parsed is None:
            raise ConfigError(
                f"{path} does not parse: rerun the train.py command of {run_dir} (it repairs "
                f"{name}, evaluating the run again from its checkpoints where needed), then score it"
            )
    state = (status or {}).get("state")
    has_results = run.results_file.is_file()
    if status is None and not has_results and not run.config_file.is_file():
        raise ConfigError(
            f"{run_dir} holds no run (no {rundir.STATUS}, {rundir.RESULTS} or config.yaml): give "
            "a run directory train.py wrote, <sweep>/<task>/<model>/<split>/seed<N>"
        )
    if status is None:
        raise ConfigError(
            f"{run_dir} has no {rundir.STATUS}, so whether the run finished cannot be told; rerun "
            f"the train.py command of {run_dir} (it finishes the run and writes its status), then "
            "score it"
        )
    if state != "done" or not has_results:
        at = f" at step {status.get('step')} of {status.get('max_steps')}" if status else ""
        raise ConfigError(
            f"{run_dir} is not a finished run (state {state!r}{at}, results.json "
            f"{'present' if has_results else 'missing'}); score it once train.py has finished it"
        )


def load_kept(run_dir: str | Path, policy: str = "min_val_loss", overrides=()) -> Kept:
    """The run's model with the ``policy`` checkpoint loaded; ``overrides`` (dotted
    ``key=value`` strings, e.g. ``task.test_lengths=[20,512]``) change the stored config for
    this scoring only (what the run is, its identity and results.json, stay as they are).
    Raises FileNotFoundError or ConfigError with one line naming the file and the fix."""
    from rlt.models import build_model

    run_dir = Path(run_dir)
    if policy not in rundir.POLICIES:
        raise ConfigError(
            f"--policy {policy!r} is not a checkpoint policy; use one of {', '.join(rundir.POLICIES)}"
        )
    require_finished(run_dir)
    run = rundir.RunDir(run_dir)
    if (note := portable.scoring_note(run.results() or {})) is not None:
        print(f"note: {run_dir} {note}", file=sys.stderr)
    config, ckpt = run.config_file, run.policy_file(policy)
    for path, what in ((config, "its config.yaml"), (ckpt, f"the {policy} checkpoint")):
        if not path.is_file():
            kept = [p for p in rundir.POLICIES if run.policy_file(p).is_file()]
            other = f"; it kept {', '.join(kept)} (--policy NAME)" if kept and path == ckpt else ""
            raise FileNotFoundError(
                f"{run_dir} lacks {what} ({path}): score a run that kept it{other}"
            )
    try:
        stored = identity.stored_config(run_dir)
    except identity.UnreadableConfig as e:
        raise ConfigError(f"{e}; this is not a run directory train.py wrote") from e
    cfg: DictConfig = OmegaConf.create(identity.upgraded(stored))  # written by an older version?
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    spec = prepare(cfg, on_this_machine=True, scoring=True)
    status = run.status() or {}
    if (why := identity.tokens_mismatch(spec, status)) is not None:  # plugins renumbered them
        raise ConfigError(
            f"cannot score {run_dir}: {why}, so its embedding and output rows would stand for "
            "other tokens; score it with the plugins it was trained with"
        )
    model = build_model(spec.entry.config_class()(**spec.model_kwargs))
    try:
        state = load_weights(ckpt)
        step = int(state["step"])
        weights = state["state_dict"]
    except Exception as e:  # a damaged file (torch's message is many lines), or not a policy's
        raise ConfigError(
            f"{ckpt} does not load ({type(e).__name__}); retrain the run (force=true) to rewrite it"
        ) from e
    try:
        restore(model, state, spec)
    except RuntimeError as e:  # load_state_dict: missing, unexpected or other-shaped tensors
        raise ConfigError(
            f"{ckpt} holds {len(weights)} tensors that are not the weights of the model its "
            f"config.yaml describes ({spec.identity['label']}, {spec.model_kwargs.get('d_model')} "
            "wide): a checkpoint copied from another run, or config.yaml edited since. Put back "
            "the run's own files, or retrain it (force=true)"
        ) from e
    return Kept(spec=spec, model=model.eval(), step=step)
