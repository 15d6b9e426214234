"""Indexing and data-dependent ops: Gather, GatherElements, GatherND, Scatter, ScatterElements,
ScatterND, TensorScatter, OneHot, NonZero, Compress, TopK, Unique, ArgMax, ArgMin,
NonMaxSuppression.
"""

__all__: list[str] = []
