"""Element-wise math: unary functions, binary arithmetic with broadcasting, comparisons, logical
and bitwise operators, Where, Clip, variadic Max/Min/Mean/Sum.
"""

__all__: list[str] = []
