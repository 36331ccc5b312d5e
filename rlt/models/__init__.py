"""The RLT model family and the Transformer baseline, in plain PyTorch (shared/SPEC.md section 1).

from rlt.models import RLTConfig, build_model
model = build_model(RLTConfig(n_enc=4, n_dec=4, feedback_interval=1))
logits = model(tokens)                          # (B, T) -> (B, T, V)
logits, state = model.prefill(prompt, model.init_state(B))
logits, state = model.step(token, state)
"""

from rlt.models.build import build_model, count_parameters
from rlt.models.config import (
    DeltaNetConfig,
    DeltaProductConfig,
    LSTMConfig,
    PDSSMConfig,
    RLTConfig,
    TransformerConfig,
    parse_split,
)
from rlt.models.deltanet import DeltaNet
from rlt.models.deltaproduct import DeltaProduct
from rlt.models.lstm import LSTMModel
from rlt.models.pdssm import PDSSM
from rlt.models.rlt import RecurrentLoopedTransformer
from rlt.models.state import KVCache, LSTMState, RLTState, TransformerState, WindowKV
from rlt.models.transformer import DecoderOnlyTransformer

__all__ = [
    "DeltaNet",
    "DeltaNetConfig",
    "DeltaProduct",
    "DeltaProductConfig",
    "DecoderOnlyTransformer",
    "KVCache",
    "LSTMConfig",
    "LSTMModel",
    "LSTMState",
    "PDSSM",
    "PDSSMConfig",
    "RLTConfig",
    "RLTState",
    "RecurrentLoopedTransformer",
    "TransformerConfig",
    "TransformerState",
    "WindowKV",
    "build_model",
    "count_parameters",
    "parse_split",
]
