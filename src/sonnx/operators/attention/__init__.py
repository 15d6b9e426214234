"""The attention operators: ONNX Attention, RotaryEmbedding and the linear-attention ones
(``attention``), and onnxruntime's com.microsoft attention (``contrib_*``).

FlexAttention (ai.onnx.preview) has no class: its converter in
:mod:`sonnx.onnx.converters.attention` composes standard operators.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.attention import (
    attention,
    contrib_bert,
    contrib_bias,
    contrib_decoder,
    contrib_gqa,
)

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    attention.Attention,
    attention.RotaryEmbedding,
    attention.LinearAttention,
    attention.CausalConvWithState,
    contrib_bert.Attention,
    contrib_bert.MultiHeadAttention,
    contrib_bert.QAttention,
    contrib_bias.RelativePositionBias,
    contrib_decoder.DecoderMaskedMultiHeadAttention,
    contrib_gqa.GroupQueryAttention,
    contrib_gqa.RotaryEmbedding,
)
