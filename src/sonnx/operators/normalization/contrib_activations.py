"""onnxruntime's fused activations and bias adds: Gelu (com.microsoft), BiasGelu, FastGelu,
QuickGelu, BiasAdd and BiasSplitGelu (the last two CUDA-only in onnxruntime; here they follow
``ContribOperators.md``). Gradients come from torch autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sonnx.errors import BadInputError
from sonnx.operators.normalization.common import check_float
from sonnx.operators.normalization.contrib_base import ContribNormOperator, check_vector

__all__: list[str] = []


def _plus_bias(op: str, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x + bias`` with bias a vector over x's last axis (None: x)."""
    check_float(op, "X", x)
    if bias is None:
        return x
    if x.dim() == 0:
        raise BadInputError(f"{op}: input X must be at least 1-D with a bias, received a scalar")
    check_vector(op, "bias", bias, x.shape[-1])
    return x + bias


class Gelu(ContribNormOperator):
    """``0.5 * X * (1 + erf(X / sqrt(2)))``: com.microsoft's Gelu, before ONNX had one."""

    op_type = "Gelu"
    since_versions = (1,)

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        check_float(self.op_type, "X", x)
        return F.gelu(x)


class BiasGelu(ContribNormOperator):
    """Gelu (the erf form) of ``A + B``, B a vector over A's last axis."""

    op_type = "BiasGelu"
    since_versions = (1,)

    def forward(self, a, b) -> torch.Tensor:  # type: ignore[override]
        return F.gelu(_plus_bias(self.op_type, a, b))


class FastGelu(ContribNormOperator):
    """Gelu's tanh approximation of ``X (+ bias)``:
    ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``."""

    op_type = "FastGelu"
    since_versions = (1,)

    def forward(self, x, bias=None) -> torch.Tensor:  # type: ignore[override]
        return F.gelu(_plus_bias(self.op_type, x, bias), approximate="tanh")


class QuickGelu(ContribNormOperator):
    """``X * sigmoid(alpha * X)`` (CLIP's activation, alpha 1.702 by default)."""

    op_type = "QuickGelu"
    since_versions = (1,)
    defaults = {"alpha": 1.702}

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        check_float(self.op_type, "X", x)
        return x * torch.sigmoid(float(self.attr("alpha")) * x)


def _check_3d(op: str, x: torch.Tensor) -> None:
    check_float(op, "X", x)
    if x.dim() != 3:
        raise BadInputError(f"{op}: input X must be 3-D (N, S, C), received shape {tuple(x.shape)}")


class BiasAdd(ContribNormOperator):
    """``X + bias + skip``: X and skip (N, S, C), bias (C,)."""

    op_type = "BiasAdd"
    since_versions = (1,)

    def forward(self, x, bias, skip) -> torch.Tensor:  # type: ignore[override]
        _check_3d(self.op_type, x)
        check_float(self.op_type, "skip", skip)
        if skip.shape != x.shape:
            raise BadInputError(
                f"{self.op_type}: input skip must have X's shape {tuple(x.shape)}, received "
                f"shape {tuple(skip.shape)}"
            )
        return _plus_bias(self.op_type, x, bias) + skip


class BiasSplitGelu(ContribNormOperator):
    """``left * Gelu(right)`` where ``X + bias`` (N, S, D) splits into halves on its last axis;
    Y (N, S, D / 2)."""

    op_type = "BiasSplitGelu"
    since_versions = (1,)

    def forward(self, x, bias) -> torch.Tensor:  # type: ignore[override]
        _check_3d(self.op_type, x)
        if x.shape[-1] % 2:
            raise BadInputError(
                f"{self.op_type}: input X's last axis must be even to split in halves, "
                f"received shape {tuple(x.shape)}"
            )
        left, right = _plus_bias(self.op_type, x, bias).chunk(2, dim=-1)
        return left * F.gelu(right)
