"""The activation operators: elementwise functions (``functions``), gated ones (``gated``)
and the softmax family (``softmax``).

Version 1 of several activations carried a ``consumed_inputs`` attribute (legacy memory
bookkeeping); the classes accept and ignore it, and never export it. Softmax, LogSoftmax and
Hardmax below version 13 coerce the input to 2-D at ``axis``: the class reads its version.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.activation import functions, gated, softmax

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    functions.Relu,
    functions.LeakyRelu,
    functions.PRelu,
    functions.Elu,
    functions.Selu,
    functions.Celu,
    functions.Sigmoid,
    functions.HardSigmoid,
    functions.Tanh,
    functions.Softplus,
    functions.Softsign,
    functions.ThresholdedRelu,
    functions.Shrink,
    gated.HardSwish,
    gated.Gelu,
    gated.Mish,
    gated.Swish,
    gated.SwiGLU,
    softmax.Softmax,
    softmax.LogSoftmax,
    softmax.Hardmax,
)
