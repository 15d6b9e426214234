"""The normalizations and Dropout (``batch``), and onnxruntime's fused normalizations and
activations (``contrib_skip``, ``contrib_quantized``, ``contrib_activations``: com.microsoft
version 1, except SimplifiedLayerNormalization, which onnxruntime registers in the default
domain).

BatchNormalization is not listed: every version goes through its converter in
:mod:`sonnx.onnx.converters.normalization`, which follows the training flag.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.normalization import (
    batch,
    contrib_activations,
    contrib_quantized,
    contrib_skip,
)

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    batch.InstanceNormalization,
    batch.LayerNormalization,
    batch.GroupNormalization,
    batch.RMSNormalization,
    batch.LRN,
    batch.LpNormalization,
    batch.MeanVarianceNormalization,
    batch.Dropout,
    contrib_skip.SkipLayerNormalization,
    contrib_skip.SkipSimplifiedLayerNormalization,
    contrib_skip.EmbedLayerNormalization,
    contrib_skip.GroupNorm,
    contrib_skip.SkipGroupNorm,
    contrib_skip.SimplifiedLayerNormalization,
    contrib_quantized.QEmbedLayerNormalization,
    contrib_activations.Gelu,
    contrib_activations.BiasGelu,
    contrib_activations.FastGelu,
    contrib_activations.QuickGelu,
    contrib_activations.BiasAdd,
    contrib_activations.BiasSplitGelu,
)
