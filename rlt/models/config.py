"""Model configurations, validated on construction (before any tensor is allocated).

Every choice the report leaves open (shared/SPEC.md section 1, "our choices") is a field here
with its default and the reason inline, so a run's config says exactly what was built.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_SPLIT = re.compile(r"^\s*(\d+)\s*\+\s*(\d+)\s*$")


def parse_split(split: str) -> tuple[int, int]:
    """``"4+4"`` -> ``(4, 4)``: encoder and decoder block counts of an RLT split.

    Rejects anything that is not two non-negative integers joined by ``+`` (``"4-4"``,
    ``"4+"``) and the empty model ``"0+0"``, with a ValueError that names ``split``.
    """
    match = _SPLIT.match(split) if isinstance(split, str) else None
    if match is None:
        raise ValueError(f"split must look like '4+4' (encoder+decoder blocks), got {split!r}")
    n_enc, n_dec = int(match.group(1)), int(match.group(2))
    if n_enc + n_dec == 0:
        raise ValueError(f"split must have at least one block, got {split!r}")
    return n_enc, n_dec


def _check_ints(config: Any, *names: str, minimum: int = 1) -> None:
    """Each named field an int (not a bool) >= minimum, else a ValueError naming it."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _feedback_interval(value: Any) -> int | None:
    """Normalise B: ``None``, ``"inf"``, ``"none"`` or ``math.inf`` mean RLT-0; else an int >= 1."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "none", "null"):
        return None
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(
            f"feedback_interval must be an int >= 1, None or 'inf' (RLT-0), got {value!r}"
        )
    if value < 1:
        raise ValueError(f"feedback_interval must be >= 1 (or None/'inf' for RLT-0), got {value!r}")
    return int(value)


@dataclass(kw_only=True)
class _CommonConfig:
    """Fields shared by both families (same width, FFN and heads for a fair comparison)."""

    d_model: int = 512  # width d; the report uses 512
    n_heads: int = 4  # attention heads H; the report uses 4
    d_ff: int | None = None  # SwiGLU hidden width; None = floor(8 d / 3) (1365 at d=512)
    vocab_size: int = 140  # one shared vocabulary for all six tasks (rlt.tasks.vocab.VOCAB_SIZE)
    pos_encoding: str = "rope"  # "rope" in self-attention/SWA (report silent), or "none"
    rope_base: float = 10000.0  # RoPE frequency base (the usual value; report silent)
    norm_eps: float = 1e-6  # RMSNorm epsilon
    init_std: float = 0.02  # normal init; residual projections get 1/sqrt(2 * n_blocks) more
    checkpoint_activations: bool = False  # recompute blocks in backward: memory for time

    def __post_init__(self) -> None:
        _check_ints(self, "d_model", "n_heads", "vocab_size")
        if self.d_ff is None:
            self.d_ff = self.matched_d_ff((8 * self.d_model) // 3, dataclasses.asdict(self))
        _check_ints(self, "d_ff")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads must divide d_model, got n_heads={self.n_heads}, d_model={self.d_model}"
            )
        if self.pos_encoding not in ("rope", "none"):
            raise ValueError(f"pos_encoding must be 'rope' or 'none', got {self.pos_encoding!r}")
        if self.pos_encoding == "rope" and self.head_dim % 2:
            raise ValueError(
                f"pos_encoding='rope' needs an even head dim, got d_model/n_heads={self.head_dim}"
            )
        if not self.rope_base > 1:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps!r}")
        if not self.init_std > 0:
            raise ValueError(f"init_std must be > 0, got {self.init_std!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def matched_d_ff(cls, d_ff: int, fields: Mapping[str, Any]) -> int:
        """The FFN width of this family's blocks where the Transformer's is ``d_ff`` (a scale's
        ``d_ff``, or floor(8d/3) by default), given the model's other fields (``d_model``,
        ``n_heads`` and the family's own; missing ones take their defaults). The same width
        here; a family whose token mixing has more (fewer) parameters than attention's 4 d^2
        narrows (widens) its FFN so that its blocks match the Transformer's."""
        return d_ff

    @classmethod
    def _field(cls, fields: Mapping[str, Any], name: str) -> Any:
        """``fields[name]``, or the field's default."""
        return fields[name] if name in fields else cls.__dataclass_fields__[name].default


@dataclass(kw_only=True)
class TransformerConfig(_CommonConfig):
    """The decoder-only baseline: ``n_layers`` causal blocks, final RMSNorm, untied head."""

    n_layers: int = 8  # Transformer 8 (16 for the parity series)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_ints(self, "n_layers")

    @property
    def name(self) -> str:
        return "transformer"


