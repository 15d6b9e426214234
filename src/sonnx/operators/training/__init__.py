"""The ``ai.onnx.preview.training`` optimizer operators (``updates``). Gradient is a
converter in :mod:`sonnx.onnx.converters.gradient`.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.training import updates

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    updates.Adagrad,
    updates.Adam,
    updates.Momentum,
)
