"""Convolutions: Conv, ConvTranspose, ConvInteger, DeformConv, Col2Im (1-D/2-D/3-D, dilation,
groups, asymmetric pads, auto_pad).

Padding is resolved to explicit begin/end amounts (see :mod:`sonnx.operators.conv.windows`) and
applied with ``F.pad`` before a torch convolution with ``padding=0``, so asymmetric and SAME pads
need no special kernels. DeformConv and Col2Im live in :mod:`sonnx.operators.conv.sampling`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.tracing import NotTraceableError, value_checks
from sonnx.errors import BadInputError
from sonnx.operators.conv.sampling import Col2Im, DeformConv, col2im, deform_conv2d
from sonnx.operators.conv.windows import (
    CONV,
    CONV_TRANSPOSE,
    auto_pad_mode,
    check_spatial_rank,
    check_window,
    effective_kernel,
    explicit_pads,
    forward_pads,
    one_point,
    require_opset,
    spatial_ints,
    split_total,
    torch_pad,
    user_ints,
    user_pads,
)
from sonnx.precision import autocast_mixes
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "Col2Im",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "DeformConv",
    "col2im",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "deform_conv2d",
]


def _check_kernel_attr(op: Operator, kernel: Sequence[int]) -> None:
    """kernel_shape is optional in ONNX (W's shape is authoritative) but must agree if given."""
    given = op.attr("kernel_shape")
    if given is not None and len(given) > 0 and [int(k) for k in given] != list(kernel):
        raise BadInputError(
            f"{op.op_type}: attribute kernel_shape {list(given)} does not match the weight's "
            f"spatial shape {list(kernel)}"
        )


def _group(op: Operator) -> int:
    group = int(op.attr("group") or 1)
    if group < 1:
        raise BadInputError(f"{op.op_type}: attribute group must be >= 1, received {group}")
    return group


def _same_dtype(op_type: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> None:
    tensors = [x, w] if b is None else [x, w, b]
    types = [t.dtype for t in tensors]
    if len(set(types)) > 1 and not autocast_mixes(*tensors):
        shown = ", ".join(str(t) for t in types)
        raise BadInputError(
            f"{op_type}: inputs X, W and B must share one element type, received {shown}"
        )


def _bias_shape(op_type: str, b: torch.Tensor | None, channels: int) -> None:
    if b is not None and tuple(b.shape) != (channels,):
        raise BadInputError(
            f"{op_type}: input B must have shape ({channels},) (one value per output channel), "
            f"received shape {tuple(b.shape)}"
        )


def conv_forward(
    op: Operator, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None
) -> torch.Tensor:
    """Conv's computation: resolve pads, run the torch convolution (zero-padding first when
    the pads are asymmetric, which torch's convolutions cannot express).

    The geometry found for the last input signature is kept on ``op`` (outside graph tracing,
    where sizes may be symbols): an imported graph runs one operator object many times on the
    same shapes, and the checks and pad arithmetic cost about as much as a small convolution.
    """
    kept = value_checks()
    if not kept and x.dtype == torch.float64 and x.device.type == "cpu":
        # torch 2.13's inductor hands every CPU convolution with a constant weight to oneDNN
        # (mkldnn._convolution_pointwise), which takes no float64: the compiled graph would
        # fail at its first run. QLinearConv and ConvInteger accumulate in float64.
        raise NotTraceableError("inductor would hand its float64 convolution to oneDNN")
    signature = (
        (x.shape, w.shape, x.dtype, w.dtype, None if b is None else (b.shape, b.dtype))
        if kept
        else None
    )
    last = getattr(op, "_conv_geometry", None)
    if last is not None and kept and last[0] == signature:
        n, strides, pads, dilations, group = last[1]
    else:
        n, strides, pads, dilations, group = _conv_geometry(op, x, w, b)
        if kept:
            op._conv_geometry = (signature, (n, strides, pads, dilations, group))
    if pads[:n] == pads[n:]:  # symmetric: torch pads inside the kernel, no extra copy
        if group == 1 and not any(pads) and one_point(x, w):
            return _as_product(x, w, b)
        return CONV[n](x, w, b, strides, pads[:n], dilations, group)
    x = F.pad(x, torch_pad(pads[:n], pads[n:]))
    return CONV[n](x, w, b, strides, 0, dilations, group)


def _as_product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """An unpadded 1x1 convolution of a one-point input as the matrix product it is: torch's
    convolutions (oneDNN's on the CPU) spend ~50 us per call setting up what a GEMM of a few
    thousand values does in a few, in eager runs and in compiled graphs alike (where the
    product becomes a plain GEMM: see :mod:`sonnx.runtime.plain_linears`)."""
    rows = F.linear(x.reshape(x.shape[0], -1), w.reshape(w.shape[0], -1), b)
    return rows.reshape(*rows.shape, *x.shape[2:])


def _conv_geometry(
    op: Operator, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None
) -> tuple[int, list[int], list[int], list[int], int]:
    """The checked spatial rank, strides, pads (begins, then ends), dilations and group of
    ``op`` on these inputs (BadInputError naming what does not fit)."""
    n = check_spatial_rank(op.op_type, "X", x)
    if w.dim() != x.dim():
        raise BadInputError(
            f"{op.op_type}: input W must have the rank of X ({x.dim()}-D: M, C/group, "
            f"kernel...), received shape {tuple(w.shape)}"
        )
    group = _group(op)
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group != 0:
        raise BadInputError(
            f"{op.op_type}: X has {x.shape[1]} channels, so with group={group} W must have shape "
            f"(M, {x.shape[1] // group}, ...) with M divisible by {group}, received W shape "
            f"{tuple(w.shape)}"
        )
    _bias_shape(op.op_type, b, w.shape[0])
    _same_dtype(op.op_type, x, w, b)
    kernel = list(w.shape[2:])
    _check_kernel_attr(op, kernel)
    strides = spatial_ints(op, "strides", n, 1)
    dilations = spatial_ints(op, "dilations", n, 1)
    sizes = list(x.shape[2:])
    pads = forward_pads(op, sizes, kernel, strides, dilations)
    out = [
        (size + pads[i] + pads[n + i] - k) // s + 1
        for i, (size, k, s) in enumerate(
            zip(sizes, effective_kernel(kernel, dilations), strides, strict=True)
        )
    ]
    check_window(op.op_type, out, sizes)
    return n, strides, pads, dilations, group


class Conv(Operator):
    """ONNX Conv: X (N, C, spatial...), W (M, C/group, kernel...), optional B (M,)."""

    op_type = "Conv"
    since_versions = (1, 11, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(
        self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
    ) -> torch.Tensor:
        return conv_forward(self, x, w, b)


class ConvInteger(Operator):
    """ONNX ConvInteger: int8/uint8 convolution of zero-point-shifted operands, int32 result.

    Computed in float64, which is exact for every sum an int32 result can hold.
    """

    op_type = "ConvInteger"
    since_versions = (10,)
    output_shape = OutputShape.FROM_SHAPES
    parameterising_inputs = frozenset({2, 3})

    def forward(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        x_zero_point: torch.Tensor | None = None,
        w_zero_point: torch.Tensor | None = None,
    ) -> torch.Tensor:
        for name, t in (("x", x), ("w", w)):
            if t.dtype not in (torch.int8, torch.uint8):
                raise BadInputError(
                    f"ConvInteger: input {name} must be int8 or uint8, received "
                    f"{dtype_name(t.dtype)}"
                )
        xf = x.to(torch.float64)
        wf = w.to(torch.float64)
        if x_zero_point is not None:
            if x_zero_point.numel() != 1:
                raise BadInputError(
                    "ConvInteger: input x_zero_point must be a scalar (one zero point for x), "
                    f"received shape {tuple(x_zero_point.shape)}"
                )
            xf = xf - x_zero_point.to(torch.float64).reshape(())
        if w_zero_point is not None:
            # A scalar zero point, or one per output channel (axis 0 of W).
            zp = w_zero_point.to(torch.float64)
            wf = wf - (zp.reshape(()) if zp.numel() == 1 else zp.reshape(-1, *[1] * (w.dim() - 1)))
        return torch.round(conv_forward(self, xf, wf, None)).to(torch.int32)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        require_opset(g, self.op_type, 10)
        super().export(g, inputs, outputs)


class ConvTranspose(Operator):
    """ONNX ConvTranspose: X (N, C, spatial...), W (C, M/group, kernel...), optional B (M,).

    Runs the unpadded torch transposed convolution (full output ``stride * (in - 1) +
    dilated_kernel``), then crops the begin/end pads and appends output_padding with one
    ``F.pad`` (so any output_padding works, not only those torch accepts); B is added by the
    convolution, or after the pad when that appends (the appended values get B too).
    With output_shape (or SAME_*: ``in * stride``) the pads follow from the requested size; an
    output larger than the full one is extended with zeros at the end, as onnxruntime does.
    """

    op_type = "ConvTranspose"
    since_versions = (1, 11, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(
        self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
    ) -> torch.Tensor:
        n = check_spatial_rank(self.op_type, "X", x)
        group = _group(self)
        if w.dim() != x.dim() or w.shape[0] != x.shape[1] or x.shape[1] % group != 0:
            raise BadInputError(
                f"ConvTranspose: X has {x.shape[1]} channels, so W must be {x.dim()}-D with shape "
                f"({x.shape[1]}, M/group, kernel...) and group={group} must divide "
                f"{x.shape[1]}, received W shape {tuple(w.shape)}"
            )
        _bias_shape(self.op_type, b, w.shape[1] * group)
        _same_dtype(self.op_type, x, w, b)
        kernel = list(w.shape[2:])
        _check_kernel_attr(self, kernel)
        strides = spatial_ints(self, "strides", n, 1)
        dilations = spatial_ints(self, "dilations", n, 1)
        extra = spatial_ints(self, "output_padding", n, 0)
        sizes = list(x.shape[2:])
        full = [
            s * (i - 1) + k
            for s, i, k in zip(strides, sizes, effective_kernel(kernel, dilations), strict=True)
        ]
        begins, ends = self._pads(n, sizes, strides, full, extra)
        after = [e - p for e, p in zip(extra, ends, strict=True)]
        # B inside the convolution where the output only crops the full one: one kernel, and
        # no separate add for inductor's binary folding (see sonnx.runtime.transposed_convs).
        inside = b is not None and all(p >= 0 for p in begins) and all(a <= 0 for a in after)
        y = CONV_TRANSPOSE[n](x, w, b if inside else None, strides, 0, 0, group, dilations)
        if any(begins) or any(after):  # F.pad copies the output even when it pads nothing
            y = F.pad(y, torch_pad([-p for p in begins], after))
        if b is not None and not inside:
            y = y + b.reshape(1, -1, *([1] * n))
        return y

    def _pads(
        self,
        n: int,
        sizes: list[int],
        strides: list[int],
        full: list[int],
        extra: list[int],
    ) -> tuple[list[int], list[int]]:
        """Begin and end amounts cropped from the full output (negative: extended)."""
        mode = auto_pad_mode(self)
        wanted = self.attr("output_shape")
        if wanted is not None and len(wanted) > 0:
            target = [int(v) for v in wanted][-n:]
        elif mode in ("SAME_UPPER", "SAME_LOWER"):
            target = [i * s for i, s in zip(sizes, strides, strict=True)]
        else:
            pads = [0] * (2 * n) if mode == "VALID" else explicit_pads(self, n)
            return pads[:n], pads[n:]
        if len(target) != n:
            raise BadInputError(
                f"ConvTranspose: attribute output_shape must give the {n} spatial sizes, "
                f"received {list(wanted)}"
            )
        begins, ends = [], []
        for f, e, t in zip(full, extra, target, strict=True):
            total = f + e - t
            begin, end = split_total(total, mode) if total >= 0 else (0, total)
            begins.append(begin)
            ends.append(end)
        return begins, ends


# ---- SINGA-named functions ------------------------------------------------------------------


def _conv_nd(
    n: int,
    x: Tensor,
    W: Tensor,
    b: Tensor | None,
    stride: int | Sequence[int],
    padding: int | Sequence[int],
    dilation: int | Sequence[int],
    group: int,
) -> Tensor:
    name = f"conv{n}d"
    op = Conv(
        strides=user_ints(name, "stride", stride, n),
        pads=user_pads(name, padding, n),
        dilations=user_ints(name, "dilation", dilation, n),
        group=group,
    )
    return op(x, W) if b is None else op(x, W, b)


def conv1d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
) -> Tensor:
    """1-D convolution of x (N, C, L) with W (M, C/group, k); padding as in :func:`conv2d`.

    :param x: the (N, C, L) input.
    :param W: the (M, C/group, k) weights.
    :param b: the (M,) bias, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups (C and M divisible by it).
    :returns: the (N, M, ...) output (ONNX Conv).
    :raises BadInputError: the ranks or channel counts of ``x`` and ``W`` do not fit, a size list
        has the wrong length, or the kernel does not fit the padded input.
    """
    return _conv_nd(1, x, W, b, stride, padding, dilation, group)


def conv2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
) -> Tensor:
    """2-D convolution of x (N, C, H, W) with W (M, C/group, kh, kw) and optional bias b (M,).

    ``padding`` is an int, one value per spatial axis, or ONNX-style begins then ends.

    :param x: the (N, C, H, W) input.
    :param W: the (M, C/group, kh, kw) weights.
    :param b: the (M,) bias, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups (C and M divisible by it).
    :returns: the (N, M, ...) output (ONNX Conv).
    :raises BadInputError: the ranks or channel counts of ``x`` and ``W`` do not fit, a size list
        has the wrong length, or the kernel does not fit the padded input.
    """
    return _conv_nd(2, x, W, b, stride, padding, dilation, group)


def conv3d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
) -> Tensor:
    """3-D convolution of x (N, C, D, H, W) with W (M, C/group, kd, kh, kw).

    :param x: the (N, C, D, H, W) input.
    :param W: the (M, C/group, kd, kh, kw) weights.
    :param b: the (M,) bias, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups (C and M divisible by it).
    :returns: the (N, M, ...) output (ONNX Conv).
    :raises BadInputError: the ranks or channel counts of ``x`` and ``W`` do not fit, a size list
        has the wrong length, or the kernel does not fit the padded input.
    """
    return _conv_nd(3, x, W, b, stride, padding, dilation, group)


def _conv_transpose_nd(
    n: int,
    x: Tensor,
    W: Tensor,
    b: Tensor | None,
    stride: int | Sequence[int],
    padding: int | Sequence[int],
    output_padding: int | Sequence[int],
    dilation: int | Sequence[int],
    group: int,
) -> Tensor:
    name = f"conv_transpose{n}d"
    op = ConvTranspose(
        strides=user_ints(name, "stride", stride, n),
        pads=user_pads(name, padding, n),
        output_padding=user_ints(name, "output_padding", output_padding, n),
        dilations=user_ints(name, "dilation", dilation, n),
        group=group,
    )
    return op(x, W) if b is None else op(x, W, b)


def conv_transpose1d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
) -> Tensor:
    """1-D transposed convolution; arguments as in :func:`conv_transpose2d`.

    :param x: the (N, C, L) input.
    :param W: the (C, M/group, k) weights.
    :param b: the (M,) bias, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: what to crop from the full output: an int, per axis, or begins then ends.
    :param output_padding: what to add at the end of each spatial axis: an int or one per axis.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups.
    :returns: the (N, M, ...) output (ONNX ConvTranspose).
    :raises BadInputError: the shapes of ``x`` and ``W`` do not fit, or a size list has the wrong
        length.
    """
    return _conv_transpose_nd(1, x, W, b, stride, padding, output_padding, dilation, group)


