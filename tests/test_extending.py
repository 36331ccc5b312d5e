"""docs/EXTENDING.md stays true: every file it shows is written into a fresh directory and every
command it shows is run there, as a user following the page would (plugins imported from the
current directory, configs found through hydra.searchpath); then what the page promises is
checked: the task's tokens extend the vocabulary, the family gets its own label, the metric
is recorded and tabulated."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "EXTENDING.md"
# A code block, and the "File `path`:" line that names it (absent for commands).
BLOCK = re.compile(r"(?:^File `([^`]+)`:\n\n)?^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks() -> tuple[dict[str, str], list[str]]:
    """The page's files (path -> the block's text, byte for byte as a reader copies it) and
    its commands (the lines of its bash blocks)."""
    files, commands = {}, []
    for name, lang, body in BLOCK.findall(PAGE.read_text()):
        if name:
            files[name] = body
        elif lang == "bash":
            commands += [line for line in body.splitlines() if line.strip()]
    return files, commands


def test_the_page_shows_four_extensions_and_their_commands():
    files, commands = blocks()
    assert {
        "my_lab/count_task.py",
        "my_lab/gru.py",
        "my_lab/metrics.py",
        "my_lab/conf/task/count_mod3.yaml",
        "my_lab/conf/model/gru.yaml",
        "my_lab/conf/sweep/my_grid.yaml",
        "my_lab/conf/model/rlt1_alpha05.yaml",
    } <= set(files)
    assert all(c.startswith("python ") for c in commands) and len(commands) == 5


@pytest.mark.slow
def test_every_example_of_the_page_runs(tmp_path):
    files, commands = blocks()
    for name in ("train.py", "conf", "analysis"):
        (tmp_path / name).symlink_to(REPO / name)
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    outputs = []
    for command in commands:
        argv = shlex.split(command)
        p = subprocess.run(
            [sys.executable, *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env={"WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert p.returncode == 0, f"{command}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        outputs.append(p.stdout)

    # 1. the task's two tokens extend the shared 140: its model has 142 outputs
    run = tmp_path / "runs/tiny/count_mod3/rlt1/2+2/seed42"
    weights = torch.load(run / "checkpoints/min_val_loss.pt", weights_only=False)["state_dict"]
    heads = [v for k, v in weights.items() if k.endswith("head.weight")]
    assert heads and heads[0].shape[0] == 142
    # 2. the family trained with its own setting and is its own column, labelled by depth
    gru = json.loads((tmp_path / "runs/tiny/parity/gru/L4/seed42/results.json").read_text())
    assert gru["run"]["family"] == "gru" and gru["run"]["plugins"] == ["my_lab.gru"]
    config = (tmp_path / "runs/tiny/parity/gru/L4/seed42/config.yaml").read_text()
    assert "dropout: 0.1" in config
    table = outputs[3]
    assert "| task | RLT-1 2+2 | GRU 4 |" in table
    # 3. the metric is in results.json beside acc, and tabulated by name
    s5 = json.loads((tmp_path / "runs/my_grid/s5/gru/L4/seed43/results.json").read_text())
    assert "first_acc" in s5["selection"]["val"]
    assert {row["metric"] for row in s5["test"]} >= {"acc", "first_acc"}
    assert "validation first_acc (%)" in table and "| count_mod3 |" in table
    # 4. the sweep ran its 8 cells, and grid.json names them (what `rlt.sweep status` reads)
    assert "total: 8 done" in outputs[2]
    grid = json.loads((tmp_path / "runs/my_grid/grid.json").read_text())
    assert len(grid["cells"]) == 8
    assert {c["model"] for c in grid["cells"]} == {"rlt1", "gru"}
    # 5. one -m trained the model and its variant, each under its own name, label and value
    for name, alpha, label in (("rlt1", 0.1, "RLT-1"), ("rlt1_alpha05", 0.5, "RLT-1 alpha=0.5")):
        config = yaml.safe_load(
            (tmp_path / f"runs/tiny/parity/{name}/2+2/seed42/config.yaml").read_text()
        )
        assert (config["model"]["alpha"], config["model"]["label"]) == (alpha, label)
    assert "total: 2 done" in outputs[4]
