"""Loss and accuracy from logits and a collated batch (pure PyTorch, no Lightning).

Every quantity is first computed per example and then averaged over examples, so a metric
over a dataset does not depend on how it was cut into batches or padded: aggregate
``example_metrics`` with a running sum and count (or call ``batch_metrics`` and weight each
batch by its size). Definitions (docs/DESIGN.md section 3):

- ``loss``: mean cross-entropy over each example's supervised positions, then over examples
  (the report's "mean per-example loss", used for checkpoint selection);
- ``acc``: the primary metric. ``acc_mode="last"``: the prediction at the last scored position
  is right (final label / final state). ``acc_mode="tokens"`` (addition): the fraction of
  scored positions right, teacher-forced;
- ``token_acc``: the fraction of scored positions right (S5 prefix-state accuracy);
- ``seq_acc``: every scored position right (S5 whole-sequence accuracy);
- ``exact`` (``greedy_exact``): greedy generation from the prompt reproduces the response
  (addition: answer + EOS) exactly.

More metrics: :func:`register_metric` adds a per-example function ``(logits, batch) -> (B,)``
computed beside these on every validation and test set (docs/EXTENDING.md).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import textwrap
import tokenize
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

from rlt.plugins import NameClash
from rlt.tasks.base import IGNORE
from rlt.tasks.vocab import EOS, PAD

ACC_MODES = ("last", "tokens")

Generate = Callable[..., torch.Tensor]
"""``generate(prompt (B, t) long, max_new_tokens, eos_id=...) -> (B, t + n)``, n <= max_new_tokens."""


def example_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example mean cross-entropy over supervised positions: (B, T, V), (B, T) -> (B,)."""
    b, t, v = logits.shape
    if labels.shape != (b, t):
        raise ValueError(
            f"labels must be (B, T) = {(b, t)} to match logits {tuple(logits.shape)}, got {tuple(labels.shape)}"
        )
    ce = F.cross_entropy(
        logits.reshape(b * t, v).float(),
        labels.reshape(b * t),
        ignore_index=IGNORE,
        reduction="none",
    )
    mask = labels != IGNORE
    return (ce.view(b, t) * mask).sum(1) / mask.sum(1).clamp(min=1)


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The training/selection loss: mean over examples of ``example_losses`` (a scalar)."""
    return example_losses(logits, labels).mean()


BUILT_IN = ("loss", "acc", "token_acc", "seq_acc", "exact")
# Registered metrics: name -> per-example function (logits (B, T, V), batch) -> (B,) in [0, 1].
EXTRA: dict[str, Callable[[torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor]] = {}


def register_metric(name: str):
    """Decorator: compute ``fn(logits, batch) -> (B,)`` per example on every validation and test
    set, recorded in results.json under ``name`` beside acc (``tables.py --metric name``)."""
    if name in BUILT_IN:
        raise ValueError(f"metric {name!r} is built in; pick another name")

    def add(fn):
        if name in EXTRA:  # as task and family names: two plugins never share one silently
            raise NameClash("metric", name, _dotted(EXTRA[name]), _dotted(fn))
        EXTRA[name] = fn
        return fn

    return add


def definitions() -> dict[str, dict[str, str | None]]:
    """Which code computed each registered metric, as results.json records it
    (``metric_definitions``), so the analysis never averages two metrics that share a name:
    ``{name: {"function": "my_lab.metrics.first_acc", "source_sha1": "0f3a..."}}``. The hash
    covers the function's tokens (comments and layout aside; None when Python cannot read the
    source), so a definition edited between runs is told apart too."""
    return {
        name: {"function": _dotted(fn), "source_sha1": _source_sha1(fn)}
        for name, fn in EXTRA.items()
    }


def _dotted(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _source_sha1(fn: Callable) -> str | None:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    try:
        tokens = tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline)
        code = " ".join(t.string for t in tokens if t.type not in skip)
    except (tokenize.TokenError, SyntaxError):
        code = source
    return hashlib.sha1(code.encode()).hexdigest()[:12]


def example_metrics(
    logits: torch.Tensor, batch: Mapping[str, torch.Tensor], acc_mode: str = "last"
) -> dict[str, torch.Tensor]:
    """``loss``, ``acc``, ``token_acc``, ``seq_acc`` per example, each a float tensor (B,)."""
    if acc_mode not in ACC_MODES:
        raise ValueError(f"acc_mode must be one of {ACC_MODES}, got {acc_mode!r}")
    labels, score = batch["labels"], batch["score"]
    with torch.no_grad():
        correct = (logits.argmax(-1) == labels) & score  # (B, T)
        n_scored = score.sum(1)
        n_correct = correct.sum(1)
        token_acc = n_correct.float() / n_scored.clamp(min=1).float()
        positions = torch.arange(score.shape[1], device=score.device)
        last = torch.where(score, positions, -1).argmax(1)  # (B,) last scored position
        final = correct.gather(1, last[:, None]).squeeze(1).float()
        out = {
            "loss": example_losses(logits.detach(), labels),
            "acc": final if acc_mode == "last" else token_acc,
            "token_acc": token_acc,
            "seq_acc": ((n_correct == n_scored) & (n_scored > 0)).float(),
        }
        for name, fn in EXTRA.items():
            value = fn(logits, batch)
            if value.shape != final.shape:
                raise ValueError(
                    f"metric {name!r} must return one value per example, shape "
                    f"{tuple(final.shape)}, got {tuple(value.shape)}"
                )
            out[name] = value.float()
        return out


def batch_metrics(
    logits: torch.Tensor, batch: Mapping[str, torch.Tensor], acc_mode: str = "last"
) -> dict[str, torch.Tensor]:
    """Means over the batch of ``example_metrics`` (0-d tensors); weight by batch size."""
    return {k: v.mean() for k, v in example_metrics(logits, batch, acc_mode).items()}


def greedy_exact(
    generate: Generate, batch: Mapping[str, torch.Tensor], eos_id: int = EOS
) -> torch.Tensor:
    """Per example (B,) float: does greedy decoding from the prompt give the response exactly?

    The response is everything after ``prompt_len`` up to the padding (addition: answer digits
    and EOS); whatever the model emits after it is ignored. Prompts of different lengths are
    generated in separate calls, one per distinct ``prompt_len``, because a recurrent model
    cannot skip left padding.
    """
    tokens, prompt_len = batch["tokens"], batch["prompt_len"]
    seq_len = (tokens != PAD).sum(1)  # PAD occurs only as padding
    result = torch.zeros(tokens.shape[0], dtype=torch.float32, device=tokens.device)
    with torch.no_grad():
        for p in torch.unique(prompt_len).tolist():
            rows = (prompt_len == p).nonzero().squeeze(1)
            n_new = int((seq_len[rows] - p).max())
            target = tokens[rows, p : p + n_new]  # (b, n_new), PAD beyond each response
            wanted = target != PAD
            out = generate(tokens[rows, :p], n_new, eos_id=eos_id)
            gen = out[:, p : p + n_new].to(target.device)
            if gen.shape[1] < n_new:  # generation stopped early (every row emitted EOS)
                gen = F.pad(gen, (0, n_new - gen.shape[1]), value=-1)
            result[rows] = ((gen == target) | ~wanted).all(1).float()
    return result
