"""Shape values that stay symbolic while graph mode traces a graph with symbolic sizes.

An exported transformer computes its reshape targets from its input's shape: ``Shape ->
Gather -> Unsqueeze -> Concat -> Reshape``. Traced with symbolic sizes (see
:mod:`sonnx.runtime.symbolic_graphs`), ``Shape`` sees ``torch.SymInt`` sizes; written into an
int64 tensor they would become their current values, and the graph would hold only for them.
So in a symbolic trace ``Shape`` and ``Size`` return a :class:`SymbolicInts` instead: a small
NumPy object array whose elements are Python numbers or torch's symbolic ones (``SymInt``,
``SymBool`` after a comparison, ``SymFloat`` after a Cast to float). The shape arithmetic
operators then compute on the symbols (:func:`run_on_symbols`) and the operator that finally
reads the values (a Reshape's target, a Range's limit, an Expand's shape) receives the symbols
through :func:`~sonnx.engine.operator.host_ints`; the trace records ``s0 * 64`` instead of
``512`` and the graph serves every size.

Operators meet such values in one of four ways:

* arithmetic and comparisons (Add, Mul, Div, Equal, Where, Cast, ...) compute elementwise on
  the symbols, NumPy-broadcast;
* operators that only move elements (Gather, Concat, Slice, Unsqueeze, ...) run their torch code
  on int64 positions and pick the elements at the positions that come out, as string tensors do
  (:mod:`sonnx.strings`);
* operators that read a size input on the host (the inputs their class declares
  ``size_inputs``) receive the :class:`SymbolicInts` itself;
* anything else gets it as a traced int64 tensor (:func:`materialize`): still correct, and a
  later host read of it makes the step run eagerly, as any data-dependent step does.

Outside a symbolic trace sizes are ints, ``Shape`` returns a tensor and nothing here runs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch._prims_common import is_contiguous_or_false
from torch._subclasses.fake_tensor import is_fake

from sonnx import dtypes
from sonnx.host_arrays import HostArray
from sonnx.strings import object_array

if TYPE_CHECKING:
    from sonnx.engine.operator import Operator

__all__ = [
    "SymbolicInts",
    "has_symbols",
    "known_true",
    "materialize",
    "run_on_symbols",
    "symbolic",
    "viewable",
]

SYMBOLIC_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


class SymbolicInts(HostArray):
    """A small host array of numbers some of which are symbolic sizes, with the parts of the
    ``torch.Tensor`` interface that shape- and device-generic code reads. ``array`` is the
    NumPy object array; ``dtype`` the torch element type the values stand for."""

    __slots__ = ("dtype",)

    def __init__(self, array: np.ndarray, dtype: torch.dtype) -> None:
        self.array = array
        self.dtype = dtype

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def item(self) -> Any:
        return self.array.item()

    def _like(self, array: np.ndarray) -> SymbolicInts:
        return SymbolicInts(array, self.dtype)

    def __repr__(self) -> str:
        return f"SymbolicInts({self.array.tolist()!r}, {self.dtype})"


def has_symbols(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` is a torch symbolic number."""
    return any(isinstance(v, SYMBOLIC_TYPES) for v in values)


def known_true(condition: bool | torch.SymBool) -> bool:
    """``condition`` itself if it is a plain bool; a symbolic one only if it holds for every
    value of its symbols (torch's ``statically_known_true``).

    A symbolic condition exists only in a trace, which has loaded torch's symbolic-shape
    module already; imported at start-up, that module (and sympy) would add about half a
    second to every ``import sonnx``.
    """
    if isinstance(condition, bool):
        return condition
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return statically_known_true(condition)


def symbolic(values: Sequence[Any], dtype: torch.dtype = torch.int64) -> SymbolicInts:
    """``values`` (a flat sequence) as a 1-D :class:`SymbolicInts`."""
    return SymbolicInts(object_array(list(values)), dtype)


