"""SINGA's layers and losses as composites of ONNX operators; none is an ONNX operator of
its own, so the family registers nothing.
"""

from sonnx.engine.operator import Operator

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = ()
