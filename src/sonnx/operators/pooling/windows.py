"""Where a pooling operator's windows fall over an input (:class:`Window`: ONNX pads, the
extra end padding ceil_mode needs, output sizes, window sums and counts), kept per input
shape, and the running maxima and sums over strided views that pool a CPU input faster than
torch's kernels do (:func:`window_reduce`). The operators are in
:mod:`sonnx.operators.pooling.windowed`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import torch
import torch.nn.functional as F

from sonnx.engine.operator import Operator
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError
from sonnx.operators.conv.windows import (
    CONV,
    auto_pad_mode,
    check_spatial_rank,
    check_window,
    effective_kernel,
    forward_pads,
    spatial_ints,
    torch_pad,
)


class Window:
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
        the window (see :func:`window`): worked out once per input shape."""
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


_CHANNELS_LAST = {2: torch.channels_last, 3: torch.channels_last_3d}


def window(op: Operator, x: torch.Tensor) -> Window:
    """``op``'s windows over ``x``, kept on ``op`` for the last input shape outside graph
    tracing (where sizes may be symbols): an imported graph runs one operator object on the
    same shapes run after run, and working the windows out costs 20-60 us a call."""
    if not value_checks():
        return Window(op, x)
    last = getattr(op, "_last_window", None)
    if last is not None and last[0] == x.shape:
        return last[1]
    win = Window(op, x)
    op._last_window = (x.shape, win)
    return win


def separable_pays(win: Window, x: torch.Tensor) -> bool:
    """Whether to pool ``x`` window by window over strided views (:func:`window_reduce`):
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


def window_reduce(
    win: Window, x: torch.Tensor, combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
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


def separable_max(win: Window, x: torch.Tensor) -> torch.Tensor:
    """Max pooling by :func:`window_reduce`; exact (NaN propagates as in torch's pooling),
    with -inf pads standing for ONNX's padding."""
    if win.reaches_past_input:
        x = win.pad(x, float("-inf"))
    return window_reduce(win, x, torch.maximum)


def whole_windows(win: Window) -> bool:
    """Whether every window lies inside the input, undilated: then each averages over the
    kernel's size (no pads, no ceil_mode overhang)."""
    return not win.reaches_past_input and all(d == 1 for d in win.dilations)
