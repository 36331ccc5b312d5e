"""Op-level references of portable arithmetic: every CPU kernel the model families use, run on
fixed inputs, each output hashed.

A retrained run that parts from its reference names a step (rlt/portable/check.py); these name
the kernel. Each case runs one operation (or one family's forward and backward) at the shapes
of the laptop and paper presets and returns its outputs; :func:`hashes` turns them into
``{case: sha256 prefix}``, compared with ``tests/reference/portable_ops.json`` by
tests/test_portable.py and ``python -m rlt.portable --check``.

Inputs are host-independent by construction: integers from torch's Mersenne Twister
(``randint``), scaled by a power of two, so every input bit is the same on every host; only
the kernel under test can make two hosts differ.

    python -m rlt.portable --check           # these hashes and the retrained references
    python -m rlt.portable --write-ops       # remake tests/reference/portable_ops.json
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from rlt.portable import kernels

kernels.install()  # the kernels as the families run them (a correctly rounded square root)

# (name, d_model, d_ff, heads, batch, positions): the laptop preset's training step (64 x 20
# tokens) and one micro-batch of the paper preset (32 x 41 tokens, parity's longest + 1).
SHAPES = {"laptop": (64, 170, 4, 64, 20), "paper": (512, 1365, 4, 32, 41)}


def fixed(*shape: int, seed: int, scale: float = 1.0) -> Tensor:
    """Values in [-scale, scale) on a 2**-12 grid, the same bits on every host."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-4096, 4096, shape, generator=g).float() * (scale / 4096)


def _linear_cases(preset: str) -> dict[str, Callable[[], tuple[Tensor, ...]]]:
    d, ff, _, b, t = SHAPES[preset]
    cases = {}
    # (rows, in, out): the whole step's projections, then one token's (the recurrent loop's).
    for rows, name in ((b * t, "step"), (b, "token")):
        for n_in, n_out in ((d, 3 * d), (d, d), (d, 2 * ff), (ff, d), (d, 140)):

            def run(rows=rows, n_in=n_in, n_out=n_out) -> tuple[Tensor, ...]:
                x = fixed(rows, n_in, seed=rows + n_in).requires_grad_()
                w = fixed(n_out, n_in, seed=n_out, scale=n_in**-0.5).requires_grad_()
                bias = fixed(n_out, seed=n_out + 1, scale=0.1).requires_grad_()
                y = F.linear(x, w, bias)  # (rows, out)
                y.backward(fixed(rows, n_out, seed=7))
                return y, x.grad, w.grad, bias.grad

            cases[
                f"linear {preset} {name} {rows}x{n_in}->{n_out} (fwd, grad in, grad w, grad b)"
            ] = run
    return cases


def _attention_cases(preset: str) -> dict[str, Callable[[], tuple[Tensor, ...]]]:
    d, _, h, b, t = SHAPES[preset]
    dh = d // h

    def sdpa() -> tuple[Tensor, ...]:
        q, k, v = (fixed(b, h, t, dh, seed=s).requires_grad_() for s in (11, 12, 13))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        y.backward(fixed(b, h, t, dh, seed=14))
        return y, q.grad, k.grad, v.grad

    def window_bmm() -> tuple[Tensor, ...]:
        # One token's window attention as the fused recurrence computes it: (B*H, 1, Dh) @
        # (B*H, Dh, W), softmax, then (B*H, 1, W) @ (B*H, W, Dh).
        q = fixed(b * h, 1, dh, seed=21)
        k = fixed(b * h, dh, 8, seed=22)
        v = fixed(b * h, 8, dh, seed=23)
        p = torch.softmax(torch.bmm(q, k) * dh**-0.5, dim=-1)  # (B*H, 1, W)
        return p, torch.bmm(p, v)

    return {
        f"sdpa causal {preset} {b}x{h}x{t}x{dh} (fwd, grad q, k, v)": sdpa,
        f"window attention bmm + softmax {preset} {b * h}x1x{dh} @ {dh}x8": window_bmm,
    }


