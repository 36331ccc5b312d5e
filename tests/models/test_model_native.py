"""The C++ token loops (rlt/models/native.py) against the Python loops, and trainer.native.

The C++ loops make the same ATen calls in the same order as the Python ones, so outputs and
every gradient must be equal bit for bit (float32, the training dtype); their agreement with
the plain autograd path is tests/models/test_model_fused.py (its ``loop`` fixture).
"""

from __future__ import annotations

import pytest
import torch

import rlt.models.native as native
from rlt.training.spec import ConfigError
from rlt.training.trainer_setup import AUTO_NATIVE_MIN_STEPS, resolve_native
from tests.models.conftest import make_rlt

needs_native = pytest.mark.skipif(
    not native.native_available()[0], reason=f"no C++ token loop: {native.native_available()[1]}"
)


def outputs_and_grads(model, tokens: torch.Tensor, *, native_step: bool):
    model.native_step = native_step
    model.zero_grad(set_to_none=True)
    weights = torch.randn(*tokens.shape, 140, generator=torch.Generator().manual_seed(5))
    logits = model(tokens)
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


class _Spy:
    """Counts the calls into the C++ library."""

    def __init__(self, module) -> None:
        self.module, self.calls = module, []

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.module, name)


@needs_native
@pytest.mark.parametrize(
    "split, fields",
    [
        ("1+1", dict(feedback_interval=1, tbptt=5)),  # cuts at 5, 10, ...; window edges
        ("2+2", dict(feedback_interval=4, tbptt=6)),  # T=21 not a multiple of B; cuts in chunks
        ("1+2", dict(feedback_interval=3, d_model=64, n_heads=1)),  # Dh=64: the matmul layout
        ("0+2", dict(feedback_interval=1, pos_encoding="none", window=1)),
    ],
)
def test_native_loop_equals_the_python_loop_bit_for_bit(split, fields, tokens, monkeypatch):
    spy = _Spy(native.token_loop())
    monkeypatch.setattr(native, "token_loop", lambda: spy)
    model = make_rlt(split, **fields)
    out, grads = outputs_and_grads(model, tokens, native_step=False)
    assert spy.calls == []
    native_out, native_grads = outputs_and_grads(model, tokens, native_step=True)
    assert spy.calls == ["forward_loop", "backward_loop"]
    assert torch.equal(native_out, out)
    assert grads.keys() == native_grads.keys()
    for name, grad in grads.items():
        assert torch.equal(native_grads[name], grad), name


def test_native_rule_off_and_models_without_loops():
    assert resolve_native("off", make_rlt("1+1", 1), "cpu", 10**6, False)[0] is False
    assert resolve_native(False, make_rlt("1+1", 1), "cpu", 10**6, False)[0] is False
    on, why = resolve_native("on", make_rlt("1+1", None), "cpu", 10**6, False)  # RLT-0
    assert not on and "no fused" in why
    plain = make_rlt("1+1", 1, fused=False)
    assert resolve_native("on", plain, "cpu", 10**6, False)[0] is False
    on, why = resolve_native("on", make_rlt("1+1", 1), "cpu", 10**6, True)
    assert not on and "compiled" in why


@needs_native
def test_native_rule_auto(monkeypatch):
    model = make_rlt("1+1", 1)
    monkeypatch.setattr(native, "is_built", lambda: False)
    on, why = resolve_native("auto", model, "cpu", AUTO_NATIVE_MIN_STEPS - 1, False)
    assert not on and "too few" in why
    assert resolve_native("auto", model, "cpu", AUTO_NATIVE_MIN_STEPS, False)[0] is True
    assert resolve_native("on", model, "cpu", 10, False)[0] is True  # on: whatever the run
    monkeypatch.setattr(native, "is_built", lambda: True)  # built: free for any run
    assert resolve_native("auto", model, "cpu", 10, False)[0] is True
    on, why = resolve_native("auto", model, "cuda", 10**6, False)
    assert not on and "cuda" in why


def test_native_rule_without_a_toolchain(monkeypatch):
    model = make_rlt("1+1", 1)
    monkeypatch.setattr(native, "native_available", lambda: (False, "no C++ compiler"))
    monkeypatch.setattr(native, "is_built", lambda: True)
    on, why = resolve_native("auto", model, "cpu", 10**6, False)
    assert not on and "no C++ compiler" in why
    with pytest.raises(ConfigError, match="trainer.native=auto"):
        resolve_native("on", model, "cpu", 10**6, False)


def test_native_rule_when_the_build_fails(monkeypatch):
    model = make_rlt("1+1", 1)

    def broken():
        raise RuntimeError("Error building extension 'rlt_token_loop'\nninja: build stopped")

    monkeypatch.setattr(native, "native_available", lambda: (True, ""))
    monkeypatch.setattr(native, "token_loop", broken)
    on, why = resolve_native("auto", model, "cpu", 10**6, False)
    assert not on and "build failed" in why and "ninja: build stopped" in why
    with pytest.raises(ConfigError, match="build failed"):
        resolve_native("on", model, "cpu", 10**6, False)


