"""The kernels portable arithmetic replaces (rlt/portable/kernels.py): a float32 square root
that rounds correctly on every CPU, checked against NumPy's (the CPU's IEEE square root
instruction), bit for bit, in every form ATen offers it."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import rlt.training.module  # noqa: F401  (installs the kernels, as every training process does)
from rlt.portable import kernels


def _values() -> torch.Tensor:
    """Every binade of float32 (subnormals too), random mantissas, and the special values."""
    g = torch.Generator().manual_seed(0)
    mantissa = torch.randint(0, 2**23, (4000,), generator=g, dtype=torch.int32)
    exponent = torch.randint(0, 255, (4000,), generator=g, dtype=torch.int32)  # 0: subnormal
    bits = (exponent << 23) | mantissa
    special = torch.tensor([0.0, -0.0, 1.0, 4.0, 2.0, float("inf"), -1.0, -float("inf")])
    return torch.cat([bits.view(torch.float32), special, torch.tensor([float("nan")])])


def _bits(x: torch.Tensor) -> np.ndarray:
    return x.contiguous().view(torch.int32).numpy()


def _ieee(x: torch.Tensor) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.sqrt(x.numpy()).view(np.int32)


needs_kernels = pytest.mark.skipif(
    not kernels.installed(), reason="portable arithmetic is off here (RLT_PORTABLE=0 or no AVX2)"
)


@needs_kernels
def test_float32_square_root_rounds_correctly_in_every_form() -> None:
    x = _values()
    want = _ieee(x)
    nan = np.isnan(x.numpy()) | (x.numpy() < 0)
    assert np.array_equal(_bits(torch.sqrt(x))[~nan], want[~nan])
    assert torch.sqrt(x)[torch.from_numpy(nan)].isnan().all()
    assert np.array_equal(_bits(x.sqrt()), _bits(torch.sqrt(x)))
    assert np.array_equal(_bits(x.clone().sqrt_()), _bits(torch.sqrt(x)))
    out = torch.empty(0)
    torch.sqrt(x, out=out)
    assert np.array_equal(_bits(out), _bits(torch.sqrt(x)))
    strided = x.repeat_interleave(3)[::3]  # not contiguous: ATen buffers it for MKL otherwise
    assert not strided.is_contiguous()
    assert np.array_equal(_bits(strided.sqrt()), _bits(torch.sqrt(x)))
    assert torch.sqrt(torch.tensor(-0.0)).item() == 0.0 and torch.sqrt(torch.tensor(-0.0)).signbit()


@needs_kernels
def test_half_precision_square_roots_round_correctly_and_other_dtypes_keep_atens() -> None:
    x = _values().abs()
    x = x[torch.isfinite(x)]
    half = x.clamp(max=60000).half()
    want = np.sqrt(half.numpy().astype(np.float64)).astype(np.float16)  # one rounding
    assert np.array_equal(half.sqrt().numpy().view(np.int16), want.view(np.int16))
    bf = x.bfloat16()
    want_bf = torch.from_numpy(np.sqrt(bf.double().numpy())).bfloat16()  # one rounding
    assert torch.equal(bf.sqrt().view(torch.int16), want_bf.view(torch.int16))
    ints = torch.arange(0, 1000)
    assert ints.sqrt().dtype == torch.float32
    assert np.array_equal(_bits(ints.sqrt()), _ieee(ints.float()))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.arange(4).sqrt_()
    double = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    exact = np.sqrt(double.numpy().astype(np.longdouble))
    got = double.sqrt().numpy()
    ulps = np.abs((got.astype(np.longdouble) - exact) / np.spacing(got).astype(np.longdouble))
    assert ulps.max() < 1  # float64 as ATen computes it, within one unit in the last place


@needs_kernels
def test_the_square_roots_gradient_is_unchanged() -> None:
    x = (torch.rand(257, generator=torch.Generator().manual_seed(2)) + 0.01).requires_grad_()
    x.sqrt().backward(torch.ones(257))
    want = np.float32(0.5) / np.sqrt(x.detach().numpy())
    assert np.allclose(x.grad.numpy(), want, rtol=1e-6, atol=0)


def test_the_kernels_are_portable_arithmetics_only() -> None:
    code = (
        "import rlt.training.module, torch; from rlt.portable import kernels, describe; "
        "print(kernels.installed(), describe()['exact_sqrt'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "RLT_PORTABLE"}

    def run(**extra: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert run(RLT_PORTABLE="0") == "False False"
    on = "True True" if kernels.installed() else "False False"
    assert run() == on


def test_the_exact_square_root_is_todays_portable_arithmetic_only(monkeypatch) -> None:
    """On with portable arithmetic's settings of today; off with RLT_EXACT_SQRT=0, with the
    earlier MKL_CBWR=AVX2 (whose runs took torch's own) and with portable arithmetic off."""
    import rlt.portable as portable

    monkeypatch.setattr(portable, "status", "on")
    for name, value in portable.SETTINGS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(portable.EXACT_SQRT, raising=False)
    assert portable.exact_sqrt() and portable.started_arithmetic()["exact_sqrt"] is True
    monkeypatch.setenv(portable.EXACT_SQRT, "off")
    assert not portable.exact_sqrt()
    monkeypatch.setenv(portable.EXACT_SQRT, "1")
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    assert not portable.exact_sqrt()
    monkeypatch.setattr(portable, "status", "off (RLT_PORTABLE=0)")
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")
    assert not portable.exact_sqrt()
