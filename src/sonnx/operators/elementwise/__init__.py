"""Element-wise math: unary functions, binary arithmetic with broadcasting, comparisons, logical
and bitwise operators, Where, Clip, variadic Max/Min/Mean/Sum, and Cast.

The operators live in ``unary``, ``trigonometric``, ``binary``, ``logic`` and ``select``
(shared helpers in ``base``; element-type conversion in ``cast``); this package gathers the
first five.
"""

# ruff: noqa: F403
from sonnx.operators.elementwise import binary, logic, select, trigonometric, unary
from sonnx.operators.elementwise.binary import *
from sonnx.operators.elementwise.logic import *
from sonnx.operators.elementwise.select import *
from sonnx.operators.elementwise.trigonometric import *
from sonnx.operators.elementwise.unary import *

__all__ = [
    *unary.__all__,
    *trigonometric.__all__,
    *binary.__all__,
    *logic.__all__,
    *select.__all__,
]