def materialize(value: SymbolicInts) -> torch.Tensor:
    """The values as a tensor of the trace: every symbol becomes a node computing it."""
    flat = value.array.reshape(-1).tolist()
    if not flat:
        return torch.empty(value.array.shape, dtype=value.dtype)
    scalars = [torch.full((), v, dtype=value.dtype) for v in flat]
    return torch.stack(scalars).reshape(value.array.shape)


def viewable(x: torch.Tensor) -> torch.Tensor:
    """``x``, or in a trace with symbolic sizes a contiguous copy of it unless it is known to
    be contiguous: whether a reshape of a strided tensor can be a view depends on which sizes
    are 1, so torch would pin the graph to the batch size it was traced at."""
    if has_symbols(x.shape) and not is_contiguous_or_false(x):
        return x.clone(memory_format=torch.contiguous_format)
    return x


def run_on_symbols(op: Operator, raw: Sequence[Any]) -> Any:
    """Run ``op`` on inputs of which at least one is a :class:`SymbolicInts`."""
    positions = [i for i, r in enumerate(raw) if type(r) is SymbolicInts]
    if op.reads_shape_only:
        return op.forward(*(torch.zeros(()).expand(r.shape) if i in positions else r
                            for i, r in enumerate(raw)))  # fmt: skip
    elementwise = _ELEMENTWISE.get(op.op_type)
    if elementwise is not None and all(_readable(r) for r in raw):
        dtype = _result_dtype(op, raw)
        if isinstance(dtype, torch.dtype):  # not a Cast to strings
            return elementwise(op, [_as_array(r) for r in raw], dtype)
    if set(positions) <= op.size_inputs:
        return op.forward(*raw)
    if op.moves_elements_only and all(_readable(r) for r in _data_inputs(op, raw)):
        return _moved(op, raw)
    return op.forward(*(materialize(r) if type(r) is SymbolicInts else r for r in raw))


def _readable(value: Any) -> bool:
    """A symbolic value, or a tensor whose values the host may read during a trace (a
    constant, not a traced value)."""
    if value is None or type(value) is SymbolicInts:
        return True
    return isinstance(value, torch.Tensor) and not is_fake(value) and value.numel() <= 64


