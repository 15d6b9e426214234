"""Pooling: MaxPool, AveragePool, LpPool, global pooling, MaxUnpool (1-D/2-D/3-D, ceil_mode,
dilation, count_include_pad).

ONNX pooling differs from torch's in ways torch's ``padding=`` argument cannot express
(asymmetric and SAME pads, dilated average pooling, which windows ceil_mode keeps), so each
operator computes the ONNX output size itself (:func:`_window`), pads the input with ``F.pad`` to
exactly the extent the windows cover, and then pools with ``padding=0``:

* MaxPool pads with -inf and runs torch's max pooling (its indices are converted to ONNX's
  flattened ones), or, in inference on the CPU over a 2-D or 3-D input that is not in
  channels-last order, takes running maxima of strided views (:func:`_separable_max`).
* AveragePool and LpPool sum windows with a ones-kernel convolution (which handles dilation) and
  divide by a window count computed the same way from a mask, so windows that start in the
  padding, count_include_pad and the ceil_mode overhang all follow ONNX; AveragePool with
  every window inside the input runs torch's average pooling or, where MaxPool takes running
  maxima of views, running sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError, OpsetTooOldError
from sonnx.operators.conv.windows import (
    CONV,
    auto_pad_mode,
    check_spatial_rank,
    check_window,
    effective_kernel,
    forward_pads,
    spatial_ints,
    torch_pad,
    user_ints,
    user_pads,
)
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


class _Window:
    """Where an op's windows fall: ONNX pads, the extra end padding ceil_mode needs, sizes."""

    def __init__(self, op: Operator, x: torch.Tensor) -> None:
        n = check_spatial_rank(op.op_type, "X", x)
        kernel = op.attr("kernel_shape")
        if kernel is None or len(kernel) != n:
            raise BadInputError(
                f"{op.op_type}: attribute kernel_shape must give {n} sizes (one per spatial "
                f"axis of X, shape {tuple(x.shape)}), received {kernel}"
            )
        self.n = n
        self.kernel = [int(k) for k in kernel]
        self.strides = spatial_ints(op, "strides", n, 1)
        self.dilations = spatial_ints(op, "dilations", n, 1)
        self.sizes = list(x.shape[2:])
        pads = forward_pads(op, self.sizes, self.kernel, self.strides, self.dilations)
        self.begins, self.ends = pads[:n], pads[n:]
        ceil = bool(op.attr("ceil_mode")) and auto_pad_mode(op) == "NOTSET"
        self.out: list[int] = []
        self.covered_ends: list[int] = []
        for i, k in enumerate(effective_kernel(self.kernel, self.dilations)):
            size, s, begin = self.sizes[i], self.strides[i], self.begins[i]
            span = size + begin + self.ends[i] - k
            if ceil:
                out = -(-span // s) + 1
                # ONNX (like torch) drops a last window that would start in the end padding.
                if (out - 1) * s >= size + begin:
                    out -= 1
            else:
                out = span // s + 1
            self.out.append(out)
            # End padding that makes the padded input exactly as long as the windows reach.
            self.covered_ends.append((out - 1) * s + k - size - begin)
        check_window(op.op_type, self.out, self.sizes)

    @cached_property
    def reaches_past_input(self) -> bool:
        """Whether some window reaches past the input: into begin pads, end pads or the
        ceil_mode overhang (ends no window reaches are cropped, not padded)."""
        return any(self.begins) or any(end > 0 for end in self.covered_ends)

    @cached_property
    def torch_arguments(self) -> tuple[list[int], bool] | None:
        """``(padding, ceil_mode)`` for torch's own pooling when its windows are exactly
        ONNX's: symmetric pads of at most half the (dilated) kernel. None otherwise. Kept with
        the window (see :func:`_window`): worked out once per input shape."""
        if self.begins != self.ends:
            return None
        kernels = effective_kernel(self.kernel, self.dilations)
        if any(2 * p > k for p, k in zip(self.begins, kernels, strict=True)):
            return None
        ceil = any(
            o != (s + 2 * p - k) // st + 1
            for o, s, p, k, st in zip(
                self.out, self.sizes, self.begins, kernels, self.strides, strict=True
            )
        )
        return list(self.begins), ceil

    def pad(self, x: torch.Tensor, value: float) -> torch.Tensor:
        """x padded to the covered extent with ``value`` (cropping ends no window reaches)."""
        return F.pad(x, torch_pad(self.begins, self.covered_ends), value=value)

    def window_sums(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of each window of an already padded (N, C, spatial...) tensor (dilation-aware)."""
        batch, channels = x.shape[:2]
        ones = torch.ones((1, 1, *self.kernel), dtype=x.dtype, device=x.device)
        flat = x.reshape(batch * channels, 1, *x.shape[2:])
        sums = CONV[self.n](flat, ones, None, self.strides, 0, self.dilations)
        return sums.reshape(batch, channels, *sums.shape[2:])

    def counts(self, x: torch.Tensor, include_pad: bool) -> torch.Tensor:
        """How many elements each window averages over, shaped (1, 1, out...).

        The input always counts; with include_pad the explicit pads count too, but never the
        ceil_mode overhang past the end pads (as in ONNX's reference and torch).
        """
        mask = torch.ones((1, 1, *self.sizes), dtype=x.dtype, device=x.device)
        if include_pad:
            mask = F.pad(mask, torch_pad(self.begins, self.ends), value=1.0)
            overhang = [c - e for c, e in zip(self.covered_ends, self.ends, strict=True)]
            mask = F.pad(mask, torch_pad([0] * self.n, overhang))
        else:
            mask = self.pad(mask, 0.0)
        return self.window_sums(mask)


_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_CHANNELS_LAST = {2: torch.channels_last, 3: torch.channels_last_3d}


def _window(op: Operator, x: torch.Tensor) -> _Window:
    """``op``'s windows over ``x``, kept on ``op`` for the last input shape outside graph
    tracing (where sizes may be symbols): an imported graph runs one operator object on the
    same shapes run after run, and working the windows out costs 20-60 us a call."""
    if not value_checks():
        return _Window(op, x)
    last = getattr(op, "_last_window", None)
    if last is not None and last[0] == x.shape:
        return last[1]
    win = _Window(op, x)
    op._last_window = (x.shape, win)
    return win


def _separable_pays(win: _Window, x: torch.Tensor) -> bool:
    """Whether to pool ``x`` window by window over strided views (:func:`_window_reduce`):
    outside graph tracing (a compiled graph's pooling is inductor's own loop), not for a
    gradient (``maximum``'s would split a tie between equal inputs, where max pooling's goes
    to one), on the CPU, over two or three spatial axes of an input that is not in
    channels-last order. torch's CPU kernels for that order walk one plane at a time:
    measured, one thread, inference, 2-D windows of 2x2 to 5x5 on batch 1-16: max pooling
    0.07-0.28x torch's time (3-D 2x2x2 and 3x3x3: 0.10-0.17x), average pooling 0.11-0.51x; for
    channels-last inputs torch's kernels vectorize over channels and are kept."""
    return (
        win.n in _CHANNELS_LAST
        and max(win.kernel) > 1
        and value_checks()
        and x.device.type == "cpu"
        and not (torch.is_grad_enabled() and x.requires_grad)
        and not _strictly_channels_last(x, win.n)
    )


def _strictly_channels_last(x: torch.Tensor, n: int) -> bool:
    """Whether torch's pooling takes ``x`` in channels-last order (a tensor whose strides
    fit both orders, one channel or one pixel, it takes in the other)."""
    return x.is_contiguous(memory_format=_CHANNELS_LAST[n]) and not x.is_contiguous()


def _window_reduce(
    win: _Window, x: torch.Tensor, combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """``combine`` (``torch.maximum``, ``torch.add``) over each window of an input padded as
    the windows need, as running results over strided views, one spatial axis at a time: the
    maximum (sum) over a box is the maximum (sum) over its rows of those along them."""
    for i in range(win.n):
        axis = 2 + i
        kernel, stride, dilation = win.kernel[i], win.strides[i], win.dilations[i]
        reach = (win.out[i] - 1) * stride + 1
        every_stride = (slice(None),) * axis + (slice(None, None, stride),)
        result = None
        for offset in range(0, kernel * dilation, dilation):
            view = x.narrow(axis, offset, reach)[every_stride]
            result = view if result is None else combine(result, view)
        x = result
    return x


def _separable_max(win: _Window, x: torch.Tensor) -> torch.Tensor:
    """Max pooling by :func:`_window_reduce`; exact (NaN propagates as in torch's pooling),
    with -inf pads standing for ONNX's padding."""
    if win.reaches_past_input:
        x = win.pad(x, float("-inf"))
    return _window_reduce(win, x, torch.maximum)


def _whole_windows(win: _Window) -> bool:
    """Whether every window lies inside the input, undilated: then each averages over the
    kernel's size (no pads, no ceil_mode overhang)."""
    return not win.reaches_past_input and all(d == 1 for d in win.dilations)


def _torch_pool(
    win: _Window, x: torch.Tensor, want_indices: bool, pools: dict, **options: Any
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
        win = _window(self, x)
        work = x if x.dtype.is_floating_point else x.to(torch.float64)
        want_indices = (self.requested_outputs or 1) > 1
        if not want_indices and _separable_pays(win, work):
            pooled = _separable_max(win, work)
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
        self, where: torch.Tensor, win: _Window, padded: Sequence[int], shape: Sequence[int]
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
        win = _window(self, x)
        if _whole_windows(win) and _separable_pays(win, x):
            # the same sums as torch's kernel adds, in another order (within ~1 ulp)
            return _window_reduce(win, x, torch.add) / math.prod(win.kernel)
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
        win = _window(self, x)
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
