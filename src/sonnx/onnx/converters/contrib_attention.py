"""Importer registrations for the com.microsoft attention operators: see
sonnx.operators.attention.contrib_gqa and its contrib_attention_* siblings."""

from __future__ import annotations

from sonnx.onnx.registry import register_operators
from sonnx.operators.attention.contrib_bert import (
    Attention,
    MultiHeadAttention,
    QAttention,
)
from sonnx.operators.attention.contrib_bias import RelativePositionBias
from sonnx.operators.attention.contrib_decoder import DecoderMaskedMultiHeadAttention
from sonnx.operators.attention.contrib_gqa import GroupQueryAttention, RotaryEmbedding

register_operators(
    Attention, DecoderMaskedMultiHeadAttention, GroupQueryAttention, MultiHeadAttention,
    QAttention, RelativePositionBias, RotaryEmbedding,
)
