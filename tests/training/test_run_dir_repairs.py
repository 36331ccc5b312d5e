"""What a run directory in an unusual state gets (found by a review of the run's life, each
reproduced before the fix): a cell refused after the grid started leaves the other cells
running; a finished run whose results.json and last.ckpt are both gone is refused rather than
trained again; a lost status.json no longer makes the next resume misread the arithmetic it
started in; a ``trainer.args.max_time`` stop is a stop to resume; another user's leftover lock
is taken, a held one is "[busy]"; a run another process finished meanwhile is skipped."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from rlt import locks, rundir
from rlt.training import run as run_module
from rlt.training.run import run
from rlt.training.spec import ConfigError
from tests.training.helpers import compose_cfg, load_results
from tests.training.test_identity import snapshot
from tests.training.test_run_lock import lock_holder
from tests.training.test_trust import tiny, train_py


def cfg_of(root: Path, *overrides: str):
    return compose_cfg(tiny(root, "task=parity", "split=1+1", *overrides))


def stopped_at_3(root: Path, *overrides: str) -> Path:
    """A run that failed at step 3 (its last.ckpt kept), as a crash leaves it."""
    cfg = cfg_of(root, "callbacks.inject_failure={kind: error, step: 3}", *overrides)
    with pytest.raises(RuntimeError):
        run(cfg)
    return Path(cfg.out_dir)


def test_a_cell_refused_once_the_grid_runs_leaves_the_others_running(tmp_path):
    """seed 1's last.ckpt is unreadable (which only its own job finds out): the grid goes on
    to seed 2, the summary lists seed 1 as refused with the fix, and the command exits 1."""
    run_dir = stopped_at_3(tmp_path / "root", "seed=1")
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    proc = train_py(
        "-m", *tiny(tmp_path / "root", "task=parity", "split=1+1", "seed=1,2"), cwd=tmp_path
    )
    out = proc.stdout
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "refused" in out and "cannot resume from" in out and "force=true" in out, out
    seed2 = run_dir.parent / "seed2"
    assert json.loads((seed2 / rundir.STATUS).read_text())["state"] == "done"
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == b"not a checkpoint"


def test_an_unreadable_checkpoint_is_refused_in_one_line_without_torchs_advice(tmp_path):
    run_dir = stopped_at_3(tmp_path)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError) as err:
        run(cfg_of(tmp_path))
    message = str(err.value)
    assert "\n" not in message and "weights_only=False" not in message
    assert message.startswith(f"cannot resume from {run_dir / 'checkpoints' / 'last.ckpt'}: ")


def test_a_finished_run_without_results_or_last_ckpt_is_refused_not_retrained(tmp_path):
    out = run(cfg_of(tmp_path))
    run_dir = Path(out["run_dir"])
    (run_dir / rundir.RESULTS).write_text('{"schema_version": 1, "run": {')
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="cannot be evaluated again without training.*force=true"):
        run(cfg_of(tmp_path))
    assert snapshot(tmp_path) == before  # no policy weights overwritten


def test_a_lost_status_is_recorded_as_an_unknown_start_and_the_run_resumes(tmp_path, capsys):
    """status.json damaged while the run is stopped: the resume says so and records the start
    as unknown; before the fix the next resume was refused with "it started with portable
    arithmetic off" (the absent record read as an old run's), whatever it started in."""
    run_dir = stopped_at_3(tmp_path, "scale.max_steps=8")
    started = json.loads((run_dir / rundir.STATUS).read_text())["portable"]
    assert isinstance(started, bool)
    (run_dir / rundir.STATUS).write_text("{not json")
    with pytest.raises(RuntimeError):
        run(
            cfg_of(tmp_path, "scale.max_steps=8", "callbacks.inject_failure={kind: error, step: 5}")
        )
    assert "[repair]" in capsys.readouterr().out
    status = json.loads((run_dir / rundir.STATUS).read_text())
    assert status["portable"] == "unknown" and status["added_tokens"] == "unknown"
    out = run(cfg_of(tmp_path, "scale.max_steps=8"))
    assert out["state"] == "resumed"
    assert load_results(run_dir)["val_curve"][-1]["step"] == 8


