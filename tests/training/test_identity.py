"""A run directory is one configuration: skip and resume only when the requested config is
the stored one; bad values fail before any file changes."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from rlt import portable, rundir
from rlt.training.identity import config_differences
from rlt.training.run import run
from rlt.training.spec import ConfigError
from tests.training.helpers import compose_cfg, load_results


def tiny(tmp_path: Path, *overrides: str):
    return compose_cfg(
        ["experiment=tiny", f"root={tmp_path}", "task=parity", "split=1+1", *overrides]
    )


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root with a digest of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def finished(tmp_path):
    out = run(tiny(tmp_path))
    assert out["state"] == "done"
    return tmp_path


def test_changed_lr_on_a_finished_run_is_refused_and_nothing_written(finished):
    before = snapshot(finished)
    with pytest.raises(ConfigError, match=r"scale\.lr: 0\.001 -> 0\.5") as err:
        run(tiny(finished, "scale.lr=0.5"))
    assert "force=true" in str(err.value) and "root=" in str(err.value)
    assert snapshot(finished) == before


def test_run_control_keys_do_not_count(finished, capsys):
    out = run(tiny(finished, "trainer.threads=2", "print_table=false", "logger=none"))
    assert out["state"] == "skipped"


def test_killed_run_with_changed_alpha_is_refused(tmp_path):
    failing = tiny(tmp_path, "+callbacks.inject_failure={kind: error, step: 3}")
    out = run(failing, raise_on_failure=False)
    assert out["state"] == "failed"
    assert (Path(out["run_dir"]) / "checkpoints" / "last.ckpt").exists()
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match=r"model\.alpha: 0\.1 -> 0\.7") as err:
        run(tiny(tmp_path, "model.alpha=0.7"))
    assert snapshot(tmp_path) == before
    # Only model keys differ: the message names the variant's fix, its own name and label.
    assert "variant of model rlt1" in str(err.value)
    assert "model.name=rlt1_alpha07 \"model.label='RLT-1 alpha=0.7'\"" in str(err.value)
    # The suggested names work: the variant trains beside the stored run.
    variant = run(tiny(tmp_path, "model.alpha=0.7", "model.name=rlt1_alpha07"))
    assert variant["state"] == "done" and "rlt1_alpha07" in variant["run_dir"]
    assert run(tiny(tmp_path))["state"] == "resumed"  # the same config resumes as before


def test_force_retrains_with_the_new_config(finished):
    out = run(tiny(finished, "scale.lr=0.002", "force=true"))
    assert out["state"] == "done"
    assert "lr: 0.002" in (Path(out["run_dir"]) / "config.yaml").read_text()
    assert run(tiny(finished, "scale.lr=0.002"))["state"] == "skipped"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["seed=abc"], "seed"),
        (["seed=-1"], "seed"),
        (["scale.micro_batch=0"], "scale.micro_batch"),
        (["scale.lr=abc"], "scale.lr"),
        (["scale.lr=-1"], "scale.lr"),
        (["force=true", "scale.lr=abc"], "scale.lr"),
        (["+foo=1"], "foo"),
    ],
)
def test_bad_values_fail_before_any_file_changes(finished, overrides, key):
    before = snapshot(finished)
    with pytest.raises(ConfigError, match=key):
        run(tiny(finished, *overrides))
    assert snapshot(finished) == before


def test_differences_ignore_unset_keys_an_older_config_lacks():
    old = {"scale": {"lr": 0.1}, "callbacks": {}}
    new = {"scale": {"lr": 0.1}, "callbacks": {"early_stop": {"val_acc": None, "patience": 2}}}
    assert config_differences(old, new) == []
    new["callbacks"]["early_stop"]["val_acc"] = 0.99
    assert config_differences(old, new) == [
        "callbacks.early_stop.patience: '<absent>' -> 2",
        "callbacks.early_stop.val_acc: '<absent>' -> 0.99",
    ]


@pytest.mark.slow
def test_redirected_run_logs_progress_lines_while_it_trains(tmp_path):
    import subprocess
    import sys

    from tests.training.helpers import REPO

    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        subprocess.run(
            [sys.executable, str(REPO / "train.py"), "experiment=tiny", "task=parity",
             "split=1+1", f"root={tmp_path / 'runs'}", "scale.max_steps=6",
             "trainer.progress_bar=true", "trainer.progress_every=2"],
            stdout=out, stderr=subprocess.STDOUT, check=True, cwd=tmp_path,
        )  # fmt: skip
    lines = log.read_text().splitlines()
    progress = [i for i, line in enumerate(lines) if "parity/rlt1/1+1/seed42: step " in line]
    done = next(i for i, line in enumerate(lines) if line.startswith("[done]"))
    steps = [lines[i].split("step ")[1].split(",")[0] for i in progress]
    assert steps == ["2/6", "4/6", "6/6"]
    assert any("seed42: start at step 0/6" in line for line in lines)
    assert progress[-1] < done  # written while training, not at the end
    run_log = (tmp_path / "runs/tiny/parity/rlt1/1+1/seed42/train.log").read_text()
    assert "step 4/6" in run_log and "steps/s" in run_log


class _Payload:
    """Unpickling this runs a command: what a malicious checkpoint would carry."""

    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED",))


def test_policy_file_with_a_pickle_payload_is_refused(tmp_path, monkeypatch):
    import torch

    from rlt.training.checkpoints import load_weights

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "min_val_loss.pt"
    torch.save({"step": 1, "feedback_interval": 1, "state_dict": {}, "x": _Payload()}, path)
    with pytest.raises(RuntimeError, match="only tensors and plain values"):
        load_weights(path)
    assert not (tmp_path / "PWNED").exists()
    good = tmp_path / "good.pt"
    torch.save({"step": 3, "feedback_interval": None, "state_dict": {"w": torch.ones(2)}}, good)
    assert load_weights(good)["step"] == 3


def test_every_model_field_reaches_the_built_model():
    from rlt.training.module import module_for
    from rlt.training.spec import prepare

    spec = prepare(compose_cfg(["experiment=tiny", "scale.d_model=64", "model.init_std=0.05"]))
    assert spec.model_kwargs["init_std"] == 0.05
    model = module_for(spec.entry)(spec.model_kwargs).model
    assert model.config.init_std == 0.05
    w = model.encoder[0].attn.qkv.weight  # a plain (non-residual) projection: N(0, init_std)
    assert 0.045 < float(w.detach().std()) < 0.055
    spec = prepare(
        compose_cfg(["experiment=tiny", "model.enc_final_norm=true", "model.fused=false"])
    )
    assert spec.model_kwargs["enc_final_norm"] is True and spec.model_kwargs["fused"] is False


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+model.nope=1"], r"model\.nope is not a field .*valid keys: .*model\.init_std"),
        (["model=lstm", "+model.alpha=1"], r"model\.alpha is not a field of model family 'lstm'"),
        (["model.init_std=abc"], r"model\.init_std must be of type float"),
        (["model.fused=3"], r"model\.fused must be of type bool"),
        (["+trainer.args.max_steps=3"], r"use scale\.max_steps instead"),
        (["+trainer.args.bogus=3"], r"not a lightning\.Trainer argument"),
    ],
)
def test_bad_model_and_trainer_keys_are_named(overrides, message):
    from rlt.training.spec import prepare

    with pytest.raises(ConfigError, match=message):
        prepare(compose_cfg(["experiment=tiny", *overrides]))


def test_trainer_args_pass_through(tmp_path, monkeypatch):
    """``trainer.args`` reach Lightning's Trainer as given (seen by the Trainer itself)."""
    import functools

    import lightning as L

    seen = {}
    real_init = L.Trainer.__init__

    @functools.wraps(real_init)  # the argument check reads the signature
    def init(self, *args, **kwargs):
        seen.update(kwargs)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(L.Trainer, "__init__", init)
    out = run(tiny(tmp_path, "+trainer.args.limit_train_batches=4", "scale.max_steps=1"))
    assert out["state"] == "done"
    assert seen.get("limit_train_batches") == 4


