"""Gated DeltaProduct and PD-SSM (issue 57), each layer against an independent reference: a
naive per-token loop of the paper's equations with explicit matrices in float64 (DeltaProduct
in the paper's orientation, S of shape d_v x d_k and o_t = S_t q_t; PD-SSM in complex128 with
P_t and D_t as N x N matrices). Streaming equals the training forward; DeltaProduct's
transition has spectral radius <= 1 and reaches eigenvalue -1, PD-SSM's is a column one-hot
matrix times a diagonal of modulus < 1; both are parameter-matched to the Transformer."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rlt.models import (
    DeltaNetConfig,
    DeltaProductConfig,
    PDSSMConfig,
    build_model,
    count_parameters,
)
from rlt.models.deltaproduct import DeltaProductLayer, DeltaProductLayerState
from rlt.models.pdssm import PDSSMLayer, column_one_hot


def randomise(module: torch.nn.Module, std: float, seed: int) -> None:
    """Every parameter N(0, std^2): outputs far from the near-zero init, so a wrong term shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


# -- DeltaProduct ------------------------------------------------------------------------------
def deltaproduct_layer(n_householder=2, gated=True, neg=True, chunk=16, seed=0):
    cfg = DeltaProductConfig(
        d_model=12,
        n_heads=3,
        n_layers=1,
        n_householder=n_householder,
        gated=gated,
        neg_eigval=neg,
        chunk_size=chunk,
    )
    layer = DeltaProductLayer(cfg).double()
    randomise(layer, 0.5, seed)
    return layer


def naive_deltaproduct_layer(layer: DeltaProductLayer, x: torch.Tensor):
    """The layer from the zero state, from its weights and the paper's equations: y (N, T, d)
    and every head's final S (N, H, d_v, d_k). Token t: S <- alpha_t S, then for j = 1..n_h
    S <- S (I - beta k k^T) + beta v k^T with unit k, and o_t = S q_t."""
    cfg = layer.config
    n, t_len, d = x.shape
    h, nh, width = cfg.n_heads, cfg.n_householder, cfg.conv_size
    dh = d // h
    proj = x @ layer.qkv.weight.T  # (N, T, (1 + 2 n_h) d)
    w = layer.conv.weight[:, 0]  # (C, kernel): causal, zeros before position 0
    conv = torch.zeros_like(proj)
    for t in range(t_len):
        for j in range(width):
            src = t - (width - 1) + j
            if src >= 0:
                conv[:, t] += w[:, j] * proj[:, src]
    act = conv * torch.sigmoid(conv)
    q = act[..., :d].reshape(n, t_len, h, dh)
    k = act[..., d : (1 + nh) * d].reshape(n, t_len, nh, h, dh)
    v = act[..., (1 + nh) * d :].reshape(n, t_len, nh, h, dh)
    beta = torch.sigmoid(x @ layer.beta.weight.T).reshape(n, t_len, nh, h) * (
        2 if cfg.neg_eigval else 1
    )
    alpha = torch.ones(n, t_len, h, dtype=x.dtype)
    if cfg.gated:
        dt = F.softplus(x @ layer.decay.weight.T + layer.dt_bias)
        alpha = torch.exp(-layer.A_log.exp() * dt)
    eye = torch.eye(dh, dtype=x.dtype)
    out = torch.zeros(n, t_len, h, dh, dtype=x.dtype)
    final = torch.zeros(n, h, dh, dh, dtype=x.dtype)
    for a in range(n):
        for b in range(h):
            s = torch.zeros(dh, dh, dtype=x.dtype)  # (d_v, d_k)
            for t in range(t_len):
                s = alpha[a, t, b] * s
                for j in range(nh):
                    kk = k[a, t, j, b] / k[a, t, j, b].norm()
                    bt = beta[a, t, j, b]
                    s = s @ (eye - bt * torch.outer(kk, kk)) + bt * torch.outer(v[a, t, j, b], kk)
                out[a, t, b] = s @ (q[a, t, b] / q[a, t, b].norm())
            final[a, b] = s
    o = rms_norm(out, layer.o_norm.weight, cfg.norm_eps).reshape(n, t_len, d)
    gate = x @ layer.gate.weight.T
    return (o * gate * torch.sigmoid(gate)) @ layer.out.weight.T, final


