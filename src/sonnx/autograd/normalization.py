"""Normalization: BatchNormalization, InstanceNormalization, LayerNormalization,
GroupNormalization, RMSNormalization, LRN, LpNormalization, MeanVarianceNormalization; Dropout.
"""

__all__: list[str] = []
