"""Pooling over whole spatial extents (GlobalAveragePool, GlobalMaxPool, GlobalLpPool) and
MaxUnpool, the scatter that undoes MaxPool with its indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.conv.windows import (
    explicit_pads,
    require_opset,
    spatial_ints,
    user_ints,
    user_pads,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder


def _spatial_axes(op_type: str, x: torch.Tensor) -> tuple[int, ...]:
    if x.dim() < 3:
        raise BadInputError(
            f"{op_type}: input X must be (N, C, spatial...) with at least one spatial axis, "
            f"received shape {tuple(x.shape)}"
        )
    return tuple(range(2, x.dim()))


class GlobalAveragePool(Operator):
    """Mean over every spatial axis, keeping them as size 1."""

    op_type = "GlobalAveragePool"
    since_versions = (1, 22)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "globalaveragepool",
            (
                "Average over all spatial axes: (N, C, spatial...) -> (N, C, 1, ...) "
                "(GlobalAveragePool)."
            ),
            inputs=(Input("x", "an (N, C, spatial...) floating-point tensor."),),
            returns="an (N, C, 1, ...) tensor of ``x``'s dtype.",
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=_spatial_axes(self.op_type, x), keepdim=True)


class GlobalMaxPool(Operator):
    """Maximum over every spatial axis, keeping them as size 1."""

    op_type = "GlobalMaxPool"
    since_versions = (1, 22)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "globalmaxpool",
            (
                "Maximum over all spatial axes: (N, C, spatial...) -> (N, C, 1, ...) (ONNX "
                "GlobalMaxPool)."
            ),
            inputs=(Input("x", "an (N, C, spatial...) tensor."),),
            returns="an (N, C, 1, ...) tensor of ``x``'s dtype.",
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=_spatial_axes(self.op_type, x), keepdim=True)


def lp_export_p(op: Operator, g: GraphBuilder) -> int | float:
    """LpPool/GlobalLpPool's p as the export opset spells it: a float at opset 1, else an int."""
    p = op.attr("p")
    if g.opset < 2:
        return float(p)
    if float(p) != int(p):
        raise ExportError(f"{op.op_type}: p={p} is not an integer, as opset {g.opset} needs")
    return int(p)