def _elementwise_cases() -> dict[str, Callable[[], tuple[Tensor, ...]]]:
    d, ff, _, b, t = SHAPES["laptop"]

    def rms_norm() -> tuple[Tensor, ...]:
        x = fixed(b, t, d, seed=31).requires_grad_()
        w = (1 + fixed(d, seed=32, scale=0.1)).requires_grad_()
        y = F.rms_norm(x, (d,), w, eps=1e-6)
        y.backward(fixed(b, t, d, seed=33))
        return y, x.grad, w.grad

    def swiglu() -> tuple[Tensor, ...]:
        a, g = (fixed(b, t, ff, seed=s, scale=4.0).requires_grad_() for s in (41, 42))
        y = F.silu(g) * a
        y.backward(fixed(b, t, ff, seed=43))
        return y, a.grad, g.grad

    def merge_gate() -> tuple[Tensor, ...]:
        x = fixed(b, d, seed=51, scale=4.0).requires_grad_()
        y = torch.sigmoid(x)
        y.backward(fixed(b, d, seed=52))
        return y, x.grad

    def rope() -> tuple[Tensor, ...]:
        dh = d // 4
        freqs = 10000.0 ** (-torch.arange(0, dh, 2).float() / dh)
        angles = torch.outer(torch.arange(t).float(), freqs)  # (T, Dh/2)
        rot = torch.polar(torch.ones_like(angles), angles)
        x = fixed(b, t, 4, dh, seed=61)
        xc = torch.view_as_complex(x.reshape(b, t, 4, dh // 2, 2))
        return torch.view_as_real(xc * rot[None, :, None]).flatten(3), rot.real, rot.imag

    def softmax() -> tuple[Tensor, ...]:
        x = fixed(b, 4, t, t, seed=71, scale=8.0).requires_grad_()
        y = torch.softmax(x, dim=-1)
        y.backward(fixed(b, 4, t, t, seed=72))
        return y, x.grad

    def loss() -> tuple[Tensor, ...]:
        logits = fixed(b * t, 140, seed=81, scale=6.0).requires_grad_()
        target = torch.randint(0, 140, (b * t,), generator=torch.Generator().manual_seed(82))
        mask = torch.arange(b * t) % 3 != 0  # scored positions only, as the tasks supervise
        value = F.cross_entropy(logits[mask], target[mask])
        value.backward()
        return value, logits.grad, (logits.argmax(-1) == target).float().mean()

    def embedding() -> tuple[Tensor, ...]:
        weight = fixed(140, d, seed=91).requires_grad_()
        ids = torch.randint(0, 140, (b, t), generator=torch.Generator().manual_seed(92))
        out = F.embedding(ids, weight)
        out.backward(fixed(b, t, d, seed=93))
        return out, weight.grad

    def reductions() -> tuple[Tensor, ...]:
        x = fixed(b, t, d, seed=101, scale=3.0)
        return x.sum(), x.mean(dim=-1), x.pow(2).sum(-1).sqrt(), torch.linalg.vector_norm(x)

    return {
        f"rms_norm laptop {b}x{t}x{d} (fwd, grad x, grad w)": rms_norm,
        f"swiglu silu(g)*a laptop {b}x{t}x{ff} (fwd, grads)": swiglu,
        f"sigmoid gate laptop {b}x{d} (fwd, grad)": merge_gate,
        f"rope polar + complex multiply laptop {b}x{t}x4x{d // 4}": rope,
        f"softmax laptop {b}x4x{t}x{t} (fwd, grad)": softmax,
        f"cross_entropy on scored positions {b * t}x140 (loss, grad, acc)": loss,
        f"embedding laptop 140x{d} (fwd, grad w)": embedding,
        f"sum, mean, norm reductions laptop {b}x{t}x{d}": reductions,
    }


def _optimizer_cases() -> dict[str, Callable[[], tuple[Tensor, ...]]]:
    def adamw() -> tuple[Tensor, ...]:
        params = [fixed(170, 64, seed=111).requires_grad_(), fixed(64, seed=112).requires_grad_()]
        opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
        for step in range(3):
            for i, p in enumerate(params):
                p.grad = fixed(*p.shape, seed=113 + 10 * step + i, scale=0.5)
            total = torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        return (*(p.detach() for p in params), total)

    return {"adamw step x3 + clip_grad_norm_ (the report's betas, decay)": adamw}


def _family_cases() -> dict[str, Callable[[], tuple[Tensor, ...]]]:
    """One forward and backward of each family at width 64 with fixed weights: the kernels no
    single case above names (the fused recurrence's loop, the LSTM's, DeltaNet's, DeltaProduct's
    and PD-SSM's)."""
    from rlt.models import build_model
    from rlt.models import config as mc

    small = dict(d_model=64, n_heads=4, vocab_size=140)
    configs = {
        "rlt1 1+1": lambda: mc.RLTConfig.from_split("1+1", feedback_interval=1, **small),
        "rlt2 B=4 1+1": lambda: mc.RLTConfig.from_split("1+1", feedback_interval=4, **small),
        "rlt0 1+1": lambda: mc.RLTConfig.from_split("1+1", feedback_interval=None, **small),
        "transformer 2": lambda: mc.TransformerConfig(n_layers=2, **small),
        "lstm 2": lambda: mc.LSTMConfig(d_model=64, n_layers=2, vocab_size=140),
        "deltanet 2": lambda: mc.DeltaNetConfig(n_layers=2, **small),
        "deltaproduct 2": lambda: mc.DeltaProductConfig(n_layers=2, **small),
        "pdssm 2": lambda: mc.PDSSMConfig(n_layers=2, **small),
    }
    cases = {}
    for name, config in configs.items():

        def run(config=config) -> tuple[Tensor, ...]:
            model = build_model(config())
            with torch.no_grad():
                for i, p in enumerate(model.parameters()):
                    p.copy_(fixed(*p.shape, seed=1000 + i, scale=p.shape[-1] ** -0.5))
            tokens = torch.randint(1, 140, (8, 20), generator=torch.Generator().manual_seed(5))
            logits = model(tokens)  # (8, 20, 140)
            F.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 1).flatten()).backward()
            return (logits, *(p.grad for p in model.parameters() if p.grad is not None))

        cases[f"family {name}: forward + backward, 8x20 tokens"] = run
    return cases


def cases() -> dict[str, Callable[[], tuple[Tensor, ...]]]:
    return {
        **_linear_cases("laptop"),
        **_linear_cases("paper"),
        **_attention_cases("laptop"),
        **_attention_cases("paper"),
        **_elementwise_cases(),
        **_optimizer_cases(),
        **_family_cases(),
    }


def digest(outputs: tuple[Tensor, ...] | Tensor) -> str:
    """The first 16 hex digits of the sha256 of every output's float32 bytes, in order."""
    h = hashlib.sha256()
    for out in outputs if isinstance(outputs, tuple) else (outputs,):
        t = out.detach().float().contiguous().reshape(-1)
        h.update(str(tuple(out.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def hashes(threads: int = 1) -> dict[str, str]:
    """Every case's digest, computed with ``threads`` intra-op threads (1: the references')."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return {name: digest(run()) for name, run in cases().items()}
    finally:
        torch.set_num_threads(before)


def differing(got: dict[str, str], reference: dict[str, str]) -> list[str]:
    """The cases whose digest differs from the reference (or that only one side has)."""
    return [n for n in sorted(set(got) | set(reference)) if got.get(n) != reference.get(n)]
