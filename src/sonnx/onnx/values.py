"""The graph values an imported graph passes between its nodes, by the name the importer's
modules and users import them under; they are defined in :mod:`sonnx.engine.values`, below the
operators that make them (the sequence and optional operators of
:mod:`sonnx.operators.control`)."""

from sonnx.engine.values import (
    GraphValue,
    MapSequence,
    MapValue,
    OptionalValue,
    TensorSequence,
    is_single_value,
)

__all__ = [
    "GraphValue",
    "MapSequence",
    "MapValue",
    "OptionalValue",
    "TensorSequence",
    "is_single_value",
]
