"""The indexing operators: gather and scatter, arg-extrema, TopK, Unique and
NonMaxSuppression (``gather_scatter``), OneHot, NonZero and Compress (``masks``).
Scatter and TopK-1 are adapted in :mod:`sonnx.onnx.converters.indexing`.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.indexing import gather_scatter, masks

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    gather_scatter.Gather,
    gather_scatter.GatherElements,
    gather_scatter.GatherND,
    gather_scatter.ScatterElements,
    gather_scatter.ScatterND,
    gather_scatter.TensorScatter,
    gather_scatter.TopK,
    gather_scatter.Unique,
    gather_scatter.ArgMax,
    gather_scatter.ArgMin,
    gather_scatter.NonMaxSuppression,
    masks.OneHot,
    masks.NonZero,
    masks.Compress,
)
