"""Importer registrations for pooling (see :mod:`sonnx.operators.pooling.windowed`).

The operator classes read their attributes with the schema defaults of the matched version, so
every since-version maps to the same class: later versions only added attributes (storage_order,
ceil_mode, dilations, count_include_pad) whose defaults give the earlier behaviour, and LpPool /
GlobalLpPool's p changed from float to int.
"""

from sonnx.onnx.registry import register_operator
from sonnx.operators.pooling.windowed import (
    AveragePool,
    GlobalAveragePool,
    GlobalLpPool,
    GlobalMaxPool,
    LpPool,
    MaxPool,
    MaxUnpool,
)

register_operator(MaxPool, 1, 8, 10, 11, 12, 22)
register_operator(AveragePool, 1, 7, 10, 11, 19, 22)
register_operator(LpPool, 1, 2, 11, 18, 22)
register_operator(GlobalAveragePool, 1, 22)
register_operator(GlobalMaxPool, 1, 22)
register_operator(GlobalLpPool, 1, 2, 22)
register_operator(MaxUnpool, 9, 11, 22)
