"""What eval.py and ``python -m rlt.probe`` write after training (issue 40): tied to the
checkpoint and configuration they scored, never taken for another run's, never written
through a symlink, never from a run that is still training, never running code from a stored
config; and every bad input refused in one line before anything is written."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml

from rlt import rundir
from rlt.analysis.collect import collect
from rlt.analysis.tables import generalization_table, length_table
from tests.training.helpers import REPO, compose_cfg

TINY = ["experiment=tiny", "print_table=false", "evaluate.probe=false"]


def _eval_cli():
    spec = importlib.util.spec_from_file_location("rlt_eval_cli", REPO / "eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


eval_main = _eval_cli()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One finished tiny run (parity_prefix, RLT-1 2+2, 4 steps), trained once for the module;
    each test scores a copy of it."""
    from rlt.training.run import run

    root = tmp_path_factory.mktemp("scored")
    return Path(run(compose_cfg([*TINY, f"root={root}"]))["run_dir"])


@pytest.fixture
def run_dir(trained, tmp_path) -> Path:
    copy = tmp_path / "tiny" / Path(*trained.parts[-4:])
    shutil.copytree(trained, copy)
    return copy


def _lengths(path: Path) -> set[int]:
    return {r["length"] for r in json.loads(path.read_text())["rows"]}


def test_eval_records_what_it_scored_and_later_calls_add_lengths(run_dir, capsys):
    results = json.loads((run_dir / "results.json").read_text())
    assert eval_main([str(run_dir), "task.test_lengths=[30]"]) == 0
    assert eval_main([str(run_dir), "task.test_lengths=[24,30]"]) == 0
    out = run_dir / "eval_min_val_loss.json"
    block = json.loads(out.read_text())
    assert _lengths(out) == {24, 30}  # the second call added 24 and kept 30
    assert block["config_hash"] == results["config_hash"]
    assert block["step"] == results["test_by_policy"]["min_val_loss"]["step"]
    ckpt = run_dir / "checkpoints" / "min_val_loss.pt"
    assert block["checkpoint"]["sha256"] == rundir.file_sha256(ckpt)
    assert "    30  acc" in capsys.readouterr().out  # a progress line per length


def test_eval_lengths_are_rows_of_their_own_never_the_headline_length(run_dir):
    """Table 2's default is the longest length every run was tested at (256 here), not a
    longer one eval.py scored for one run; the length table marks the scored-later row."""
    assert eval_main([str(run_dir), "task.test_lengths=[300]"]) == 0
    c = collect([run_dir.parents[3]])
    t2 = generalization_table(c)
    assert list(t2.display.index) == ["parity_prefix (256)"]
    rows = set(length_table(c).data["row"])
    assert "parity_prefix / 300 (eval.py)" in rows and "parity_prefix / 256" in rows


def test_a_retrain_sets_scored_files_aside_and_a_foreign_one_is_ignored(run_dir, tmp_path):
    """After force=true with another config, neither the old eval file nor the old probe
    reaches the tables; one copied from another run is named in a warning and ignored."""
    from rlt.training.run import run

    assert eval_main([str(run_dir), "task.test_lengths=[300]"]) == 0
    probe = {**rundir.scored_stamp(run_dir, "min_val_loss", 4), "targets": {}}
    rundir.atomic_write_json(run_dir / "probe.json", probe)
    stale = json.loads((run_dir / "eval_min_val_loss.json").read_text())
    root = run_dir.parents[4]
    run(compose_cfg([*TINY, f"root={root}", "force=true", "scale.lr=0.002"]))
    assert not (run_dir / "eval_min_val_loss.json").exists()
    assert (run_dir / "eval_min_val_loss.replaced.json").exists()
    assert (run_dir / "probe.replaced.json").exists() and not (run_dir / "probe.json").exists()
    (run_dir / "eval_final.json").write_text(json.dumps({**stale, "policy": "final"}))
    c = collect([run_dir.parents[3]])
    assert 300 not in set(c.test["length"])
    assert any("eval_final.json: ignored" in w and "config_hash" in w for w in c.warnings)


def test_eval_refuses_a_run_that_is_not_finished(run_dir, capsys):
    rundir.write_status(run_dir, "running", step=2)
    before = sorted(p.name for p in run_dir.iterdir())
    assert eval_main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "not a finished run (state 'running' at step 2" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in run_dir.iterdir()) == before