def test_command_line_names_valid_model_keys(tmp_path):
    import subprocess
    import sys

    from tests.training.helpers import REPO

    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "model.nope=1", f"root={tmp_path}"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "model.nope is not a model key" in proc.stderr and "model.init_std" in proc.stderr
    assert "Traceback" not in proc.stderr and not any(tmp_path.iterdir())


def test_unreadable_results_are_repaired_on_rerun(finished, capsys):

    run_dir = next(finished.rglob("results.json")).parent
    before = load_results(run_dir)
    (run_dir / "results.json").write_text('{"schema_version": 1, "run": {')
    out = run(tiny(finished))
    assert "[repair]" in capsys.readouterr().out
    assert out["state"] == "resumed"
    after = load_results(run_dir)
    assert after["test_by_policy"] == before["test_by_policy"]
    assert after["val_curve"] == before["val_curve"]


def test_unwritable_run_directory_gets_one_clear_error(tmp_path):
    # A file where the run's directory tree should go: mkdir fails even for root (a read-only
    # directory does not stop root, which CI runs as).
    blocker = tmp_path / "blocked"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="is a file, not a directory; use root=DIR"):
        run(tiny(blocker))
    # below it (train.py's precheck let it through, and Hydra failed making the directory)
    with pytest.raises(ConfigError, match=f"{blocker} is a file, not a directory; .*root=DIR"):
        run(tiny(blocker / "below"))
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize(("scale", "split"), [("laptop", "1+1"), ("paper", "4+4")])
def test_deltanet_is_parameter_matched_to_the_transformer_at_each_scale(scale, split):
    from rlt.models import count_parameters
    from rlt.training.families import model_config

    counts = {}
    for model in ("deltanet", "deltanet01", "gated_deltanet", "transformer"):
        cfg = compose_cfg([f"model={model}", f"scale={scale}", f"split={split}"])
        _, config_cls, kwargs = model_config(cfg)
        counts[model] = count_parameters(config_cls(**kwargs))
        assert kwargs.get("gated", False) == (model == "gated_deltanet")
    assert counts["deltanet"] == counts["deltanet01"]
    # the gate adds a d x H projection and 2 H scalars per layer
    heads, layers = 4, (2 if scale == "laptop" else 8)
    d = 64 if scale == "laptop" else 512
    assert counts["gated_deltanet"] - counts["deltanet"] == layers * (d * heads + 2 * heads)
    for model in ("deltanet", "gated_deltanet"):
        assert abs(counts[model] / counts["transformer"] - 1) < 0.03, counts


