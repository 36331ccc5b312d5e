"""DeltaNet (issue 14): the chunked (UT) form equals the token-by-token delta rule in outputs
and gradients, streaming equals the training forward, a hand-set [-1, 1] layer computes parity
through its state, and the [0, 1] range cannot reflect."""

from __future__ import annotations

import math

import pytest
import torch

from rlt.models import DeltaNetConfig, TransformerConfig, build_model, count_parameters
from rlt.models.deltanet import (
    DeltaNetLayer,
    chunked_delta,
    fla_delta,
    recurrent_delta,
    use_fla,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def random_inputs(n=2, h=3, t=23, dk=5, dv=4, seed=0, neg=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(
        torch.randn(n, h, t, dk, generator=g, dtype=torch.float64), dim=-1
    )
    k = torch.nn.functional.normalize(
        torch.randn(n, h, t, dk, generator=g, dtype=torch.float64), dim=-1
    )
    v = torch.randn(n, h, t, dv, generator=g, dtype=torch.float64)
    beta = torch.rand(n, h, t, generator=g, dtype=torch.float64) * (2 if neg else 1)
    s0 = torch.randn(n, h, dk, dv, generator=g, dtype=torch.float64)
    return q, k, v, beta, s0


def naive_delta(q, k, v, beta, s0, g=None):
    """The delta rule with explicit transition matrices, one head and position at a time;
    with log decays g, the gated rule S = alpha (I - beta k k^T) S + beta k v^T."""
    n, h, t, dk = k.shape
    out = torch.zeros(n, h, t, v.shape[-1], dtype=q.dtype)
    s = s0.clone()
    for a in range(n):
        for b in range(h):
            state = s0[a, b]
            for i in range(t):
                kk = k[a, b, i][:, None]
                alpha = 1.0 if g is None else math.exp(g[a, b, i])
                transition = alpha * (torch.eye(dk, dtype=q.dtype) - beta[a, b, i] * kk @ kk.T)
                state = transition @ state + beta[a, b, i] * kk @ v[a, b, i][None, :]
                out[a, b, i] = state.T @ q[a, b, i]
            s[a, b] = state
    return out, s


@pytest.mark.parametrize(("t", "chunk"), [(23, 4), (23, 8), (16, 16), (5, 8), (1, 3), (40, 7)])
def test_chunked_equals_recurrent_equals_naive(t, chunk):
    q, k, v, beta, s0 = random_inputs(t=t, seed=t + chunk)
    ref_o, ref_s = naive_delta(q, k, v, beta, s0)
    rec_o, rec_s = recurrent_delta(q, k, v, beta, s0)
    ch_o, ch_s = chunked_delta(q, k, v, beta, s0, chunk)
    for o, s in ((rec_o, rec_s), (ch_o, ch_s)):
        assert torch.allclose(o, ref_o, atol=1e-10) and torch.allclose(s, ref_s, atol=1e-10)


def random_log_decay(n=2, h=3, t=23, seed=0):
    """Log decays with alpha = exp(g) spread over (0.3, 1]: strong and weak forgetting."""
    g = torch.Generator().manual_seed(seed + 100)
    return torch.rand(n, h, t, generator=g, dtype=torch.float64).mul(1.2).neg()


@pytest.mark.parametrize(("t", "chunk"), [(23, 4), (16, 16), (5, 8), (1, 3), (40, 7)])
def test_gated_chunked_equals_recurrent_equals_naive(t, chunk):
    q, k, v, beta, s0 = random_inputs(t=t, seed=t + chunk)
    g = random_log_decay(t=t, seed=t)
    ref_o, ref_s = naive_delta(q, k, v, beta, s0, g)
    rec_o, rec_s = recurrent_delta(q, k, v, beta, s0, g)
    ch_o, ch_s = chunked_delta(q, k, v, beta, s0, chunk, g)
    for o, s in ((rec_o, rec_s), (ch_o, ch_s)):
        assert torch.allclose(o, ref_o, atol=1e-10) and torch.allclose(s, ref_s, atol=1e-10)
    # and the decay matters: without it the result differs
    assert not torch.allclose(recurrent_delta(q, k, v, beta, s0)[0], ref_o, atol=1e-3)


@pytest.mark.parametrize("gated", [False, True])
def test_chunked_and_recurrent_gradients_agree(gated):
    inputs = [*random_inputs(t=19, seed=3 + gated), random_log_decay(t=19) if gated else None]
    inputs = [x if x is None else x.requires_grad_() for x in inputs]
    leaves = [x for x in inputs if x is not None]
    grads = []
    for fn in (
        lambda q, k, v, b, s, g: recurrent_delta(q, k, v, b, s, g),
        lambda q, k, v, b, s, g: chunked_delta(q, k, v, b, s, 5, g),
    ):
        o, s = fn(*inputs)
        (o.sin().sum() + s.cos().sum()).backward()
        grads.append([x.grad.clone() for x in leaves])
        for x in leaves:
            x.grad = None
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9)


def test_gated_layer_decays_within_zero_one_and_only_when_gated():
    torch.manual_seed(0)
    gated = DeltaNetLayer(DeltaNetConfig(d_model=16, n_heads=2, n_layers=1, gated=True))
    plain = DeltaNetLayer(DeltaNetConfig(d_model=16, n_heads=2, n_layers=1))
    x = torch.randn(4, 9, 16) * 3
    alpha = gated.log_decay(x).exp()
    assert alpha.shape == (4, 2, 9) and (alpha > 0).all() and (alpha <= 1).all()
    assert alpha.min() < 0.999  # it does forget
    assert plain.log_decay(x) is None
    extra = {n for n, _ in gated.named_parameters()} - {n for n, _ in plain.named_parameters()}
    assert extra == {"decay.weight", "A_log", "dt_bias"}
    with pytest.raises(ValueError, match="kernel=torch"):
        use_fla("fla", x, gated=True)
    assert use_fla("auto", x, gated=True) is False


def make(neg=True, chunk=4, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = DeltaNetConfig(d_model=24, n_heads=3, n_layers=2, neg_eigval=neg, chunk_size=chunk, **kw)
    return build_model(cfg).double()


@pytest.mark.parametrize("prompt_len", [0, 1, 6, 13])
@pytest.mark.parametrize(("neg", "gated"), [(True, False), (False, False), (True, True)])
def test_streaming_equals_forward(prompt_len, neg, gated, tokens):
    model = make(neg=neg, chunk=4, gated=gated)
    with torch.no_grad():
        full = model(tokens)
        logits, state = model.prefill(tokens[:, :prompt_len], model.init_state(tokens.shape[0]))
        pieces = [logits]
        for pos in range(prompt_len, tokens.shape[1]):
            step, state = model.step(tokens[:, pos], state)
            pieces.append(step[:, None])
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-10)
    assert state.position == tokens.shape[1]


def test_prefill_in_pieces_not_multiple_of_chunk(tokens):
    model = make(chunk=4)
    with torch.no_grad():
        full = model(tokens)
        state = model.init_state(tokens.shape[0])
        a, state = model.prefill(tokens[:, :7], state)  # 7 and 14: neither a multiple of 4
        b, state = model.prefill(tokens[:, 7:], state)
    assert torch.allclose(torch.cat([a, b], dim=1), full, atol=1e-10)


def test_parameter_count_is_matched_to_the_transformer():
    for d, layers in ((512, 8), (64, 2), (64, 4)):
        tf = count_parameters(TransformerConfig(d_model=d, n_heads=4, n_layers=layers))
        for gated in (False, True):
            cfg = DeltaNetConfig(d_model=d, n_heads=4, n_layers=layers, gated=gated)
            delta = count_parameters(cfg)
            assert abs(delta / tf - 1) < 0.03, (d, layers, gated, delta, tf)


# -- parity through the state ----------------------------------------------------------------
BOS, ONE, ZERO = 1, 2, 3  # token ids of this hand-built example


def parity_layer(neg: bool, big: float = 30.0) -> DeltaNetLayer:
    """One head of width 8; embedding dims: 0 constant, 1 <bos>, 2 bit 1, 3 bit 0.
    k = q = e0 always; v = e0 at <bos> and 0 on bits; beta = 1 at <bos>, ~2 (or ~1 in the
    [0, 1] range) on a 1 bit and ~0 on a 0 bit. So <bos> writes S = e0 e0^T and each 1 bit
    reflects it (S -> -S): o_t = S^T e0 = (-1)^(ones so far) e0."""
    cfg = DeltaNetConfig(d_model=8, n_heads=1, n_layers=1, neg_eigval=neg)
    layer = DeltaNetLayer(cfg).double()
    d = 8
    with torch.no_grad():
        for p in layer.parameters():
            p.zero_()
        layer.qkv.weight[0, 0] = big  # q <- constant
        layer.qkv.weight[d, 0] = big  # k <- constant
        layer.qkv.weight[2 * d, 1] = 1.0  # v <- <bos>
        layer.conv.weight[:, 0, -1] = 1.0  # the current position only
        layer.beta.weight[0, 2] = big
        layer.beta.weight[0, 3] = -big
        layer.o_norm.weight.fill_(1.0)
        layer.gate.weight[0, 0] = big
        layer.out.weight[0, 0] = 1.0
    return layer


def embed(bits: torch.Tensor) -> torch.Tensor:
    """(N, T) bits -> (N, 1 + T, 8) inputs: <bos> then the bits."""
    n, t = bits.shape
    x = torch.zeros(n, 1 + t, 8, dtype=torch.float64)
    x[:, :, 0] = 1.0
    x[:, 0, 1] = 1.0
    x[:, 1:, 2] = bits.double()
    x[:, 1:, 3] = 1.0 - bits.double()
    return x


@pytest.mark.parametrize("chunk", [1, 16])
def test_hand_set_neg_eigval_layer_computes_parity_to_256_bits(chunk):
    layer = parity_layer(neg=True)
    layer.config = DeltaNetConfig(d_model=8, n_heads=1, n_layers=1, chunk_size=chunk)
    bits = torch.randint(0, 2, (64, 256), generator=torch.Generator().manual_seed(0))
    state = torch.zeros(64, 1, 8, 8, dtype=torch.float64)
    conv = torch.zeros(64, 3, 24, dtype=torch.float64)
    with torch.no_grad():
        from rlt.models.deltanet import DeltaNetLayerState

        y, _ = layer(embed(bits), DeltaNetLayerState(conv, state))
    predicted_odd = y[:, 1:, 0] < 0  # after every bit
    running = bits.cumsum(dim=1) % 2 == 1
    assert torch.equal(predicted_odd, running)  # exact at every prefix length 1..256


def test_zero_one_range_cannot_reflect():
    # The same hand-set weights in the [0, 1] range: a 1 bit erases the state instead of
    # reflecting it, so the running parity is lost.
    layer = parity_layer(neg=False)
    bits = torch.randint(0, 2, (64, 64), generator=torch.Generator().manual_seed(1))
    from rlt.models.deltanet import DeltaNetLayerState

    with torch.no_grad():
        y, _ = layer(
            embed(bits),
            DeltaNetLayerState(
                torch.zeros(64, 3, 24, dtype=torch.float64),
                torch.zeros(64, 1, 8, 8, dtype=torch.float64),
            ),
        )
    running = bits.cumsum(dim=1) % 2 == 1
    assert (((y[:, 1:, 0] < 0) == running).double().mean()) < 0.75
    # And provably: for any weights and inputs beta < 1, so the transition I - beta k k^T
    # (unit k) has eigenvalues 1 - beta > 0 and 1; no sign flip is representable.
    for neg, lo, hi in ((False, 0.0, 1.0), (True, -1.0, 1.0)):
        torch.manual_seed(2)
        layer = DeltaNetLayer(DeltaNetConfig(d_model=16, n_heads=2, n_layers=1, neg_eigval=neg))
        with torch.no_grad():
            for p in layer.parameters():
                p.normal_(std=3.0)
            x = torch.randn(8, 30, 16) * 5
            _, k, _, beta, _ = layer._mix_inputs(x, torch.zeros(8, 3, 48))
        kk = k[..., :, None] * k[..., None, :]
        eye = torch.eye(k.shape[-1])
        eig = torch.linalg.eigvalsh(eye - beta[..., None, None] * kk)
        assert eig.min() >= lo - 1e-5 and eig.max() <= hi + 1e-5
        if neg:
            assert eig.min() < -0.5  # the extended range does reach negative eigenvalues
        else:
            assert eig.min() >= 0.0 - 1e-6


def _fla_available() -> bool:
    try:
        import fla.ops.delta_rule  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.cuda
@pytest.mark.skipif(not _fla_available(), reason="needs CUDA and flash-linear-attention")
@pytest.mark.parametrize("neg", [True, False])
def test_fla_kernel_equals_the_pytorch_recurrence_on_cuda(neg):
    """The optional GPU path: flash-linear-attention's kernel against our recurrence, outputs,
    final state and gradients (float32 on CUDA; the kernel has no float64)."""
    inputs = [x.float().cuda().requires_grad_() for x in random_inputs(t=70, dk=16, dv=16, neg=neg)]
    results = []
    for fn in (fla_delta, recurrent_delta):
        o, s = fn(*inputs)
        (o.sin().sum() + s.cos().sum()).backward()
        results.append((o.detach(), s.detach(), [x.grad.clone() for x in inputs]))
        for x in inputs:
            x.grad = None
    (o1, s1, g1), (o2, s2, g2) = results
    assert torch.allclose(o1, o2, atol=2e-3) and torch.allclose(s1, s2, atol=2e-3)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, atol=5e-3)


def test_kernel_choice_off_cuda():
    """kernel=auto on CPU is the PyTorch path; kernel=fla on CPU is a clear error."""
    x = torch.zeros(1, 3, 24, dtype=torch.float64)
    assert not use_fla("auto", x) and not use_fla("torch", x)
    with pytest.raises((ImportError, ValueError), match="model.kernel"):
        use_fla("fla", x)
    with pytest.raises(ValueError, match="kernel must be"):
        DeltaNetConfig(d_model=24, n_heads=3, n_layers=1, kernel="triton")


def test_parameter_table_lists_both_deltanets_matched_to_the_transformer():
    from rlt.models.build import PAPER, parameter_rows

    rows = {r["model"]: r["params"] for r in parameter_rows()}
    d, h = PAPER["d_model"], PAPER["n_heads"]
    for layers in (8, 16):
        tf = rows[f"Transformer {layers}"]
        plain, gated = rows[f"DeltaNet {layers}"], rows[f"Gated DeltaNet {layers}"]
        assert abs(plain / tf - 1) < 0.03 and abs(gated / tf - 1) < 0.03
        assert gated - plain == layers * (d * h + 2 * h)  # W_a, A_log and dt_bias per layer