def test_a_max_time_stop_is_interrupted_and_resumes_with_more_time(tmp_path):
    """Lightning's Timer keeps the time spent in last.ckpt, so the same max_time stops again
    at once: the message says to raise it or drop it, and max_time is not part of the run's
    identity (it changes no number)."""
    run_dir = stopped_at_3(tmp_path, "scale.max_steps=8")  # last.ckpt at step 2
    out = run(
        cfg_of(tmp_path, "scale.max_steps=8", "+trainer.args.max_time={seconds: 0}"),
        raise_on_failure=False,
    )
    assert out["state"] == "interrupted"  # was failed, and every rerun failed the same way
    status = json.loads((run_dir / rundir.STATUS).read_text())
    assert status["state"] == "interrupted" and status["stopped_by"] == "TimeLimit"
    assert status["step"] == 2 and (run_dir / "checkpoints" / "last.ckpt").exists()
    out = run(cfg_of(tmp_path, "scale.max_steps=8"))
    assert out["state"] == "resumed"
    assert load_results(out["run_dir"])["val_curve"][-1]["step"] == 8


class _ForeignLock:
    """os.open as another user meets a ``.lock`` it did not create: opening it to write is
    refused (CI runs as root, for whom a file's mode refuses nothing)."""

    def __init__(self, path: Path, monkeypatch):
        self.path, real = path, os.open

        def fake(p, flags, *args):
            if Path(p) == self.path and flags & os.O_RDWR and self.path.exists():
                raise PermissionError(13, "Permission denied", str(p))
            return real(p, flags, *args)

        monkeypatch.setattr(locks.os, "open", fake)


def test_another_users_lock_is_busy_while_held_and_taken_when_its_holder_died(
    tmp_path, monkeypatch
):
    holder = lock_holder(tmp_path)
    _ForeignLock(tmp_path / rundir.LOCK, monkeypatch)
    try:
        assert holder.stdout.readline().strip() == "True"
        with rundir.run_lock(tmp_path) as got:  # a PermissionError before the fix
            assert got is False
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / rundir.LOCK).exists()  # left by the killed holder
    with rundir.run_lock(tmp_path) as got:
        assert got is True
    assert not (tmp_path / rundir.LOCK).exists()


def test_a_run_finished_by_another_process_after_this_one_judged_it_is_skipped(
    tmp_path, monkeypatch
):
    """The snapshot is read before the lock; another process may finish the run in between.
    Under the lock the run looks again and skips it, with nothing written."""
    run(cfg_of(tmp_path))
    before = snapshot(tmp_path)
    monkeypatch.setattr(run_module, "finished", lambda spec, disk: False)  # judged too early
    out = run(cfg_of(tmp_path, "resume=false"))
    assert out["state"] == "skipped"
    assert snapshot(tmp_path) == before


def test_a_dead_holders_file_is_removed_only_while_it_is_still_the_lock(tmp_path, monkeypatch):
    """Between this process opening another user's leftover ``.lock`` and locking it, the
    holder may have unlinked it and a new run taken a new ``.lock``: that one is never
    removed (two runs would then train one directory)."""
    path = tmp_path / rundir.LOCK
    path.write_text("1 gone-host")
    real = os.open

    def open_then_replaced(p, flags, *args):
        fd = real(p, flags, *args)
        if Path(p) == path and flags == os.O_RDONLY:
            path.unlink()
            path.write_text("2 new-run")  # another run's lock, taken meanwhile
        return fd

    monkeypatch.setattr(locks.os, "open", open_then_replaced)
    assert locks._held_by_another_user(path) is False
    assert path.read_text() == "2 new-run"
