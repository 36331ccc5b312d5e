"""A finished run's kept checkpoint, rebuilt for scoring after training: the model of its
config.yaml with the weights of one checkpoint policy (``checkpoints/<policy>.pt``), as the run
evaluated it (RLT-2 with the chunk size it was evaluated at). Used by ``eval.py`` and
``python -m rlt.probe``; nothing here writes to the run directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from torch import nn

from rlt import families, rundir
from rlt.training import identity
from rlt.training.callbacks import load_weights
from rlt.training.spec import RunSpec, prepare


@dataclass
class Kept:
    spec: RunSpec
    model: nn.Module
    step: int


def load_kept(run_dir: str | Path, policy: str = "min_val_loss", overrides=()) -> Kept:
    """The run's model with the ``policy`` checkpoint loaded; ``overrides`` (dotted
    ``key=value`` strings, e.g. ``task.test_lengths=[20,512]``) change the stored config for
    this scoring only (what the run is, its identity and results.json, stay as they are)."""
    from rlt.models import build_model

    run_dir = Path(run_dir)
    config = run_dir / rundir.CONFIG
    ckpt = run_dir / rundir.CKPT_DIR / f"{policy}.pt"
    for path, what in ((config, "its config.yaml"), (ckpt, f"the {policy} checkpoint")):
        if not path.is_file():
            raise FileNotFoundError(f"{run_dir} lacks {what} ({path}): score a run that kept it")
    stored = OmegaConf.to_container(OmegaConf.load(config))
    cfg: DictConfig = OmegaConf.create(identity.upgraded(stored))  # written by an older version?
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    spec = prepare(cfg, on_this_machine=True)
    model = build_model(families.get(spec.family).config_class()(**spec.model_kwargs))
    state = load_weights(ckpt)
    model.load_state_dict(state["state_dict"])
    fb = spec.schedule.final if spec.schedule is not None else state.get("feedback_interval")
    if spec.family == "rlt" and fb:
        model.feedback_interval = fb
    return Kept(spec=spec, model=model.eval(), step=int(state["step"]))
