"""Importer registrations for the com.microsoft attention operators: see
sonnx.autograd.contrib_attention."""

from __future__ import annotations

from sonnx.autograd.contrib_attention import GroupQueryAttention, RotaryEmbedding
from sonnx.onnx.registry import register_operator

register_operator(RotaryEmbedding, 1, domain="com.microsoft")
register_operator(GroupQueryAttention, 1, domain="com.microsoft")