def conv_transpose2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
) -> Tensor:
    """2-D transposed convolution of x (N, C, H, W) with W (C, M/group, kh, kw).

    ``padding`` is cropped from the full output (an int, per axis, or begins then ends);
    ``output_padding`` is appended at the end of each spatial axis.

    :param x: the (N, C, H, W) input.
    :param W: the (C, M/group, kh, kw) weights.
    :param b: the (M,) bias, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: what to crop from the full output: an int, per axis, or begins then ends.
    :param output_padding: what to add at the end of each spatial axis: an int or one per axis.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups.
    :returns: the (N, M, ...) output (ONNX ConvTranspose).
    :raises BadInputError: the shapes of ``x`` and ``W`` do not fit, or a size list has the wrong
        length.
    """
    return _conv_transpose_nd(2, x, W, b, stride, padding, output_padding, dilation, group)


def conv_transpose3d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
) -> Tensor:
    """3-D transposed convolution; arguments as in :func:`conv_transpose2d`.

    :param x: the (N, C, D, H, W) input.
    :param W: the (C, M/group, kd, kh, kw) weights.
    :param b: the (M,) bias, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: what to crop from the full output: an int, per axis, or begins then ends.
    :param output_padding: what to add at the end of each spatial axis: an int or one per axis.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups.
    :returns: the (N, M, ...) output (ONNX ConvTranspose).
    :raises BadInputError: the shapes of ``x`` and ``W`` do not fit, or a size list has the wrong
        length.
    """
    return _conv_transpose_nd(3, x, W, b, stride, padding, output_padding, dilation, group)
