"""Config -> model, and the parameter table of the report's configurations."""

from __future__ import annotations

from typing import Any

import torch

from rlt import families
from rlt.models import config as mc
from rlt.models.base import SequenceModel

PAPER = dict(d_model=512, n_heads=4, d_ff=1365, vocab_size=140)  # shared/SPEC.md section 1
SPLITS_8 = ["4+4", "5+3", "6+2", "7+1", "8+0"]
SPLITS_16 = [f"{e}+{16 - e}" for e in range(8, 17)]  # 8+8, 9+7, ..., 16+0


# The config dataclass of any registered family (rlt/families.py), plugins' included.
ModelConfig = Any


def build_model(config: ModelConfig) -> SequenceModel:
    """The model a config describes (RLT-0/1/2 from ``feedback_interval``, the baseline, the
    LSTM control, or any other family of rlt/families.py)."""
    path = f"{type(config).__module__}:{type(config).__qualname__}"
    for family in families.families():
        if family.config == path:  # by name first: other families' modules stay unimported
            return family.model_class()(config)
    for family in families.families():
        if type(config) is family.config_class():
            return family.model_class()(config)
    known = ", ".join(f.config.partition(":")[2] for f in families.families())
    raise TypeError(
        f"config must be the config of a registered model family ({known}; rlt/families.py), "
        f"got {type(config).__name__}"
    )


def count_parameters(config: ModelConfig) -> int:
    """Parameters of the model a config builds, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        return build_model(config).num_parameters()


def parameter_rows(**overrides: int) -> list[dict[str, object]]:
    """Rows {model, split, params, rlt0, difference} for the report's 8- and 16-layer configs."""
    common = {**PAPER, **overrides}
    rows: list[dict[str, object]] = []
    for layers, splits in ((8, SPLITS_8), (16, SPLITS_16)):
        rows.append(
            dict(
                model=f"Transformer {layers}",
                split="-",
                params=count_parameters(mc.TransformerConfig(n_layers=layers, **common)),
                rlt0=None,
                difference=None,
            )
        )
        rows.append(
            dict(
                model=f"LSTM {layers}",
                split="-",
                params=count_parameters(
                    mc.LSTMConfig(
                        d_model=common["d_model"],
                        n_layers=layers,
                        vocab_size=common["vocab_size"],
                    )
                ),
                rlt0=None,
                difference=None,
            )
        )
        # The linear-RNN baselines, each with the FFN width that matches the Transformer's
        # blocks at this scale (the config's matched_d_ff, as training sets it).
        for name, cls, fields in (
            (f"DeltaNet {layers}", mc.DeltaNetConfig, {}),
            (f"Gated DeltaNet {layers}", mc.DeltaNetConfig, {"gated": True}),
            (f"DeltaProduct {layers}", mc.DeltaProductConfig, {}),
            (f"PD-SSM {layers}", mc.PDSSMConfig, {}),
        ):
            fields = {**common, **fields, "n_layers": layers}
            fields["d_ff"] = cls.matched_d_ff(common["d_ff"], fields)
            rows.append(
                dict(
                    model=name,
                    split="-",
                    params=count_parameters(cls(**fields)),
                    rlt0=None,
                    difference=None,
                )
            )
        for split in splits:
            rlt1 = count_parameters(mc.RLTConfig.from_split(split, feedback_interval=1, **common))
            rlt0 = count_parameters(
                mc.RLTConfig.from_split(split, feedback_interval=None, **common)
            )
            rows.append(
                dict(
                    model="RLT-1/RLT-2", split=split, params=rlt1, rlt0=rlt0, difference=rlt1 - rlt0
                )
            )
    return rows


def format_parameter_table(rows: list[dict[str, object]]) -> str:
    lines = [
        f"{'model':<18}{'split':>6}{'params':>14}{'M':>8}{'RLT-0':>14}{'M':>8}{'RLT-1 - RLT-0':>15}",
    ]
    for r in rows:
        rlt0 = "" if r["rlt0"] is None else f"{r['rlt0']:>14,}{r['rlt0'] / 1e6:>8.2f}"
        diff = "" if r["difference"] is None else f"{r['difference']:>15,}"
        lines.append(
            f"{r['model']:<18}{r['split']:>6}{r['params']:>14,}{r['params'] / 1e6:>8.2f}{rlt0}{diff}"
        )
    return "\n".join(lines)