def test_early_stop_ends_the_run_and_a_rerun_keeps_it(tmp_path):
    import json

    overrides = [
        "scale.max_steps=8",
        "scale.val_every=2",
        "callbacks.early_stop.val_acc=0.0",  # every validation qualifies
        "callbacks.early_stop.patience=2",
    ]
    out = run(tiny(tmp_path, *overrides))
    run_dir = Path(out["run_dir"])
    res = load_results(run_dir)
    assert out["state"] == "done" and res["stopped_early"] == 4
    assert [r["step"] for r in res["val_curve"]] == [2, 4]
    assert res["test_by_policy"]["final"]["step"] == 4
    # Killed after stopping but before results were written: the rerun resumes, trains nothing
    # more and writes the same results.
    (run_dir / "results.json").unlink()
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "state": "running"}))
    again = run(tiny(tmp_path, *overrides))
    assert again["state"] == "resumed"
    res2 = load_results(run_dir)
    assert res2["val_curve"] == res["val_curve"] and res2["test"] == res["test"]


def test_diagnostics_record_the_feedback_path(tmp_path):
    import json
    import math

    out = run(tiny(tmp_path, "scale.max_steps=4", "callbacks.diagnostics_every=2"))
    rows = json.loads((Path(out["run_dir"]) / "diagnostics.json").read_text())
    assert [r["step"] for r in rows] == [2, 4]
    for r in rows:
        for key in ("grad_s_star", "grad_W_s", "grad_W_g_state", "grad_total", "state_share"):
            assert math.isfinite(r[key]) and r[key] >= 0, key
        assert 0 < r["gate"] < 1 and r["grad_W_s"] <= r["grad_total"]
    rlt0 = run(tiny(tmp_path, "model=rlt0", "scale.max_steps=4", "callbacks.diagnostics_every=2"))
    assert not (Path(rlt0["run_dir"]) / "diagnostics.json").exists()  # no feedback path


