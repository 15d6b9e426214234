"""Convolution and pooling layers (1-D, 2-D, 3-D) over (N, C, spatial...) inputs."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import sonnx.autograd as autograd
from sonnx.errors import BadInputError
from sonnx.layer.base import (
    Layer,
    check_input,
    gaussian_param,
    int_tuple,
    new_state,
    pads_for,
    positive_int,
)
from sonnx.tensor import Tensor

__all__ = [
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
]

_PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_LAYOUTS = {1: "(N, C, L)", 2: "(N, C, H, W)", 3: "(N, C, D, H, W)"}


class _ConvNd(Layer):
    """Shared by Conv1d/2d/3d: ``W`` (nb_kernels, C / group, *kernel), ``b`` (nb_kernels,).

    ``Conv2d(nb_kernels, kernel_size, ...)`` takes the input channels from the first input;
    SINGA's ``Conv2d(in_channels, nb_kernels, kernel_size[, stride[, padding]])`` fixes them.
    ``pad_mode`` is ONNX's ``auto_pad`` ("NOTSET" uses ``padding``; "SAME_UPPER",
    "SAME_LOWER" and "VALID" compute the pads from the input size).

    :param nb_kernels: the output channels (or ``in_channels`` in SINGA's positional form).
    :param kernel_size: the kernel's size, one int for every spatial axis or one per axis.
    :param args: SINGA's positional ``nb_kernels, kernel_size[, stride[, padding]]`` after
        ``in_channels``.
    :param stride: the step, one int or one per spatial axis.
    :param padding: zeros added at both ends, one int, one per spatial axis, or ONNX's
        begin-and-end ``pads``.
    :param dilation: the kernel's dilation, one int or one per spatial axis.
    :param group: the number of channel groups (``nb_kernels`` and the input channels must be
        divisible by it).
    :param bias: add a bias ``b`` (zeros at first).
    :param pad_mode: ONNX's ``auto_pad``: "NOTSET", "SAME_UPPER", "SAME_LOWER" or "VALID".
    :raises BadInputError: too many positional arguments, sizes that are not positive ints,
        ``nb_kernels`` not divisible by ``group``, or an unknown ``pad_mode``; at the first
        call, an input of the wrong rank or channels.
    """

    spatial: ClassVar[int] = 2

    def __init__(
        self,
        nb_kernels: int,
        kernel_size: int | tuple[int, ...],
        *args: Any,
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] = 0,
        dilation: int | tuple[int, ...] = 1,
        group: int = 1,
        bias: bool = True,
        pad_mode: str = "NOTSET",
    ) -> None:
        super().__init__()
        name, n = type(self).__name__, self.spatial
        if len(args) > 3:
            raise BadInputError(
                f"{name}: expected at most (in_channels, nb_kernels, kernel_size, stride, "
                f"padding) positionally, received {2 + len(args)} positional arguments"
            )
        in_channels = None
        if args:
            in_channels = positive_int(name, "in_channels", nb_kernels)
            nb_kernels, kernel_size = kernel_size, args[0]
            stride = args[1] if len(args) > 1 else stride
            padding = args[2] if len(args) > 2 else padding
        self.in_channels = in_channels
        self.nb_kernels = positive_int(name, "nb_kernels", nb_kernels)
        self.kernel_size = int_tuple(name, "kernel_size", kernel_size, n)
        self.stride = int_tuple(name, "stride", stride, n)
        self.padding = pads_for(name, padding, n)
        self.dilation = int_tuple(name, "dilation", dilation, n)
        self.group = positive_int(name, "group", group)
        if self.nb_kernels % self.group:
            raise BadInputError(
                f"{name}: nb_kernels ({self.nb_kernels}) must be divisible by group ({self.group})"
            )
        if pad_mode not in _PAD_MODES:
            raise BadInputError(
                f"{name}: pad_mode must be one of {_PAD_MODES}, received {pad_mode!r}"
            )
        self.pad_mode = pad_mode
        self.bias = bool(bias)

    def initialize(self, x: Tensor) -> None:
        """Create the kernel ``W``, drawn from N(0, 2 / fan) with ``fan = C *
        prod(kernel_size) + nb_kernels``, and, with ``bias``, ``b`` (zeros) for ``x``'s ``C``
        channels.

        :param x: the first input, ``(N, C, *spatial)``.
        :raises BadInputError: ``x`` has another rank, or its channels are not ``in_channels``
            or not divisible by ``group``.
        """
        name = type(self).__name__
        check_input(self, x, (self.spatial + 2,), _LAYOUTS[self.spatial])
        channels = x.shape[1]
        if self.in_channels is not None and channels != self.in_channels:
            raise BadInputError(
                f"{name}: input must have {self.in_channels} channels (axis 1), "
                f"received shape {x.shape}"
            )
        if channels % self.group:
            raise BadInputError(
                f"{name}: input channels ({channels}) must be divisible by group "
                f"({self.group}), received shape {x.shape}"
            )
        self.in_channels = channels
        shape = (self.nb_kernels, channels // self.group, *self.kernel_size)
        fan = channels * math.prod(self.kernel_size) + self.nb_kernels
        self.W = gaussian_param(shape, x, fan)
        if self.bias:
            self.b = new_state((self.nb_kernels,), x)

    def forward(self, x: Tensor) -> Tensor:
        """Convolve ``x`` with ``W`` (ONNX Conv).

        :param x: the input, ``(N, C, *spatial)``.
        :returns: the output, ``(N, nb_kernels, *spatial_out)``.
        :raises BadInputError: ``x`` has another rank or channel count, or its dtype or device
            differs from ``W``'s.
        """
        check_input(self, x, (self.spatial + 2,), _LAYOUTS[self.spatial], like=self.W)
        if x.shape[1] != self.in_channels:
            raise BadInputError(
                f"{type(self).__name__}: input must have {self.in_channels} channels (axis 1), "
                f"received shape {x.shape}"
            )
        attrs: dict[str, Any] = {
            "kernel_shape": self.kernel_size,
            "strides": self.stride,
            "dilations": self.dilation,
            "group": self.group,
        }
        if self.pad_mode == "NOTSET":
            attrs["pads"] = self.padding
        else:
            attrs["auto_pad"] = self.pad_mode
        op = autograd.Conv(**attrs)
        return op(x, self.W, self.b) if self.bias else op(x, self.W)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.nb_kernels}, "
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, group={self.group}, bias={self.bias}, "
            f"pad_mode={self.pad_mode!r})"
        )


class Conv1d(_ConvNd):
    """1-D convolution of (N, C, L) inputs."""

    spatial = 1


class Conv2d(_ConvNd):
    """2-D convolution of (N, C, H, W) inputs."""

    spatial = 2


class Conv3d(_ConvNd):
    """3-D convolution of (N, C, D, H, W) inputs."""

    spatial = 3


class _PoolNd(Layer):
    """Shared by the pooling layers; ``stride`` defaults to the kernel size.

    :param kernel_size: the window's size, one int or one per spatial axis.
    :param stride: the step, one int or one per spatial axis (None: ``kernel_size``).
    :param padding: padding at both ends, one int, one per spatial axis, or ONNX's ``pads``.
    :param ceil_mode: round the output size up instead of down.
    :raises BadInputError: sizes that are not positive ints; at a call, an input of the wrong
        rank.
    """

    spatial: ClassVar[int] = 2

    def __init__(
        self,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] | None = None,
        padding: int | tuple[int, ...] = 0,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        name, n = type(self).__name__, self.spatial
        self.kernel_size = int_tuple(name, "kernel_size", kernel_size, n)
        self.stride = self.kernel_size if stride is None else int_tuple(name, "stride", stride, n)
        self.padding = pads_for(name, padding, n)
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x: Tensor) -> Tensor:
        """Pool each window of ``x``.

        :param x: the input, ``(N, C, *spatial)``.
        :returns: the output, ``(N, C, *spatial_out)``.
        :raises BadInputError: ``x`` has another rank.
        """
        check_input(self, x, (self.spatial + 2,), _LAYOUTS[self.spatial])
        return self._pool(x)

    def _pool(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define _pool()")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, ceil_mode={self.ceil_mode})"
        )


class _MaxPoolNd(_PoolNd):
    def _pool(self, x: Tensor) -> Tensor:
        pool = (autograd.max_pool1d, autograd.max_pool2d, autograd.max_pool3d)[self.spatial - 1]
        return pool(x, self.kernel_size, self.stride, self.padding, self.ceil_mode)


class _AvgPoolNd(_PoolNd):
    """Average pooling; ``count_include_pad`` (torch's default True) counts padded zeros.

    :param kernel_size: the window's size, one int or one per spatial axis.
    :param stride: the step, one int or one per spatial axis (None: ``kernel_size``).
    :param padding: padding at both ends, one int, one per spatial axis, or ONNX's ``pads``.
    :param ceil_mode: round the output size up instead of down.
    :param count_include_pad: count the padded zeros in each average.
    :raises BadInputError: sizes that are not positive ints; at a call, an input of the wrong
        rank.
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] | None = None,
        padding: int | tuple[int, ...] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = bool(count_include_pad)

    def _pool(self, x: Tensor) -> Tensor:
        pool = (autograd.avg_pool1d, autograd.avg_pool2d, autograd.avg_pool3d)[self.spatial - 1]
        return pool(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad
        )


class MaxPool1d(_MaxPoolNd):
    """Max pooling of (N, C, L) inputs."""

    spatial = 1


class MaxPool2d(_MaxPoolNd):
    """Max pooling of (N, C, H, W) inputs."""

    spatial = 2


class MaxPool3d(_MaxPoolNd):
    """Max pooling of (N, C, D, H, W) inputs."""

    spatial = 3


class AvgPool1d(_AvgPoolNd):
    """Average pooling of (N, C, L) inputs."""

    spatial = 1


class AvgPool2d(_AvgPoolNd):
    """Average pooling of (N, C, H, W) inputs."""

    spatial = 2


class AvgPool3d(_AvgPoolNd):
    """Average pooling of (N, C, D, H, W) inputs."""

    spatial = 3
