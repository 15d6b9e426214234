"""The convolutions (``conv``). Every since-version shares one form: Conv-1/11/22 and
ConvTranspose-1/11/22 only widened the types and defaults, DeformConv-22 only added types.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.conv import conv

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    conv.Conv,
    conv.ConvTranspose,
    conv.ConvInteger,
    conv.DeformConv,
    conv.Col2Im,
)