def test_state_share_matches_a_direct_computation():
    import torch

    from rlt.models import RLTConfig, build_model
    from rlt.training.callbacks import FeedbackDiagnostics

    torch.manual_seed(0)
    model = build_model(RLTConfig.from_split("1+1", d_model=16, n_heads=2, alpha=0.5))
    tokens = torch.randint(3, 20, (3, 9))
    tokens[0, 6:] = 0  # padding is left out
    got = FeedbackDiagnostics("unused", lambda: tokens, 1).state_share(model)
    # Directly: run the plain decoder; each position's contribution is the merge's output
    # minus its input e (the definition), the gate sigmoid(W_e e + W_s norm(s)).
    with torch.no_grad():
        e = model.encode(tokens)
        merge = model.merge
        s = merge.initial_state(3)
        window, memory = model.empty_window(3, e), model.memory_kv(e)
        ratios, gates = [], []
        for t in range(9):
            # The state's contribution as the merge's own output shows it: u - e.
            ge = merge.gate_input(e[:, t : t + 1])
            contrib = merge(e[:, t : t + 1], ge, s)[:, 0] - e[:, t]
            ratio = contrib.norm(dim=-1) / e[:, t].norm(dim=-1)
            gs = merge.state_proj(merge.state_norm(s)).chunk(2, dim=-1)[0]
            gate = torch.sigmoid(ge[:, 0] + gs)
            keep = tokens[:, t] != 0
            ratios += ratio[keep].tolist()
            gates += gate.mean(dim=-1)[keep].tolist()
            out, s_next, window = model.decode(e[:, t : t + 1], memory, start=t, s=s, window=window)
            s = s_next
    assert got["state_share"] == pytest.approx(sum(ratios) / len(ratios), rel=1e-5)
    assert got["gate"] == pytest.approx(sum(gates) / len(gates), rel=1e-5)


@pytest.mark.parametrize(
    ("model", "delta_family"),
    [
        ("gated_deltanet", True),
        ("gated_deltanet01", True),
        ("deltanet01", True),
        ("lstm", False),
        ("rlt2_sched_4to1", False),
        ("transformer", False),
    ],
)
def test_model_key_check_reads_the_family_from_the_model_file(model, delta_family, capsys):
    from rlt.training.hydra_support import precheck_overrides

    if delta_family:
        precheck_overrides([f"model={model}", "model.gated=false"])  # a key of its family
    with pytest.raises(SystemExit):
        precheck_overrides([f"model={model}", "model.nope=1"])
    listed = capsys.readouterr().err
    assert "model.nope is not a model key" in listed
    assert ("model.neg_eigval" in listed and "model.gated" in listed) == delta_family
    assert ("model.window" in listed and "model.tbptt" in listed) == model.startswith("rlt")


