"""The LSTM control (model=lstm): streaming equals the training forward, a hand-written LSTM
recurrence agrees with it, and its parameter count is the closed form."""

from __future__ import annotations

import pytest
import torch

from rlt.models import LSTMConfig, build_model, count_parameters


def make_lstm(n_layers: int = 2, d_model: int = 24, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(LSTMConfig(d_model=d_model, n_layers=n_layers))


def reference_logits(model, tokens: torch.Tensor) -> torch.Tensor:
    """The textbook LSTM equations, one position and one layer at a time, on the model's
    weights: i, f, g, o = split(W_ih x + b_ih + W_hh h + b_hh); c' = f c + i tanh(g);
    h' = o tanh(c')."""
    lstm = model.lstm
    n, t = tokens.shape
    d = model.config.d_model
    x = model.embed.weight[tokens]  # (N, T, d)
    for layer in range(model.config.n_layers):
        w_ih = getattr(lstm, f"weight_ih_l{layer}")
        w_hh = getattr(lstm, f"weight_hh_l{layer}")
        b = getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")
        h = torch.zeros(n, d, dtype=x.dtype)
        c = torch.zeros(n, d, dtype=x.dtype)
        outs = []
        for pos in range(t):
            z = x[:, pos] @ w_ih.T + h @ w_hh.T + b
            i, f, g, o = z[:, :d], z[:, d : 2 * d], z[:, 2 * d : 3 * d], z[:, 3 * d :]
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        x = torch.stack(outs, dim=1)
    return x @ model.head.weight.T


def test_forward_matches_textbook_recurrence(tokens) -> None:
    model = make_lstm().double()
    with torch.no_grad():
        assert torch.allclose(model(tokens), reference_logits(model, tokens), atol=1e-10)


@pytest.mark.parametrize("prompt_len", [0, 1, 7, 20])
def test_streaming_equals_forward(prompt_len: int, tokens) -> None:
    model = make_lstm(n_layers=3)
    with torch.no_grad():
        full = model(tokens)
        state = model.init_state(tokens.shape[0])
        logits, state = model.prefill(tokens[:, :prompt_len], state)
        pieces = [logits]
        for pos in range(prompt_len, tokens.shape[1]):
            step_logits, state = model.step(tokens[:, pos], state)
            pieces.append(step_logits[:, None])
        streamed = torch.cat(pieces, dim=1)
    assert state.position == tokens.shape[1]
    assert torch.allclose(streamed, full, atol=1e-5)


def test_state_holds_h_and_c_of_every_layer(tokens) -> None:
    # A clone's independence, for every family: test_model_state_lifecycle.py.
    model = make_lstm()
    with torch.no_grad():
        _, state = model.prefill(tokens[:, :5], model.init_state(tokens.shape[0]))
    assert state.nbytes() == 2 * 2 * tokens.shape[0] * 24 * 4  # h and c, 2 layers, float32


def test_generate_continues_from_the_prompt_state(tokens) -> None:
    model = make_lstm()
    out = model.generate(tokens[:, :6], max_new_tokens=4)
    assert out.shape == (tokens.shape[0], 10) and torch.equal(out[:, :6], tokens[:, :6])
    with torch.no_grad():  # the first generated token is the argmax after the prompt
        assert torch.equal(out[:, 6], model(tokens[:, :6])[:, -1].argmax(-1))


@pytest.mark.parametrize(("d", "layers"), [(64, 2), (512, 8), (24, 1)])
def test_parameter_count_formula(d: int, layers: int) -> None:
    v = 140
    # embedding + per layer (W_ih, W_hh: 4d x d each; b_ih, b_hh: 4d each) + untied head
    expected = v * d + layers * (2 * 4 * d * d + 2 * 4 * d) + d * v
    assert count_parameters(LSTMConfig(d_model=d, n_layers=layers)) == expected


@pytest.mark.parametrize("field", ["d_model", "n_layers", "vocab_size"])
def test_bad_config_names_the_field(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LSTMConfig(**{field: 0})
