"""The optimizer and schedule as config (conf/optim/, conf/scheduler/): the defaults are the
report's AdamW and warmup + cosine, alternatives train, runs stored before the groups were
Hydra targets keep their identity, and a bad entry is refused before any work."""

from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest
import torch
import yaml
from omegaconf import OmegaConf
from torch import nn

from rlt.training import optim
from rlt.training.identity import config_differences, requested_config
from rlt.training.run import run
from rlt.training.spec import ConfigError, prepare
from tests.training.helpers import REPO, compose_cfg, load_results


def groups_of(cfg) -> tuple[dict, dict]:
    return (
        OmegaConf.to_container(cfg.optim, resolve=True),
        OmegaConf.to_container(cfg.scheduler, resolve=True),
    )


def lrs(scheduler_cfg: dict, *, lr: float, max_steps: int) -> list[float]:
    """The learning rate of every step under a scheduler entry."""
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    sched = optim.build_scheduler(opt, scheduler_cfg, max_steps)
    out = []
    for _ in range(max_steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_the_default_schedule_is_the_reports_warmup_then_cosine():
    cfg = compose_cfg(["scale=tiny", "scale.lr=1e-3", "scale.min_lr=1e-4"])
    cfg.scale.warmup_steps, cfg.scale.max_steps = 4, 24
    _, sched = groups_of(cfg)
    got = lrs(sched, lr=1e-3, max_steps=24)
    # Written out independently: (s+1)/4 of lr during warmup, then
    # min_lr + (lr - min_lr) * (1 + cos(pi * (s - 4) / 19)) / 2 to the last step (s = 23).
    want = [1e-3 * (s + 1) / 4 for s in range(4)] + [
        1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * (s - 4) / 19)) for s in range(4, 24)
    ]
    assert got == pytest.approx(want, rel=1e-12)
    assert got[3] == pytest.approx(1e-3) and got[-1] == pytest.approx(1e-4)


def test_the_default_schedule_is_torchs_linear_warmup_then_cosine_annealing():
    # torch's own composition (LinearLR, then CosineAnnealingLR from the warmup's end) gives the
    # same schedule to 1e-13; not to the last bit (CosineAnnealingLR updates recursively: ~3 %
    # of steps bit-equal), which is why the run keeps its closed form (bit-equal results).
    warmup, steps, lr, min_lr = 20, 3000, 3e-3, 1e-4  # the laptop preset
    cfg = compose_cfg(["scale=laptop"])
    scale = cfg.scale
    assert (scale.warmup_steps, scale.max_steps, scale.lr, scale.min_lr) == (
        warmup,
        steps,
        lr,
        min_lr,
    )
    got = lrs(groups_of(cfg)[1], lr=lr, max_steps=steps)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    want = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SequentialLR's own deprecation notes
        linear = torch.optim.lr_scheduler.LinearLR(opt, 1 / warmup, 1.0, total_iters=warmup - 1)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps - 1 - warmup, min_lr)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [linear, cosine], milestones=[warmup])
        for _ in range(steps):
            want.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    assert got == pytest.approx(want, rel=1e-12)


def test_the_default_optimizer_is_adamw_with_the_reports_settings():
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    opt_cfg, _ = groups_of(compose_cfg())
    opt = optim.build_optimizer(model, opt_cfg, lr=3e-3)
    assert type(opt) is torch.optim.AdamW
    decayed, plain = opt.param_groups
    assert tuple(decayed["betas"]) == (0.9, 0.95) and decayed["lr"] == 3e-3
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    # embedding and linear weight decay; the linear bias and the norm's weight and bias do not
    assert {id(p) for p in decayed["params"]} == {id(model[0].weight), id(model[1].weight)}
    assert len(plain["params"]) == 3


def test_a_torch_scheduler_is_a_target_too():
    sched = {
        "_target_": "torch.optim.lr_scheduler.StepLR",
        "_partial_": True,
        "step_size": 3,
        "gamma": 0.5,
    }
    assert optim.takes(optim.factory("scheduler", sched), "max_steps") is False
    assert lrs(sched, lr=1.0, max_steps=7) == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]


def test_constant_schedule_warms_up_then_holds():
    sched = {"_target_": "rlt.training.optim.constant", "_partial_": True, "warmup_steps": 2}
    assert lrs(sched, lr=0.5, max_steps=5) == [0.25, 0.5, 0.5, 0.5, 0.5]


