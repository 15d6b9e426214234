"""Variadic Max, Min, Mean and Sum (broadcasting NumPy-style), Where and Clip, plus
SINGA's ``add_bias``.

Gradients come from torch: Max/Min send the gradient to the selected input (split evenly on
ties), Where to the selected branch, Clip to the input where it lies inside [min, max].
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from sonnx import dtypes
from sonnx.engine.host_values import host
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    Input,
    SingaFunction,
)
from sonnx.errors import BadInputError, OpsetTooOldError
from sonnx.operators.elementwise.base import (
    NO_KERNEL_UINTS,
    broadcast_shape,
    from_ordered,
    modular,
    ordered,
    require,
    require_float,
    same_dtype,
    to_ordered,
)
from sonnx.operators.elementwise.binary import Add
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = [
    "Clip",
    "Max",
    "Mean",
    "Min",
    "Sum",
    "Where",
    "add_bias",
    "clip",
    "max",
    "mean",
    "min",
    "sum",
    "where",
]


# What the SINGA-named functions below share.
_NUMBERS = (
    Input(
        "xs",
        "number tensors of one dtype (numbers and arrays become constants).",
        annotation="Any",
        variadic=True,
    ),
)
_BROADCAST = "a tensor of the broadcast shape and the inputs' dtype."
_VARIADIC_ERRORS = (
    (
        "BadInputError",
        "no input, the dtypes differ, the shapes do not broadcast, or the inputs are boolean.",
    ),
)


class VariadicOp(Operator):
    """One or more inputs ``data_0, data_1, …`` of one numeric type, broadcast together."""

    output_shape = OutputShape.FROM_SHAPES

    def check(self, xs: tuple[torch.Tensor, ...]) -> None:
        if not xs:
            raise BadInputError(f"{self.op_type}: expected at least one input, received none")
        names = [f"data_{i}" for i in range(len(xs))]
        same_dtype(self.op_type, names, xs)
        broadcast_shape(self.op_type, names, xs)
        require(self.op_type, "data_0", xs[0], "a numeric tensor", xs[0].dtype != torch.bool)


class Max(VariadicOp):
    """ONNX ``Max``: the element-wise maximum of one or more tensors, broadcast together."""

    op_type = "Max"
    since_versions = (6, 8, 12, 13)

    singa_functions = (
        SingaFunction(
            "max",
            "Element-wise maximum of one or more tensors (broadcasting; ONNX ``Max``).",
            inputs=_NUMBERS,
            returns=_BROADCAST,
            raises=_VARIADIC_ERRORS,
        ),
    )

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        self.check(xs)
        if len(xs) == 1:
            return xs[0].clone()
        return ordered(lambda *ys: functools.reduce(torch.maximum, ys), *xs)


class Min(VariadicOp):
    """ONNX ``Min``: the element-wise minimum of one or more tensors, broadcast together."""

    op_type = "Min"
    since_versions = (6, 8, 12, 13)

    singa_functions = (
        SingaFunction(
            "min",
            "Element-wise minimum of one or more tensors (broadcasting; ONNX ``Min``).",
            inputs=_NUMBERS,
            returns=_BROADCAST,
            raises=_VARIADIC_ERRORS,
        ),
    )

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        self.check(xs)
        if len(xs) == 1:
            return xs[0].clone()
        return ordered(lambda *ys: functools.reduce(torch.minimum, ys), *xs)


class Sum(VariadicOp):
    """ONNX ``Sum``: the element-wise sum of one or more tensors, broadcast together."""

    op_type = "Sum"
    since_versions = (6, 8, 13)

    singa_functions = (
        SingaFunction(
            "sum",
            "Element-wise sum of one or more tensors (broadcasting; ONNX ``Sum``).",
            inputs=_NUMBERS,
            returns=_BROADCAST,
            raises=_VARIADIC_ERRORS,
        ),
    )

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        self.check(xs)
        if len(xs) == 1:
            return xs[0].clone()
        return modular(lambda *ys: functools.reduce(torch.add, ys), *xs)


class Mean(VariadicOp):
    """ONNX ``Mean``: the element-wise mean of one or more floating-point tensors."""

    op_type = "Mean"
    since_versions = (6, 8, 13)

    singa_functions = (
        SingaFunction(
            "mean",
            "Element-wise mean of one or more float tensors (broadcasting; ONNX ``Mean``).",
            inputs=(
                Input(
                    "xs", "floating-point tensors of one dtype.", annotation="Any", variadic=True
                ),
            ),
            returns=_BROADCAST,
            raises=(
                (
                    "BadInputError",
                    (
                        "no input, the dtypes differ, the shapes do not broadcast, or the inputs "
                        "are not floating-point."
                    ),
                ),
            ),
        ),
    )

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        self.check(xs)
        require_float(self.op_type, "data_0", xs[0])
        return functools.reduce(torch.add, xs) / len(xs)


class Where(Operator):
    """``Where(condition, X, Y)``: X where condition holds, else Y (all three broadcast)."""

    op_type = "Where"
    since_versions = (9, 16)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    moved_inputs = frozenset({1, 2})

    singa_functions = (
        SingaFunction(
            "where",
            (
                "``x`` where ``condition`` holds, else ``y`` (SINGA's argument order; ONNX's "
                "Where puts the condition first)."
            ),
            inputs=(
                Input("x", "the values taken where ``condition`` is True.", annotation="Any"),
                Input("y", "the values taken elsewhere, of ``x``'s dtype.", annotation="Any"),
                Input(
                    "condition", "a bool tensor; all three broadcast together.", annotation="Any"
                ),
            ),
            returns="a tensor of the broadcast shape and ``x``'s dtype.",
            raises=(
                (
                    "BadInputError",
                    (
                        "``condition`` is not boolean, ``x`` and ``y`` differ in dtype, or the "
                        "shapes do not broadcast."
                    ),
                ),
            ),
            call_order=("condition", "x", "y"),
        ),
    )

    def forward(self, condition: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        require(
            self.op_type, "condition", condition, "a bool tensor", condition.dtype == torch.bool
        )
        same_dtype(self.op_type, ("X", "Y"), (x, y))
        broadcast_shape(self.op_type, ("condition", "X", "Y"), (condition, x, y))
        return torch.where(condition, x, y)


def _bound(name: str, t: torch.Tensor | None) -> torch.Tensor | None:
    """ONNX bounds are scalars; one-element tensors (common in exported models) are accepted."""
    if t is None:
        return None
    if t.numel() != 1:
        raise BadInputError(
            f"Clip: input {name} must be a scalar (one element), received shape {tuple(t.shape)}"
        )
    return t.reshape(())


def _scalar_bound(bound: torch.Tensor | None, x: torch.Tensor) -> bool:
    """A bound that can be read as a Python number for free: absent, or one element on the
    CPU that carries no gradient."""
    return bound is None or (
        bound.numel() == 1
        and not bound.requires_grad
        and bound.device.type == "cpu"
        and x.device.type == "cpu"
    )


class Clip(Operator):
    """``min(max(input, min), max)``; when min > max every value becomes max (as in ONNX).

    Opset 11 made min and max optional inputs (attributes before, see the converters); opset
    12 added the integer types.
    """

    op_type = "Clip"
    since_versions = (11, 12, 13)
    output_shape = OutputShape.FROM_SHAPES
    parameterising_inputs = frozenset({1, 2})

    def forward(
        self, x: torch.Tensor, lo: torch.Tensor | None = None, hi: torch.Tensor | None = None
    ) -> torch.Tensor:
        require(self.op_type, "input", x, "a numeric tensor", x.dtype != torch.bool)
        lo, hi = _bound("min", lo), _bound("max", hi)
        present = [("input", x)] + [(n, t) for n, t in (("min", lo), ("max", hi)) if t is not None]
        same_dtype(self.op_type, [n for n, _ in present], [t for _, t in present])
        if lo is None and hi is None:
            return x.clone()
        if _scalar_bound(lo, x) and _scalar_bound(hi, x) and x.dtype.is_floating_point:
            # Python-number bounds take torch's much faster scalar kernel (ReLU6 is a Clip)
            return torch.clamp(
                x, None if lo is None else host(lo).item(), None if hi is None else host(hi).item()
            )
        if x.dtype in NO_KERNEL_UINTS:
            lo_key = None if lo is None else to_ordered(lo)
            hi_key = None if hi is None else to_ordered(hi)
            return from_ordered(torch.clamp(to_ordered(x), lo_key, hi_key), x.dtype)
        return torch.clamp(x, lo, hi)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        dtype = next(t.dtype for t in self.inputs if t is not None)
        if g.opset < 12 and not dtypes.is_float(dtype):
            raise OpsetTooOldError(
                f"Clip of {dtypes.dtype_name(dtype)} needs opset 12 or later (integer types), "
                f"exporting at opset {g.opset}",
                12,
            )
        g.add_node(self.op_type, inputs, outputs)


def clip(x: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """Limit ``x`` to [min, max]; a bound that is None is not applied (ONNX ``Clip``).

    Python numbers become constants of ``x``'s type; where min > max every value becomes max.

    :param x: a number tensor.
    :param min: the lower bound: None, a number or a one-element tensor of ``x``'s dtype.
    :param max: the upper bound: None, a number or a one-element tensor of ``x``'s dtype.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean, a bound has more than one element, or a bound's dtype
        differs from ``x``'s.
    """
    lo, hi = (b if b is None or isinstance(b, Tensor) else _constant_like(x, b) for b in (min, max))
    return Clip()(x, lo, hi)


def _constant_like(x: Tensor, value: Any) -> Tensor:
    return Tensor(data=torch.tensor(value, dtype=x.dtype), device=x.device, requires_grad=False)


def add_bias(x: Tensor, b: Tensor, axis: int = 0) -> Tensor:
    """SINGA's AddBias for a 2-D ``x``: add ``b`` to every row (axis=0, ``b`` has one value
    per column) or to every column (axis=1, ``b`` has one value per row).

    Recorded as an ONNX Add; for axis=1 ``b`` first gets a trailing size-1 axis (Unsqueeze) so
    that NumPy broadcasting lines it up with the rows.

    :param x: a 2-D tensor.
    :param b: a 1-D tensor of ``x``'s dtype.
    :param axis: 0 to add ``b`` to each row, 1 to add it to each column.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not 2-D or ``b`` not 1-D, ``axis`` is not 0 or 1, or ``b``'s
        length does not match.
    """
    if x.ndim() != 2 or b.ndim() != 1:
        raise BadInputError(
            f"add_bias: expected a 2-D x and a 1-D b, received shapes {x.shape} and {b.shape}"
        )
    if axis not in (0, 1):
        raise BadInputError(f"add_bias: axis must be 0 or 1, received {axis}")
    if b.shape[0] != x.shape[1 - axis]:
        raise BadInputError(
            f"add_bias: b must have {x.shape[1 - axis]} values for axis={axis} and x of shape "
            f"{x.shape}, received {b.shape[0]}"
        )
    if axis == 1:
        from sonnx.operators.shape.layout import unsqueeze

        b = unsqueeze(b, 1)
    return Add()(x, b)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def max(*xs: Any) -> Tensor:
    """Element-wise maximum of one or more tensors (broadcasting; ONNX ``Max``).

    :param xs: number tensors of one dtype (numbers and arrays become constants).
    :returns: a tensor of the broadcast shape and the inputs' dtype.
    :raises BadInputError: no input, the dtypes differ, the shapes do not broadcast, or the inputs
        are boolean.
    """
    return Max()(*xs)


def min(*xs: Any) -> Tensor:
    """Element-wise minimum of one or more tensors (broadcasting; ONNX ``Min``).

    :param xs: number tensors of one dtype (numbers and arrays become constants).
    :returns: a tensor of the broadcast shape and the inputs' dtype.
    :raises BadInputError: no input, the dtypes differ, the shapes do not broadcast, or the inputs
        are boolean.
    """
    return Min()(*xs)


def sum(*xs: Any) -> Tensor:
    """Element-wise sum of one or more tensors (broadcasting; ONNX ``Sum``).

    :param xs: number tensors of one dtype (numbers and arrays become constants).
    :returns: a tensor of the broadcast shape and the inputs' dtype.
    :raises BadInputError: no input, the dtypes differ, the shapes do not broadcast, or the inputs
        are boolean.
    """
    return Sum()(*xs)


def mean(*xs: Any) -> Tensor:
    """Element-wise mean of one or more float tensors (broadcasting; ONNX ``Mean``).

    :param xs: floating-point tensors of one dtype.
    :returns: a tensor of the broadcast shape and the inputs' dtype.
    :raises BadInputError: no input, the dtypes differ, the shapes do not broadcast, or the inputs
        are not floating-point.
    """
    return Mean()(*xs)


def where(x: Any, y: Any, condition: Any) -> Tensor:
    """``x`` where ``condition`` holds, else ``y`` (SINGA's argument order; ONNX's Where puts the
    condition first).

    :param x: the values taken where ``condition`` is True.
    :param y: the values taken elsewhere, of ``x``'s dtype.
    :param condition: a bool tensor; all three broadcast together.
    :returns: a tensor of the broadcast shape and ``x``'s dtype.
    :raises BadInputError: ``condition`` is not boolean, ``x`` and ``y`` differ in dtype, or the
        shapes do not broadcast.
    """
    return Where()(condition, x, y)
