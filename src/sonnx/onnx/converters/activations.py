"""Importer registrations for activations: see sonnx.operators.activation.functions.

Version 1 of several activations carried a ``consumed_inputs`` attribute (legacy memory
bookkeeping); the Operator classes accept and ignore it, and never export it.
"""

from sonnx.onnx.registry import register_operator
from sonnx.operators.activation.functions import (
    Celu,
    Elu,
    Gelu,
    HardSigmoid,
    HardSwish,
    LeakyRelu,
    Mish,
    PRelu,
    Relu,
    Selu,
    Shrink,
    Sigmoid,
    Softplus,
    Softsign,
    SwiGLU,
    Swish,
    Tanh,
    ThresholdedRelu,
)
from sonnx.operators.activation.softmax import Hardmax, LogSoftmax, Softmax

register_operator(Relu, 1, 6, 13, 14)
register_operator(LeakyRelu, 1, 6, 16)
register_operator(PRelu, 1, 6, 7, 9, 16)
register_operator(Elu, 1, 6, 22)
register_operator(Selu, 1, 6, 22)
register_operator(Celu, 12, 28)
register_operator(Sigmoid, 1, 6, 13)
register_operator(HardSigmoid, 1, 6, 22)
register_operator(HardSwish, 14, 22)
register_operator(Tanh, 1, 6, 13)
register_operator(Softplus, 1, 22)
register_operator(Softsign, 1, 22)
register_operator(ThresholdedRelu, 10, 22)
register_operator(Gelu, 20)
register_operator(Mish, 18, 22)
register_operator(Swish, 24)
register_operator(SwiGLU, 28)
register_operator(Shrink, 9)
# Versions below 13 coerce the input to 2-D at `axis`: the op reads its version to know.
register_operator(Softmax, 1, 11, 13)
register_operator(LogSoftmax, 1, 11, 13)
register_operator(Hardmax, 1, 11, 13)
