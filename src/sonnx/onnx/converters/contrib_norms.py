"""Importer registrations for onnxruntime's fused normalizations and activations: see
sonnx.operators.normalization.contrib_skip, sonnx.operators.normalization.contrib_quantized and
sonnx.operators.normalization.contrib_activations.

Every one is since-version 1 of the ``com.microsoft`` domain, except
SimplifiedLayerNormalization, which onnxruntime registers in the default domain (version 1,
so it serves every opset; onnx has no schema for it, so nodes are not schema-checked).
"""

from sonnx.onnx.registry import register_operators
from sonnx.operators.normalization.contrib_activations import (
    BiasAdd,
    BiasGelu,
    BiasSplitGelu,
    FastGelu,
    Gelu,
    QuickGelu,
)
from sonnx.operators.normalization.contrib_quantized import QEmbedLayerNormalization
from sonnx.operators.normalization.contrib_skip import (
    EmbedLayerNormalization,
    GroupNorm,
    SimplifiedLayerNormalization,
    SkipGroupNorm,
    SkipLayerNormalization,
    SkipSimplifiedLayerNormalization,
)

register_operators(
    SkipLayerNormalization, SkipSimplifiedLayerNormalization, EmbedLayerNormalization,
    QEmbedLayerNormalization, GroupNorm, SkipGroupNorm, Gelu, BiasGelu, FastGelu, QuickGelu,
    BiasAdd, BiasSplitGelu, SimplifiedLayerNormalization,
)
