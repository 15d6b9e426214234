"""Pooling: MaxPool, AveragePool, LpPool, global pooling, MaxUnpool (1-D/2-D/3-D, ceil_mode,
dilation, count_include_pad).
"""

__all__: list[str] = []
