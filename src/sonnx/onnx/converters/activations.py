"""Importer registrations for activations: see sonnx.operators.activation.functions and
sonnx.operators.activation.gated.

Version 1 of several activations carried a ``consumed_inputs`` attribute (legacy memory
bookkeeping); the Operator classes accept and ignore it, and never export it.
"""

from sonnx.onnx.registry import register_operators
from sonnx.operators.activation.functions import (
    Celu,
    Elu,
    HardSigmoid,
    LeakyRelu,
    PRelu,
    Relu,
    Selu,
    Shrink,
    Sigmoid,
    Softplus,
    Softsign,
    Tanh,
    ThresholdedRelu,
)
from sonnx.operators.activation.gated import Gelu, HardSwish, Mish, SwiGLU, Swish
from sonnx.operators.activation.softmax import Hardmax, LogSoftmax, Softmax

register_operators(
    Relu, LeakyRelu, PRelu, Elu, Selu, Celu, Sigmoid, HardSigmoid, HardSwish, Tanh, Softplus,
    Softsign, ThresholdedRelu, Gelu, Mish, Swish, SwiGLU, Shrink,
    # Versions below 13 coerce the input to 2-D at `axis`: the op reads its version to know.
    Softmax, LogSoftmax, Hardmax,
)