def zero_state(layer: DeltaProductLayer, n: int) -> DeltaProductLayerState:
    cfg = layer.config
    dh = cfg.d_model // cfg.n_heads
    return DeltaProductLayerState(
        torch.zeros(n, cfg.conv_size - 1, layer.conv.in_channels, dtype=torch.float64),
        torch.zeros(n, cfg.n_heads, dh, dh, dtype=torch.float64),
    )


@pytest.mark.parametrize("n_householder", [1, 2, 3])
@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("chunk", [1, 3, 16])  # token by token; chunks of 3 tokens (padded); one
def test_deltaproduct_layer_equals_the_naive_equations(n_householder, gated, chunk):
    layer = deltaproduct_layer(n_householder, gated, chunk=chunk, seed=n_householder)
    x = torch.randn(2, 11, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with torch.no_grad():
        want_y, want_s = naive_deltaproduct_layer(layer, x)
        got_y, state = layer(x, zero_state(layer, 2))
    torch.testing.assert_close(got_y, want_y, rtol=0, atol=1e-10)
    # stored as DeltaNet stores it: the transpose, (d_k, d_v)
    torch.testing.assert_close(state.s, want_s.transpose(-1, -2), rtol=0, atol=1e-10)
    assert want_y.abs().max() > 1e-2  # not a comparison of zeros


def test_deltaproduct_with_one_step_is_gated_deltanet():
    """n_householder=1: the same weights give Gated DeltaNet's outputs."""
    sizes = dict(d_model=24, n_heads=3, n_layers=2, d_ff=40, chunk_size=4)
    torch.manual_seed(0)
    product = build_model(DeltaProductConfig(n_householder=1, **sizes)).double()
    net = build_model(DeltaNetConfig(gated=True, **sizes)).double()
    net.load_state_dict(product.state_dict())
    tokens = torch.randint(1, 140, (3, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(product(tokens), net(tokens), rtol=0, atol=1e-12)


def deltaproduct_model(chunk=4, seed=0, **fields):
    torch.manual_seed(seed)
    sizes = dict(d_model=24, n_heads=3, n_layers=2, d_ff=40)
    return build_model(DeltaProductConfig(chunk_size=chunk, **sizes, **fields))


@pytest.mark.parametrize("prompt_len", [0, 1, 7, 20])
@pytest.mark.parametrize("n_householder", [2, 3])
def test_deltaproduct_streaming_equals_forward(prompt_len, n_householder, tokens):
    model = deltaproduct_model(n_householder=n_householder)
    with torch.no_grad():
        full = model(tokens)
        logits, state = model.prefill(tokens[:, :prompt_len], model.init_state(tokens.shape[0]))
        pieces = [logits]
        for pos in range(prompt_len, tokens.shape[1]):
            step, state = model.step(tokens[:, pos], state)
            pieces.append(step[:, None])
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)
    assert state.position == tokens.shape[1]


def test_deltaproduct_prefill_in_pieces_not_multiple_of_chunk(tokens):
    model = deltaproduct_model(chunk=4).double()
    with torch.no_grad():
        full = model(tokens)
        state = model.init_state(tokens.shape[0])
        a, state = model.prefill(tokens[:, :7], state)
        b, state = model.prefill(tokens[:, 7:], state)
    torch.testing.assert_close(torch.cat([a, b], dim=1), full, rtol=0, atol=1e-10)


def transitions(layer: DeltaProductLayer, x: torch.Tensor) -> torch.Tensor:
    """Every token's transition of the stored state, (N, H, T, Dk, Dk):
    A_t = alpha_t (I - beta_n k_n k_n^T) ... (I - beta_1 k_1 k_1^T), built from the layer's
    own q/k/beta and decay."""
    cfg = layer.config
    zeros = torch.zeros(x.shape[0], cfg.conv_size - 1, layer.conv.in_channels, dtype=x.dtype)
    _, k, _, beta, _ = layer._mix_inputs(x, zeros)  # k (N, H, T, n_h, Dk)
    g = layer.log_decay(x)
    eye = torch.eye(k.shape[-1], dtype=x.dtype)
    a = eye.expand(*k.shape[:3], -1, -1)
    for j in range(cfg.n_householder):
        kj = k[:, :, :, j]
        factor = eye - beta[:, :, :, j, None, None] * kj[..., :, None] * kj[..., None, :]
        a = factor @ a
    return a if g is None else g.exp()[..., None, None] * a


@pytest.mark.parametrize("gated", [True, False])
def test_deltaproduct_transition_has_spectral_radius_at_most_one(gated):
    layer = deltaproduct_layer(n_householder=2, gated=gated)
    randomise(layer, 3.0, seed=4)  # saturated betas: both ends of (0, 2)
    x = torch.randn(4, 30, 12, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with torch.no_grad():
        eig = torch.linalg.eigvals(transitions(layer, x))
    assert eig.abs().max() <= 1 + 1e-10
    assert eig.real.min() < -0.5  # negative eigenvalues are reached
    assert eig.imag.abs().max() > 0.1  # two reflections rotate: complex eigenvalues


def test_deltaproduct_reaches_eigenvalue_minus_one_at_beta_two():
    """beta = 2 (sigmoid saturated) and no gate: the step I - 2 k k^T is a reflection."""
    layer = deltaproduct_layer(n_householder=1, gated=False)
    with torch.no_grad():
        layer.beta.weight.fill_(0.0)
        layer.beta.weight[:, 0] = 100.0  # beta = 2 sigmoid(100 x_0) = 2 in float64 for x_0 > 1
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    x[..., 0] = 2.0
    with torch.no_grad():
        eig = torch.linalg.eigvalsh(transitions(layer, x))  # symmetric for one step
    assert torch.allclose(eig[..., 0], torch.full_like(eig[..., 0], -1.0), atol=1e-12)
    assert torch.allclose(eig[..., 1:], torch.ones_like(eig[..., 1:]), atol=1e-12)


# -- PD-SSM ------------------------------------------------------------------------------------
def pdssm_layer(seed=0, **fields):
    cfg = PDSSMConfig(d_model=12, n_heads=3, n_layers=1, **{"state_size": 5, **fields})
    layer = PDSSMLayer(cfg).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # the linears from their near-zero init to N(0, 0.5^2)
        for lin in (layer.select, layer.magnitude, layer.phase, layer.B, layer.C):
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g, dtype=torch.float64) * 0.5)
        layer.skip.copy_(torch.randn(12, generator=g, dtype=torch.float64))
    return layer


def start_state(layer: PDSSMLayer, n: int) -> torch.Tensor:
    h = torch.zeros(n, layer.n_heads, layer.state_size, 2, dtype=torch.float64)
    h[:, :, 0, 0] = 1.0
    return h


def naive_pdssm_layer(layer: PDSSMLayer, x: torch.Tensor):
    """The layer from h_0 = e_1, in complex128 from its weights and the paper's equations:
    P_t column one-hot (column j = e_i, i = argmax_i M_t[i, j], M_t = sum_k s_k A_k,
    s = softmax(W_S x)), D_t = diag(sigmoid(W_m x + b_m) exp(2 pi i sigmoid(W_p x + b_p))),
    h_t = P_t D_t h_{t-1} + B x_t, y_t = Re(C h_t) + skip * x_t."""
    n, t_len, d = x.shape
    h, s, k = layer.n_heads, layer.state_size, layer.dict_size
    sel = torch.softmax((x @ layer.select.weight.T).reshape(n, t_len, h, k), dim=-1)
    mag = torch.sigmoid(x @ layer.magnitude.weight.T + layer.magnitude_bias).reshape(n, t_len, h, s)
    ang = 2 * math.pi * torch.sigmoid(x @ layer.phase.weight.T + layer.phase_bias)
    ang = ang.reshape(n, t_len, h, s)
    wb = layer.B.weight.reshape(h, s, 2, d)
    b_mat = torch.complex(wb[:, :, 0], wb[:, :, 1])  # (H, S, d)
    wc = layer.C.weight.reshape(d, h, s, 2)
    c_mat = torch.complex(wc[..., 0], -wc[..., 1])  # (d, H, S): Re(C h) = W_re h_re + W_im h_im
    y = torch.zeros(n, t_len, d, dtype=x.dtype)
    final = torch.zeros(n, h, s, dtype=torch.complex128)
    for a in range(n):
        states = [torch.eye(s, dtype=torch.complex128)[0] for _ in range(h)]  # e_1
        for t in range(t_len):
            xt = x[a, t].to(torch.complex128)
            for b in range(h):
                m = sum(sel[a, t, b, i] * layer.dictionary[b, i] for i in range(k))
                p = torch.zeros(s, s, dtype=torch.complex128)
                for j in range(s):
                    p[int(m[:, j].argmax()), j] = 1.0
                dmat = torch.diag(mag[a, t, b] * torch.exp(1j * ang[a, t, b]))
                states[b] = p @ dmat @ states[b] + b_mat[b] @ xt
            y[a, t] = sum(c_mat[:, b] @ states[b] for b in range(h)).real + layer.skip * x[a, t]
        final[a] = torch.stack(states)
    return y, final


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pdssm_layer_equals_the_naive_equations(seed):
    layer = pdssm_layer(seed)
    x = torch.randn(
        2, 9, 12, generator=torch.Generator().manual_seed(10 + seed), dtype=torch.float64
    )
    with torch.no_grad():
        want_y, want_h = naive_pdssm_layer(layer, x)
        got_y, got_h = layer(x, start_state(layer, 2))
    torch.testing.assert_close(got_y, want_y, rtol=0, atol=1e-10)
    torch.testing.assert_close(
        torch.complex(got_h[..., 0], got_h[..., 1]), want_h, rtol=0, atol=1e-10
    )
    assert (want_h - want_h[..., :1]).abs().max() > 1e-2  # the state moved off e_1


def test_pdssm_transition_is_column_one_hot_times_a_contracting_diagonal():
    layer = pdssm_layer(3, state_size=7)
    x = torch.randn(4, 20, 12, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    x = x.requires_grad_()  # P is exactly one-hot also on the training path (straight-through)
    p, d, _ = layer.transition(x)
    assert set(p.detach().unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(p.detach().sum(dim=-2), torch.ones(p.shape[:-2] + (7,), dtype=p.dtype))
    modulus = d.detach().norm(dim=-1)
    assert modulus.max() < 1 and modulus.min() > 0
    # A_t = P_t D_t: spectral radius below one
    a = p.detach().to(torch.complex128) @ torch.diag_embed(torch.complex(d[..., 0], d[..., 1]))
    assert torch.linalg.eigvals(a.detach()).abs().max() < 1
    # more than one column onto one row happens: P_t is not only a permutation
    assert (p.detach().sum(dim=-1) > 1).any()


def test_pdssm_dictionary_trains_through_the_straight_through_softmax():
    layer = pdssm_layer(4)
    x = torch.randn(2, 6, 12, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    y, _ = layer(x, start_state(layer, 2))
    y.pow(2).sum().backward()
    assert layer.dictionary.grad.abs().max() > 0 and layer.select.weight.grad.abs().max() > 0
    scores = torch.randn(3, 4, 4, dtype=torch.float64, requires_grad=True)
    p = column_one_hot(scores)
    (p * torch.randn(3, 4, 4, dtype=torch.float64)).sum().backward()
    soft = scores.detach().softmax(dim=-2)
    assert torch.equal(p.detach(), p.detach().round()) and scores.grad.abs().max() > 0
    assert torch.allclose(soft.sum(-2), torch.ones(3, 4, dtype=torch.float64))


def pdssm_model(seed=0, **fields):
    torch.manual_seed(seed)
    return build_model(PDSSMConfig(d_model=24, n_heads=3, n_layers=2, d_ff=40, **fields))


@pytest.mark.parametrize("prompt_len", [0, 1, 7, 20])
def test_pdssm_streaming_equals_forward(prompt_len, tokens):
    model = pdssm_model()
    with torch.no_grad():
        full = model(tokens)
        logits, state = model.prefill(tokens[:, :prompt_len], model.init_state(tokens.shape[0]))
        pieces = [logits]
        for pos in range(prompt_len, tokens.shape[1]):
            step, state = model.step(tokens[:, pos], state)
            pieces.append(step[:, None])
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)
    assert state.position == tokens.shape[1]


def test_pdssm_starts_every_head_at_e1():
    state = pdssm_model().init_state(2)
    assert len(state.layers) == 2 and state.batch_size == 2
    for h in state.layers:
        assert h.shape == (2, 3, 16, 2)
        assert h[:, :, 0, 0].eq(1).all() and h.abs().sum() == 2 * 3
    assert state.nbytes() == 2 * 2 * 3 * 16 * 2 * 4


# -- both: parameters and configs --------------------------------------------------------------
@pytest.mark.parametrize(("scale", "split"), [("laptop", "1+1"), ("paper", "4+4")])
def test_both_are_parameter_matched_to_the_transformer_at_each_scale(scale, split):
    from rlt.training.families import model_config
    from tests.training.helpers import compose_cfg

    counts, widths = {}, {}
    for model in ("deltaproduct", "pdssm", "transformer"):
        cfg = compose_cfg([f"model={model}", f"scale={scale}", f"split={split}"])
        _, config_cls, kwargs = model_config(cfg)
        counts[model], widths[model] = count_parameters(config_cls(**kwargs)), kwargs["d_ff"]
    # Both FFNs take the layer's parameter difference to attention: narrower at d = 64,
    # DeltaProduct narrower and PD-SSM wider at d = 512.
    want = {"laptop": (170, 95, 73), "paper": (1365, 842, 1903)}[scale]
    assert (widths["transformer"], widths["deltaproduct"], widths["pdssm"]) == want
    for model in ("deltaproduct", "pdssm"):
        assert abs(counts[model] / counts["transformer"] - 1) < 0.03, counts


def test_the_parameter_table_lists_both():
    from rlt.models.build import parameter_rows

    rows = {r["model"]: r["params"] for r in parameter_rows()}
    for layers in (8, 16):
        tf = rows[f"Transformer {layers}"]
        for name in (f"DeltaProduct {layers}", f"PD-SSM {layers}"):
            assert abs(rows[name] / tf - 1) < 0.03, (name, rows[name], tf)


@pytest.mark.parametrize(
    ("cls", "layer_cls", "fields"),
    [
        (PDSSMConfig, PDSSMLayer, dict(state_size=6, dict_size=5)),
        (PDSSMConfig, PDSSMLayer, {}),
        (DeltaProductConfig, DeltaProductLayer, {}),
        (DeltaProductConfig, DeltaProductLayer, dict(n_householder=3, gated=False)),
        (DeltaProductConfig, DeltaProductLayer, dict(n_householder=1, conv_size=2)),
    ],
)
def test_layer_parameters_are_the_closed_form_the_ffn_width_is_matched_by(cls, layer_cls, fields):
    fields = dict(d_model=24, n_heads=3, **fields)
    with torch.device("meta"):
        layer = layer_cls(cls(n_layers=1, **fields))
    assert sum(p.numel() for p in layer.parameters()) == cls.layer_parameters(fields)


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (DeltaProductConfig, "n_householder", 0),
        (DeltaProductConfig, "chunk_size", 0),
        (DeltaProductConfig, "gated", "yes"),
        (PDSSMConfig, "state_size", 0),
        (PDSSMConfig, "dict_size", -1),
    ],
)
def test_bad_config_names_the_field(cls, field, value):
    with pytest.raises(ValueError, match=field):
        cls(d_model=24, n_heads=3, n_layers=1, **{field: value})


def test_a_layer_heavier_than_a_transformer_block_keeps_an_ffn_of_half_the_width():
    """scale=tiny (d=16, 2 heads, d_ff 32): PD-SSM's dictionaries, DeltaProduct's 3 steps."""
    tiny = dict(d_model=16, n_heads=2)
    assert PDSSMConfig.matched_d_ff(32, tiny) == 8
    assert DeltaProductConfig.matched_d_ff(32, {**tiny, "n_householder": 3}) == 8
    assert DeltaProductConfig.matched_d_ff(32, {**tiny, "n_householder": 1}) == 21
    assert PDSSMConfig(**tiny).d_ff == 8  # the default: matched to floor(8d/3) = 42
