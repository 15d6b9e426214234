"""Importer converters, one module per operator family; importing this registers them all."""

from sonnx.onnx.converters import (  # noqa: F401
    activations,
    attention,
    cast,
    conv,
    elementwise,
    indexing,
    linalg,
    loss,
    normalization,
    pooling,
    reduce,
    resize,
    shape,
)