def _as_array(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if type(value) is SymbolicInts:
        return value.array
    flat = value.detach().cpu().reshape(-1).tolist()
    return object_array(flat, tuple(value.shape))


def _data_inputs(op: Operator, raw: Sequence[Any]) -> list[Any]:
    which = op.moved_inputs
    return [r for i, r in enumerate(raw) if which is None or i in which]


def _moved(op: Operator, raw: Sequence[Any]) -> Any:
    """A layout operator on int64 positions standing for its data inputs' elements."""
    which = op.moved_inputs
    pools, stand_ins, offset = [], [], 0
    dtype = torch.int64
    for i, r in enumerate(raw):
        if r is not None and (which is None or i in which):
            count = r.numel()
            stand_ins.append(torch.arange(offset, offset + count).reshape(r.shape))
            pools.append(_as_array(r).reshape(-1))
            dtype = r.dtype
            offset += count
        else:
            stand_ins.append(r)
    pool = np.concatenate(pools) if len(pools) > 1 else pools[0]
    result = op.forward(*stand_ins)

    def pick(positions: torch.Tensor) -> SymbolicInts:
        index = positions.numpy()
        return SymbolicInts(object_array(pool[index.reshape(-1)], index.shape), dtype)

    if isinstance(result, torch.Tensor):
        return pick(result)
    return tuple(None if r is None else pick(r) for r in result)


def _result_dtype(op: Operator, raw: Sequence[Any]) -> torch.dtype:
    if op.op_type in _COMPARISONS:
        return torch.bool
    if op.op_type == "Cast":
        return dtypes.onnx_to_torch(op.attr("to"))
    data = raw[1] if op.op_type == "Where" else raw[0]
    return data.dtype


def _map(function: Callable[..., Any], arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``function`` elementwise over NumPy-broadcast object arrays, its results unconverted
    (a NumPy comparison would call ``bool`` on each symbolic result and pin the size)."""
    out = np.frompyfunc(function, len(arrays), 1)(*arrays)
    return out if isinstance(out, np.ndarray) else object_array([out], ())


def _truncating_div(a: Any, b: Any) -> Any:
    """Integer Div as ONNX (and C) define it: rounded toward zero. Symbols are sizes, never
    negative, so floor division is that for them."""
    if isinstance(a, int) and isinstance(b, int):
        return abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
    return a // b


def _binary(function: Callable[[Any, Any], Any]) -> Callable[..., SymbolicInts]:
    def run(op: Operator, arrays: list[np.ndarray], dtype: torch.dtype) -> SymbolicInts:
        return SymbolicInts(_map(function, arrays[:2]), dtype)

    return run


def _variadic(function: Callable[[Any, Any], Any]) -> Callable[..., SymbolicInts]:
    def run(op: Operator, arrays: list[np.ndarray], dtype: torch.dtype) -> SymbolicInts:
        total = arrays[0]
        for other in arrays[1:]:
            total = _map(function, [total, other])
        return SymbolicInts(total, dtype)

    return run


def _unary(function: Callable[[Any], Any]) -> Callable[..., SymbolicInts]:
    def run(op: Operator, arrays: list[np.ndarray], dtype: torch.dtype) -> SymbolicInts:
        return SymbolicInts(_map(function, arrays[:1]), dtype)

    return run


def _div(op: Operator, arrays: list[np.ndarray], dtype: torch.dtype) -> SymbolicInts:
    function = operator.truediv if dtype.is_floating_point else _truncating_div
    return SymbolicInts(_map(function, arrays), dtype)


def _where(op: Operator, arrays: list[np.ndarray], dtype: torch.dtype) -> SymbolicInts:
    # The condition is decided here (a guard such as ``s0 != -1`` that holds for every size).
    return SymbolicInts(_map(lambda c, a, b: a if c else b, arrays), dtype)


def _cast(op: Operator, arrays: list[np.ndarray], dtype: torch.dtype) -> SymbolicInts:
    if dtype == torch.bool:
        return SymbolicInts(_map(lambda v: v != 0, arrays[:1]), dtype)
    if dtype.is_floating_point:
        # Sizes cast to float stay integer symbols (their values are whole numbers): a float
        # symbol in a traced graph is one inductor often cannot compile.
        return SymbolicInts(_map(_to_float, arrays[:1]), dtype)
    return SymbolicInts(_map(_to_int, arrays[:1]), dtype)


def _to_float(value: Any) -> Any:
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return value
    return torch.sym_float(value) if isinstance(value, torch.SymBool) else float(value)


def _to_int(value: Any) -> Any:
    if isinstance(value, (torch.SymFloat, float)):
        return torch.sym_int(value)  # truncates, as a float-to-int Cast does
    if isinstance(value, torch.SymBool):
        return torch.sym_ite(value, 1, 0)
    return int(value) if isinstance(value, (bool, np.integer)) else value


_COMPARISONS = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not"})
_ELEMENTWISE: dict[str, Callable[[Operator, list[np.ndarray], torch.dtype], SymbolicInts]] = {
    "Add": _binary(operator.add),
    "Sub": _binary(operator.sub),
    "Mul": _binary(operator.mul),
    "Div": _div,
    "Mod": _binary(operator.mod),
    "Neg": _unary(operator.neg),
    "Abs": _unary(abs),
    "Floor": _unary(math.floor),
    "Ceil": _unary(math.ceil),
    "Max": _variadic(torch.sym_max),
    "Min": _variadic(torch.sym_min),
    "Sum": _variadic(operator.add),
    "Equal": _binary(operator.eq),
    "Less": _binary(operator.lt),
    "Greater": _binary(operator.gt),
    "LessOrEqual": _binary(operator.le),
    "GreaterOrEqual": _binary(operator.ge),
    "Not": _unary(torch.sym_not),
    "And": _binary(operator.and_),
    "Or": _binary(operator.or_),
    "Where": _where,
    "Cast": _cast,
    "Identity": _unary(lambda v: v),
}
