"""Selection and stopping by Lightning's own callbacks, and the files they write.

- :class:`PolicyCheckpoint`: Lightning's ``ModelCheckpoint``, one per checkpoint policy
  (``min_val_loss`` monitors ``val/loss``, ``max_val_acc`` ``val/acc``, ``final`` keeps the
  latest validated step), writing the model's weights to ``checkpoints/<policy>.pt`` the moment
  a policy's choice changes (a crash never loses the best weights found so far) and, at each
  step of ``callbacks.budgets``, the policy's file as it stands then (``<policy>@<step>.pt``);
- :class:`LastCheckpoint`: the full Lightning checkpoint ``last.ckpt`` a rerun resumes from,
  written after every validation, after every other callback has recorded it;
- :class:`StopAtValAcc`: Lightning's ``EarlyStopping`` on ``val/acc`` for
  ``callbacks.early_stop`` (the last ``patience`` validations all reach the threshold).

Lightning runs every ``ModelCheckpoint`` after the other callbacks, in the order given, so the
policies are written after the run's record of the validation and ``last.ckpt`` after them
all. Every file goes through a temporary file and a rename (:mod:`rlt.atomic`).

The run logs ``val/<metric>`` as float64 tensors (rlt/training/module.py), so the callbacks
compare exactly the numbers results.json records, and :func:`select_step` (the same rule,
read from the validation curve) names the step each file must hold.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from rlt import rundir

POLICIES = rundir.POLICIES
# the validation metric each policy selects on (``val/<metric>`` in trainer.callback_metrics),
# and which way is better
_MONITOR = {"min_val_loss": ("loss", "min"), "max_val_acc": ("acc", "max")}


def select_step(curve: list[dict[str, float]], policy: str) -> dict[str, float]:
    """The validation row a policy selects from ``curve`` (rows with step, loss, acc).

    ``min_val_loss`` is the report's rule: lowest mean per-example validation loss, earliest step
    on ties. ``max_val_acc``: highest validation accuracy, earliest on ties. ``final``: last row.
    A NaN never wins (as Lightning's ModelCheckpoint, which scores it as the worst value).
    """
    if not curve:
        raise ValueError("empty validation curve: the run has not validated yet")
    if policy == "final":
        return curve[-1]
    if policy not in _MONITOR:
        raise ValueError(f"unknown checkpoint policy {policy!r}; expected one of {POLICIES}")
    metric, mode = _MONITOR[policy]
    sign = 1.0 if mode == "min" else -1.0

    def score(row: dict[str, float]) -> float:
        return math.inf if math.isnan(row[metric]) else sign * row[metric]

    best = curve[0]
    for row in curve[1:]:
        if score(row) < score(best):
            best = row
    return best


class WriteError(OSError):
    """A run file could not be written (full disk, file-size limit, read-only directory); the
    message names the file and the fix."""


def written(path: Path, write) -> None:
    """Write ``path`` through a temporary file (``write(tmp)``), naming the file when it fails:
    torch.save reports a full disk as "enforce fail at inline_container.cc"."""
    try:
        rundir.atomic_replace(path, write)
    except (OSError, RuntimeError) as e:
        reason = getattr(e, "strerror", None) or str(e).strip().splitlines()[0][:160]
        raise WriteError(
            f"cannot write {path} ({reason}): the disk may be full, a file-size limit reached or "
            "the directory read-only; fix that and rerun the same command (it resumes from the "
            "last checkpoint)"
        ) from e


def save_weights(module: torch.nn.Module, path: Path, step: int, feedback_interval: Any) -> None:
    """Weights-only checkpoint (the model is small next to a full Lightning checkpoint)."""
    state = {
        "step": step,
        "feedback_interval": feedback_interval,
        "state_dict": module.state_dict(),
    }
    written(path, lambda tmp: torch.save(state, tmp))


def load_weights(path: Path) -> dict[str, Any]:
    """A policy file written by :func:`save_weights`, loaded with ``weights_only=True``: tensors
    and plain values only, so a run directory from someone else cannot execute code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise RuntimeError(
            f"cannot load the weights file {path} ({type(e).__name__}: {str(e)[:200]}). It must "
            "hold only tensors and plain values; rerun with force=true to retrain this run."
        ) from e


def eval_interval(spec, ckpt: dict[str, Any]) -> int | None:
    """The chunk size a policy file is evaluated with: the last schedule stage's (SPEC:
    inference uses it), else the one it trained with; None for a family without feedback."""
    scheduled = spec.schedule.final if spec.schedule is not None else None
    return spec.entry.interval(ckpt.get("feedback_interval"), scheduled)


def restore(model: torch.nn.Module, ckpt: dict[str, Any], spec) -> int | None:
    """A loaded policy file's weights into ``model``, set to evaluate as :func:`eval_interval`
    says; returns that chunk size."""
    model.load_state_dict(ckpt["state_dict"])
    fb = eval_interval(spec, ckpt)
    if fb:
        model.feedback_interval = fb
    return fb


class _RunFile(ModelCheckpoint):
    """A ModelCheckpoint writing one fixed file of the run directory's ``checkpoints/``,
    atomically, that resumes its choice wherever the run directory has moved since."""

    def __init__(
        self, run: rundir.RunDir, name: str, monitor: str | None = None, mode: str = "min"
    ):
        super().__init__(
            dirpath=run.ckpt_dir,
            filename=name,
            monitor=monitor,
            mode=mode,
            save_top_k=1,
            auto_insert_metric_name=False,
            enable_version_counter=False,
            save_on_train_epoch_end=False,
        )
        self.run, self.name = run, name

    @property
    def state_key(self) -> str:
        return self._generate_state_key(file=self.name)

    def _write(self, trainer, path: Path) -> None:
        raise NotImplementedError

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        self._write(trainer, Path(filepath))
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        for logger in trainer.loggers:
            logger.after_save_checkpoint(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Lightning keeps a choice only where the directory did not move; the file names are
        # fixed, so the choice stands wherever the run directory is now
        def here(path: str | None) -> str | None:
            return str(Path(self.dirpath) / Path(path).name) if path else path

        super().load_state_dict(
            {
                **state_dict,
                "dirpath": self.dirpath,
                "best_model_path": here(state_dict["best_model_path"]),
                "kth_best_model_path": here(state_dict.get("kth_best_model_path")),
                "last_model_path": here(state_dict.get("last_model_path")),
                "best_k_models": {here(k): v for k, v in state_dict["best_k_models"].items()},
            }
        )


class PolicyCheckpoint(_RunFile):
    """``checkpoints/<policy>.pt``: the weights of the validation step ``policy`` chooses so
    far (earliest on ties: Lightning's strict comparison), and at each step of ``budgets`` the
    file as it stands then (``<policy>@<step>.pt``)."""

    FILE_EXTENSION = ".pt"

    def __init__(self, run: rundir.RunDir, policy: str, budgets=()):
        if policy not in POLICIES:
            raise ValueError(f"unknown checkpoint policy {policy!r}; expected one of {POLICIES}")
        metric, mode = _MONITOR.get(policy, (None, "min"))
        super().__init__(run, policy, metric and f"val/{metric}", mode)
        self.policy = policy
        self.budgets = set(budgets)

    def _write(self, trainer, path: Path) -> None:
        model = trainer.lightning_module.model
        save_weights(model, path, trainer.global_step, model.feedback_interval)

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if trainer.global_step == 0:  # a fresh start (a forced retrain among them)
            for kept in self.run.ckpt_dir.glob(self.run.policy_file(self.policy, "*").name):
                kept.unlink()  # budget checkpoints of an earlier training: never this run's

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        step = trainer.global_step
        if step in self.budgets and trainer.state.fn == "fit" and not trainer.sanity_checking:
            src = self.run.policy_file(self.policy)
            written(self.run.policy_file(self.policy, step), lambda tmp: shutil.copyfile(src, tmp))


class LastCheckpoint(_RunFile):
    """``checkpoints/last.ckpt``: the whole training state (weights, optimizer, loops, every
    callback's state) after each validation, for a rerun to resume from."""

    def __init__(self, run: rundir.RunDir):
        super().__init__(run, run.last_ckpt.stem)

    def _write(self, trainer, path: Path) -> None:
        written(path, trainer.save_checkpoint)


class StopAtValAcc(EarlyStopping):
    """``callbacks.early_stop``: Lightning's EarlyStopping on ``val/acc``, ending training once
    the last ``patience`` validations all reached ``val_acc`` (``>=``; the count of such
    validations in a row is EarlyStopping's ``wait_count``, kept in last.ckpt)."""

    def __init__(self, val_acc: float, patience: int = 1):
        super().__init__(monitor="val/acc", mode="max", patience=max(1, int(patience)),
                         check_finite=False)  # fmt: skip
        self.val_acc = float(val_acc)

    def _evaluate_stopping_criteria(self, current: torch.Tensor) -> tuple[bool, str | None]:
        self.wait_count = self.wait_count + 1 if float(current) >= self.val_acc else 0
        if self.wait_count >= self.patience:
            return True, (f"val/acc reached {self.val_acc} in the last {self.patience} validations")
        return False, None


def run_checkpoints(run_dir: Path, policies, budgets=()) -> list[ModelCheckpoint]:
    """The run's checkpoint callbacks: one per policy (``final`` always: the latest weights;
    min_val_loss is always among ``policies``, the configuration requires it), then
    ``last.ckpt``; each listed policy keeps its budget copies."""
    run = rundir.RunDir(run_dir)
    kept = [p for p in policies if p != "final"]
    final = PolicyCheckpoint(run, "final", budgets if "final" in policies else ())
    return [PolicyCheckpoint(run, p, budgets) for p in kept] + [final, LastCheckpoint(run)]
