"""Callbacks: what a run records at each validation, progress on disk, and the B schedule.

Lightning's validation loop validates every ``val_every`` optimizer steps
(``val_check_interval``) and, when ``max_steps`` is not a multiple of ``val_every``, at the last
step (:class:`RunRecord` asks for it as a stop at ``max_steps``, which Lightning validates);
:class:`RunRecord` records each validation, the training curve, step timings and
``status.json``. Selection, stopping and the checkpoint files are Lightning's own callbacks
(rlt/training/checkpoints.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

from rlt import rundir
from rlt.tasks.vocab import PAD as PAD_ID
from rlt.training.schedule import FeedbackSchedule


def out_of_time(trainer) -> bool:
    """``trainer.args.max_time`` ran out: a stop to resume, not an early stop."""
    from lightning.pytorch.callbacks import Timer

    return any(isinstance(c, Timer) and c.time_remaining() <= 0 for c in trainer.callbacks)


class RunRecord(L.Callback):
    """Records every validation (Lightning's loop, ``val_every`` steps apart, and at the last
    step), the training curve, step timings, an early stop (any callback's stop before
    ``max_steps``) and ``status.json``; all of it kept in ``last.ckpt`` for resume."""

    def __init__(
        self,
        run_dir: str | Path,
        val_every: int,
        max_steps: int,
        train_log_every: int = 10,
        records_interval: bool = False,
    ):
        self.run = rundir.RunDir(run_dir)
        # the family has a feedback interval (rlt.families.Family.feedback): each validation row
        # records the B it was evaluated with
        self.records_interval = records_interval
        self.val_every = val_every
        self.max_steps = max_steps
        self.train_log_every = train_log_every
        # Persistent state (restored from last.ckpt on resume).
        self.val_curve: list[dict[str, Any]] = []
        self.train_curve: list[dict[str, float]] = []
        self.train_seconds = 0.0
        self.timed_steps = 0
        # process CPU seconds of the timed steps (core-seconds: unlike wall time, not inflated by
        # other jobs on a shared machine), in all and per chunk size B in force (schedules)
        self.cpu_seconds = 0.0
        self.by_interval: dict[str, dict[str, float]] = {}
        self.stopped_early: int | None = None  # the step, when a callback ended the run early
        # Per-process state.
        self._t0: float | None = None
        self._c0 = 0.0
        self._last_step = -1
        self._loss_acc: list[float] = []

    # -- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "val_curve": self.val_curve,
            "train_curve": self.train_curve,
            "train_seconds": self.train_seconds,
            "timed_steps": self.timed_steps,
            "cpu_seconds": self.cpu_seconds,
            "by_interval": self.by_interval,
            "stopped_early": self.stopped_early,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.val_curve = list(state["val_curve"])
        self.train_curve = list(state["train_curve"])
        self.train_seconds = float(state["train_seconds"])
        self.timed_steps = int(state["timed_steps"])
        self.cpu_seconds = float(state["cpu_seconds"])
        self.by_interval = {k: dict(v) for k, v in state["by_interval"].items()}
        self.stopped_early = state["stopped_early"]

    # -- hooks ----------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_step = trainer.global_step
        if self.stopped_early is not None:
            trainer.should_stop = True  # resumed after early stopping: nothing left to train
        self.run.set_status("running", step=trainer.global_step, max_steps=self.max_steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._t0, self._c0 = time.perf_counter(), time.process_time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._t0 is not None:
            wall, cpu = time.perf_counter() - self._t0, time.process_time() - self._c0
            self.train_seconds += wall
            self.cpu_seconds += cpu
            self._t0 = None
            b = str(getattr(pl_module.model, "feedback_interval", None))
            cost = self.by_interval.setdefault(b, {"steps": 0, "seconds": 0.0, "cpu_seconds": 0.0})
            cost["seconds"] += wall
            cost["cpu_seconds"] += cpu
        if outputs is not None and "loss" in outputs:
            self._loss_acc.append(float(outputs["loss"]))
        step = trainer.global_step
        if step == self._last_step:
            return  # inside a gradient-accumulation cycle
        self._last_step = step
        self.timed_steps += 1
        b = str(getattr(pl_module.model, "feedback_interval", None))
        if b in self.by_interval:
            self.by_interval[b]["steps"] += 1
        if self._loss_acc:
            # Lightning reports the loss divided by the accumulation count; undo for the record.
            mean = sum(self._loss_acc) / len(self._loss_acc) * trainer.accumulate_grad_batches
            self._loss_acc = []
            if step % self.train_log_every == 0 or step == self.max_steps:
                self.train_curve.append({"step": step, "loss": mean})
        if step == self.max_steps and step % self.val_every:
            # the last step is off the validation grid: a stop here is one Lightning's loop
            # validates before it ends (inside fit, so the checkpoint callbacks see it)
            trainer.should_stop = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """After Lightning's validation loop: the row, the loggers, an early stop, the status.
        Runs before the checkpoint callbacks (Lightning orders every ModelCheckpoint last), so
        ``last.ckpt`` holds this validation."""
        step = trainer.global_step
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        metrics = dict(pl_module.val_metrics)
        row = {"step": step, **metrics}
        if self.records_interval:
            row["feedback_interval"] = pl_module.model.feedback_interval
        self.val_curve.append(row)
        for logger in trainer.loggers:
            logger.log_metrics({f"val/{k}": v for k, v in metrics.items()}, step=step)
        if trainer.should_stop and step < self.max_steps and not out_of_time(trainer):
            self.stopped_early = step  # callbacks.early_stop, or a user's callback
        self.run.set_status(
            "running",
            step=step,
            max_steps=self.max_steps,
            val_acc=metrics["acc"],
            best_val_acc=max(r["acc"] for r in self.val_curve),
        )


class FeedbackScheduleCallback(L.Callback):
    """Applies a schedule of the RLT-2 chunk size B over optimizer steps (issue 8).

    The B in force is a pure function of the global step, so resume restores it exactly.
    """

    def __init__(self, schedule: FeedbackSchedule):
        self.schedule = schedule

    def _apply(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        b = self.schedule.at(trainer.global_step)
        if pl_module.model.feedback_interval != b:
            pl_module.model.feedback_interval = b

    def on_train_start(self, trainer, pl_module) -> None:
        self._apply(trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._apply(trainer, pl_module)


class FeedbackDiagnostics(L.Callback):
    """How strongly the recurrent state enters the decoder, over training (issue 12's study).

    Every ``every`` optimizer steps it records, for an RLT with feedback:
    - ``grad_s_star``, ``grad_W_s``, ``grad_W_g_state`` and ``grad_total``: gradient norms of
      the optimizer step about to be taken (before clipping, after accumulation);
    - ``state_share``: mean over a fixed validation batch and its positions of
      ``|alpha * g_t * (W_s r_{t-1})| / |e_t|``, the state's contribution to the decoder input
      u_t relative to the encoder's; ``gate``: the mean of g_t.
    Rows go to ``diagnostics.json`` in the run directory (and survive a resume).
    """

    def __init__(self, run_dir: str | Path, batch_fn, every: int):
        self.path = Path(run_dir) / rundir.DIAGNOSTICS
        self.batch_fn = batch_fn
        self.every = max(1, int(every))
        self.rows: list[dict[str, float]] = []
        self._grads: dict[str, float] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self.rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows = list(state["rows"])

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        merge = getattr(pl_module.model, "merge", None)
        step = trainer.global_step + 1  # the step this update completes
        if merge is None or step % self.every:
            return
        d = merge.s_star.shape[0]
        w = merge.state_proj.weight.grad

        def norm(t):
            return float(t.norm()) if t is not None else float("nan")

        total = torch.sqrt(
            sum(p.grad.pow(2).sum() for p in pl_module.parameters() if p.grad is not None)
        )
        self._grads = {
            "grad_s_star": norm(merge.s_star.grad),
            "grad_W_g_state": norm(None if w is None else w[:d]),
            "grad_W_s": norm(None if w is None else w[d:]),
            "grad_total": float(total),
        }

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if not self._grads or step % self.every or (self.rows and self.rows[-1]["step"] == step):
            return
        row = {"step": step, **self._grads, **self.state_share(pl_module.model)}
        self._grads = {}
        self.rows.append(row)
        rundir.atomic_write_json(self.path, self.rows)

    @torch.no_grad()
    def state_share(self, model) -> dict[str, float]:
        merge = model.merge
        tokens = self.batch_fn()
        real = tokens != PAD_ID  # (N, T): padding positions are left out of the means
        sums = {"ratio": 0.0, "gate": 0.0, "n": 0, "offset": 0}

        def hook(module, inputs, output):
            e, ge, s = inputs  # (N, c, d), (N, c, d), (N, d): c positions from "offset"
            c = e.shape[1]
            mask = real[:, sums["offset"] : sums["offset"] + c]
            sums["offset"] += c
            gs, ws = module.state_proj(module.state_norm(s)).chunk(2, dim=-1)
            gate = torch.sigmoid(ge + gs[:, None])
            contrib = module.alpha * gate * ws[:, None]
            ratio = contrib.norm(dim=-1) / e.norm(dim=-1).clamp_min(1e-12)  # (N, c)
            sums["ratio"] += float(ratio[mask].sum())
            sums["gate"] += float(gate.mean(dim=-1)[mask].sum())
            sums["n"] += int(mask.sum())

        was_training = model.training
        model.eval()
        handle = merge.register_forward_hook(hook)
        try:
            model(tokens)
        finally:
            handle.remove()
            model.train(was_training)
        if not sums["n"]:
            return {}
        return {"state_share": sums["ratio"] / sums["n"], "gate": sums["gate"] / sums["n"]}


class PlainProgress(L.Callback):
    """One flushed line every ``every_steps`` optimizer steps or ``every_seconds`` seconds
    (whichever comes first): step/max, train loss, last validation accuracy, steps/s and ETA.
    For logs (SLURM, nohup, ``> log``) where a live bar shows nothing; lines also go to
    ``train.log`` in the run directory."""

    def __init__(self, cell: str, recorder: RunRecord, log_path: Path, every_steps: int,
                 every_seconds: float, stream=None):  # fmt: skip
        self.cell = cell
        self.recorder = recorder
        self.log_path = Path(log_path)
        self.every_steps = max(1, int(every_steps))
        self.every_seconds = float(every_seconds)
        self.stream = stream
        self._start: tuple[float, int] | None = None
        self._last_print = 0.0
        self._last_step = -1
        self._pending: tuple[int, float] | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = (time.perf_counter(), trainer.global_step)
        self._last_step = trainer.global_step
        self._last_print = time.perf_counter()
        self._emit(f"start at step {trainer.global_step}/{self.recorder.max_steps}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return
        self._last_step = step
        now = time.perf_counter()
        due = step % self.every_steps == 0 or now - self._last_print >= self.every_seconds
        if not due and step < self.recorder.max_steps:
            return
        self._last_print = now
        if step % self.recorder.val_every == 0 or step == self.recorder.max_steps:
            self._pending = (step, now)  # Lightning validates this step next: say its result
            return
        self._emit(self.line(step, now))

    def on_validation_end(self, trainer, pl_module) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._emit(self.line(*pending))

    def line(self, step: int, now: float) -> str:
        total = self.recorder.max_steps
        parts = [f"step {step}/{total}"]
        if self.recorder.train_curve:
            parts.append(f"loss {self.recorder.train_curve[-1]['loss']:.4f}")
        if self.recorder.val_curve:
            last = self.recorder.val_curve[-1]
            parts.append(f"val_acc {100 * last['acc']:.2f}% (step {last['step']})")
        t0, s0 = self._start or (now, step)
        if step > s0 and now > t0:
            rate = (step - s0) / (now - t0)
            eta = (total - step) / rate
            parts.append(f"{rate:.2f} steps/s, ETA {_duration(eta)}")
        return ", ".join(parts)

    def _emit(self, text: str) -> None:
        import sys

        line = f"[{time.strftime('%H:%M:%S')}] {self.cell}: {text}"
        print(line, file=self.stream or sys.stdout, flush=True)
        with open(self.log_path, "a") as f:
            f.write(line + "\n")


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def step_progress_bar():
    """Lightning's rich bar counting optimizer steps out of max_steps (its own counts
    micro-batches against the step total with gradient accumulation) under a plain label."""
    from lightning.pytorch.callbacks import RichProgressBar

    class StepProgressBar(RichProgressBar):
        @property
        def total_train_batches(self) -> int:
            return self.trainer.max_steps

        def _get_train_description(self, current_epoch: int) -> str:
            return "train (optimizer steps)"

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if not self.is_disabled and self.train_progress_bar_id is None:
                self._initialize_train_progress_bar_id()
            self._update(self.train_progress_bar_id, trainer.global_step)
            self._update_metrics(trainer, pl_module)
            self.refresh()

    return StepProgressBar(leave=True)