def test_an_early_stop_that_never_fired_is_the_fixed_step_run(tmp_path):
    """Issue 28: a finished run of a preset with early stopping that trained every step is
    the run the same preset trains without it, so it is skipped, not refused; a run whose
    early stop fired is another configuration, and so is asking to add a stop afterwards."""
    never = ["callbacks.early_stop.val_acc=1.0", "callbacks.early_stop.patience=50"]
    out = run(tiny(tmp_path, *never))
    assert out["state"] == "done" and load_results(Path(out["run_dir"]))["stopped_early"] is None
    assert run(tiny(tmp_path))["state"] == "skipped"
    with pytest.raises(ConfigError, match="callbacks.early_stop.val_acc: 1.0 -> 0.5"):
        run(tiny(tmp_path, "callbacks.early_stop.val_acc=0.5"))

    fired = tmp_path / "fired"
    stop = ["scale.max_steps=8", "scale.val_every=2", "callbacks.early_stop.val_acc=0.0"]
    out = run(tiny(fired, *stop))
    assert load_results(Path(out["run_dir"]))["stopped_early"] == 4
    with pytest.raises(ConfigError, match="callbacks.early_stop.val_acc: 0.0 -> None"):
        run(tiny(fired, "scale.max_steps=8", "scale.val_every=2"))


def test_a_stopped_run_resumes_only_in_the_arithmetic_it_started_in(tmp_path, monkeypatch):
    """status.json records whether the run started with portable arithmetic (rlt/portable/);
    resuming it in the other mode would change its numbers mid-run, so it is refused in one
    line naming RLT_PORTABLE, before anything is written."""
    out = run(
        tiny(tmp_path, "+callbacks.inject_failure={kind: error, step: 3}"), raise_on_failure=False
    )
    assert out["state"] == "failed"
    status = json.loads((Path(out["run_dir"]) / "status.json").read_text())
    assert status["portable"] is portable.active()
    before = snapshot(tmp_path)
    _other_arithmetic(monkeypatch)
    with pytest.raises(ConfigError, match=r"RLT_PORTABLE=0.*force=true") as err:
        run(tiny(tmp_path))
    assert "\n" not in str(err.value)
    assert snapshot(tmp_path) == before
    monkeypatch.undo()
    assert run(tiny(tmp_path))["state"] == "resumed"


def test_a_run_stopped_between_its_results_and_its_done_status_is_checked_as_a_resume(
    tmp_path, monkeypatch
):
    """results.json is written before status.json says done; a run stopped between the two is
    continued from last.ckpt (not skipped), so both resume checks apply to it, by one rule: in
    the other arithmetic it is refused, and a done run with readable results is only skipped."""
    out = run(tiny(tmp_path))
    run_dir = Path(out["run_dir"])
    status_path = run_dir / "status.json"
    done = json.loads(status_path.read_text())
    status_path.write_text(json.dumps({**done, "state": "running"}))
    _other_arithmetic(monkeypatch)
    with pytest.raises(ConfigError, match=r"cannot resume .*force=true"):
        run(tiny(tmp_path))
    status_path.write_text(json.dumps(done))
    assert run(tiny(tmp_path))["state"] == "skipped"


def _other_arithmetic(monkeypatch) -> None:
    monkeypatch.setattr(portable, "status", "off (RLT_PORTABLE=0)" if portable.active() else "on")


def test_a_run_stopped_before_the_record_resumes_only_with_the_old_default(tmp_path, monkeypatch):
    """status.json without ``portable`` (a run stopped before the mode was recorded) started
    with it off, the default then: it resumes with RLT_PORTABLE=0 and is refused with it on."""
    out = run(
        tiny(tmp_path, "+callbacks.inject_failure={kind: error, step: 3}"), raise_on_failure=False
    )
    path = Path(out["run_dir"]) / "status.json"
    status = json.loads(path.read_text())
    del status["portable"]
    path.write_text(json.dumps(status))
    monkeypatch.setattr(portable, "status", "on")
    with pytest.raises(
        ConfigError, match=r"started with portable arithmetic off: resume it with RLT_PORTABLE=0"
    ):
        run(tiny(tmp_path))
    monkeypatch.setattr(portable, "status", "off (RLT_PORTABLE=0)")
    assert run(tiny(tmp_path))["state"] == "resumed"


