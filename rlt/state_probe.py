"""What the state knows (issue 30): a linear probe of a model's representation at every position,
fitted to the task's *running* state there.

The report's claim is mechanistic: RLT's decoder output s_t, fed back at the next token, carries
the running computation, so the model stays right far beyond its training lengths. Accuracy by
length cannot tell a state that drifts from a readout that fails; a probe can.

- **Representation**: the last block's output at position t, before the final norm and the
  output head, the same definition for every family: for RLT-1 and RLT-2 exactly the s_t that
  is fed back; RLT-0 and the Transformer the last decoder / transformer block's output; the
  LSTM the top layer's h_t; DeltaNet the top block's output. Taken with a forward pre-hook on
  the final norm (the head for the LSTM, which has no norm), from the model's own forward.
- **Targets** (:func:`running_targets`): parity, the parity of the bits so far; s5 and
  s5_swaps, the permutation so far (120 classes) and, as an easier readout, where each of the
  five elements sits (five 5-class probes, accuracy averaged). Position t is the t-th input
  symbol (token t, after ``<bos>``); at the last one the running state is the task's label
  (checked by a test on every test set).
- **Fit**: multinomial logistic regression with an L2 penalty (:data:`L2`), full-batch LBFGS for
  :data:`LBFGS_STEPS` steps from zero weights on standardized features (deterministic), on every
  position of :data:`N_FIT` sequences drawn at the **training lengths only**, from indices
  of the training split far beyond any run's stream (:data:`FIT_OFFSET`): a fixed probe-training
  set that is never a test set (:func:`fit_probe` refuses any other split).
- **Evaluation**: on the task's test sets, per test length and per position bucket (1-16,
  17-32, 33-64, ...), with the RMS norm of the representation per bucket (drift).

Cost: a few seconds at laptop scale (one forward over the test sets and the fit set, and one
LBFGS fit per target); ``evaluate.probe`` runs it at the end of a run for the selected
checkpoint; ``python -m rlt.probe RUN_DIR`` (rlt/probe.py) runs it on a kept checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rlt.tasks import vocab
from rlt.tasks.base import Example, Task

N_FIT = 512
FIT_OFFSET = 2**40
LBFGS_STEPS = 100
L2 = 1e-3
BUCKETS = ((1, 16), (17, 32), (33, 64), (65, 128), (129, 256), (257, 512), (513, 1024))
REQUIRED = ("parity", "s5", "s5_swaps")  # task kinds with a required running target


def bucket_name(lo: int, hi: int) -> str:
    return f"{lo}-{hi}"


def has_target(task: Task) -> bool:
    return task.name in REQUIRED


def running_targets(task: Task, example: Example) -> dict[str, np.ndarray]:
    """The running state at each input position 1..n of ``example``: name -> (n,) classes, or
    (n, 5) for the five "where" probes."""
    n = example.length
    symbols = np.asarray(example.tokens[1 : n + 1])
    if task.name == "parity":
        return {"parity": np.cumsum(symbols - vocab.DIGIT_IDS[0]) % 2}
    if task.name in ("s5", "s5_swaps"):
        states = np.asarray(task.states((symbols - vocab.PERM_OFFSET).tolist()))
        perms = np.asarray(vocab.PERMUTATIONS)[states]  # (n, 5): the state in one-line notation
        # where[t, j]: the position at which element j sits in the state after operation t
        where = np.argsort(perms, axis=1)
        return {"state": states, "where": where}
    raise ValueError(f"no running target for task {task.name!r} (probe tasks: {REQUIRED})")


def label_at_end(task: Task, targets: dict[str, np.ndarray]) -> int:
    """The vocabulary id the running state at the last position stands for (it must equal the
    task's label there)."""
    if task.name == "parity":
        return vocab.DIGIT_IDS[0] + int(targets["parity"][-1])
    return vocab.PERM_OFFSET + int(targets["state"][-1])


def _hook_module(model: nn.Module) -> nn.Module | None:
    """The module whose input is the representation: the final norm, else the head (None when
    the model has neither: a family of one's own may name them otherwise)."""
    for name in ("norm", "head"):
        module = getattr(model, name, None)
        if isinstance(module, nn.Module):
            return module
    return None


def can_probe(model: nn.Module) -> bool:
    """Whether the probe can read ``model``'s representation (a final ``norm`` or ``head``)."""
    return _hook_module(model) is not None


NO_HOOK = (
    "the state probe reads the input of the model's final `norm` (or, without one, its "
    "`head`) module, and {name} has neither"
)


@torch.no_grad()
def representations(
    model: nn.Module, examples: Sequence[Example], batch: int = 256
) -> list[Tensor]:
    """Per example, the representation at input positions 1..n: (n, d) float32."""
    from rlt.tasks.data import collate

    captured: list[Tensor] = []
    hook = _hook_module(model)
    if hook is None:
        raise ValueError(NO_HOOK.format(name=type(model).__name__))
    handle = hook.register_forward_pre_hook(
        lambda _m, args: captured.append(args[0].detach().float())
    )
    out: list[Tensor] = []
    was_training = model.training
    model.eval()
    try:
        for i in range(0, len(examples), batch):
            chunk = examples[i : i + batch]
            captured.clear()
            model(collate(chunk)["tokens"])
            rep = captured[-1]
            out += [rep[j, 1 : ex.length + 1].cpu() for j, ex in enumerate(chunk)]
    finally:
        handle.remove()
        model.train(was_training)
    return out


class Probe:
    """Multinomial logistic regression on standardized features (weights, bias, scaling)."""

    def __init__(self, mean: Tensor, std: Tensor, weight: Tensor, bias: Tensor) -> None:
        self.mean, self.std, self.weight, self.bias = mean, std, weight, bias

    def predict(self, x: Tensor) -> Tensor:
        return (((x - self.mean) / self.std) @ self.weight + self.bias).argmax(-1)


def fit_logistic(
    x: Tensor, y: Tensor, n_classes: int, *, steps: int = LBFGS_STEPS, l2: float = L2
) -> Probe:
    """L2-penalized multinomial logistic regression by full-batch LBFGS from zeros."""
    x = x.double()
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / std
    weight = torch.zeros(x.shape[1], n_classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(z @ weight + bias, y) + l2 * (weight**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return Probe(mean.float(), std.float(), weight.detach().float(), bias.detach().float())


def fit_examples(task: Task, n: int = N_FIT) -> list[Example]:
    """The fixed probe-training set: ``n`` sequences at the training lengths, from indices of
    the training split beyond any run's stream."""
    return [task.example("train", FIT_OFFSET + i) for i in range(n)]


def _stack(task: Task, examples: Sequence[Example], reps: Sequence[Tensor]):
    """(features (P, d), {target: (P,) or (P, 5)}, positions (P,)) over every input position."""
    targets = [running_targets(task, ex) for ex in examples]
    names = targets[0].keys()
    ys = {k: torch.as_tensor(np.concatenate([t[k] for t in targets])) for k in names}
    pos = torch.cat([torch.arange(1, ex.length + 1) for ex in examples])
    return torch.cat(list(reps)), ys, pos


def fit_probe(task: Task, model: nn.Module, examples: Sequence[Example]):
    """Fit every target's probe on ``examples``, which must all come from the training split
    (never a test set). Returns ({target: Probe, or 5 Probes for "where"}, features, targets)
    of the fitting positions."""
    bad = {ex.split for ex in examples} - {"train"}
    if bad:
        raise ValueError(f"the probe fits on training-length sequences only, got split(s) {bad}")
    x, ys, _ = _stack(task, examples, representations(model, examples))
    probes: dict[str, Any] = {}
    for name, y in ys.items():
        if y.ndim == 1:
            probes[name] = fit_logistic(x, y.long(), _n_classes(task, name))
        else:
            probes[name] = [fit_logistic(x, y[:, j].long(), 5) for j in range(y.shape[1])]
    return probes, x, ys


def _n_classes(task: Task, name: str) -> int:
    return 2 if name == "parity" else 120


def _accuracy(probe: Any, x: Tensor, y: Tensor) -> Tensor:
    """Per-position accuracy (P,) float: one probe, or the mean over the five element probes."""
    if isinstance(probe, list):
        hits = torch.stack([(p.predict(x) == y[:, j]).float() for j, p in enumerate(probe)])
        return hits.mean(0)
    return (probe.predict(x) == y).float()


def probe_model(
    model: nn.Module,
    task: Task,
    lengths: Sequence[int],
    *,
    n_test: int | None = None,
    n_fit: int = N_FIT,
) -> dict[str, Any]:
    """Fit on the probe-training set, then evaluate on the test sets at ``lengths``: probe
    accuracy (%) per target, per test length and per position bucket, and the representation's
    RMS norm per bucket. The results.json ``probe`` block."""
    fit_set = fit_examples(task, n_fit)  # what is probed: the fit set, then the test sets
    test_sets = [(int(length), task.test_set(int(length), n_test)) for length in lengths]
    probes, fit_x, fit_y = fit_probe(task, model, fit_set)
    out: dict[str, Any] = {
        "representation": "last block output before the final norm (s_t for RLT-1/RLT-2)",
        "n_fit": n_fit,
        "fit_lengths": list(task.train_lengths),
        "lbfgs_steps": LBFGS_STEPS,
        "l2": L2,
        "targets": {},
        "rms": {"by_bucket": {}, "by_length": {}},
    }
    for name, probe in probes.items():
        out["targets"][name] = {
            "fit_acc": 100 * float(_accuracy(probe, fit_x, fit_y[name]).mean()),
            "by_length": {},
            "by_bucket": {},
        }
    pooled: dict[str, dict[str, list[Tensor]]] = {name: {} for name in probes}
    rms_pooled: dict[str, list[Tensor]] = {}
    for length, examples in test_sets:
        x, ys, pos = _stack(task, examples, representations(model, examples))
        rms = x.pow(2).mean(-1).sqrt()
        out["rms"]["by_length"][str(length)] = float(rms.mean())
        for lo, hi in BUCKETS:
            if lo <= length:
                rms_pooled.setdefault(bucket_name(lo, hi), []).append(
                    rms[(pos >= lo) & (pos <= hi)]
                )
        for name, probe in probes.items():
            acc = _accuracy(probe, x, ys[name])
            record = {"acc": 100 * float(acc.mean()), "buckets": {}}
            for lo, hi in BUCKETS:
                mask = (pos >= lo) & (pos <= hi)
                if mask.any():
                    b = bucket_name(lo, hi)
                    record["buckets"][b] = 100 * float(acc[mask].mean())
                    pooled[name].setdefault(b, []).append(acc[mask])
            out["targets"][name]["by_length"][str(length)] = record
    for name, buckets in pooled.items():
        out["targets"][name]["by_bucket"] = {
            b: 100 * float(torch.cat(v).mean()) for b, v in buckets.items()
        }
    out["rms"]["by_bucket"] = {b: float(torch.cat(v).mean()) for b, v in rms_pooled.items()}
    return out


def format_probe(block: dict[str, Any]) -> str:
    """The probe block as a small table: one row per target, one column per bucket."""
    buckets = list(block["rms"]["by_bucket"])
    lines = [f"{'target':10s} {'fit':>7s} " + " ".join(f"{b:>8s}" for b in buckets)]
    for name, t in block["targets"].items():
        cells = " ".join(f"{t['by_bucket'].get(b, float('nan')):8.2f}" for b in buckets)
        lines.append(f"{name:10s} {t['fit_acc']:7.2f} {cells}")
    rms = " ".join(f"{block['rms']['by_bucket'][b]:8.3f}" for b in buckets)
    lines.append(f"{'rms norm':10s} {'':>7s} {rms}")
    return "\n".join(lines)
