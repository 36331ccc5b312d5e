"""Does this host reproduce portable arithmetic's committed references? One screen's answer.

    python -m rlt.portable --check            # kernels, then the tiny run and 200 laptop steps
    python -m rlt.portable --check --quick    # kernels and the tiny run only (seconds)

First every kernel of rlt/portable/ops.py against tests/reference/portable_ops.json (a
difference names the kernel), then the reference runs retrained (tests/reference/portable_
<case>.json: the tiny experiment and 200 laptop-shape RLT-1 steps) against their every
number: "reproduces", or the first step and metric that differs. Exit status 0 when all
reproduce, 1 when something differs, 2 when the check cannot run here (no AVX2, no
references). The references live in the repository (tests/reference/), so the check runs from
a clone (``pip install -e .``).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import rlt.portable as portable

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "reference"
OPS_REFERENCE = REFERENCE / "portable_ops.json"
CASES = {
    "tiny": ["experiment=tiny"],
    "laptop200": [
        "task=parity_3to16",
        "model=rlt1",
        "split=1+1",
        "scale=laptop",
        "scale.max_steps=200",
    ],
}
COMMON = ["print_table=false", "logger=csv", "trainer.threads=1", "trainer.native=off"]
NUMBERS = ("params", "train_curve", "val_curve", "selection", "test_by_policy")


def host() -> tuple[str, str]:
    """(/proc/cpuinfo "model name", the widest vector extension): what VERIFIED keys by."""
    return portable.cpu_model(), "avx512f" if "avx512f" in portable.cpu_flags() else "avx2"


def made_on() -> dict[str, str]:
    """The host a reference was made on, for the reference file."""
    import torch

    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    native = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
        env=env, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return {
        "cpu_model": portable.cpu_model(),
        "cpu_family_model_stepping": _cpuinfo_numbers(),
        "widest_vector_extension": host()[1],
        "native_cpu_capability": native,
        "mkl_cbwr": portable.SETTINGS["MKL_CBWR"],  # the children's (portable_env)
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
    }


def _cpuinfo_numbers() -> str:
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.machine()
    return "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping"))


def portable_env() -> dict[str, str]:
    """This environment with portable arithmetic's defaults, one thread, W&B off: what the
    references were made in, whatever this process has."""
    env = {k: v for k, v in os.environ.items() if k not in portable.SETTINGS}
    env.update(RLT_PORTABLE="1", OMP_NUM_THREADS="1", WANDB_MODE="disabled")
    return env


def kernel_hashes() -> dict[str, str]:
    """rlt/portable/ops.py's hashes, computed in a fresh process in portable arithmetic's
    defaults (MKL reads its setting once per process)."""
    code = (
        "import json, rlt; from rlt.portable import ops; "
        "assert rlt.portable.status == 'on', rlt.portable.status; print(json.dumps(ops.hashes()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=portable_env(), capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"the kernel cases failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_case(name: str, root: Path) -> dict:
    """Train reference case ``name`` under ``root`` in portable arithmetic, one thread, in a
    fresh process (MKL reads its setting once); its numbers (NUMBERS of results.json)."""
    env = portable_env()
    cmd = [sys.executable, "train.py", *CASES[name], *COMMON, f"root={root}"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed: {out.stderr[-2000:]}")
    (path,) = root.rglob("results.json")
    results = json.loads(path.read_text())
    arithmetic = results["arithmetic"]
    if arithmetic["portable"] is not True or arithmetic["cpu_capability"] != "AVX2":
        raise RuntimeError(f"the reference run was not in portable arithmetic: {arithmetic}")
    return {key: results[key] for key in NUMBERS}


def same(a: Any, b: Any) -> bool:
    """Equal as numbers are reproduced: like ``==`` through dicts and lists, except that NaN
    equals NaN (two runs that diverged alike made the same numbers)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def first_difference(got: dict, want: dict) -> str | None:
    """Where two runs' numbers part, in the order they were made: the first training step whose
    loss differs, else the first validation step and metric, else selection and test; None
    when every number is equal (NaN equal to NaN: :func:`same`)."""
    if same(got, want):
        return None
    if got.get("params") != want.get("params"):
        return f"parameter count {got.get('params')} (reference {want.get('params')})"
    for curve, what in (("train_curve", "training"), ("val_curve", "validation")):
        for mine, ref in zip(got.get(curve) or [], want.get(curve) or []):
            for metric in sorted(set(mine) | set(ref)):
                if not same(mine.get(metric), ref.get(metric)):
                    return (
                        f"{what} {metric} at step {ref.get('step')}: {mine.get(metric)!r} "
                        f"(reference {ref.get(metric)!r})"
                    )
        if len(got.get(curve) or []) != len(want.get(curve) or []):
            return f"{what} curve length {len(got.get(curve) or [])} (reference {len(want[curve])})"
    for key in ("selection", "test_by_policy"):
        if not same(got.get(key), want.get(key)):
            return f"{key} (curves equal): {json.dumps(got.get(key))[:200]}"
    return "numbers differ"


def write_ops_reference() -> Path:
    payload = {"made_on": made_on(), "hashes": kernel_hashes()}
    OPS_REFERENCE.write_text(json.dumps(payload, indent=1) + "\n")
    return OPS_REFERENCE


def check(quick: bool = False) -> int:
    """Print the comparison (one screen); 0: reproduces, 1: differs, 2: cannot check here."""
    from rlt.portable import ops

    print(f"host: {portable.cpu_model()} ({_cpuinfo_numbers()}, widest {host()[1]})")
    print("checking portable arithmetic's defaults (" + ", ".join(
        f"{k}={v}" for k, v in portable.SETTINGS.items()) + "), one thread")  # fmt: skip
    if not portable.has_avx2():
        print("cannot check: portable arithmetic needs an x86-64 CPU with AVX2")
        return 2
    if not OPS_REFERENCE.exists():
        print(f"cannot check: no references at {REFERENCE} (run it from a clone of the repository)")
        return 2
    reference = json.loads(OPS_REFERENCE.read_text())
    differ = ops.differing(kernel_hashes(), reference["hashes"])
    made = reference["made_on"]
    print(f"references made on: {made['cpu_model']} ({made['cpu_family_model_stepping']}), "
          f"{made['date']}, MKL_CBWR={made['mkl_cbwr']}")  # fmt: skip
    total = len(reference["hashes"])
    print(f"kernels: {total - len(differ)} of {total} reproduce")
    for name in differ[:12]:
        print(f"  differs: {name}")
    if len(differ) > 12:
        print(f"  ... and {len(differ) - 12} more")
    failed = bool(differ)
    for name in ("tiny",) if quick else tuple(CASES):
        want = json.loads((REFERENCE / f"portable_{name}.json").read_text())["numbers"]
        with tempfile.TemporaryDirectory() as tmp:
            got = run_case(name, Path(tmp))
        where = first_difference(got, want)
        print(
            f"run {name}: "
            + ("reproduces (every number)" if where is None else f"differs: {where}")
        )
        failed |= where is not None
    print("this host reproduces portable arithmetic's references" if not failed else
          "this host does NOT reproduce them: open an issue with this screen")  # fmt: skip
    return 1 if failed else 0