@pytest.mark.parametrize("damaged", ["status.json", "results.json"])
def test_eval_names_a_state_file_that_does_not_parse_and_its_repair(run_dir, capsys, damaged):
    (run_dir / damaged).write_text('{"state": "do')
    before = sorted(p.name for p in run_dir.iterdir())
    assert eval_main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{run_dir / damaged} does not parse: rerun the train.py command" in err
    assert len(err.splitlines()) == 1 and "portable" not in err
    assert sorted(p.name for p in run_dir.iterdir()) == before


@pytest.mark.parametrize("copied", ["another family", "other widths", "no weights"])
def test_a_checkpoint_that_is_not_the_configs_model_is_one_line(run_dir, capsys, copied):
    """A checkpoint copied from another run (a Transformer's into an RLT's directory), a
    config.yaml edited since, or a file of tensors that is no policy file: a traceback from
    load_state_dict or a KeyError, now one line naming the file and what to do."""
    import torch

    ckpt = run_dir / "checkpoints" / "min_val_loss.pt"
    state = torch.load(ckpt, weights_only=True)
    if copied == "another family":
        state["state_dict"] = {"blocks.0.w": torch.zeros(2)}
    if copied == "other widths":
        state["state_dict"] = {k: torch.zeros(3, *v.shape) for k, v in state["state_dict"].items()}
    if copied == "no weights":
        state = {"x": 1}
    torch.save(state, ckpt)
    assert eval_main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert str(ckpt) in err and len(err.strip().splitlines()) == 1, err
    says = "does not load" if copied == "no weights" else "not the weights of the model"
    assert says in err


def test_a_run_without_its_status_is_named_as_such(run_dir, capsys):
    """eval.py said results.json did not parse when status.json was missing."""
    (run_dir / "status.json").unlink()
    assert eval_main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "has no status.json" in err and "results.json" not in err


def test_a_run_directory_that_takes_no_file_is_refused_before_the_probe_works(
    run_dir, capsys, monkeypatch
):
    """The probe did all its work, then failed with a traceback writing probe.json."""
    import os

    from rlt import probe

    monkeypatch.setattr(probe, "probe_model", lambda *a, **k: pytest.fail("probed anyway"))
    (run_dir / f".write_test.{os.getpid()}").mkdir()  # the write test cannot make its file
    assert probe.main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {run_dir / 'probe.json'}" in err and "writable" in err
    assert len(err.strip().splitlines()) == 1 and not (run_dir / "probe.json").exists()


def test_eval_names_a_sweep_folder_a_missing_policy_and_a_missing_run_dir(run_dir, capsys):
    """A sweep folder was 'not a finished run (state None, ...)'; a policy the run did not keep
    did not say which it kept; no argument asked for the optional overrides too."""
    sweep = run_dir.parents[3]
    assert eval_main([str(sweep)]) == 2
    assert "holds no run (no status.json, results.json or config.yaml)" in capsys.readouterr().err
    (run_dir / "checkpoints" / "min_val_loss.pt").unlink()
    assert eval_main([str(run_dir)]) == 2
    assert "it kept final, max_val_acc (--policy NAME)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        eval_main([])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "give the run directory to score" in err and "required" not in err


