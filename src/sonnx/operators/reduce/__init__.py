"""The reductions (``reductions``). The versions whose ``axes`` is an attribute are adapted
in :mod:`sonnx.onnx.converters.reduce`.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.reduce import reductions

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    reductions.ReduceSum,
    reductions.ReduceMean,
    reductions.ReduceProd,
    reductions.ReduceL1,
    reductions.ReduceL2,
    reductions.ReduceSumSquare,
    reductions.ReduceMax,
    reductions.ReduceMin,
    reductions.ReduceLogSum,
    reductions.ReduceLogSumExp,
)
