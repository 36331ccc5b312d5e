"""Kernels that portable arithmetic replaces, where pinning the CPU's code paths is not enough.

MKL decides some of its code paths by the CPU's vendor, whatever ``MKL_CBWR`` says: on an AMD
EPYC, ``MKL_VERBOSE=1`` reports ``CNR:AUTO,STRICT`` where ``MKL_CBWR=AVX2,STRICT`` was asked
(only ``COMPATIBLE`` is honoured there). Its vector math (VML), which ATen calls for
``sqrt`` of a float32 tensor, then gives another result than on an Intel Xeon: there ``vsSqrt``
rounds correctly, as IEEE 754 asks of a square root; on that AMD EPYC 18 % of 100,000 values came
back one unit in the last place off. AdamW takes a square root of every parameter's second
moment at every step, so before this module an AMD host parted from the Intel references at
the first optimizer step (training step 1), every earlier operation equal bit for bit
(``../shared/tools/op_hashes.py`` on the 20-step laptop run, 2026-12-07).

:func:`install` (called where rlt trains, benchmarks a training step or probes a run:
rlt/training/module.py, rlt/bench_steps.py, rlt/probe.py, and by this package's op references)
registers, while portable arithmetic is on, a CPU kernel for ``aten::sqrt`` that rounds correctly
on every host: a float32 (or half-precision) input is taken to float64, its square root taken
there and rounded once (an integer input first becomes float32, as ATen promotes it). A float64
square root within one unit of its last place (MKL's promise for ``vdSqrt``, on any CPU) rounds
to the correctly rounded float32 result, because a float32 square root is never closer than
2^-50 (relative) to a point halfway between two float32 numbers, and 53 bits resolve that. Where
``vsSqrt`` already rounds correctly (the Intel Xeon of the references) every number stays what
it was; other dtypes get ATen's own square root (``pow(x, 0.5)``, which is ATen's sqrt kernel).
Only the CPU is replaced: CUDA's float32 square root rounds correctly by default.
"""

from __future__ import annotations

import warnings

import torch

import rlt.portable as portable

# float64 holds every square root of these to within half an ulp of their own precision.
_WIDENED = (torch.float32, torch.float16, torch.bfloat16)

_library: torch.library.Library | None = None


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    if not (x.is_floating_point() or x.is_complex()):
        x = x.to(torch.get_default_dtype())  # integers and booleans: as ATen promotes them
    if x.dtype in _WIDENED:
        return torch.pow(x.double(), 0.5).to(x.dtype)
    return torch.pow(x, 0.5)  # float64, complex: ATen's own sqrt kernel, as before


def _sqrt_out(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    result = _sqrt(x)
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


def _sqrt_(x: torch.Tensor) -> torch.Tensor:
    if not (x.is_floating_point() or x.is_complex()):
        raise RuntimeError(f"result type Float can't be cast to the desired output type {x.dtype}")
    return x.copy_(_sqrt(x))


def install() -> bool:
    """Register the correctly rounded CPU square root, once per process, where
    :func:`rlt.portable.exact_sqrt` says so (portable arithmetic on, as ``import rlt`` decided,
    and ``RLT_EXACT_SQRT`` not 0). Returns whether it is in force."""
    global _library
    if _library is not None:
        return True
    if not portable.exact_sqrt():
        return False
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": meant
        warnings.simplefilter("ignore", UserWarning)
        library.impl("sqrt", _sqrt, "CPU")
        library.impl("sqrt.out", _sqrt_out, "CPU")
        library.impl("sqrt_", _sqrt_, "CPU")
    _library = library
    return True


def installed() -> bool:
    return _library is not None
