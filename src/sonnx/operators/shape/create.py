"""Operators that make new tensors: Shape, Size, Constant, ConstantOfShape, Range, EyeLike.

Shape, Size, ConstantOfShape and integer Range sit in the Shape -> Gather -> Concat -> Reshape
chains of exported transformer graphs, so they stay cheap: one small int64 tensor each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.device import as_device, get_default_device
from sonnx.engine.host_values import host
from sonnx.engine.memory_guard import check_elements, check_shape
from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.engine.singa_functions import (
    Input,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.operators.shape.common import attrs_without, int64_input
from sonnx.symbolic_sizes import SYMBOLIC_TYPES, has_symbols, symbolic
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "Constant",
    "ConstantOfShape",
    "EyeLike",
    "Range",
    "Shape",
    "Size",
    "constant_of_shape",
    "eye_like",
    "range",
    "shape",
    "size",
]

INT64_MAX = 2**63 - 1


def array_to_torch(op: str, array: Any) -> torch.Tensor:
    """A NumPy array (an attribute value) as a torch tensor with the same element type.

    bfloat16 and float8 arrays (``ml_dtypes``) have no NumPy-native type: their bits are
    reinterpreted as the torch dtype of the same name.
    """
    a = np.array(array, order="C")  # a copy; np.ascontiguousarray would make 0-d arrays 1-D
    if a.dtype.kind in "biufc" and a.dtype.type.__module__ == "numpy":
        return torch.from_numpy(a)  # host: callers move it to their device
    target = getattr(torch, a.dtype.name, None)
    if not isinstance(target, torch.dtype) or a.dtype.itemsize not in (1, 2):
        raise BadInputError(
            f"{op}: values of element type {a.dtype} cannot be held by a torch tensor; "
            "expected a boolean, integer, float or complex value"
        )
    bits = a.view(np.uint8 if a.dtype.itemsize == 1 else np.uint16)
    return torch.from_numpy(bits).view(target)  # host: callers move it to their device


class Shape(Operator):
    """The input's shape as an int64 vector, optionally only dims ``start:end`` (opset 15)."""

    op_type = "Shape"
    since_versions = (1, 13, 15, 19, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    reads_shape_only = True

    singa_functions = (
        SingaFunction(
            "shape",
            (
                "``x``'s shape as an int64 tensor (recorded: exported graphs stay dynamic; ONNX "
                "``Shape``)."
            ),
            inputs=(Input("x", "any tensor (its values are not read)."),),
            returns="a 1-D int64 tensor of ``x``'s dims.",
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = self.attr("start") or 0
        end = self.attr("end")
        # Python slicing clamps negative and out-of-range bounds exactly as ONNX does.
        dims = list(x.shape)[start:end]
        if has_symbols(dims):  # a trace with symbolic sizes: keep the symbols
            return symbolic(dims)
        # host: shape values live on the host (see sonnx.engine.host_values)
        return torch.tensor(dims, dtype=torch.int64)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        start, end = self.attr("start") or 0, self.attr("end")
        if g.opset >= 15 or (start == 0 and end is None):
            g.add_node("Shape", inputs, outputs, **(self.export_attrs(g) if g.opset >= 15 else {}))
            return
        # Older opsets: the whole shape, then a Slice of it.
        full = g.fresh_name("shape")
        g.add_node("Shape", inputs, [full])
        stop = INT64_MAX if end is None else end
        if g.opset >= 10:
            bounds = [g.constant([start], "starts", np.int64), g.constant([stop], "ends", np.int64)]
            g.add_node("Slice", [full, *bounds], outputs)
        else:
            g.add_node("Slice", [full], outputs, starts=[start], ends=[stop], axes=[0])


class Size(Operator):
    """The number of elements, as an int64 scalar."""

    op_type = "Size"
    since_versions = (1, 13, 19, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    reads_shape_only = True

    singa_functions = (
        SingaFunction(
            "size",
            "The number of elements of ``x`` as an int64 scalar tensor (ONNX ``Size``).",
            inputs=(Input("x", "any tensor (its values are not read)."),),
            returns="a 0-d int64 tensor.",
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        count = x.numel()
        if has_symbols([count]):  # a trace with symbolic sizes: keep the symbol
            return symbolic([count]).reshape(())
        return torch.tensor(count, dtype=torch.int64)  # host: a shape value


class Constant(Operator):
    """A tensor given by exactly one attribute: ``value``, ``sparse_value`` (densified by the
    importer), ``value_float(s)`` or ``value_int(s)``."""

    op_type = "Constant"
    since_versions = (1, 9, 11, 12, 13, 19, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self) -> torch.Tensor:
        given = {k: v for k, v in self.attrs.items() if v is not None}
        if len(given) != 1:
            raise BadInputError(
                f"Constant: exactly one value attribute must be set, received {sorted(given)}"
            )
        ((name, value),) = given.items()
        # No input to take a device from: the default device (an imported graph moves its
        # Constant values to the graph's device).
        device = as_device(None).torch_device
        if name in ("value", "sparse_value"):
            return array_to_torch("Constant", value).to(device)
        if name in ("value_float", "value_floats"):
            return torch.tensor(value, dtype=torch.float32, device=device)
        if name in ("value_int", "value_ints"):
            return torch.tensor(value, dtype=torch.int64, device=device)
        if name in ("value_string", "value_strings"):
            raise BadInputError(
                f"Constant: attribute {name} holds strings, which a torch tensor cannot hold; "
                "sonnx supports numeric and boolean constants only"
            )
        raise BadInputError(f"Constant: unknown attribute {name!r}")

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Always the ``value`` form, which every opset has."""
        from sonnx.proto.graph_builder import tensor_proto

        g.add_node("Constant", [], outputs, value=tensor_proto(self.forward(), "value"))


class ConstantOfShape(Operator):
    """A tensor of the given shape filled with ``value`` (a one-element tensor; default float32
    zero)."""

    op_type = "ConstantOfShape"
    since_versions = (9, 20, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({0})
    size_inputs = frozenset({0})
    parameterising_inputs = frozenset({0})

    def forward(self, shape: torch.Tensor) -> torch.Tensor:
        dims = host_ints(shape)
        if any(d < 0 for d in dims):
            raise BadInputError(
                f"ConstantOfShape: shape must have non-negative dims, received {dims}"
            )
        value = self.attr("value")
        fill = (
            torch.zeros((), dtype=torch.float32, device=shape.device)
            if value is None
            else array_to_torch("ConstantOfShape", value).reshape(-1)[:1].reshape(())
        )
        device = _output_device(shape, fill)
        check_shape("ConstantOfShape: output", dims, fill.dtype, device)
        return fill.to(device).expand(dims).contiguous()


def _output_device(shape: torch.Tensor, fill: torch.Tensor) -> torch.device:
    """Where ConstantOfShape's output lives: an integer fill makes a host value where the shape
    is one (a shape built from sizes), but a float fill made from a host shape is data (an RNN's
    zero initial state): it goes to the default device, the graph's while a graph runs."""
    if shape.device.type == "cpu" and (fill.is_floating_point() or fill.is_complex()):
        return get_default_device().torch_device
    return shape.device


class Range(Operator):
    """``start, start + delta, ...`` up to ``limit`` (exclusive), in ``start``'s element type.

    float16/bfloat16 are accumulated in float32 (opset 27's default ``stash_type``).
    """

    op_type = "Range"
    since_versions = (11, 27)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({0, 1, 2})
    size_inputs = frozenset({0, 1, 2})
    parameterising_inputs = frozenset({0, 1, 2})

    def forward(
        self, start: torch.Tensor, limit: torch.Tensor, delta: torch.Tensor
    ) -> torch.Tensor:
        for name, t in (("start", start), ("limit", limit), ("delta", delta)):
            if t.numel() != 1:
                raise BadInputError(
                    f"Range: input {name} must be a scalar, received shape {tuple(t.shape)}"
                )
        dtype = start.dtype
        if dtype.is_floating_point:
            s, stop, d = (_host_scalar(t, float) for t in (start, limit, delta))
            count = torch.sym_max(_float_range_count(s, stop, d), 0) if d else None
            step_type = torch.float64
        else:
            s, stop, d = (_host_scalar(t, int) for t in (start, limit, delta))
            count = torch.sym_max(-((s - stop) // d), 0) if d else None
            step_type = torch.int64
        if count is None:
            raise BadInputError("Range: delta must be non-zero, received 0")
        check_elements("Range: output", count, 8, start.device, f"({count},)")
        steps = torch.arange(count, dtype=step_type, device=start.device)
        return (steps * d + s).to(dtype)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        attrs = self.export_attrs(g) if g.opset >= 27 else attrs_without(self.attrs, "stash_type")
        g.add_node("Range", inputs, outputs, **attrs)


def _float_range_count(start: Any, limit: Any, delta: Any) -> Any:
    """``ceil((limit - start) / delta)``; with a symbolic size among whole numbers (a float
    Range over an image side, as detection heads build their grids), in integers, since a
    float symbol in a traced graph is one inductor cannot compile."""
    bounds = (start, limit, delta)
    if not has_symbols(bounds):
        return math.ceil((limit - start) / delta)
    if not all(isinstance(v, torch.SymInt) or float(v).is_integer() for v in bounds):
        raise NotImplementedError(f"Range: bounds {bounds} have no form for symbolic sizes")
    first, last, step = (v if isinstance(v, torch.SymInt) else int(v) for v in bounds)
    return -((first - last) // step)


def _host_scalar(t: torch.Tensor, kind: type) -> Any:
    """A scalar input's value on the host as ``kind``; a symbolic size (a trace with symbolic
    sizes, see :mod:`sonnx.symbolic_sizes`) stays a symbol."""
    value = host(t).item()
    return value if isinstance(value, SYMBOLIC_TYPES) else kind(value)


class EyeLike(Operator):
    """A 2-D tensor shaped like the input with ones on diagonal ``k``; element type ``dtype``
    (an ONNX type code) or the input's."""

    op_type = "EyeLike"
    since_versions = (9, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise BadInputError(f"EyeLike: input must be 2-D, received shape {tuple(x.shape)}")
        code = self.attr("dtype")
        dtype = x.dtype if code is None else dtypes.onnx_to_torch(code)
        rows = torch.arange(x.shape[0], device=x.device)[:, None]
        cols = torch.arange(x.shape[1], device=x.device)[None, :]
        return (cols - rows == self.attr("k")).to(dtype)


# ---- SINGA-named functions -------------------------------------------------------------------


def constant_of_shape(shape: Sequence[int] | Tensor, value: float | int | bool = 0.0) -> Tensor:
    """A tensor of ``shape`` filled with ``value`` (bool, int64 or float32 by its Python type).

    :param shape: the dims: a sequence of ints or an int64 tensor (ONNX ``ConstantOfShape``).
    :param value: the fill value; its Python type picks the element type.
    :returns: the filled tensor.
    :raises BadInputError: a dim is negative.
    """
    kind = (
        np.bool_ if isinstance(value, bool) else np.int64 if isinstance(value, int) else np.float32
    )
    dims = shape if isinstance(shape, Tensor) else int64_input(shape, None)
    return ConstantOfShape(value=np.array([value], dtype=kind))(dims)


def range(start: float | Tensor, limit: float | Tensor, delta: float | Tensor = 1) -> Tensor:
    """``start, start + delta, ...`` below ``limit``: int64 when all three are Python ints,
    else float32 (or the element type of ``start`` when it is a Tensor).

    :param start: the first value: a number or a scalar tensor.
    :param limit: the bound (exclusive): a number or a scalar tensor.
    :param delta: the step (non-zero): a number or a scalar tensor.
    :returns: a 1-D tensor (ONNX ``Range``).
    :raises BadInputError: a tensor argument is not a scalar, or ``delta`` is 0.
    """
    reference = next((t for t in (start, limit, delta) if isinstance(t, Tensor)), None)
    if reference is None:
        plain = all(isinstance(v, int) for v in (start, limit, delta))
        dtype = torch.int64 if plain else torch.float32
    else:
        dtype = reference.dtype
    device = as_device(None if reference is None else reference.device).torch_device
    args = [
        v
        if isinstance(v, Tensor)
        else Tensor(
            data=torch.tensor(v, dtype=dtype, device=device),
            device=device,
            requires_grad=False,
        )
        for v in (start, limit, delta)
    ]
    return Range()(*args)


def eye_like(x: Tensor, k: int = 0, dtype: Any = None) -> Tensor:
    """Ones on diagonal ``k`` of a matrix shaped like ``x``, zeros elsewhere (ONNX ``EyeLike``).

    :param x: a 2-D tensor (only its shape and dtype are read).
    :param k: the diagonal: 0 the main one, positive above it, negative below.
    :param dtype: the element type (as :func:`cast` accepts it); None for ``x``'s.
    :returns: a tensor of ``x``'s shape.
    :raises BadInputError: ``x`` is not 2-D, or ``dtype`` is not a data type.
    """
    attrs: dict[str, Any] = {"k": k}
    if dtype is not None:
        attrs["dtype"] = dtypes.torch_to_onnx(dtypes.as_torch_dtype(dtype))
    return EyeLike(**attrs)(x)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def shape(x: Tensor) -> Tensor:
    """``x``'s shape as an int64 tensor (recorded: exported graphs stay dynamic; ONNX ``Shape``).

    :param x: any tensor (its values are not read).
    :returns: a 1-D int64 tensor of ``x``'s dims.
    """
    return Shape()(x)


def size(x: Tensor) -> Tensor:
    """The number of elements of ``x`` as an int64 scalar tensor (ONNX ``Size``).

    :param x: any tensor (its values are not read).
    :returns: a 0-d int64 tensor.
    """
    return Size()(x)