@dataclass(kw_only=True)
class DeltaNetConfig(_CommonConfig):
    """DeltaNet (issue 14): ``n_layers`` blocks of delta-rule token mixing and SwiGLU.

    ``neg_eigval``: beta in (0, 2), transition eigenvalues in (-1, 1) (Grazzi et al.); False:
    beta in (0, 1), eigenvalues in [0, 1) (the original DeltaNet). ``d_ff`` None = floor(8d/3)
    - floor(d/3), parameter-matched to the Transformer of the same depth and width.
    """

    n_layers: int = 8
    neg_eigval: bool = True
    conv_size: int = 4  # short causal depthwise convolution on q, k, v
    chunk_size: int = 16  # positions per chunk of the chunked (UT) form used for training
    # auto: flash-linear-attention's Triton kernel on CUDA when that optional package is
    # installed (pip install -e ".[gpu]"), else the PyTorch forms; torch / fla force one.
    kernel: str = "auto"
    # Gated DeltaNet: a data-dependent decay of the state before each update (rlt/models/deltanet.py).
    gated: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_ints(self, "n_layers", "conv_size", "chunk_size")
        for name in ("neg_eigval", "gated"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.kernel not in ("auto", "torch", "fla"):
            raise ValueError(f"kernel must be auto, torch or fla, got {self.kernel!r}")

    @classmethod
    def matched_d_ff(cls, d_ff: int, fields: Mapping[str, Any]) -> int:
        """The DeltaNet layer has one d x d matrix more than attention (the output gate): the
        FFN is narrower by floor(d/3)."""
        return d_ff - fields["d_model"] // 3

    @property
    def name(self) -> str:
        base = "gated_deltanet" if self.gated else "deltanet"
        return base if self.neg_eigval else f"{base}01"


def _matched_ffn(d_ff: int, d_model: int, layer: int) -> int:
    """The FFN width that gives a block with a token-mixing layer of ``layer`` parameters the
    parameters of a Transformer block of FFN width ``d_ff``: d_ff + (4 d^2 - layer) / 3d (a
    SwiGLU column holds 3d), rounded down; never below d/2, where the layer alone outweighs a
    Transformer block (PD-SSM's at scale=tiny) and the block stays heavier."""
    return max(d_ff + (4 * d_model * d_model - layer) // (3 * d_model), d_model // 2)


@dataclass(kw_only=True)
class DeltaProductConfig(_CommonConfig):
    """Gated DeltaProduct (issue 57): DeltaNet's blocks with n_h delta-rule (generalised
    Householder) steps per token, rlt/models/deltaproduct.py. ``d_ff`` None = the width that
    matches the Transformer's block parameters (:meth:`matched_d_ff`): each step past the first
    adds a key and a value projection (2 d^2), so the FFN narrows (laptop 170 -> 95, the
    report's 1365 -> 842 at n_h = 2)."""

    n_layers: int = 8
    n_householder: int = 2  # n_h: Householder steps per token (1 = Gated DeltaNet's layer)
    neg_eigval: bool = True  # beta in (0, 2): each step's eigenvalue 1 - beta in (-1, 1)
    gated: bool = True  # the scalar decay alpha_t before the steps (the paper's gated form)
    conv_size: int = 4  # short causal depthwise convolution on q and every step's k, v
    chunk_size: int = 16  # tokens per chunk of the chunked (UT) form used for training

    def __post_init__(self) -> None:
        _check_ints(self, "n_layers", "n_householder", "conv_size", "chunk_size")
        for name in ("neg_eigval", "gated"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        super().__post_init__()

    @classmethod
    def layer_parameters(cls, fields: Mapping[str, Any]) -> int:
        """Parameters of one DeltaProduct layer: q and n_h keys and values (1 + 2 n_h) d^2 and
        their convolution (1 + 2 n_h) d kernel, betas d H n_h, output gate and projection
        2 d^2, output norm d/H, and with the gate its d H + 2 H."""
        d, h = fields["d_model"], cls._field(fields, "n_heads")
        n, kernel = cls._field(fields, "n_householder"), cls._field(fields, "conv_size")
        width = (1 + 2 * n) * d
        gate = d * h + 2 * h if cls._field(fields, "gated") else 0
        return width * d + width * kernel + d * h * n + 2 * d * d + d // h + gate

    @classmethod
    def matched_d_ff(cls, d_ff: int, fields: Mapping[str, Any]) -> int:
        return _matched_ffn(d_ff, fields["d_model"], cls.layer_parameters(fields))

    @property
    def name(self) -> str:
        base = "deltaproduct" if self.gated else "deltaproduct_ungated"
        return base if self.neg_eigval else f"{base}01"


@dataclass(kw_only=True)
class PDSSMConfig(_CommonConfig):
    """PD-SSM (issue 57): blocks of a PD-SSM layer (transition P_t D_t: a column one-hot P_t
    times a complex diagonal D_t, rlt/models/pdssm.py) and SwiGLU. One PD-SSM head per
    attention head (``n_heads`` from the scale), each with its own complex state of
    ``state_size`` entries. ``d_ff`` None = the width that matches the Transformer's block
    parameters (:meth:`matched_d_ff`): at laptop widths (d=64, N=16) the layer outweighs
    attention and the FFN narrows (170 -> 73); at the report's (d=512) it widens (1365 -> 1903);
    at scale=tiny the 16 x 16 dictionaries alone outweigh a Transformer block, so the FFN stays
    at d/2 there and the parameters are not matched."""

    n_layers: int = 8
    state_size: int = 16  # N: complex state entries per head (an N-state automaton per head)
    dict_size: int = 8  # K: dictionary matrices per head that P_t is selected from (the paper's 8)

    def __post_init__(self) -> None:
        _check_ints(self, "n_layers", "state_size", "dict_size")
        super().__post_init__()

    @classmethod
    def layer_parameters(cls, fields: Mapping[str, Any]) -> int:
        """Parameters of one PD-SSM layer: selector d H K, dictionary H K N^2, magnitude and
        phase maps 2 (d H N + H N), complex B and C 2 x 2 d H N, skip d."""
        d, h = fields["d_model"], cls._field(fields, "n_heads")
        n, k = cls._field(fields, "state_size"), cls._field(fields, "dict_size")
        return d * h * k + h * k * n * n + 2 * (d * h * n + h * n) + 4 * d * h * n + d

    @classmethod
    def matched_d_ff(cls, d_ff: int, fields: Mapping[str, Any]) -> int:
        return _matched_ffn(d_ff, fields["d_model"], cls.layer_parameters(fields))

    @property
    def name(self) -> str:
        return "pdssm"


@dataclass(kw_only=True)
class LSTMConfig:
    """The recurrent control (not in the report): ``n_layers`` stacked ``torch.nn.LSTM`` layers
    of width ``d_model`` between the shared embedding and an untied head. The attention fields
    of the other families do not apply; PyTorch's default init is used (see rlt.models.lstm)."""

    d_model: int = 512
    n_layers: int = 2
    vocab_size: int = 140

    def __post_init__(self) -> None:
        _check_ints(self, "d_model", "n_layers", "vocab_size")

    @property
    def name(self) -> str:
        return "lstm"


@dataclass(kw_only=True)
class RLTConfig(_CommonConfig):
    """The Recurrent Looped Transformer family; ``feedback_interval`` picks the variant.

    ``feedback_interval`` (B): 1 = RLT-1, k > 1 = RLT-2 with chunks of k tokens, None (or
    ``"inf"``) = RLT-0, which is built without s*, the state norm, W_g, b_g and W_s.
    """

    n_enc: int = 4  # encoder blocks L_E (split "4+4")
    n_dec: int = 4  # decoder blocks L_D
    window: int = 8  # SWA window W of every decoder layer: itself plus W-1 previous positions
    alpha: float = 0.1  # feedback scale in u_t = e_t + alpha * g_t * (W_s r_{t-1})
    feedback_interval: int | None = 1  # B; None/"inf" = RLT-0 (no feedback parameters)
    # A final RMSNorm on e_t before the memory K/V projection. Off: the report's parameter
    # counts are the structure of SPEC section 1 with no such norm (it would add d per model,
    # below the reported 0.01M resolution, so the counts cannot decide; off is the literal one).
    enc_final_norm: bool = False
    tbptt: int = 128  # gradients through s and the SWA caches are cut every tbptt tokens
    # Train RLT-1/RLT-2 with the fused recurrence (hand-written backward, batched weight
    # gradients; rlt/models/recurrence.py). False = the plain autograd path, its reference.
    fused: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_ints(self, "n_enc", "n_dec", minimum=0)
        if self.n_enc + self.n_dec == 0:
            raise ValueError("n_enc + n_dec must be >= 1 (split '0+0' has no blocks)")
        _check_ints(self, "window")
        if not (
            isinstance(self.alpha, int | float) and math.isfinite(self.alpha) and self.alpha >= 0
        ):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}")
        self.feedback_interval = _feedback_interval(self.feedback_interval)
        _check_ints(self, "tbptt")

    @classmethod
    def from_split(cls, split: str, **fields: Any) -> RLTConfig:
        """``RLTConfig.from_split("6+2", feedback_interval=4)``."""
        n_enc, n_dec = parse_split(split)
        return cls(n_enc=n_enc, n_dec=n_dec, **fields)

    @property
    def split(self) -> str:
        return f"{self.n_enc}+{self.n_dec}"

    @property
    def name(self) -> str:
        """``rlt0``, ``rlt1`` or ``rlt2_b4``: the variant, as run directories name it."""
        if self.feedback_interval is None:
            return "rlt0"
        if self.feedback_interval == 1:
            return "rlt1"
        return f"rlt2_b{self.feedback_interval}"
