"""com.microsoft fused float products: FusedMatMul, FusedGemm, FusedConv and NhwcConv.

onnxruntime's graph optimizer writes the first three when it folds a Transpose or a scalar Mul
into a MatMul, or an activation (and for Conv, an added tensor) into a Gemm or Conv; its
transformer optimizer writes NhwcConv (channels-last Conv) for diffusion models. Each runs here
as the unfused sequence of torch operations, so gradients follow the plain operators'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from sonnx.errors import BadInputError
from sonnx.operators.contrib import ContribOperator
from sonnx.operators.conv.conv import conv_forward
from sonnx.operators.quantize.contrib_nbits import ContribQuantOperator

__all__ = ["FusedConv", "FusedGemm", "FusedMatMul", "NhwcConv"]


def _transposed_batch(x: torch.Tensor) -> torch.Tensor:
    """``transBatch``: x laid out [d0, batch..., d_last] read as [batch..., d0, d_last]."""
    rank = x.dim()
    return x.permute(*range(1, rank - 1), 0, rank - 1)


class FusedMatMul(ContribQuantOperator):
    """``Y = alpha * op(A) @ op(B)``, numpy-style broadcast batches.

    ``transBatchA`` (rank >= 3) first moves A's leading dimension to the row position, then
    ``transA`` swaps the last two; likewise for B.
    """

    op_type = "FusedMatMul"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {
        "alpha": 1.0,
        "transA": 0,
        "transB": 0,
        "transBatchA": 0,
        "transBatchB": 0,
    }

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = self._operand("A", a, "transBatchA", "transA")
        b = self._operand("B", b, "transBatchB", "transB")
        if a.shape[-1] != b.shape[-2]:
            raise BadInputError(
                f"FusedMatMul node {self.name!r}: the transposed A {tuple(a.shape)} and B "
                f"{tuple(b.shape)} do not agree on the inner dimension"
            )
        return torch.matmul(a, b) * float(self.attr("alpha"))

    def _operand(self, name: str, x: torch.Tensor, batch: str, swap: str) -> torch.Tensor:
        if x.dim() < 2:
            raise BadInputError(
                f"FusedMatMul node {self.name!r}: input {name} must have rank >= 2, received "
                f"shape {tuple(x.shape)}"
            )
        if self.attr(batch) and x.dim() > 2:
            x = _transposed_batch(x)
        return x.transpose(-1, -2) if self.attr(swap) else x


#: The parameters each activation reads, in order (FusedGemm's ``activation_<name>``
#: attributes; FusedConv's ``activation_params`` list).
PARAMETERS = {
    "LeakyRelu": ("alpha",),
    "Clip": ("min", "max"),
    "HardSigmoid": ("alpha", "beta"),
    "Elu": ("alpha",),
    "Selu": ("alpha", "gamma"),
    "ThresholdedRelu": ("alpha",),
}


def _activation(
    op: ContribOperator, name: str | None, params: Sequence[float]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The element-wise activation ``name`` (None: none) with its parameters in the order of
    :data:`PARAMETERS`."""
    if name is None:
        return lambda x: x
    needed = PARAMETERS.get(name, ())
    if len(params) < len(needed):
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: activation {name} needs its parameters "
            f"{list(needed)}, received {list(params)}"
        )
    p = [float(v) for v in params]
    table: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "Relu": torch.relu,
        "Tanh": torch.tanh,
        "Sigmoid": torch.sigmoid,
        "LeakyRelu": lambda x: F.leaky_relu(x, p[0]),
        "Clip": lambda x: x.clamp(p[0], p[1]),
        "HardSigmoid": lambda x: (p[0] * x + p[1]).clamp(0, 1),
        "Elu": lambda x: F.elu(x, p[0]),
        "Selu": lambda x: p[1] * torch.where(x > 0, x, p[0] * torch.expm1(x)),
        "Softplus": F.softplus,
        "Softsign": F.softsign,
        "ThresholdedRelu": lambda x: torch.where(x > p[0], x, torch.zeros_like(x)),
    }
    if name not in table:
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: attribute activation must be one of "
            f"{sorted(table)}, received {name!r}"
        )
    return table[name]


class FusedGemm(ContribQuantOperator):
    """Gemm followed by an activation: ``activation(alpha * op(A) @ op(B) + beta * C)``.

    The activation's parameters are the attributes ``activation_alpha``, ``activation_beta``
    or ``activation_gamma`` that it reads (see :data:`PARAMETERS`).
    """

    op_type = "FusedGemm"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {
        "alpha": 1.0,
        "beta": 1.0,
        "transA": 0,
        "transB": 0,
    }

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
    ) -> torch.Tensor:
        for name, t in (("A", a), ("B", b)):
            if t.dim() != 2:
                raise BadInputError(
                    f"FusedGemm node {self.name!r}: input {name} must be 2-D, received shape "
                    f"{tuple(t.shape)}"
                )
        a = a.t() if self.attr("transA") else a
        b = b.t() if self.attr("transB") else b
        y = torch.matmul(a, b) * float(self.attr("alpha"))
        if c is not None:
            y = y + c * float(self.attr("beta"))
        name = self.attr("activation")
        wanted = (f"activation_{p}" for p in PARAMETERS.get(name, ()))
        params = [self.attrs[n] for n in wanted if n in self.attrs]
        return _activation(self, name, params)(y)


class FusedConv(ContribQuantOperator):
    """Conv, plus an optional tensor Z of the output's shape, then an activation:
    ``activation(Conv(X, W, B) + Z)``; ``activation_params`` in onnxruntime's order (LeakyRelu:
    alpha; Clip: min, max; HardSigmoid: alpha, beta)."""

    op_type = "FusedConv"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "group": 1}

    def forward(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        b: torch.Tensor | None = None,
        z: torch.Tensor | None = None,
    ) -> torch.Tensor:
        y = conv_forward(self, x, w, b)
        if z is not None:
            if z.shape != y.shape:
                raise BadInputError(
                    f"FusedConv node {self.name!r}: input Z must have the convolution's output "
                    f"shape {tuple(y.shape)}, received {tuple(z.shape)}"
                )
            y = y + z
        name = self.attr("activation")
        return _activation(self, name, self.attr("activation_params") or ())(y)


class NhwcConv(ContribQuantOperator):
    """Conv on channels-last tensors, as onnxruntime's transformer optimizer writes it
    (``FusionNhwcConv``, for its CUDA kernel; onnxruntime has no CPU kernel): X (N, spatial...,
    C), W (M, kernel..., C / group), B (M,), Y (N, spatial..., M); Conv's attributes."""

    op_type = "NhwcConv"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "group": 1}

    def forward(
        self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
    ) -> torch.Tensor:
        if x.dim() < 3 or w.dim() != x.dim():
            raise BadInputError(
                f"NhwcConv node {self.name!r}: X (N, spatial..., C) and W (M, kernel..., C / "
                f"group) must have the same rank, at least 3, received X "
                f"{tuple(x.shape)} and W {tuple(w.shape)}"
            )
        y = conv_forward(self, x.movedim(-1, 1), w.movedim(-1, 1), b)
        return y.movedim(1, -1)
