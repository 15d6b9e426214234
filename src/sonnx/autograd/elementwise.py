"""Element-wise math: unary functions, binary arithmetic with broadcasting, comparisons, logical
and bitwise operators, Where, Clip, variadic Max/Min/Mean/Sum.

The operators live in ``elementwise_unary``, ``elementwise_binary``, ``elementwise_logic`` and
``elementwise_select`` (shared helpers in ``elementwise_base``); this module gathers them.
"""

# ruff: noqa: F403
from sonnx.autograd import (
    elementwise_binary,
    elementwise_logic,
    elementwise_select,
    elementwise_unary,
)
from sonnx.autograd.elementwise_binary import *
from sonnx.autograd.elementwise_logic import *
from sonnx.autograd.elementwise_select import *
from sonnx.autograd.elementwise_unary import *

__all__ = [
    *elementwise_unary.__all__,
    *elementwise_binary.__all__,
    *elementwise_logic.__all__,
    *elementwise_select.__all__,
]
