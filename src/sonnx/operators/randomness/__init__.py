"""The random generators (``generators``)."""

from sonnx.engine.operator import Operator
from sonnx.operators.randomness import generators

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    generators.RandomUniform,
    generators.RandomNormal,
    generators.RandomUniformLike,
    generators.RandomNormalLike,
    generators.Bernoulli,
    generators.Multinomial,
)