def test_eval_never_writes_through_a_symlink(run_dir, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("precious")
    (run_dir / "eval_min_val_loss.json").symlink_to(outside)
    assert eval_main([str(run_dir), "task.test_lengths=[30]"]) == 0
    assert outside.read_text() == "precious"
    link = run_dir / "eval_min_val_loss.json"
    assert not link.is_symlink() and _lengths(link) == {30}


def test_a_stored_config_runs_no_code_when_scored(run_dir, tmp_path):
    """A run directory from someone else: a _target_ planted in its scheduler never runs."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    config = run_dir / "config.yaml"
    stored = yaml.safe_load(config.read_text())
    stored["scheduler"]["min_lr"] = {"_target_": "builtins.open", "file": str(victim), "mode": "w"}
    config.write_text(yaml.safe_dump(stored))
    eval_main([str(run_dir), "task.test_lengths=[30]"])
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["task.test_lengths=0"], "not positive whole lengths"),
        (["task.test_lengths=[]"], "give a non-empty list of lengths"),
        (["task.test_lengths=[1000000000]"], "exceed eval.py's 16384 tokens"),
        (["scale.n_test=1000000000"], "scale.n_test must be at most 1,000,000"),
        (["state.drop=none", "state.at=5"], "state.drop=none drops nothing anywhere"),
        (["--policy", "../checkpoints/final"], "is not a checkpoint policy; use one of"),
        (["scale.lr=1"], "eval.py takes"),
    ],
)
def test_bad_eval_input_is_one_line_and_writes_nothing(run_dir, capsys, args, says):
    before = sorted(p.name for p in run_dir.iterdir())
    assert eval_main([str(run_dir), *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in run_dir.iterdir()) == before


@pytest.mark.parametrize("content", [b"- a\n- b\n", b"\x00\xff\xfe binary", b""])
def test_a_config_yaml_that_is_no_config_is_one_line(run_dir, capsys, content):
    (run_dir / "config.yaml").write_bytes(content)
    assert eval_main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "config.yaml" in err and len(err.strip().splitlines()) == 1, err


def test_a_grid_cell_lacking_keys_is_reported_not_a_crash(run_dir):
    sweep = run_dir.parents[3]
    rundir.atomic_write_json(sweep / "grid.json", {"cells": [{"task": "parity_prefix"}]})
    c = collect([sweep])
    assert any("cell 0 lacks model, seed" in w for w in c.warnings)
    assert len(c.used) == 1


# State interventions through eval.py (issue 39) -----------------------------------------------
def _rows(rows: list[dict]) -> dict[tuple[int, str], float]:
    return {(r["length"], r["metric"]): r["value"] for r in rows}


def test_eval_without_an_intervention_equals_the_runs_test_results(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    assert eval_main([str(run_dir)]) == 0
    scored = json.loads((run_dir / "eval_min_val_loss.json").read_text())
    assert _rows(scored["rows"]) == _rows(results["test"])


def test_dropping_rlt1_feedback_changes_its_numbers_into_a_file_of_its_own(run_dir):
    results_before = (run_dir / "results.json").read_bytes()
    assert eval_main([str(run_dir), "state.drop=feedback", "state.at=8"]) == 0
    out = run_dir / "state_min_val_loss_drop-feedback_at-8.json"
    block = json.loads(out.read_text())
    assert block["intervention"] == {"drop": ["feedback"], "at": "8"}
    test = _rows(json.loads(results_before)["test"])
    dropped = _rows(block["rows"])
    assert dropped.keys() == test.keys()
    assert any(dropped[k] != test[k] for k in test if k[1] == "loss")
    assert (run_dir / "results.json").read_bytes() == results_before
    assert not (run_dir / "eval_min_val_loss.json").exists()  # never the run's eval rows
    c = collect([run_dir.parents[3]])
    assert len(c.test) and not c.test["scored_later"].any()  # the tables never read it


def test_dropping_rlt0_feedback_leaves_its_numbers_as_they_are(tmp_path):
    from rlt.training.run import run

    out = run(compose_cfg([*TINY, f"root={tmp_path}", "model=rlt0"]))
    run_dir = Path(out["run_dir"])
    assert eval_main([str(run_dir), "state.drop=feedback", "state.at=8"]) == 0
    block = json.loads((run_dir / "state_min_val_loss_drop-feedback_at-8.json").read_text())
    test = _rows(json.loads((run_dir / "results.json").read_text())["test"])
    dropped = _rows(block["rows"])
    for key, value in test.items():  # streamed in pieces: the same numbers up to rounding
        assert dropped[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_the_streamed_control_equals_the_test_results_and_positions_show_where_a_drop_acts(
    run_dir,
):
    """``state.drop=none`` streams without a cut: the run's test numbers (up to rounding).
    ``by_position`` at a length where every example scores the same positions averages to the
    length's token accuracy, and a drop at 8 leaves every position before 8 as it was (this
    4-step model is too weak to show the change after 8 in accuracy; its loss shows it, above)."""
    assert eval_main([str(run_dir), "state.drop=none"]) == 0
    assert eval_main([str(run_dir), "state.drop=all", "state.at=8"]) == 0
    none = json.loads((run_dir / "state_min_val_loss_drop-none.json").read_text())
    cut = json.loads(
        (run_dir / "state_min_val_loss_drop-feedback+window+memory_at-8.json").read_text()
    )
    assert none["intervention"] == {"drop": [], "at": "none"}
    test = _rows(json.loads((run_dir / "results.json").read_text())["test"])
    for key, value in _rows(none["rows"]).items():
        assert value == pytest.approx(test[key], rel=1e-6, abs=1e-9), key
    assert [b["length"] for b in none["by_position"]] == sorted({k[0] for k in test})
    for block in none["by_position"]:
        assert len(set(block["n"])) == 1  # fixed-length test sets: every position, every example
        mean = sum(block["acc"]) / len(block["acc"])
        assert mean == pytest.approx(test[(block["length"], "token_acc")], abs=1e-6)  # float32
    for a, b in zip(none["by_position"], cut["by_position"], strict=True):
        before = [i for i, pos in enumerate(a["position"]) if pos < 8]
        assert before and [a["acc"][i] for i in before] == [b["acc"][i] for i in before]


def test_a_part_the_family_lacks_is_refused_before_scoring(run_dir, capsys):
    assert eval_main([str(run_dir), "state.drop=gates", "state.at=8"]) == 2
    err = capsys.readouterr().err
    assert "its parts are feedback, window, memory (or all, or none)" in err
    assert not list(run_dir.glob("state_*.json"))


@pytest.mark.parametrize("at", ["100000", "every:100000"])
def test_a_position_no_test_sequence_reaches_is_refused_before_scoring(run_dir, capsys, at):
    """Issue 55: a cut beyond every test sequence drops nothing, and its file was the control's
    under an intervention's name; refused in one line naming state.at and the longest test
    length, before anything is written."""
    longest = max(r["length"] for r in json.loads((run_dir / "results.json").read_text())["test"])
    assert eval_main([str(run_dir), "state.drop=feedback", f"state.at={at}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: state.at={at}:"), err
    assert f"test length {longest}" in err and "nothing would be dropped" in err
    assert not list(run_dir.glob("state_*.json"))


def test_a_position_some_test_lengths_do_not_reach_is_said(run_dir, capsys):
    """A cut that the longer test sequences reach and the shorter ones do not: scored, and the
    lengths where nothing was dropped are said on screen and recorded in the file."""
    test = json.loads((run_dir / "results.json").read_text())["test"]
    lengths = sorted({r["length"] for r in test})
    assert eval_main([str(run_dir), "state.drop=feedback", "state.at=100"]) == 0
    out = capsys.readouterr().out
    assert f"nothing is dropped at test length {lengths[0]}" in out
    block = json.loads((run_dir / "state_min_val_loss_drop-feedback_at-100.json").read_text())
    assert {b["length"]: b["dropped"] for b in block["by_position"]} == {
        n: n != lengths[0] for n in lengths
    }


def test_scoring_in_another_arithmetic_is_said_and_starts_the_file_anew(
    run_dir, capsys, monkeypatch
):
    """A run scored in another CPU arithmetic than it was trained in (rlt/portable/) gets a
    note naming RLT_PORTABLE; the file records the arithmetic, and rows of the two arithmetics
    are never merged into one file."""
    from rlt import portable

    trained = json.loads((run_dir / "results.json").read_text())["arithmetic"]["portable"]
    assert trained is portable.active()
    assert eval_main([str(run_dir), "task.test_lengths=[30]"]) == 0
    assert "portable arithmetic" not in capsys.readouterr().err
    out = run_dir / "eval_min_val_loss.json"
    assert json.loads(out.read_text())["portable"] is trained
    monkeypatch.setattr(portable, "status", "on" if not trained else "off (RLT_PORTABLE=0)")
    assert eval_main([str(run_dir), "task.test_lengths=[24]"]) == 0
    err = capsys.readouterr().err
    assert f"trained with portable arithmetic {'on' if trained else 'off'}" in err
    assert "RLT_PORTABLE=0" in err
    assert json.loads(out.read_text())["portable"] is not trained
    assert _lengths(out) == {24}


def test_rows_written_before_the_record_merge_with_rows_of_the_old_default(run_dir, monkeypatch):
    """An eval file written before ``portable`` was recorded was scored with it off (the
    default then): a later call with it off adds its lengths to the file's."""
    from rlt import portable

    monkeypatch.setattr(portable, "status", "off (RLT_PORTABLE=0)")
    assert eval_main([str(run_dir), "task.test_lengths=[30]"]) == 0
    out = run_dir / "eval_min_val_loss.json"
    block = json.loads(out.read_text())
    del block["portable"]
    out.write_text(json.dumps(block))
    assert eval_main([str(run_dir), "task.test_lengths=[24]"]) == 0
    assert _lengths(out) == {24, 30}


def test_the_module_texts_command_with_an_option_between_the_arguments_parses(tmp_path, capsys):
    """``python eval.py RUN_DIR --policy final task.test_lengths=[512]`` (the module's text):
    the override after the option is read as an override, not refused by the parser."""
    missing = tmp_path / "nope"
    assert eval_main([str(missing), "--policy", "final", "task.test_lengths=[512]"]) == 2
    err = capsys.readouterr().err
    assert f"{missing} is not a directory" in err and "unrecognized arguments" not in err
