"""Linear algebra and scans: MatMul, Gemm, Einsum, Det, CumSum, CumProd; the integer and quantized
matrix products are in :mod:`sonnx.operators.linalg.integer_products`, exported here too.

torch lacks CPU kernels for some unsigned types (uint16/32/64 matmul and cumsum); those are
computed in int64 and cast back, which gives the same wrap-around result modulo 2**bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sonnx import dtypes
from sonnx.engine.operator import OutputShape, host_ints
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.operators.activation.base import StrictExport
from sonnx.operators.elementwise.base import broadcast_shapes
from sonnx.operators.linalg.common import checked_matmul, shape_of, widen
from sonnx.operators.linalg.integer_products import (
    MatMulInteger,
    QLinearMatMul,
    matmul_integer,
    qlinear_matmul,
)
from sonnx.precision import autocast_mixes
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "CumProd",
    "CumSum",
    "Det",
    "Einsum",
    "Gemm",
    "MatMul",
    "MatMulInteger",
    "QLinearMatMul",
    "cumprod",
    "cumsum",
    "det",
    "einsum",
    "gemm",
    "matmul",
    "matmul_integer",
    "qlinear_matmul",
]


class MatMul(StrictExport):
    """``numpy.matmul``: 1-D operands are promoted and batch dimensions broadcast."""

    op_type = "MatMul"
    since_versions = (1, 9, 13)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "matmul",
            (
                "``a @ b`` as ``numpy.matmul``: 1-D operands promoted, batch dims broadcast (ONNX "
                "``MatMul``)."
            ),
            inputs=(
                Input("a", "a tensor of at least 1 axis, (..., M, K)."),
                Input("b", "a tensor of ``a``'s dtype, (..., K, N)."),
            ),
            returns="the (..., M, N) product.",
            raises=(
                (
                    "BadInputError",
                    (
                        "an input is 0-D, the contracted dims differ, the batch dims do not "
                        "broadcast, or the dtypes differ."
                    ),
                ),
            ),
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return checked_matmul("MatMul", a, b)


class Gemm(StrictExport):
    """``alpha * A' @ B' + beta * C`` with optional transposes; C broadcasts to (M, N)."""

    op_type = "Gemm"
    since_versions = (7, 9, 11, 13)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "gemm",
            (
                "``alpha * A' @ B' + beta * C``, ``A'`` and ``B'`` optionally transposed (ONNX "
                "``Gemm``)."
            ),
            inputs=(
                Input("A", "a 2-D (M, K) tensor, or (K, M) with ``transA``."),
                Input("B", "a 2-D (K, N) tensor, or (N, K) with ``transB``."),
                Input("C", "a tensor broadcasting to (M, N), or None for no bias."),
            ),
            returns="the (M, N) result.",
            keywords=(
                Keyword("alpha", "the scale of the product."),
                Keyword("beta", "the scale of ``C``."),
                Keyword("transA", "1 to transpose ``A`` first."),
                Keyword("transB", "1 to transpose ``B`` first."),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``A`` or ``B`` is not 2-D, the inner dims differ, or ``C`` does not "
                        "broadcast to (M, N)."
                    ),
                ),
            ),
        ),
    )

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
    ) -> torch.Tensor:
        for name, t in (("A", a), ("B", b)):
            if t.dim() != 2:
                raise BadInputError(f"Gemm: input {name} must be 2-D, received shape {shape_of(t)}")
        if self.attr("transA"):
            a = a.t()
        if self.attr("transB"):
            b = b.t()
        alpha, beta = float(self.attr("alpha")), float(self.attr("beta"))
        if (
            c is not None
            and a.dtype.is_floating_point
            and a.dtype == b.dtype == c.dtype
            and a.shape[1] == b.shape[0]
            and c.dim() <= 2
            and all(
                d in (1, e)
                for d, e in zip(reversed(c.shape), (b.shape[1], a.shape[0]), strict=False)
            )
        ):
            # one fused kernel (and one backward node) for the common float case
            return torch.addmm(c, a, b, beta=beta, alpha=alpha)
        y = checked_matmul("Gemm", a, b)
        if alpha != 1.0:
            y = (y * alpha).to(a.dtype)
        if c is None:
            return y
        try:
            shape = broadcast_shapes(c.shape, y.shape)
        except RuntimeError:
            shape = None
        if shape != y.shape:
            raise BadInputError(
                f"Gemm: input C must broadcast to the product's shape {shape_of(y)}, received "
                f"shape {shape_of(c)}"
            )
        return y + (c if beta == 1.0 else (c * beta).to(c.dtype))

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        attrs = {k: v for k, v in self.attrs.items() if k != "broadcast" and v is not None}
        ins = list(inputs)
        if (len(ins) < 3 or ins[2] == "") and g.opset < 11:
            # C became optional at opset 11: before, add a zero scalar.
            zero = torch.zeros((), dtype=self.inputs[0].dtype)  # host: a serialised initializer
            ins = [*ins[:2], g.add_initializer(zero, g.fresh_name("gemm_c"))]
        if len(ins) == 3 and g.opset < 7:  # before opset 7 broadcasting C had to be asked for
            attrs["broadcast"] = 1
        g.add_node("Gemm", ins, outputs, **attrs)


class Einsum(StrictExport):
    """Einstein summation as ``torch.einsum`` (explicit, implicit and ellipsis forms)."""

    op_type = "Einsum"
    since_versions = (12, 28)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        equation = self.attr("equation")
        if not equation:
            raise BadInputError("Einsum: attribute equation is required, received none")
        equation = equation.replace(" ", "")
        if not xs or (any(x.dtype != xs[0].dtype for x in xs) and not autocast_mixes(*xs)):
            raise BadInputError(
                "Einsum: needs at least one input, all of one dtype, received dtypes "
                f"{[dtypes.dtype_name(x.dtype) for x in xs]}"
            )
        try:
            return torch.einsum(equation, *[widen(x) for x in xs]).to(xs[0].dtype)
        except RuntimeError as e:
            shapes = ", ".join(str(shape_of(x)) for x in xs)
            raise BadInputError(
                f"Einsum: equation {equation!r} does not fit inputs of shapes {shapes}: {e}"
            ) from None


class Det(StrictExport):
    """Determinants of the square matrices in the last two dimensions."""

    op_type = "Det"
    since_versions = (11, 22)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "det",
            "Determinants of the square matrices in the last two axes (ONNX ``Det``).",
            inputs=(Input("x", "a floating-point (..., M, M) tensor."),),
            returns="a (...) tensor of ``x``'s dtype.",
            raises=(("BadInputError", "``x`` is not a floating-point tensor of square matrices."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[-1] != x.shape[-2] or not dtypes.is_float(x.dtype):
            raise BadInputError(
                "Det: input X must be a floating-point tensor of square matrices (..., M, M), "
                f"received shape {shape_of(x)} and dtype {dtypes.dtype_name(x.dtype)}"
            )
        # torch has no half-precision LU on the CPU: compute in float32 and round back.
        work = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
        return torch.linalg.det(work).to(x.dtype)


class _Scan(StrictExport):
    """CumSum and CumProd: an inclusive/exclusive, forward/reverse scan along one axis."""

    output_shape = OutputShape.FROM_SHAPES
    # The axis.
    parameterising_inputs = frozenset({1})

    identity = 0

    def scan(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, axis: torch.Tensor) -> torch.Tensor:
        values = host_ints(axis)
        if values is None or len(values) != 1 or axis.dim() > 1:
            raise BadInputError(
                f"{self.op_type}: input axis must be a 0-D or 1-element integer tensor, "
                f"received {None if axis is None else shape_of(axis)}"
            )
        rank = x.dim()
        if not -rank <= values[0] < rank:
            raise BadInputError(
                f"{self.op_type}: axis must be in [{-rank}, {rank - 1}] for a {rank}-D input, "
                f"received {values[0]}"
            )
        dim = values[0] % rank
        work = widen(x)
        if self.attr("reverse"):
            work = work.flip(dim)
        y = self.scan(work, dim)
        if self.attr("exclusive") and y.shape[dim] > 0:
            first = torch.full_like(y.narrow(dim, 0, 1), self.identity)
            y = torch.cat([first, y.narrow(dim, 0, y.shape[dim] - 1)], dim)
        if self.attr("reverse"):
            y = y.flip(dim)
        return y.to(x.dtype)


class CumSum(_Scan):
    """ONNX ``CumSum``: running sums along the axis input (``exclusive``, ``reverse``)."""

    op_type = "CumSum"
    since_versions = (11, 14)
    identity = 0

    def scan(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cumsum(x, axis, dtype=x.dtype)


class CumProd(_Scan):
    """ONNX ``CumProd``: running products along the axis input (``exclusive``, ``reverse``)."""

    op_type = "CumProd"
    since_versions = (26,)
    identity = 1

    def scan(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cumprod(x, axis, dtype=x.dtype)


def einsum(equation: str, *xs: Tensor) -> Tensor:
    """Einstein summation as ``torch.einsum`` (explicit, implicit and ellipsis; ONNX ``Einsum``).

    :param equation: the subscripts, e.g. ``"bij,bjk->bik"``.
    :param xs: one tensor per operand of ``equation``.
    :returns: the result the equation describes.
    :raises BadInputError: ``equation`` is empty or does not fit the inputs' shapes.
    """
    return Einsum(equation=equation)(*xs)


def _axis_tensor(x: Tensor, axis: int) -> Tensor:
    return Tensor(data=torch.tensor(axis, dtype=torch.int64), device=x.device, requires_grad=False)


def cumsum(x: Tensor, axis: int = 0, exclusive: int = 0, reverse: int = 0) -> Tensor:
    """Running sums along ``axis`` (ONNX ``CumSum``).

    :param x: a number tensor.
    :param axis: the axis to sum along (negative counts from the end).
    :param exclusive: 1 to leave out each element itself (the first sum is 0).
    :param reverse: 1 to sum from the end towards the start.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``axis`` is out of range.
    """
    return CumSum(exclusive=exclusive, reverse=reverse)(x, _axis_tensor(x, axis))


def cumprod(x: Tensor, axis: int = 0, exclusive: int = 0, reverse: int = 0) -> Tensor:
    """Running products along ``axis`` (ONNX ``CumProd``).

    :param x: a number tensor.
    :param axis: the axis to multiply along (negative counts from the end).
    :param exclusive: 1 to leave out each element itself (the first product is 1).
    :param reverse: 1 to multiply from the end towards the start.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``axis`` is out of range.
    """
    return CumProd(exclusive=exclusive, reverse=reverse)(x, _axis_tensor(x, axis))


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` as ``numpy.matmul``: 1-D operands promoted, batch dims broadcast (ONNX ``MatMul``).

    :param a: a tensor of at least 1 axis, (..., M, K).
    :param b: a tensor of ``a``'s dtype, (..., K, N).
    :returns: the (..., M, N) product.
    :raises BadInputError: an input is 0-D, the contracted dims differ, the batch dims do not
        broadcast, or the dtypes differ.
    """
    return MatMul()(a, b)


def gemm(
    A: Tensor,
    B: Tensor,
    C: Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> Tensor:
    """``alpha * A' @ B' + beta * C``, ``A'`` and ``B'`` optionally transposed (ONNX ``Gemm``).

    :param A: a 2-D (M, K) tensor, or (K, M) with ``transA``.
    :param B: a 2-D (K, N) tensor, or (N, K) with ``transB``.
    :param C: a tensor broadcasting to (M, N), or None for no bias.
    :param alpha: the scale of the product.
    :param beta: the scale of ``C``.
    :param transA: 1 to transpose ``A`` first.
    :param transB: 1 to transpose ``B`` first.
    :returns: the (M, N) result.
    :raises BadInputError: ``A`` or ``B`` is not 2-D, the inner dims differ, or ``C`` does not
        broadcast to (M, N).
    """
    return Gemm(alpha=alpha, beta=beta, transA=transA, transB=transB)(A, B, C)


def det(x: Tensor) -> Tensor:
    """Determinants of the square matrices in the last two axes (ONNX ``Det``).

    :param x: a floating-point (..., M, M) tensor.
    :returns: a (...) tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is not a floating-point tensor of square matrices.
    """
    return Det()(x)