class GlobalLpPool(Operator):
    """The p-norm over every spatial axis, keeping them as size 1 (p a float before v2)."""

    op_type = "GlobalLpPool"
    since_versions = (1, 2, 22)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "globallppool",
            (
                "p-norm over all spatial axes: (N, C, spatial...) -> (N, C, 1, ...) (ONNX "
                "GlobalLpPool)."
            ),
            inputs=(Input("x", "an (N, C, spatial...) floating-point tensor."),),
            returns="an (N, C, 1, ...) tensor of ``x``'s dtype.",
            keywords=(Keyword("p", "the order of the norm.", convert="int"),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = float(self.attr("p"))
        return (x.abs() ** p).sum(dim=_spatial_axes(self.op_type, x), keepdim=True) ** (1.0 / p)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(self.op_type, inputs, outputs, p=lp_export_p(self, g))


class MaxUnpool(Operator):
    """ONNX MaxUnpool: scatter X to the positions MaxPool's indices I name, zeros elsewhere.

    The indices address the tensor of the inferred shape ``(in - 1) * stride + kernel - pads``;
    an explicit output_shape larger than that keeps this layout and appends zeros at the end
    of each axis, which is what ONNX's reference (and its official cases) do.
    """

    op_type = "MaxUnpool"
    since_versions = (9, 11, 22)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({2})
    # The pooled indices are data; output_shape sizes the result.
    parameterising_inputs = frozenset({2})

    def forward(
        self, x: torch.Tensor, indices: torch.Tensor, output_shape: torch.Tensor | None = None
    ) -> torch.Tensor:
        if x.dim() < 3 or tuple(indices.shape) != tuple(x.shape):
            raise BadInputError(
                "MaxUnpool: X must be (N, C, spatial...) and I must have its shape, received "
                f"shapes {tuple(x.shape)} and {tuple(indices.shape)}"
            )
        n = x.dim() - 2
        kernel = self.attr("kernel_shape")
        if kernel is None or len(kernel) != n:
            raise BadInputError(
                f"MaxUnpool: attribute kernel_shape must give {n} sizes, received {kernel}"
            )
        strides = spatial_ints(self, "strides", n, 1)
        pads = explicit_pads(self, n)
        inferred = list(x.shape[:2]) + [
            (size - 1) * s - pads[i] - pads[n + i] + int(k)
            for i, (size, s, k) in enumerate(zip(x.shape[2:], strides, kernel, strict=True))
        ]
        total = 1
        for v in inferred:
            total *= v
        flat_index = indices.reshape(-1).long()
        if flat_index.numel() and (flat_index.min() < 0 or flat_index.max() >= total):
            raise BadInputError(
                f"MaxUnpool: input I must hold indices in [0, {total}) for the unpooled shape "
                f"{tuple(inferred)}, received values from {int(flat_index.min())} to "
                f"{int(flat_index.max())}"
            )
        y = torch.zeros(total, dtype=x.dtype, device=x.device)
        y = y.scatter(0, flat_index, x.reshape(-1)).reshape(inferred)
        wanted = host_ints(output_shape)
        if wanted is None:
            return y
        if len(wanted) != x.dim() or any(w < i for w, i in zip(wanted, inferred, strict=True)):
            raise BadInputError(
                f"MaxUnpool: input output_shape must be {x.dim()} sizes no smaller than the "
                f"unpooled shape {tuple(inferred)}, received {wanted}"
            )
        grow: list[int] = []
        for w, i in zip(reversed(wanted), reversed(inferred), strict=True):
            grow += [0, w - i]
        return torch.nn.functional.pad(y, grow)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        require_opset(g, self.op_type, 9)
        super().export(g, inputs, outputs)


def max_unpool(
    x: Tensor,
    indices: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
) -> Tensor:
    """Undo a max pooling: put x's values at the flattened ``indices`` MaxPool returned.

    :param x: the pooled (N, C, spatial...) values.
    :param indices: the int64 indices MaxPool returned with them, of ``x``'s shape.
    :param kernel_size: the pooling's window: an int, or one size per spatial axis.
    :param stride: the pooling's step; None for the kernel size.
    :param padding: the pooling's padding: an int, one per spatial axis, or begins then ends.
    :returns: the unpooled tensor, zeros where no value lands (ONNX MaxUnpool).
    :raises BadInputError: a size list has the wrong length, or an index is out of range.
    """
    n = len(x.shape) - 2
    kernel = user_ints("max_unpool", "kernel_size", kernel_size, n)
    op = MaxUnpool(
        kernel_shape=kernel,
        strides=kernel if stride is None else user_ints("max_unpool", "stride", stride, n),
        pads=user_pads("max_unpool", padding, n),
    )
    return op(x, indices)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def globalaveragepool(x: Tensor) -> Tensor:
    """Average over all spatial axes: (N, C, spatial...) -> (N, C, 1, ...) (GlobalAveragePool).

    :param x: an (N, C, spatial...) floating-point tensor.
    :returns: an (N, C, 1, ...) tensor of ``x``'s dtype.
    """
    return GlobalAveragePool()(x)


def globalmaxpool(x: Tensor) -> Tensor:
    """Maximum over all spatial axes: (N, C, spatial...) -> (N, C, 1, ...) (ONNX GlobalMaxPool).

    :param x: an (N, C, spatial...) tensor.
    :returns: an (N, C, 1, ...) tensor of ``x``'s dtype.
    """
    return GlobalMaxPool()(x)


def globallppool(x: Tensor, p: int = 2) -> Tensor:
    """p-norm over all spatial axes: (N, C, spatial...) -> (N, C, 1, ...) (ONNX GlobalLpPool).

    :param x: an (N, C, spatial...) floating-point tensor.
    :param p: the order of the norm.
    :returns: an (N, C, 1, ...) tensor of ``x``'s dtype.
    """
    return GlobalLpPool(p=int(p))(x)
