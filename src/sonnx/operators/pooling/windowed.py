"""Pooling: MaxPool, AveragePool, LpPool, global pooling, MaxUnpool (1-D/2-D/3-D, ceil_mode,
dilation, count_include_pad).

ONNX pooling differs from torch's in ways torch's ``padding=`` argument cannot express
(asymmetric and SAME pads, dilated average pooling, which windows ceil_mode keeps), so each
operator computes the ONNX output size itself (:func:`window`; that and the strided-view pooling
are in :mod:`sonnx.operators.pooling.windows`), pads the input with ``F.pad`` to exactly the
extent the windows cover, and then pools with ``padding=0``:

* MaxPool pads with -inf and runs torch's max pooling (its indices are converted to ONNX's
  flattened ones), or, in inference on the CPU over a 2-D or 3-D input that is not in
  channels-last order, takes running maxima of strided views (:func:`separable_max`).
* AveragePool and LpPool sum windows with a ones-kernel convolution (which handles dilation) and
  divide by a window count computed the same way from a mask, so windows that start in the
  padding, count_include_pad and the ceil_mode overhang all follow ONNX; AveragePool with
  every window inside the input runs torch's average pooling or, where MaxPool takes running
  maxima of views, running sums.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import OpsetTooOldError
from sonnx.operators.conv.windows import user_ints, user_pads
from sonnx.operators.pooling.whole import (
    GlobalAveragePool,
    GlobalLpPool,
    GlobalMaxPool,
    MaxUnpool,
    globalaveragepool,
    globallppool,
    globalmaxpool,
    lp_export_p,
    max_unpool,
)
from sonnx.operators.pooling.windows import (
    Window,
    separable_max,
    separable_pays,
    whole_windows,
    window,
    window_reduce,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "AveragePool",
    "GlobalAveragePool",
    "GlobalLpPool",
    "GlobalMaxPool",
    "LpPool",
    "MaxPool",
    "MaxUnpool",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "globalaveragepool",
    "globallppool",
    "globalmaxpool",
    "lp_pool2d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_unpool",
]


_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _torch_pool(
    win: Window, x: torch.Tensor, want_indices: bool, pools: dict, **options: Any
) -> torch.Tensor | None:
    """torch's own pooling where it computes exactly ONNX's windows, which saves padding a
    copy of the input; None where it does not (the caller then pads explicitly)."""
    arguments = win.torch_arguments
    if arguments is None or want_indices or x.dtype not in (torch.float32, torch.float64):
        return None
    if pools is _MAX_POOL:
        options["dilation"] = win.dilations
    padding, ceil = arguments
    out = pools[win.n](x, win.kernel, win.strides, padding, ceil_mode=ceil, **options)
    return out if list(out.shape[2:]) == win.out else None


class MaxPool(Operator):
    """ONNX MaxPool, with the optional Indices output (flattened over the whole input tensor,
    row-major or, with storage_order=1, column-major over the spatial axes).

    Integer inputs are pooled in float64, exact for int8/uint8 (and all but huge int64 values).
    """

    op_type = "MaxPool"
    since_versions = (1, 8, 10, 11, 12, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        win = window(self, x)
        work = x if x.dtype.is_floating_point else x.to(torch.float64)
        want_indices = (self.requested_outputs or 1) > 1
        if not want_indices and separable_pays(win, work):
            pooled = separable_max(win, work)
            return pooled if work is x else pooled.to(x.dtype)
        fast = _torch_pool(win, work, want_indices, _MAX_POOL)
        if fast is not None:
            return fast if work is x else fast.to(x.dtype)
        padded = win.pad(work, float("-inf"))
        result = _MAX_POOL[win.n](
            padded, win.kernel, win.strides, 0, win.dilations, return_indices=want_indices
        )
        if not want_indices:
            return result.to(x.dtype)
        values, where = result
        return values.to(x.dtype), self._onnx_indices(where, win, padded.shape[2:], x.shape)

    def _onnx_indices(
        self, where: torch.Tensor, win: Window, padded: Sequence[int], shape: Sequence[int]
    ) -> torch.Tensor:
        """torch's per-plane indices into the padded input -> ONNX's indices into X."""
        coords = []
        rest = where
        for size in reversed(padded):
            coords.append(rest % size)
            rest = rest // size
        coords = [c - b for c, b in zip(reversed(coords), win.begins, strict=True)]
        spatial = list(shape[2:])
        plane = 1
        for s in spatial:
            plane *= s
        order = range(win.n) if int(self.attr("storage_order") or 0) == 1 else range(win.n)[::-1]
        index = torch.zeros_like(where)
        step = 1
        for axis in order:
            index = index + coords[axis] * step
            step *= spatial[axis]
        planes = torch.arange(shape[0] * shape[1], device=where.device).reshape(
            shape[0], shape[1], *([1] * win.n)
        )
        return index + planes * plane

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        attrs = _attrs_for_opset(
            self, g, {"storage_order": (8, 0), "ceil_mode": (10, 0), "dilations": (10, None)}
        )
        if len(outputs) > 1 and g.opset < 8:
            raise OpsetTooOldError(
                f"MaxPool: the Indices output needs opset 8, export opset {g.opset}", 8
            )
        g.add_node(self.op_type, inputs, outputs, **attrs)


class AveragePool(Operator):
    """ONNX AveragePool; count_include_pad=0 divides by the number of input elements only."""

    op_type = "AveragePool"
    since_versions = (1, 7, 10, 11, 19, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        win = window(self, x)
        if whole_windows(win) and separable_pays(win, x):
            # the same sums as torch's kernel adds, in another order (within ~1 ulp)
            return window_reduce(win, x, torch.add) / math.prod(win.kernel)
        include = bool(self.attr("count_include_pad"))
        if all(d == 1 for d in win.dilations):
            fast = _torch_pool(win, x, False, _AVG_POOL, count_include_pad=include)
            if fast is not None:
                return fast
        return win.window_sums(win.pad(x, 0.0)) / win.counts(x, include)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        attrs = _attrs_for_opset(
            self, g, {"count_include_pad": (7, 0), "ceil_mode": (10, 0), "dilations": (19, None)}
        )
        g.add_node(self.op_type, inputs, outputs, **attrs)


class LpPool(Operator):
    """ONNX LpPool: the p-norm of each window (zero padding; p is a float before version 2)."""

    op_type = "LpPool"
    since_versions = (1, 2, 11, 18, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        win = window(self, x)
        p = float(self.attr("p"))
        powered = win.pad(x, 0.0).abs() ** p
        return win.window_sums(powered) ** (1.0 / p)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        attrs = _attrs_for_opset(self, g, {"ceil_mode": (18, 0), "dilations": (18, None)})
        attrs["p"] = lp_export_p(self, g)
        g.add_node(self.op_type, inputs, outputs, **attrs)


def _attrs_for_opset(
    op: Operator, g: GraphBuilder, since: dict[str, tuple[int, Any]]
) -> dict[str, Any]:
    """The op's attributes for export at ``g.opset``: attributes the opset lacks are dropped
    when they hold their neutral value and an ExportError otherwise.

    ``since`` maps attribute name -> (first opset that has it, neutral value; None means
    "all ones", as for dilations).
    """
    attrs = op.export_attrs(g)
    for name, (first, neutral) in since.items():
        if g.opset >= first or name not in attrs:
            continue
        value = attrs.pop(name)
        is_neutral = all(int(v) == 1 for v in value) if neutral is None else value == neutral
        if not is_neutral:
            raise OpsetTooOldError(
                f"{op.op_type}: attribute {name}={value} needs opset {first}, "
                f"export opset is {g.opset}",
                first,
            )
    return attrs


# ---- SINGA-named functions ------------------------------------------------------------------


def _pool_attrs(
    name: str,
    n: int,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None,
    padding: int | Sequence[int],
    ceil_mode: bool,
    dilation: int | Sequence[int],
) -> dict[str, Any]:
    kernel = user_ints(name, "kernel_size", kernel_size, n)
    attrs: dict[str, Any] = {
        "kernel_shape": kernel,
        "strides": kernel if stride is None else user_ints(name, "stride", stride, n),
        "pads": user_pads(name, padding, n),
    }
    if ceil_mode:
        attrs["ceil_mode"] = 1
    dilations = user_ints(name, "dilation", dilation, n)
    if any(d != 1 for d in dilations):
        attrs["dilations"] = dilations
    return attrs


def _max_pool(n: int, x: Tensor, kernel_size, stride, padding, ceil_mode, dilation) -> Tensor:
    return MaxPool(
        **_pool_attrs(f"max_pool{n}d", n, kernel_size, stride, padding, ceil_mode, dilation)
    )(x)


def max_pool1d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """1-D max pooling (ONNX MaxPool).

    :param x: the (N, C, L) input.
    :param kernel_size: the window: an int, or one size per spatial axis.
    :param stride: the step: an int or one per spatial axis; None for the kernel size.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param ceil_mode: True rounds the output size up (a last, partial window), False down.
    :param dilation: the spacing of the window's elements: an int or one per spatial axis.
    :returns: the pooled (N, C, ...) tensor.
    :raises BadInputError: a size list has the wrong length, or the window does not fit the
        padded input.
    """
    return _max_pool(1, x, kernel_size, stride, padding, ceil_mode, dilation)


def max_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """2-D max pooling of x (N, C, H, W); stride defaults to the kernel size.

    ``padding`` is an int, one value per spatial axis, or ONNX-style begins then ends.

    :param x: the (N, C, H, W) input.
    :param kernel_size: the window: an int, or one size per spatial axis.
    :param stride: the step: an int or one per spatial axis; None for the kernel size.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param ceil_mode: True rounds the output size up (a last, partial window), False down.
    :param dilation: the spacing of the window's elements: an int or one per spatial axis.
    :returns: the pooled (N, C, ...) tensor.
    :raises BadInputError: a size list has the wrong length, or the window does not fit the
        padded input.
    """
    return _max_pool(2, x, kernel_size, stride, padding, ceil_mode, dilation)


def max_pool3d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """3-D max pooling (ONNX MaxPool).

    :param x: the (N, C, D, H, W) input.
    :param kernel_size: the window: an int, or one size per spatial axis.
    :param stride: the step: an int or one per spatial axis; None for the kernel size.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param ceil_mode: True rounds the output size up (a last, partial window), False down.
    :param dilation: the spacing of the window's elements: an int or one per spatial axis.
    :returns: the pooled (N, C, ...) tensor.
    :raises BadInputError: a size list has the wrong length, or the window does not fit the
        padded input.
    """
    return _max_pool(3, x, kernel_size, stride, padding, ceil_mode, dilation)


def _avg_pool(n, x, kernel_size, stride, padding, ceil_mode, count_include_pad, dilation):
    attrs = _pool_attrs(f"avg_pool{n}d", n, kernel_size, stride, padding, ceil_mode, dilation)
    return AveragePool(count_include_pad=int(bool(count_include_pad)), **attrs)(x)


def avg_pool1d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """1-D average pooling (ONNX AveragePool).

    :param x: the (N, C, L) input.
    :param kernel_size: the window: an int, or one size per spatial axis.
    :param stride: the step: an int or one per spatial axis; None for the kernel size.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param ceil_mode: True rounds the output size up (a last, partial window), False down.
    :param count_include_pad: True divides by the whole window, padding included; False by the
        input elements in it.
    :param dilation: the spacing of the window's elements: an int or one per spatial axis.
    :returns: the pooled (N, C, ...) tensor.
    :raises BadInputError: a size list has the wrong length, or the window does not fit the
        padded input.
    """
    return _avg_pool(1, x, kernel_size, stride, padding, ceil_mode, count_include_pad, dilation)


def avg_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """2-D average pooling of x (N, C, H, W); stride defaults to the kernel size.

    ``count_include_pad`` defaults to True as in torch (ONNX's attribute default is 0).

    :param x: the (N, C, H, W) input.
    :param kernel_size: the window: an int, or one size per spatial axis.
    :param stride: the step: an int or one per spatial axis; None for the kernel size.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param ceil_mode: True rounds the output size up (a last, partial window), False down.
    :param count_include_pad: True divides by the whole window, padding included; False by the
        input elements in it.
    :param dilation: the spacing of the window's elements: an int or one per spatial axis.
    :returns: the pooled (N, C, ...) tensor.
    :raises BadInputError: a size list has the wrong length, or the window does not fit the
        padded input.
    """
    return _avg_pool(2, x, kernel_size, stride, padding, ceil_mode, count_include_pad, dilation)


def avg_pool3d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """3-D average pooling (ONNX AveragePool).

    :param x: the (N, C, D, H, W) input.
    :param kernel_size: the window: an int, or one size per spatial axis.
    :param stride: the step: an int or one per spatial axis; None for the kernel size.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param ceil_mode: True rounds the output size up (a last, partial window), False down.
    :param count_include_pad: True divides by the whole window, padding included; False by the
        input elements in it.
    :param dilation: the spacing of the window's elements: an int or one per spatial axis.
    :returns: the pooled (N, C, ...) tensor.
    :raises BadInputError: a size list has the wrong length, or the window does not fit the
        padded input.
    """
    return _avg_pool(3, x, kernel_size, stride, padding, ceil_mode, count_include_pad, dilation)


def lp_pool2d(
    x: Tensor,
    p: int,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
) -> Tensor:
    """2-D power-average (p-norm) pooling of x (N, C, H, W) (ONNX LpPool).

    :param x: the (N, C, H, W) input.
    :param p: the order of the norm taken over each window.
    :param kernel_size: the window: an int, or one size per spatial axis.
    :param stride: the step: an int or one per spatial axis; None for the kernel size.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :returns: the pooled (N, C, H', W') tensor.
    :raises BadInputError: a size list has the wrong length, or the window does not fit the
        padded input.
    """
    return LpPool(p=int(p), **_pool_attrs("lp_pool2d", 2, kernel_size, stride, padding, False, 1))(
        x
    )