def test_a_portable_run_begun_before_strict_resumes_only_with_mkl_cbwr_avx2(tmp_path, monkeypatch):
    """A portable run whose status.json has no ``mkl_cbwr`` began before 2026-12-05, with
    ``MKL_CBWR=AVX2`` (not STRICT: rlt/portable/): resuming it with STRICT would change its
    GEMM roundings mid-run, so it is refused in one line naming MKL_CBWR=AVX2, nothing written;
    with MKL_CBWR=AVX2 in force it resumes."""
    out = run(
        tiny(tmp_path, "+callbacks.inject_failure={kind: error, step: 3}"), raise_on_failure=False
    )
    path = Path(out["run_dir"]) / "status.json"
    status = json.loads(path.read_text())
    assert status["arithmetic"] == portable.started_arithmetic()
    status["portable"] = True
    del status["arithmetic"]
    path.write_text(json.dumps(status))
    monkeypatch.setattr(portable, "status", "on")
    for name, value in portable.SETTINGS.items():
        monkeypatch.setenv(name, value)
    before = snapshot(tmp_path)
    with pytest.raises(
        ConfigError, match=r"MKL_CBWR=AVX2 and this .* resume it with MKL_CBWR=AVX2"
    ):
        run(tiny(tmp_path))
    assert snapshot(tmp_path) == before
    monkeypatch.setenv("MKL_CBWR", "avx2")  # spelled as a user might
    assert run(tiny(tmp_path))["state"] == "resumed"


def test_a_portable_run_begun_before_the_exact_square_root_resumes_only_without_it(
    tmp_path, monkeypatch
):
    """A portable run whose recorded arithmetic has no ``exact_sqrt`` began before 2026-12-07,
    with torch's own float32 square root (AdamW's, one ulp off on AMD hosts): resuming it with
    the exact one would change its updates mid-run, so it is refused in one line naming
    RLT_EXACT_SQRT=0, nothing written; with RLT_EXACT_SQRT=0 it resumes, and a run begun with
    the exact root is refused under RLT_EXACT_SQRT=0."""
    monkeypatch.setattr(portable, "status", "on")
    for name, value in portable.SETTINGS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(portable.EXACT_SQRT, raising=False)
    out = run(
        tiny(tmp_path, "+callbacks.inject_failure={kind: error, step: 3}"), raise_on_failure=False
    )
    path = Path(out["run_dir"]) / "status.json"
    status = json.loads(path.read_text())
    assert status["arithmetic"]["exact_sqrt"] is True
    monkeypatch.setenv(portable.EXACT_SQRT, "0")
    with pytest.raises(ConfigError, match=r"rounded exactly .* resume it without RLT_EXACT_SQRT=0"):
        run(tiny(tmp_path))
    monkeypatch.delenv(portable.EXACT_SQRT)
    del status["arithmetic"]["exact_sqrt"]
    path.write_text(json.dumps(status))
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match=r"torch's own .* resume it with RLT_EXACT_SQRT=0") as err:
        run(tiny(tmp_path))
    assert "\n" not in str(err.value) and snapshot(tmp_path) == before
    monkeypatch.setenv(portable.EXACT_SQRT, "0")
    assert run(tiny(tmp_path))["state"] == "resumed"