def test_the_build_lock_removes_a_dead_builds_lock_file(tmp_path):
    """PyTorch's build lock (a plain file) outlives a killed build; under our OS lock it can
    only be a dead build's, so entering the build removes it (issue 29 item 2)."""
    directory = tmp_path / native.NAME
    directory.mkdir()
    (directory / "lock").write_text("")
    with native._build_lock(directory):
        assert not (directory / "lock").exists()


def test_a_live_builder_is_waited_for_with_a_stated_limit(tmp_path, capfd):
    """While another live process holds the build lock, a second one says it waits and gives up
    after the limit with the lock file named, never hangs; once the holder dies (SIGKILL), the
    kernel frees the lock and the next build proceeds at once."""
    import subprocess
    import sys

    directory = tmp_path / native.NAME
    directory.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(tmp_path / f"{native.NAME}.build.flock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match="building the C\\+\\+ token loop for over"):
            with native._build_lock(directory, wait_s=1.0):
                pass
        assert "waiting for another process" in capfd.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    with native._build_lock(directory, wait_s=5.0):
        pass


@needs_native
@pytest.mark.slow
def test_a_killed_builds_lock_file_does_not_hang_the_next_run(tmp_path):
    """The probe's case end to end: a ``lock`` file left in the extension's build directory
    (as a run killed mid-build leaves it) made every later process wait forever inside
    PyTorch; now the next process loads (or rebuilds) the library."""
    import subprocess
    import sys

    native.token_loop()  # built once (cached for the whole suite)
    lock = native._build_directory() / "lock"
    lock.write_text("")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "import rlt.models.native as n; n.token_loop(); print('ok')"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        lock.unlink(missing_ok=True)
    # Loading at all is the point (the old code waited here until the timeout). Who removes
    # the stale file is not: under pytest-xdist another worker's build may take the lock first
    # and remove it, so the message can be in that process's output rather than this one's.
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_on_with_a_broken_compiler_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """Issue 29 item 7: a compiler that is on PATH but fails (CXX=/bin/false) passed the
    precheck and failed the run after it had written; now a trivial compile finds it first."""
    from rlt.training.hydra_support import precheck

    monkeypatch.setenv("CXX", "/bin/false")
    native.compiler_works.cache_clear()
    try:
        with pytest.raises(SystemExit) as exc:
            precheck(["experiment=tiny", f"root={tmp_path / 'root'}", "trainer.native=on"])
    finally:
        native.compiler_works.cache_clear()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'/bin/false' fails on a trivial file" in err and "trainer.native=auto" in err
    assert not (tmp_path / "root").exists()


def test_auto_falling_back_says_so_on_the_console(tmp_path, monkeypatch, capsys):
    """Issue 29 item 7: auto whose build fails trains with the Python loop and says so in one
    warning line (it used to say it only in results.json)."""
    from rlt.training.run import run
    from tests.training.helpers import compose_cfg

    def broken():
        raise RuntimeError("Error building extension 'rlt_token_loop'\nninja: build stopped")

    monkeypatch.setattr(native, "native_available", lambda: (True, ""))
    monkeypatch.setattr(native, "is_built", lambda: True)
    monkeypatch.setattr(native, "token_loop", broken)
    out = run(compose_cfg(["experiment=tiny", f"root={tmp_path}", "print_table=false"]))
    assert out["state"] == "done"
    lines = [x for x in capsys.readouterr().out.splitlines() if "warning" in x]
    assert len(lines) == 1 and "ninja: build stopped" in lines[0] and "Python loop" in lines[0]


def test_library_name_is_per_environment(monkeypatch, tmp_path):
    """Two environments sharing the extension cache build under different names (else each
    rebuilds the other's library); one environment keeps one name across processes."""
    import subprocess
    import sys

    name = native.library_name()
    again = subprocess.run(
        [sys.executable, "-c", "import rlt.models.native as n; print(n.library_name())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert again == name
    assert name.startswith(native.NAME + "_")
    copy = tmp_path / "token_loop.cpp"  # another clone: the same text at another path
    copy.write_text(native.SOURCE.read_text())
    monkeypatch.setattr(native, "SOURCE", copy)
    native.library_name.cache_clear()
    try:
        other = native.library_name()
        assert other != name
        import torch.utils.cpp_extension as ext

        monkeypatch.setattr(native, "SOURCE", copy)
        monkeypatch.setattr(ext, "include_paths", lambda *a, **k: ["/elsewhere/include"])
        native.library_name.cache_clear()
        assert native.library_name() not in (name, other)  # another torch's headers
    finally:
        monkeypatch.undo()
        native.library_name.cache_clear()
    assert native.library_name() == name