@pytest.mark.parametrize(
    "override, named",
    [
        ("optim._target_=torch.optim.NoSuchThing", "optim._target_"),
        ("scheduler._partial_=false", "scheduler._partial_ must be true"),
        ("+optim.betaz=1", "betaz"),
        ("~scheduler._target_", "scheduler._target_ is missing"),
        ("optim=nosuch", "optim"),
    ],
)
def test_a_bad_entry_is_refused_before_any_work(tmp_path, override, named):
    from hydra.errors import MissingConfigException

    try:
        cfg = compose_cfg(["experiment=tiny", f"root={tmp_path}", override])
    except MissingConfigException as e:  # an unknown group option: Hydra lists the choices
        assert "optim" in str(e) and "adamw" in str(e) and "sgd" in str(e)
        return
    with pytest.raises(ConfigError, match=named):
        prepare(cfg)
    assert not any(tmp_path.iterdir())


def test_runs_stored_before_the_groups_were_targets_keep_their_identity():
    """A committed run whose config.yaml predates conf/scheduler/ (AdamW and warmup + cosine
    were code then) is the run today's default config asks for, and not the SGD or constant
    one."""
    run_dir = REPO / "docs/results/laptop/runs/laptop_long/parity_3to16/transformer/L2/seed42"
    stored = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert "scheduler" not in stored and "_target_" not in stored["optim"]
    base = ["sweep=laptop_long", "grid_cell=laptop/parity_transformer", "seed=42"]
    assert config_differences(stored, requested_config(compose_cfg(base))) == []
    sgd = config_differences(stored, requested_config(compose_cfg([*base, "optim=sgd"])))
    assert "optim._target_: 'torch.optim.AdamW' -> 'torch.optim.SGD'" in sgd
    flat = config_differences(stored, requested_config(compose_cfg([*base, "scheduler=constant"])))
    assert any(line.startswith("scheduler._target_") for line in flat)
    warm = config_differences(
        stored, requested_config(compose_cfg([*base, "scheduler.warmup_steps=7"]))
    )
    assert warm == ["scheduler.warmup_steps: 20 -> 7"]


@pytest.mark.slow
def test_sgd_with_a_constant_schedule_trains(tmp_path):
    cfg = compose_cfg(
        [
            "experiment=tiny",
            f"root={tmp_path}",
            "task=parity",
            "split=1+1",
            "optim=sgd",
            "scheduler=constant",
            "scale.lr=0.05",
            "scale.warmup_steps=2",
            "logger=csv",
        ]
    )
    out = run(cfg)
    assert out["state"] == "done"
    run_dir = tmp_path / cfg.group / cfg.cell
    results = load_results(run_dir)
    assert results["max_steps"] == cfg.scale.max_steps
    assert math.isfinite(results["selection"]["val"]["loss"])
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    (state,) = ckpt["optimizer_states"]
    assert state["param_groups"][0]["momentum"] == 0.9  # SGD's, not AdamW's betas
    assert "betas" not in state["param_groups"][0]
    metrics = pd.read_csv(next(run_dir.rglob("metrics.csv")))
    lr = metrics["train/lr"].dropna().tolist()
    assert lr == pytest.approx([0.025] + [0.05] * (cfg.scale.max_steps - 1), rel=1e-6)


@pytest.mark.slow
def test_a_run_written_before_the_groups_existed_is_skipped_and_rebuilt(tmp_path):
    """A finished run whose config.yaml lacks conf/scheduler/ and optim's _target_ (as every
    run written before them): the same request today finds it finished (no retrain), and
    eval.py's loader rebuilds it with the schedule it trained with."""
    from rlt.training.kept import load_kept

    cfg = compose_cfg(["experiment=tiny", f"root={tmp_path}", "task=parity", "split=1+1"])
    assert run(cfg)["state"] == "done"
    run_dir = tmp_path / cfg.group / cfg.cell
    stored = yaml.safe_load((run_dir / "config.yaml").read_text())
    del stored["scheduler"], stored["optim"]["_target_"], stored["optim"]["_partial_"]
    del stored["plugins"]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(stored))
    before = (run_dir / "results.json").read_bytes()
    again = compose_cfg(["experiment=tiny", f"root={tmp_path}", "task=parity", "split=1+1"])
    assert run(again)["state"] == "skipped"
    assert (run_dir / "results.json").read_bytes() == before
    kept = load_kept(run_dir)
    assert kept.spec.settings.scheduler["_target_"] == "rlt.training.optim.warmup_cosine"
    assert kept.spec.settings.scheduler["warmup_steps"] == cfg.scale.warmup_steps
    assert kept.spec.settings.optim["_target_"] == "torch.optim.AdamW"
