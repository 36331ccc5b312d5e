"""Collection: which run directories are found, how they are labelled, what counts as missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlt.analysis import NoResultsError, collect
from rlt.analysis.labels import model_key
from tests.analysis.analysis_synthetic import MODELS, SEEDS, TASKS, make_sweep, write_run


def test_finds_every_run_directory_and_keys_it(sweep: Path) -> None:
    c = collect([sweep])
    n_dirs = len(TASKS) * len(MODELS) * len(SEEDS) - 1  # one hole has no directory
    assert len(c.runs) == n_dirs
    assert c.used.shape[0] == n_dirs - 2  # failed and running
    assert set(c.used["preset"]) == {"tiny"} and set(c.used["sweep"]) == {"synthetic"}
    assert set(c.rows) == set(TASKS)
    assert c.labels == ["RLT-1 4+4", "RLT-1 5+3", "RLT-2 B=4 4+4", "RLT-0 4+4", "Transformer 8"]
    row = c.used[(c.used["label"] == "RLT-2 B=4 4+4")].iloc[0]
    assert row["feedback_interval"] == 4 and row["n_enc"] == 4 and row["sec_per_step"] == 0.3
    assert {"run_id", "row", "task", "preset", "label", "seed", "step", "metric", "value"} <= set(
        c.val.columns
    )
    assert set(c.val["metric"]) == {"loss", "acc", "token_acc"}  # not feedback_interval
    assert set(c.test["policy"]) == {"min_val_loss", "final", "max_val_acc"}
    assert set(c.test.loc[c.test["task"] == "s5_swaps", "metric"]) == {
        "acc",
        "token_acc",
        "seq_acc",
    }


def test_incomplete_runs_keep_their_identity_from_the_path(sweep: Path) -> None:
    c = collect([sweep])
    failed = c.runs[c.runs["state"] == "failed"].iloc[0]
    assert (failed["task"], failed["label"], failed["seed"]) == ("s5_swaps", "RLT-0 4+4", 43)
    assert failed["preset"] == "tiny"
    running = c.runs[c.runs["state"] == "running"].iloc[0]
    assert running["label"] == "Transformer 8" and running["step"] == 250


def test_without_grid_file_its_runs_are_the_expected_cells(tmp_path: Path) -> None:
    """Issue 41 item 4: runs without a grid file (single train.py runs) ask for themselves
    only. The cross product of the tasks, models and seeds they show used to report cells
    nobody asked for as missing (here the hole parity/RLT-1 5+3/seed44, which no one ran)."""
    root = make_sweep(tmp_path / "nogrid", grid=False)
    c = collect([root])
    assert (c.incomplete["state"] == "missing").sum() == 0
    # the failed and the running run are still incomplete: their directories asked for them
    assert sorted(c.incomplete["state"]) == ["failed", "running"]
    assert len(c.expected) == len(c.runs) == len(list(root.rglob("seed*")))


def test_the_same_cells_in_two_sweeps_are_kept_apart(sweep: Path, tmp_path: Path) -> None:
    """Issue 31: two sweeps given together that hold the same task, preset, model and seed
    (e.g. two learning rates) used to drop the second as a duplicate; now each sweep has its
    own rows, named by its directory, and nothing is dropped."""
    other = tmp_path / "other"
    write_run(other, "parity", "rlt1", "4+4", 42)
    c = collect([sweep, other])
    assert not (c.runs["state"] == "duplicate").any()
    assert "parity [tiny, other]" in c.rows and "parity [tiny, synthetic]" in c.rows
    mine = c.used[(c.used["label"] == "RLT-1 4+4") & (c.used["row"] == "parity [tiny, other]")]
    assert len(mine) == 1 and str(other) in mine.iloc[0]["path"]
    assert any("each sweep kept apart" in w for w in c.warnings)


def test_one_transformer_under_two_split_names_is_one_run(tmp_path: Path) -> None:
    """Within one sweep, the same model and seed twice (a Transformer trained under two split
    names before grids learned to skip it) is still one run: the second is listed as a
    duplicate."""
    sweep = tmp_path / "s"
    first = write_run(sweep, "parity", "transformer", "L8", 42)
    shutil.copytree(first, sweep / "parity" / "transformer_again" / "L8" / "seed42")
    c = collect([sweep])
    assert (c.runs["state"] == "duplicate").sum() == 1


def test_presets_are_kept_apart(tmp_path: Path) -> None:
    a = tmp_path / "a"
    write_run(a, "parity", "rlt1", "4+4", 42)
    b = tmp_path / "b"
    run = write_run(b, "parity", "rlt1", "4+4", 42)
    res = json.loads((run / "results.json").read_text())
    res["run"]["preset"] = "paper"
    (run / "results.json").write_text(json.dumps(res))
    c = collect([a, b])
    assert c.rows == ["parity [paper]", "parity [tiny]"]
    assert c.used["used"].all() and len(c.used) == 2


def test_unreadable_results_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "s"
    write_run(root, "parity", "rlt1", "4+4", 42)
    bad = write_run(root, "parity", "rlt1", "4+4", 43)
    (bad / "results.json").write_text("{ truncated")
    c = collect([root])
    inc = c.incomplete.set_index("seed")
    assert inc.loc[43, "state"] == "unreadable"
    assert "results.json unreadable" in inc.loc[43, "detail"]


@pytest.mark.parametrize(
    "cut, says",
    [
        ("emptied", "no numeric value in val_curve or test_by_policy"),
        ("no test", "no numeric value in test_by_policy"),
        ("no val_curve", "no numeric value in val_curve"),
        ("test values as text", "no numeric value in test_by_policy"),
    ],
)
def test_a_results_json_without_its_numbers_is_no_finished_run(
    tmp_path: Path, cut: str, says: str
) -> None:
    """A results.json that parses but lost what every finished run records (emptied to {}, a
    block cut out, its values written as text) counted as a run with results, and the report
    said every cell had them: it is listed as unreadable, naming what is missing."""
    root = tmp_path / "s"
    write_run(root, "parity", "rlt1", "4+4", 42)
    bad = write_run(root, "parity", "rlt1", "4+4", 43)
    res = json.loads((bad / "results.json").read_text())
    if cut == "emptied":
        res = {}
    if cut == "no test":
        res.pop("test_by_policy", None), res.pop("test", None)
    if cut == "no val_curve":
        del res["val_curve"]
    if cut == "test values as text":
        for block in res["test_by_policy"].values():
            for row in block["rows"]:
                row["value"] = str(row["value"])
        res.pop("test", None)
    (bad / "results.json").write_text(json.dumps(res))
    c = collect([root])
    assert c.used["seed"].tolist() == [42]
    inc = c.incomplete.set_index("seed")
    assert inc.loc[43, "state"] == "unreadable"
    assert says in inc.loc[43, "detail"]


def test_missing_results_error_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(NoResultsError, match="does not exist: check the path"):
        collect([tmp_path / "nope"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NoResultsError, match="no results.json under .*run the sweep first"):
        collect([empty])
    write_run(empty, "parity", "rlt1", "4+4", 42, state="running")
    with pytest.raises(NoResultsError, match="1 running"):
        collect([empty])


def test_a_single_run_directory_is_a_valid_input(sweep: Path) -> None:
    c = collect([sweep / "parity" / "rlt1" / "4+4" / "seed42"])
    assert len(c.used) == 1 and c.used.iloc[0]["label"] == "RLT-1 4+4"


@pytest.mark.parametrize(
    ("fields", "label"),
    [
        ({"model": "rlt1", "split": "4+4"}, "RLT-1 4+4"),
        ({"model": "rlt2_b4", "split": "5+3"}, "RLT-2 B=4 5+3"),
        ({"model": "rlt2", "split": "4+4", "feedback_interval": 8}, "RLT-2 B=8 4+4"),
        ({"model": "rlt0", "split": "8+0"}, "RLT-0 8+0"),
        ({"model": "transformer", "split": "L16"}, "Transformer 16"),
        ({"model": "transformer", "split": "5+3"}, "Transformer 8"),
        (
            {"model": "x", "family": "rlt", "n_enc": 6, "n_dec": 2, "feedback_interval": 1},
            "RLT-1 6+2",
        ),
        (
            {"model": "rlt2", "split": "4+4", "feedback_schedule": [[0, 8], [100, 4], [200, 1]]},
            "RLT-2 B=8→4→1 4+4",
        ),
        ({"model": "lstm", "split": "L2"}, "LSTM 2"),
        ({"model": "deltanet", "family": "deltanet", "n_layers": 2}, "DeltaNet [-1,1] 2"),
        ({"model": "deltanet01", "split": "L2"}, "DeltaNet [0,1] 2"),
        (
            {"model": "gated_deltanet", "family": "deltanet", "split": "L2"},
            "Gated DeltaNet [-1,1] 2",
        ),
        ({"model": "gated_deltanet01", "split": "L8"}, "Gated DeltaNet [0,1] 8"),
    ],
)
def test_model_labels(fields: dict, label: str) -> None:
    assert model_key(**fields).label == label


def test_partial_sweep_with_run_dirs_but_only_some_results(tmp_path: Path) -> None:
    root = make_sweep(tmp_path / "s")
    shutil.rmtree(root / "s5_swaps")
    c = collect([root])
    assert set(c.incomplete.loc[c.incomplete["task"] == "s5_swaps", "state"]) == {"missing"}
    assert c.rows == ["parity", "s5_swaps"]


def test_grid_json_as_train_py_writes_it(tmp_path: Path) -> None:
    """train.py -m: split null and arch_tag "L8" for the Transformer, extra keys ignored."""
    root = make_sweep(tmp_path / "s", grid=False)
    cells = []
    for task in TASKS:
        for model, split in MODELS:
            for seed in (*SEEDS, 45):
                rlt = model != "transformer"
                cells.append(
                    {"cell": f"{task}/{model}/{split}/seed{seed}", "task": task, "model": model,
                     "label": "x", "split": split if rlt else None, "arch_tag": split,
                     "seed": seed, "overrides": []}
                )  # fmt: skip
    (root / "grid.json").write_text(json.dumps({"n_jobs": len(cells), "cells": cells}))
    c = collect([root])
    missing = c.incomplete[c.incomplete["state"] == "missing"]
    assert set(missing["label"]) == set(c.labels) == {
        "RLT-1 4+4", "RLT-1 5+3", "RLT-2 B=4 4+4", "RLT-0 4+4", "Transformer 8"
    }  # fmt: skip
    assert len(missing) == len(TASKS) * len(MODELS) + 1  # seed 45 everywhere + the hole
    assert c.expected_n()[("parity", "Transformer 8")] == 4


def test_a_root_of_sweeps_reads_each_sweeps_grid(tmp_path: Path) -> None:
    """Issue 29 item 7: tables.py ROOT (a directory of sweeps, not a sweep) used to take the
    cross product of everything observed and report cells nobody asked for as missing; now each
    sweep under the root is read with its own grid file."""
    root = tmp_path / "runs"
    a = make_sweep(root / "a", holes=False)
    make_sweep(root / "b", holes=False)
    grid = json.loads((a / "sweep.json").read_text())
    (a / "sweep.json").write_text(json.dumps({**grid, "cells": grid["cells"][:3]}))
    keep = {f"{x['task']}/{x['model']}/{x['split']}/seed{x['seed']}" for x in grid["cells"][:3]}
    for run in list(a.rglob("results.json")):  # a asks for three cells only, and holds them
        if str(run.parent.relative_to(a)) not in keep:
            shutil.rmtree(run.parent)
    c = collect([root])
    assert [d.name for d in c.sweep_dirs] == ["a", "b"]
    assert {Path(d).name for d in c.used["sweep_dir"]} == {"a", "b"}
    assert (c.incomplete["state"] == "missing").sum() == 0


def test_runs_of_different_step_counts_are_tabulated_apart(tmp_path: Path) -> None:
    """Issue 29 item 3: a later launch with another scale.max_steps into the same sweep made
    Table 1 average runs of 20 and 4 steps; now each step count is its own preset (and row)."""
    sweep = make_sweep(tmp_path / "s", holes=False)
    changed = [p for p in sweep.rglob("results.json") if "seed44" in str(p)]
    for path in changed:
        r = json.loads(path.read_text())
        path.write_text(json.dumps({**r, "max_steps": 4}))
    c = collect([sweep])
    assert set(c.used["preset"]) == {"tiny (500 steps)", "tiny (4 steps)"}
    assert set(c.used.loc[c.used["seed"] == 44, "preset"]) == {"tiny (4 steps)"}
    assert any("tabulated apart" in w for w in c.warnings)
    assert (c.incomplete["state"] == "missing").sum() == 0  # the grid's cells follow their runs


def test_a_killed_run_is_interrupted_in_the_tables_as_in_status(tmp_path: Path) -> None:
    """Issue 29 item 7: one state vocabulary: a run whose status says running but that no live
    process holds (killed) is "interrupted" for the tables as for rlt.sweep status."""
    from rlt.sweep import cell_states

    sweep = make_sweep(tmp_path / "s", holes=False)
    run_dir = write_run(sweep, "parity", "rlt1", "4+4", 45, state="running")
    (run_dir / ".lock").unlink()  # its process is gone
    c = collect([sweep])
    assert c.runs.loc[c.runs["seed"] == 45, "state"].tolist() == ["interrupted"]
    states = {r["cell"]: r["state"] for r in cell_states(sweep)}
    assert states["parity/rlt1/4+4/seed45"] == "interrupted"


def test_a_variant_defined_in_config_is_its_own_column(tmp_path: Path) -> None:
    """Issue 31: model.name=rlt1_alpha05 "model.label='RLT-1 alpha=0.5'" was classified as
    plain RLT-1 and dropped as its duplicate; the recorded label now names its own column."""
    sweep = tmp_path / "s"
    plain = write_run(sweep, "parity", "rlt1", "4+4", 42)
    variant = sweep / "parity" / "rlt1_alpha05" / "4+4" / "seed42"
    shutil.copytree(plain, variant)
    res = json.loads((variant / "results.json").read_text())
    res["run"].update(model="rlt1_alpha05", label="RLT-1 alpha=0.5")
    (variant / "results.json").write_text(json.dumps(res))
    c = collect([sweep])
    assert c.labels == ["RLT-1 4+4", "RLT-1 alpha=0.5 4+4"]
    assert not (c.runs["state"] == "duplicate").any() and len(c.used) == 2
    # the standard labels of the configs stay the standard columns
    assert model_key(model="rlt2_b4", split="2+2", label="RLT-2 B=4").label == "RLT-2 B=4 2+2"
    assert (
        model_key(model="transformer", split="L4", label="Transformer 4").label == "Transformer 4"
    )


def test_another_optimizer_or_scheduler_is_tabulated_apart(tmp_path: Path) -> None:
    """Issue 41: a cell trained with SGD (or a constant schedule) is not labelled or averaged
    like the default AdamW / warmup-cosine runs: its row names what differs."""
    import yaml

    from rlt.analysis.tables import generalization_table

    root = make_sweep(tmp_path / "s", holes=False, grid=False)
    conf = Path(__file__).resolve().parents[2] / "conf"
    default = {
        "optim": yaml.safe_load((conf / "optim" / "adamw.yaml").read_text()),
        "scheduler": {"_target_": "rlt.training.optim.warmup_cosine", "warmup_steps": 20},
    }
    runs = sorted(p.parent for p in root.rglob("results.json") if "/parity/rlt1/" in str(p))
    for run_dir in sorted(p.parent for p in root.rglob("results.json")):
        (run_dir / "config.yaml").write_text(yaml.safe_dump(default))
    sgd = dict(default, optim=yaml.safe_load((conf / "optim" / "sgd.yaml").read_text()))
    (runs[0] / "config.yaml").write_text(yaml.safe_dump(sgd))  # one seed of one cell
    decayed = dict(default, optim=dict(default["optim"], weight_decay=0.0))
    (runs[1] / "config.yaml").write_text(yaml.safe_dump(decayed))
    c = collect([root])
    rows = set(c.runs["row"])
    assert "parity [tiny; optim=SGD]" in rows and "parity [tiny; optim weight_decay=0.0]" in rows
    assert any("optim=SGD" in w for w in c.warnings)
    sgd_run = c.runs[c.runs["run_id"] == str(runs[0])].iloc[0]
    assert sgd_run["row"] == "parity [tiny; optim=SGD]"
    untouched = c.runs[~c.runs["run_id"].isin([str(r) for r in runs[:2]])]
    assert set(untouched["row"]) == {f"{t} [tiny]" for t in untouched["task"]}
    table = generalization_table(c)  # the SGD seed is its own cell, n=1, not in the mean
    assert any("optim=SGD" in str(ix) for ix in table.display.index)
    shutil.rmtree(root)
