"""The pooling operators (``windowed``). Later versions only added attributes whose defaults
give the earlier behaviour, so one class serves every since-version.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.pooling import windowed

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    windowed.MaxPool,
    windowed.AveragePool,
    windowed.LpPool,
    windowed.GlobalAveragePool,
    windowed.GlobalMaxPool,
    windowed.GlobalLpPool,
    windowed.MaxUnpool,
)
