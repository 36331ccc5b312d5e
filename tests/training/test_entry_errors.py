"""train.py's edges that issues 40 and 55 found silent or crashing: a SIGTERM exits non-zero,
damaged status files are repaired rather than crashing, plugins cannot swap token ids or share
a metric name, a run is resumed only with the token table it started with, a ``-m`` command
with ``hydra.searchpath`` is still checked cell by cell, and a scheduler that needs a monitored
metric is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlt import rundir
from rlt.sweep import cell_states
from rlt.training.lifecycle import check
from rlt.training.run import SIGTERM_EXIT
from rlt.training.spec import ConfigError
from tests.test_extending import blocks
from tests.training.helpers import REPO, compose_cfg
from tests.training.test_trust import refused_by_precheck, tiny, train_py

SHORT = ["task=parity", "model=rlt1", "split=1+1", "scale.max_steps=6", "scale.val_every=2"]


def test_sigterm_exits_with_143_and_the_status_says_interrupted(tmp_path):
    """Lightning's SIGTERMException is a SystemExit without a code (exit 0), so
    ``train.py && tables.py`` went on after a stop."""
    stop = "callbacks.inject_failure={kind: sigterm, step: 3}"
    proc = train_py(*tiny(tmp_path / "r", *SHORT, stop), cwd=tmp_path)
    assert proc.returncode == SIGTERM_EXIT == 143, proc.stderr[-2000:]
    (status_path,) = (tmp_path / "r").rglob("status.json")
    assert json.loads(status_path.read_text())["state"] == "interrupted"


def test_sigterm_to_a_grid_trained_in_this_process_stops_the_grid(tmp_path):
    """The basic launcher runs a grid's cells in the process that got the SIGTERM: it stopped
    the current cell and started the next (one kill per cell, and exit 1 at the end). Now the
    grid stops: the summary, the cells after it not started, exit 143."""
    first = "parity/rlt1/1+1/seed42"
    stop = f"callbacks.inject_failure={{kind: sigterm, step: 3, cell: '{first}'}}"
    proc = train_py("-m", *tiny(tmp_path / "r", *SHORT, "seed=42,43", stop), cwd=tmp_path)
    assert proc.returncode == SIGTERM_EXIT, proc.stderr[-2000:]
    assert f"interrupted {first}" in proc.stdout and "total: 1 interrupted" in proc.stdout
    assert "its later cells were not started" in proc.stdout
    sweep = next((tmp_path / "r").iterdir())
    assert json.loads((sweep / first / "status.json").read_text())["state"] == "interrupted"
    assert not (sweep / first.replace("seed42", "seed43")).exists()


@pytest.mark.parametrize(
    "key, nearest",
    [("sed=43", "seed"), ("scale.max_step=10", "scale.max_steps"), ("trainer.thread=1", "trainer.threads")],
)  # fmt: skip
def test_a_misspelled_key_is_one_line_naming_the_nearest(tmp_path, capsys, key, nearest):
    """Hydra's message ran over lines and suggested '+sed=43', which the schema refuses."""
    err = refused_by_precheck(tiny(tmp_path, key), capsys)
    (line,) = err.strip().splitlines()
    assert f"{key.split('=')[0]} is not a config key; did you mean {nearest}?" in line
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_status_json_that_is_not_an_object_is_read_as_damaged(tmp_path):
    run_dir = tmp_path / "sweep" / "parity" / "rlt1" / "1+1" / "seed42"
    run_dir.mkdir(parents=True)
    (run_dir / rundir.STATUS).write_text("[1, 2]")
    assert rundir.read_json(run_dir / rundir.STATUS, corrupt_ok=True) is None
    with pytest.raises(ValueError, match="JSON list, not an object"):
        rundir.read_json(run_dir / rundir.STATUS)
    (state,) = cell_states(tmp_path / "sweep")  # rlt.sweep status: no AttributeError
    assert "does not parse" in (state["error"] or "")


