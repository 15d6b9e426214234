"""``Dim``: a size read from a tensor's shape that remembers where it came from.

``Tensor.shape`` returns ``Dim`` values. They are plain ints to everything (comparison, hashing,
NumPy, torch, JSON, pickling) but also carry how they were computed — which axis of which
tensor, then ``+ - * //`` with other ints — so that a shape list built from them
(``x.reshape(x.shape[0], -1)``, ``x.shape[1] * x.shape[2]``) becomes a computed input of the
operator it feeds. Its export then writes ``Shape -> Gather -> Mul -> Concat`` instead of the
example's numbers, and the exported model works at other sizes of those dims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

#: ``("dim", weakref to the tensor, axis)`` or ``(op, left, right)`` with op one of the keys of
#: :data:`ARITHMETIC` and left/right ints (plain or Dim).
Expr = tuple[Any, ...]

ARITHMETIC: dict[str, Callable[[int, int], int]] = {
    "add": int.__add__,
    "sub": int.__sub__,
    "mul": int.__mul__,
    "floordiv": int.__floordiv__,
}


class Dim(int):
    """An int that also records how it was computed from tensors' dims (see the module)."""

    expr: Expr

    def __new__(cls, value: int, expr: Expr) -> Dim:
        obj = super().__new__(cls, value)
        obj.expr = expr
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, (int(self),))

    def leaves(self) -> Iterator[tuple[Any, int]]:
        """``(tensor or None if it is gone, axis)`` for every dim this value reads."""
        stack: list[Any] = [self]
        while stack:
            value = stack.pop()
            if not isinstance(value, Dim):
                continue
            if value.expr[0] == "dim":
                yield value.expr[1](), value.expr[2]
            else:
                stack.extend(value.expr[1:])


def _binary(op: str, swapped: bool = False) -> Callable[[Dim, Any], Any]:
    compute = ARITHMETIC[op]

    def method(self: Dim, other: Any) -> Any:
        if not isinstance(other, int) or isinstance(other, bool):
            # floats, arrays, ...: plain int arithmetic, no record
            return getattr(int, f"__{'r' if swapped else ''}{op}__")(self, other)
        left, right = (other, self) if swapped else (self, other)
        return Dim(compute(int(left), int(right)), (op, left, right))

    method.__name__ = f"__{'r' if swapped else ''}{op}__"
    return method


for _op in ARITHMETIC:
    setattr(Dim, f"__{_op}__", _binary(_op))
    setattr(Dim, f"__r{_op}__", _binary(_op, swapped=True))


def has_dims(values: Any) -> bool:
    """Whether a list or tuple of ints holds a :class:`Dim` whose tensors are all alive."""
    if not isinstance(values, (list, tuple)):
        return False
    found = False
    for v in values:
        if isinstance(v, Dim):
            if any(t is None for t, _ in v.leaves()):
                return False
            found = True
    return found
