"""Importer registrations for the com.microsoft attention operators: see
sonnx.autograd.contrib_attention and its contrib_attention_* siblings."""

from __future__ import annotations

from sonnx.autograd.contrib_attention import GroupQueryAttention, RotaryEmbedding
from sonnx.autograd.contrib_attention_bert import (
    Attention,
    MultiHeadAttention,
    QAttention,
)
from sonnx.autograd.contrib_attention_bias import RelativePositionBias
from sonnx.autograd.contrib_attention_decoder import DecoderMaskedMultiHeadAttention
from sonnx.onnx.registry import register_operator

for _cls in (
    Attention,
    DecoderMaskedMultiHeadAttention,
    GroupQueryAttention,
    MultiHeadAttention,
    QAttention,
    RelativePositionBias,
    RotaryEmbedding,
):
    register_operator(_cls, 1, domain="com.microsoft")
