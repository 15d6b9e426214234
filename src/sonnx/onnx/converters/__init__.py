"""Importer converters, one module per operator family; importing this registers them all."""

from sonnx.onnx.converters import (  # noqa: F401
    activations,
    attention,
    cast,
    control_flow,
    conv,
    elementwise,
    indexing,
    linalg,
    loss,
    normalization,
    pooling,
    quantize,
    random_ops,
    reduce,
    resize,
    rnn,
    sequence,
    shape,
    signal,
    training_ops,
)
