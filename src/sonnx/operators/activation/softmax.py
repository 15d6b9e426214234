"""The softmax family: Softmax, LogSoftmax and Hardmax.

They changed meaning at opset 13 (before: coerce the input to 2-D at ``axis``; since: one
axis), so they honour ``self.version`` and translate on export. Each runs with torch functions,
so torch autograd provides the gradients.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    FLOAT_X,
    LIKE_X,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.operators.elementwise.base import require_float
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["Hardmax", "LogSoftmax", "Softmax", "hardmax", "log_softmax", "softmax"]


class _AxisNormalizer(Operator):
    """Softmax, LogSoftmax and Hardmax: one computation along one axis.

    Before opset 13 these operators flatten the input to 2-D at ``axis`` and normalise each
    row of that matrix; since opset 13 they normalise along ``axis`` alone. ``self.version``
    says which meaning applies (None: the newest).
    """

    output_shape = OutputShape.FROM_SHAPES

    def along(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        raise NotImplementedError

    def _legacy(self) -> bool:
        return self.version is not None and self.version < 13

    def _axis(self, rank: int) -> int:
        axis = int(self.attr("axis"))
        if not -rank <= axis < max(rank, 1):
            raise BadInputError(
                f"{self.op_type}: attribute axis must be in [{-rank}, {rank - 1}] for a "
                f"{rank}-D input, received {axis}"
            )
        return axis % rank if rank else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_float(self.op_type, "input", x)
        axis = self._axis(x.dim())
        if x.dim() == 0:
            return self.along(x.reshape(1), 0).reshape(())
        if self._legacy():
            rows = math.prod(x.shape[:axis])
            return self.along(x.reshape(rows, -1), 1).reshape(x.shape)
        return self.along(x, axis)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        rank = self.inputs[0].ndim()
        axis = self._axis(rank)
        if self._legacy() == (g.opset < 13) or axis == rank - 1:
            # Same meaning at the target opset (on the last axis both meanings coincide).
            g.add_node(self.op_type, inputs, outputs, axis=axis)
        elif self._legacy():
            # 2-D coercion written with opset-13 operators: Flatten, normalise rows, Reshape.
            shape, flat, rows = (g.fresh_name(f"{self.op_type.lower()}_{s}") for s in "sfr")
            g.add_node("Shape", [inputs[0]], [shape])
            g.add_node("Flatten", [inputs[0]], [flat], axis=axis)
            g.add_node(self.op_type, [flat], [rows], axis=1)
            g.add_node("Reshape", [rows, shape], outputs)
        else:
            # One axis written with old operators: move the axis last, where both agree.
            perm = [d for d in range(rank) if d != axis] + [axis]
            inverse = list(np.argsort(perm).tolist())
            moved, done = g.fresh_name("moved"), g.fresh_name("normalised")
            g.add_node("Transpose", [inputs[0]], [moved], perm=perm)
            g.add_node(self.op_type, [moved], [done], axis=rank - 1)
            g.add_node("Transpose", [done], outputs, perm=inverse)


_HALF = frozenset({torch.float16, torch.bfloat16})


def _half_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax of a 16-bit float tensor rounded after each step, as ONNX's reference does.

    torch's fused kernel rounds only once, which in 16 bits often lands one unit in the last
    place away from what ONNX's conformance data expects.
    """
    shifted = x - x.amax(dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim, keepdim=True)


class Softmax(_AxisNormalizer):
    """ONNX ``Softmax``: ``exp(x) / sum(exp(x))`` along ``axis``."""

    op_type = "Softmax"
    since_versions = (1, 11, 13)

    singa_functions = (
        SingaFunction(
            "softmax",
            "Softmax along ``axis`` (SINGA's default axis 1 is the class axis of (N, C) inputs).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            keywords=(Keyword("axis", "the axis to normalise along.", default=1),),
            raises=(("BadInputError", "``x`` is not floating-point or ``axis`` is out of range."),),
        ),
    )

    def along(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        return _half_softmax(x, dim) if x.dtype in _HALF else torch.softmax(x, dim)


class LogSoftmax(_AxisNormalizer):
    """ONNX ``LogSoftmax``: the logarithm of the softmax along ``axis``, computed stably."""

    op_type = "LogSoftmax"
    since_versions = (1, 11, 13)

    singa_functions = (
        SingaFunction(
            "log_softmax",
            "The logarithm of the softmax along ``axis``, computed stably (ONNX LogSoftmax).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            keywords=(Keyword("axis", "the axis to normalise along.", default=1),),
            raises=(("BadInputError", "``x`` is not floating-point or ``axis`` is out of range."),),
        ),
    )

    def along(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        if x.dtype in _HALF:
            return torch.log(_half_softmax(x, dim))
        return torch.log_softmax(x, dim)


class Hardmax(_AxisNormalizer):
    """1 at the first maximum along the axis, 0 elsewhere (no gradient flows through)."""

    op_type = "Hardmax"
    since_versions = (1, 11, 13)

    singa_functions = (
        SingaFunction(
            "hardmax",
            "1 at the first maximum along ``axis``, 0 elsewhere (ONNX Hardmax; no gradient).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            keywords=(Keyword("axis", "the axis to search along."),),
            raises=(("BadInputError", "``x`` is not floating-point or ``axis`` is out of range."),),
        ),
    )

    def along(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        if x.numel() == 0:
            return x.detach().clone()
        index = torch.argmax(x, dim=dim, keepdim=True)
        return torch.zeros_like(x).detach().scatter_(dim, index, 1.0)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def softmax(x: Tensor, axis: int = 1) -> Tensor:
    """Softmax along ``axis`` (SINGA's default axis 1 is the class axis of (N, C) inputs).

    :param x: a floating-point tensor.
    :param axis: the axis to normalise along.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or ``axis`` is out of range.
    """
    return Softmax(axis=axis)(x)


def log_softmax(x: Tensor, axis: int = 1) -> Tensor:
    """The logarithm of the softmax along ``axis``, computed stably (ONNX LogSoftmax).

    :param x: a floating-point tensor.
    :param axis: the axis to normalise along.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or ``axis`` is out of range.
    """
    return LogSoftmax(axis=axis)(x)


def hardmax(x: Tensor, axis: int = -1) -> Tensor:
    """1 at the first maximum along ``axis``, 0 elsewhere (ONNX Hardmax; no gradient).

    :param x: a floating-point tensor.
    :param axis: the axis to search along.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or ``axis`` is out of range.
    """
    return Hardmax(axis=axis)(x)
