"""Importer registrations for the com.microsoft attention operators: see
sonnx.autograd.contrib_attention and sonnx.autograd.contrib_attention_bert."""

from __future__ import annotations

from sonnx.autograd.contrib_attention import GroupQueryAttention, RotaryEmbedding
from sonnx.autograd.contrib_attention_bert import (
    Attention,
    MultiHeadAttention,
    QAttention,
)
from sonnx.onnx.registry import register_operator

for _cls in (Attention, GroupQueryAttention, MultiHeadAttention, QAttention, RotaryEmbedding):
    register_operator(_cls, 1, domain="com.microsoft")
