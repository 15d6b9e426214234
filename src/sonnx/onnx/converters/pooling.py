"""Importer registrations for pooling (see :mod:`sonnx.operators.pooling.windowed`).

The operator classes read their attributes with the schema defaults of the matched version, so
every since-version maps to the same class: later versions only added attributes (storage_order,
ceil_mode, dilations, count_include_pad) whose defaults give the earlier behaviour, and LpPool /
GlobalLpPool's p changed from float to int.
"""

from sonnx.onnx.registry import register_operators
from sonnx.operators.pooling.windowed import (
    AveragePool,
    GlobalAveragePool,
    GlobalLpPool,
    GlobalMaxPool,
    LpPool,
    MaxPool,
    MaxUnpool,
)

register_operators(
    MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool, MaxUnpool,
)
