"""Attention blocks: Attention, RotaryEmbedding and the other transformer operators of the current
opset.
"""

__all__: list[str] = []