def test_a_damaged_stops_list_does_not_break_the_next_stop(tmp_path):
    rundir.atomic_write_json(tmp_path / rundir.STATUS, {"state": "running", "step": 5, "stops": 7})
    status = rundir.write_status(tmp_path, "interrupted", stopped_by="SIGTERMException")
    assert status["state"] == "interrupted"
    assert [(s["step"], s["by"]) for s in status["stops"]] == [(5, "SIGTERMException")]


def test_two_metrics_of_one_name_are_refused():
    from rlt.tasks import metrics

    @metrics.register_metric("issue40_clash")
    def first(logits, batch):
        return logits[:, 0, 0]

    try:
        with pytest.raises(ValueError, match="'issue40_clash' registered twice"):

            @metrics.register_metric("issue40_clash")
            def second(logits, batch):
                return logits[:, 0, 0]

        assert metrics.EXTRA["issue40_clash"] is first
    finally:
        metrics.EXTRA.pop("issue40_clash", None)


def test_the_order_plugins_are_listed_in_cannot_change_token_ids(tmp_path):
    """Two plugins that each add a token: the ids are the same whichever is listed first (a
    relaunch with the list reordered resumed with two ids swapped)."""
    for name, token in (("lab_a", "TOKA"), ("lab_b", "TOKB")):
        (tmp_path / f"{name}.py").write_text(
            f"from rlt.tasks import vocab\nvocab.add_tokens([{token!r}])\n"
        )
    show = (
        "import sys; from rlt import plugins; from rlt.tasks import vocab; "
        "assert not plugins.load(sys.argv[1:]); "
        "print(vocab.TOKEN_TO_ID['TOKA'], vocab.TOKEN_TO_ID['TOKB'])"
    )

    def ids(*order: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", show, *order], cwd=tmp_path, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert ids("lab_a", "lab_b") == ids("lab_b", "lab_a")


# A stopped run resumed with another plugin set (issue 55) ------------------------------------
# docs/EXTENDING.md's task plugin (tokens "a", "b": ids 140, 141) and two plugins that sort
# before it: one adds a token of its own (the task's tokens move to 141, 142 and its models grow
# to 143 outputs), one adds the task's two tokens in the other order (the same 142 outputs, with
# "a" and "b" swapped: the resume used to be accepted and train on with the ids exchanged).
COUNT_TASK = ["task=count_mod3", "experiment=tiny", "root=runs", "print_table=false"]
EXTRA_PLUGINS = {
    "aa_more": "from rlt.tasks import vocab\nvocab.add_tokens(['z'])\n",
    "aa_swap": "from rlt.tasks import vocab\nvocab.add_tokens(['b', 'a'])\n",
}


def _count_task_train(lab: Path, *args: str) -> subprocess.CompletedProcess:
    """train.py on the plugin task in a fresh process (the vocabulary is process-wide)."""
    return train_py(
        f"hydra.searchpath=[file://{lab / 'my_lab' / 'conf'}]", *COUNT_TASK, *args, cwd=lab
    )


@pytest.fixture(scope="module")
def stopped_plugin_run(tmp_path_factory) -> Path:
    """A tiny run of the plugin task, stopped (SIGTERM) at step 2 of 4, made once."""
    lab = tmp_path_factory.mktemp("lab")
    files, _ = blocks()
    for rel in ("my_lab/count_task.py", "my_lab/conf/task/count_mod3.yaml"):
        (lab / rel).parent.mkdir(parents=True, exist_ok=True)
        (lab / rel).write_text(files[rel])
    for name, text in EXTRA_PLUGINS.items():
        (lab / f"{name}.py").write_text(text)
    stop = "callbacks.inject_failure={kind: sigterm, step: 3}"
    proc = _count_task_train(lab, "plugins=[my_lab.count_task]", stop)
    assert proc.returncode == SIGTERM_EXIT, proc.stderr[-2000:]
    (status,) = (lab / "runs").rglob("status.json")
    assert json.loads(status.read_text())["added_tokens"] == ["a", "b"]  # ids 140, 141
    return lab


@pytest.fixture
def lab(stopped_plugin_run, tmp_path) -> Path:
    copy = tmp_path / "lab"
    shutil.copytree(stopped_plugin_run, copy)
    return copy


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(
    ("plugins", "tokens"),
    [
        ("[my_lab.count_task,aa_more]", "['z', 'a', 'b']"),  # added tokens: 143 outputs
        ("[aa_swap,my_lab.count_task]", "['b', 'a']"),  # the same size, two ids swapped
    ],
    ids=["plugin-adds-tokens", "plugin-swaps-ids"],
)
@pytest.mark.slow
def test_a_run_resumes_only_with_the_token_table_it_started_with(lab, plugins, tokens):
    """A stopped run resumed with a plugin whose tokens sort before the task's: refused in one
    line naming both plugin lists, the tables and the fixes, before anything is written (the
    run stays interrupted, its config.yaml keeps the plugins it trained with); with its own
    plugins it then resumes."""
    (run_dir,) = (lab / "runs").rglob("status.json")
    run_dir = run_dir.parent
    before = _digests(lab / "runs")
    proc = _count_task_train(lab, f"plugins={plugins}")
    err = proc.stderr.strip()
    assert proc.returncode == 2, err[-2000:]
    assert "\n" not in err and err.startswith("config error: cannot resume"), err
    assert "plugins=[my_lab.count_task]" in err and f"plugins={plugins}" in err.replace(" ", "")
    assert "['a', 'b']" in err and tokens in err and "force=true" in err
    assert _digests(lab / "runs") == before
    assert json.loads((run_dir / "status.json").read_text())["state"] == "interrupted"
    proc = _count_task_train(lab, "plugins=[my_lab.count_task]")
    assert proc.returncode == 0 and "[resumed]" in proc.stdout, proc.stderr[-2000:]
    # a finished run scored after its plugin was edited to number the tokens otherwise: eval.py
    # loads the stored plugins, and is refused the same way before it writes anything
    task = lab / "my_lab" / "count_task.py"
    assert 'new_tokens = ("a", "b")' in task.read_text()
    task.write_text(task.read_text().replace('new_tokens = ("a", "b")', 'new_tokens = ("b", "a")'))
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval.py"), str(run_dir)],
        cwd=lab,
        capture_output=True,
        text=True,
    )
    err = proc.stderr.strip()
    assert proc.returncode == 2 and f"cannot score {run_dir}" in err, err[-2000:]
    assert "['b', 'a']" in err and "\n" not in err
    assert not list(run_dir.glob("eval_*.json"))


def test_a_grid_with_hydra_searchpath_is_still_prechecked(tmp_path, capsys):
    """With a plugin's config directory on the search path, a bad seed in the grid is refused
    before any cell trains (it used to train seed 42, write seed-1/, then fail)."""
    conf = tmp_path / "lab_conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("# @package _global_\nscale:\n  lr: 0.002\n")
    argv = [
        "-m",
        f"hydra.searchpath=[file://{tmp_path / 'lab_conf'}]",
        "experiment=mine",
        f"root={tmp_path / 'root'}",
        "seed=42,-1",
    ]
    err = refused_by_precheck(argv, capsys)
    assert "seed must be an integer >= 0, got -1" in err
    assert not (tmp_path / "root").exists()


def test_a_scheduler_that_needs_a_monitored_metric_is_refused(tmp_path):
    cfg = compose_cfg(
        tiny(
            tmp_path / "r",
            "scheduler=constant",
            "scheduler._target_=torch.optim.lr_scheduler.ReduceLROnPlateau",
            "~scheduler.warmup_steps",
        )
    )
    with pytest.raises(ConfigError, match="steps on a monitored metric"):
        check(cfg)
    assert not Path(tmp_path / "r").exists()