def test_a_run_begun_with_portable_off_resumes_only_with_the_same_settings(tmp_path, monkeypatch):
    """Off is not one arithmetic: a run begun with RLT_PORTABLE=0 and MKL_CBWR=AVX2,STRICT set
    by hand is refused when resumed with MKL's own mode (the settings differ), in one line
    naming the setting to restore; with the same settings it resumes."""
    monkeypatch.setattr(portable, "status", "off (RLT_PORTABLE=0)")
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    out = run(
        tiny(tmp_path, "+callbacks.inject_failure={kind: error, step: 3}"), raise_on_failure=False
    )
    status = json.loads((Path(out["run_dir"]) / "status.json").read_text())
    assert status["portable"] is False and status["arithmetic"]["mkl_cbwr"] == "AVX2,STRICT"
    monkeypatch.delenv("MKL_CBWR")
    before = snapshot(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"MKL_CBWR=AVX2,STRICT and this process has MKL_CBWR unset: resume it with MKL_CBWR=AVX2,STRICT",
    ) as err:
        run(tiny(tmp_path))
    assert "\n" not in str(err.value) and snapshot(tmp_path) == before
    monkeypatch.setenv("MKL_CBWR", "avx2,strict")
    assert run(tiny(tmp_path))["state"] == "resumed"


def test_a_forced_retrain_begun_in_the_other_arithmetic_starts_anew(finished, monkeypatch):
    """force=true continues its own stopped retrain, but one begun in the other arithmetic is
    started again from scratch (what force=true promises), recording the arithmetic it runs in."""
    stop = tiny(finished, "force=true", "+callbacks.inject_failure={kind: error, step: 3}")
    assert run(stop, raise_on_failure=False)["state"] == "failed"
    run_dir = next(finished.rglob("status.json")).parent
    rundir.write_status(run_dir, "interrupted", stopped_by="SIGTERMException")  # as if stopped
    _other_arithmetic(monkeypatch)
    out = run(tiny(finished, "force=true"))
    assert out["state"] == "done"  # not "resumed": trained from step 0
    assert json.loads((run_dir / "status.json").read_text())["portable"] is portable.active()


def _documented_keys() -> tuple[set[str], set[str]]:
    """The top-level and ``run`` keys of docs/DESIGN.md's results.json example, and the keys
    its notes name as optional (``probe``; ``run.plugins``)."""
    design = (Path(__file__).parents[2] / "docs" / "DESIGN.md").read_text()
    example = design.split("`results.json` (schema_version 1", 1)[1].split("```json", 1)[1]
    example = example.split("```", 1)[0]
    top = set(re.findall(r'^  "(\w+)":', example, re.M))
    run_block = example.split('"run": {', 1)[1].split("}", 1)[0]
    return top, set(re.findall(r'"(\w+)":', run_block))


def test_the_documented_results_schema_is_what_a_run_writes(finished):
    """One schema (docs/DESIGN.md section 4): every key a run writes is documented there and
    every documented key is written (``probe`` only where a task has a probe target,
    ``test_by_budget`` only with callbacks.budgets: both in the notes below the example)."""
    written = load_results(next(finished.rglob("results.json")).parent)
    top, run_keys = _documented_keys()
    optional = {"probe", "test_by_budget"}
    design = (Path(__file__).parents[2] / "docs" / "DESIGN.md").read_text()
    assert all(f"`{key}`" in design for key in optional)
    assert set(written) - optional == top - optional
    assert set(written["run"]) - {"plugins"} == run_keys - {"plugins"}


def test_only_a_depth_only_family_reads_the_split_as_its_total(monkeypatch):
    """The family's entry decides (rlt/families.py ``depth_only``), not its name: a split
    family of a plugin keeps 1+1 and 2+0 apart, as the RLT does, while the Transformer's
    1+1 and 2+0 are one two-layer run."""
    from rlt import families
    from rlt.training.identity import identity_view

    split = families.Family("split_plugin", "x:C", "x:M", False, (families.Variant("SP"),))
    monkeypatch.setitem(families._TABLE, split.name, split)

    def view(family, n_enc, n_dec):
        split_node = {"name": f"{n_enc}+{n_dec}", "n_enc": n_enc, "n_dec": n_dec}
        return identity_view({"model": {"family": family}, "split": split_node})

    for family in ("rlt", "split_plugin"):
        assert view(family, 1, 1) != view(family, 2, 0), family
    assert view("transformer", 1, 1) == view("transformer", 2, 0)
    assert view("transformer", 1, 1)["split.n_layers"] == 2
