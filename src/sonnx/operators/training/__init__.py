"""The ``ai.onnx.preview.training`` operators: the optimizer updates (``updates``) and
``Gradient``, which recomputes its forward graph with gradients recorded (``gradient``).
"""

from sonnx.engine.operator import Operator
from sonnx.operators.training import updates
from sonnx.operators.training.gradient import Gradient

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    updates.Adagrad,
    updates.Adam,
    updates.Momentum,
    Gradient,
)
