"""The streaming state: bounded where it must be, carried across the prompt boundary."""

from __future__ import annotations

import torch

from rlt.models import RLTState
from tests.models.conftest import make_rlt, make_transformer


def test_recurrent_state_does_not_grow() -> None:
    model = make_rlt("2+2", 1, window=4)
    state = model.init_state(2)
    sizes = []
    with torch.no_grad():
        for t in range(20):
            _, state = model.step(torch.full((2,), 5 + t), state)
            sizes.append(state.recurrent_nbytes())
            assert all(w.k.shape == (2, 4, 3, 8) for w in state.window)
    assert len(set(sizes)) == 1
    assert state.position == 20 and state.memory.length == 20
    # 20 positions x (2 encoder caches + memory) x (K, V) x batch 2 x d=32 x 4 bytes
    assert state.encoder_nbytes() == 20 * 3 * 2 * 2 * 32 * 4


def test_prefill_keeps_no_long_views() -> None:
    model = make_rlt("2+2", 1, window=4)
    with torch.no_grad():
        _, state = model.prefill(torch.randint(1, 140, (2, 30)), model.init_state(2))
    for w in state.window:
        assert w.k.untyped_storage().nbytes() == w.k.numel() * 4
    assert state.s.untyped_storage().nbytes() == state.s.numel() * 4


def test_state_is_named_and_carries_s() -> None:
    model = make_rlt("2+2", 4)
    state = model.init_state(3)
    assert isinstance(state, RLTState)
    assert torch.equal(state.s, model.merge.s_star.expand(3, -1))
    with torch.no_grad():
        _, state = model.prefill(torch.randint(1, 140, (3, 6)), state)
    assert state.position == 6
    assert not torch.equal(state.s, model.merge.s_star.expand(3, -1))  # chunk 0 completed


def reference_greedy(model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy decoding by re-running forward on the whole sequence each time."""
    seq = prompt
    for _ in range(n):
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq


def test_generate_is_greedy_over_the_carried_state() -> None:
    prompt = torch.randint(1, 140, (2, 6), generator=torch.Generator().manual_seed(3))
    for model in (
        make_rlt("2+2", 1),
        make_rlt("2+2", 4),
        make_rlt("2+2", None),
        make_transformer(),
    ):
        with torch.no_grad():
            assert torch.equal(model.generate(prompt, 9), reference_greedy(model, prompt, 9))


def test_generate_stops_at_eos_and_pads_finished_rows() -> None:
    model = make_rlt("1+1", 1)
    prompt = torch.randint(1, 140, (2, 4), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        free = model.generate(prompt, 6)
        eos = int(free[0, 5])  # row 0's second generated token
        out = model.generate(prompt, 6, eos_id=eos, pad_id=0)
    row0 = out[0, 4:].tolist()
    first = row0.index(eos)
    assert all(t == 0 for t in row0[first + 1 :])
    # Rows are independent: each follows the free continuation up to its first EOS, and the
    # whole batch stops right after the last row's first EOS (or at max_new_tokens).
    firsts = []
    for r in range(out.shape[0]):
        cont = free[r, 4:].tolist()
        stop = cont.index(eos) if eos in cont else None
        firsts.append(stop)
        upto = len(cont) if stop is None else stop + 1
        assert out[r, 4 : 4 + upto].tolist() == cont[:upto]
    expected = 10 if None in firsts else 4 + max(firsts) + 1
    assert out.shape[1] == expected
