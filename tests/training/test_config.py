"""Every config option composes, and every task x model x split run config validates."""

import itertools

import pytest
from omegaconf import OmegaConf

from rlt.training.spec import ConfigError, prepare
from tests.training.helpers import CONF, compose_cfg, group_options

GROUPS = [
    "task",
    "model",
    "split",
    "scale",
    "trainer",
    "logger",
    "callbacks",
    "optim",
    "experiment",
    "debug",
    "sweep",
]


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_composes(group):
    options = group_options(group)
    assert options, f"conf/{group} has no options"
    for option in options:
        cfg = compose_cfg([f"{group}={option}"], hydra=True)
        OmegaConf.resolve(cfg)  # every interpolation resolves
        assert cfg.out_dir


@pytest.mark.parametrize("launcher", ["basic", "parallel", "slurm", "local_submitit"])
def test_launchers_compose(launcher):
    cfg = compose_cfg([f"hydra/launcher={launcher}", "sweep=tiny"], hydra=True)
    assert cfg.hydra.launcher._target_


def test_every_task_model_split_validates():
    # Every task x model, and every model x split (composing all 2,400 triples through prepare
    # took over a minute; a split's checks read the model and the scale, never the task, and a
    # task's read the model, never the split). Each split's node is swapped into one composed
    # config, as train.py's override would (every split file composes in the test above).
    splits = {s: compose_cfg([f"split={s}"]).split for s in group_options("split")}
    models = group_options("model")
    base = {
        (task, model): compose_cfg([f"task={task}", f"model={model}", "scale=paper"])
        for task, model in itertools.product(group_options("task"), models)
    }
    cases = [(cfg, None) for cfg in base.values()]
    cases += [(base["parity", m], s) for m, s in itertools.product(models, splits)]
    for composed, split in cases:
        cfg = composed.copy()
        if split is not None:
            cfg.split = splits[split]
        spec = prepare(cfg)
        node = cfg.split
        assert spec.identity["n_layers"] == node.n_enc + node.n_dec
        assert spec.identity["split"] == (node.name if spec.family == "rlt" else None)
        assert spec.test_lengths


def test_run_directory_is_derived_from_the_config():
    cfg = compose_cfg(["task=parity", "model=rlt2", "split=5+3", "seed=0", "scale=paper"])
    assert cfg.out_dir == "runs/paper/parity/rlt2_b4/5+3/seed0"  # seed 0 is a valid seed
    t44 = compose_cfg(["model=transformer", "split=4+4"]).out_dir
    t53 = compose_cfg(["model=transformer", "split=5+3"]).out_dir
    assert t44 == t53 and t44.endswith("transformer/L8/seed42")


def test_paper_preset_follows_the_protocol():
    cfg = compose_cfg(["scale=paper", "task=mod5_flat"])
    assert (cfg.scale.d_model, cfg.scale.d_ff, cfg.scale.n_heads) == (512, 1365, 4)
    assert cfg.scale.global_batch // cfg.scale.micro_batch == 16
    assert cfg.scale.max_steps == 5000
    assert compose_cfg(["scale=paper", "task=parity"]).scale.max_steps == 2000


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["model=rlt2", "model.feedback_interval=null"], "RLT-2 needs a chunk size"),
        (["scale.global_batch=10", "scale.micro_batch=4"], "not a multiple"),
        (["split.n_enc=0", "split.n_dec=0"], "no layers"),
        (["model.window=0"], "window"),
        (["task.test_lengths=[4]", "task=mod5_flat"], "odd"),
        (["model=rlt2", "model.feedback_schedule=[[10,4]]"], "first stage"),
    ],
)
def test_bad_configs_fail_before_work(overrides, match):
    with pytest.raises(ConfigError, match=match):
        prepare(compose_cfg(overrides))


@pytest.mark.parametrize(
    "overrides, match",
    [
        # Hydra accepts a new key with "+": the schema refuses one nothing would read
        (["+scale.lrr=0.1"], r"scale\.lrr is not a key of scale .*valid keys: scale\.name, "),
        (["+trainer.foo=1"], r"trainer\.foo is not a key of trainer"),
        (["+callbacks.early_stop.pateince=3"], r"callbacks\.early_stop\.pateince is not a key"),
        (["+split.n_mid=2"], r"split\.n_mid is not a key of split"),
        # types and ranges, one line naming the key
        (["scale.max_steps=abc"], r"^scale\.max_steps must be an integer >= 1, got 'abc'$"),
        (["scale.lr=-1"], r"^scale\.lr must be a number >= 0, got -1$"),
        (["scale.d_ff=2.5"], r"^scale\.d_ff must be an integer >= 1, got 2\.5$"),
        (["callbacks.early_stop.patience=0"], r"patience must be an integer >= 1, got 0$"),
        (["trainer.progress_seconds=true"], r"progress_seconds must be a number >= 0, got True"),
        (["seed=-1"], r"^seed must be an integer >= 0, got -1$"),
        # bool("no") is True: force=no retrained a finished run and replaced its results
        (["force=no"], r"^force must be true or false, got 'no'$"),
        (["resume=off"], r"^resume must be true or false, got 'off'$"),
        (["print_table=1"], r"^print_table must be true or false, got 1$"),
        # a 3+2 was stored, and tabulated, as 2+2
        (["split=2+2", "split.n_enc=3"], r"^split\.name '2\+2' does not match split\.n_enc=3 "
         r"\+ split\.n_dec=2; use split=3\+2"),
    ],
)  # fmt: skip
def test_schema_refuses_unknown_keys_and_bad_values_in_one_line(overrides, match):
    with pytest.raises(ConfigError, match=match):
        prepare(compose_cfg(["experiment=tiny", *overrides]))


def test_a_stored_config_with_a_retired_key_still_scores():
    """Committed runs' configs hold callbacks.nan_guard, a key of an older version: scoring
    such a run (eval.py reads its config back) lets it through; a new run is refused."""
    cfg = compose_cfg(["experiment=tiny", "+callbacks.nan_guard=true"])
    assert prepare(cfg.copy(), scoring=True).settings.scale.max_steps == 4
    with pytest.raises(ConfigError, match="callbacks.nan_guard is not a key"):
        prepare(cfg)


def test_conf_groups_have_no_stray_files():
    for group in GROUPS:
        for path in (CONF / group).iterdir():
            assert path.suffix == ".yaml", f"unexpected file {path}"


@pytest.mark.parametrize(
    "overrides, gpus, cpus",
    [
        ([], 0, 4),  # trainer=cpu (the default), threads auto -> the report's 4
        (["trainer.threads=1"], 0, 1),
        (["trainer=gpu"], 1, 4),
        (["trainer=gpu", "trainer.devices=2", "trainer.threads=8"], 2, 8),
        (["sweep=laptop"], 0, 1),
    ],
)
def test_slurm_launcher_resources_follow_the_trainer(overrides, gpus, cpus):
    cfg = compose_cfg(["hydra/launcher=slurm", *overrides], hydra=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert (launcher["gpus_per_node"], launcher["cpus_per_task"]) == (gpus, cpus)
    # Set by hand, the launcher's keys still win.
    cfg = compose_cfg(["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=3"], hydra=True)
    assert cfg.hydra.launcher.gpus_per_node == 3
