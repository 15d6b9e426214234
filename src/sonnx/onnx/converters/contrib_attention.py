"""Importer registrations for the com.microsoft attention operators: see
sonnx.autograd.contrib_attention, contrib_attention_bert and contrib_attention_decoder."""

from __future__ import annotations

from sonnx.autograd.contrib_attention import GroupQueryAttention, RotaryEmbedding
from sonnx.autograd.contrib_attention_bert import (
    Attention,
    MultiHeadAttention,
    QAttention,
)
from sonnx.autograd.contrib_attention_decoder import DecoderMaskedMultiHeadAttention
from sonnx.onnx.registry import register_operator

for _cls in (
    Attention,
    DecoderMaskedMultiHeadAttention,
    GroupQueryAttention,
    MultiHeadAttention,
    QAttention,
    RotaryEmbedding,
):
    register_operator(_cls, 1, domain="com.microsoft")
