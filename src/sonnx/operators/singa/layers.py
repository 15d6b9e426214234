"""SINGA's older layer forms in autograd: Conv2d, Linear, MaxPool2d, AvgPool2d, BatchNorm2d.

Each is a callable object that owns its parameter tensors (``requires_grad=True,
stores_grad=True``) and runs ONNX operators when called, so a network built from them trains
with :func:`sonnx.autograd.backward` and exports like any other recorded graph.

Initialization follows SINGA's autograd layers: weights are Gaussian with mean 0 and standard
deviation ``sqrt(2 / (fan_in + fan_out))`` (Glorot-normal; for Conv2d fan_in is
``in_channels/group * kh * kw`` and fan_out ``out_channels``), biases are zero, BatchNorm2d's
scale is one and its bias zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sonnx.errors import BadInputError
from sonnx.operators.conv.conv import conv2d
from sonnx.operators.conv.windows import user_ints, user_pads
from sonnx.operators.elementwise import Add
from sonnx.operators.linalg.products import MatMul, gemm
from sonnx.operators.normalization.batch import batchnorm_2d
from sonnx.operators.pooling.windowed import avg_pool2d, max_pool2d
from sonnx.tensor import Tensor

__all__ = ["AvgPool2d", "BatchNorm2d", "Conv2d", "Linear", "MaxPool2d"]


def _param(shape: Sequence[int], name: str) -> Tensor:
    return Tensor(shape=shape, requires_grad=True, stores_grad=True, name=name)


def _positive(layer: str, **values: int) -> None:
    for name, v in values.items():
        if not isinstance(v, int) or v < 1:
            raise BadInputError(f"{layer}: {name} must be a positive int, received {v!r}")


class _Layer:
    """Holds named tensors; ``get_params``/``set_params`` cover the trainable ones."""

    _param_names: tuple[str, ...] = ()

    def get_params(self) -> dict[str, Tensor]:
        """The trainable tensors by name (the live tensors, not copies)."""
        return {k: getattr(self, k) for k in self._param_names if getattr(self, k) is not None}

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Overwrite parameters in place from Tensors or arrays of the same shapes."""
        _assign(type(self).__name__, self.get_params(), params)


def _assign(layer: str, own: dict[str, Tensor], values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        if name not in own:
            raise BadInputError(
                f"{layer}.set_params: unknown parameter {name!r}; expected one of {sorted(own)}"
            )
        source = (
            value
            if isinstance(value, Tensor)
            else Tensor(data=np.asarray(value), device=own[name].device)
        )
        own[name].copy_data(source)


class Conv2d(_Layer):
    """2-D convolution layer: W (out_channels, in_channels/group, kh, kw), b (out_channels,).

    ``padding`` is an int, (pad_h, pad_w), or ONNX-style (top, left, bottom, right).
    Calling it on an (N, in_channels, H, W) tensor returns the (N, out_channels, H', W') output.

    :param in_channels: the input's channels.
    :param out_channels: the output's channels (the number of filters).
    :param kernel_size: the filter's size: an int or (kh, kw).
    :param stride: the step: an int or (sh, sw).
    :param padding: an int, (pad_h, pad_w), or (top, left, bottom, right).
    :param dilation: the spacing of the filter's taps: an int or (dh, dw).
    :param group: the number of channel groups (dividing both channel counts).
    :param bias: whether to add a trainable bias.
    :raises BadInputError: a count is not a positive int, ``group`` does not divide the channel
        counts, or a size list has the wrong length.
    """

    _param_names = ("W", "b")

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        group: int = 1,
        bias: bool = True,
    ) -> None:
        _positive("Conv2d", in_channels=in_channels, out_channels=out_channels, group=group)
        if in_channels % group or out_channels % group:
            raise BadInputError(
                f"Conv2d: group={group} must divide in_channels={in_channels} and "
                f"out_channels={out_channels}"
            )
        self.kernel_size = user_ints("Conv2d", "kernel_size", kernel_size, 2)
        self.stride = user_ints("Conv2d", "stride", stride, 2)
        self.padding = user_pads("Conv2d", padding, 2)
        self.dilation = user_ints("Conv2d", "dilation", dilation, 2)
        self.group = group
        kh, kw = self.kernel_size
        fan_in = in_channels // group * kh * kw
        self.W = _param((out_channels, in_channels // group, kh, kw), "W")
        self.W.gaussian(0.0, math.sqrt(2.0 / (fan_in + out_channels)))
        self.b = _param((out_channels,), "b") if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return conv2d(x, self.W, self.b, self.stride, self.padding, self.dilation, self.group)


class Linear(_Layer):
    """Fully connected layer ``x @ W + b`` with W (in_features, out_features).

    A 2-D input is recorded as one ONNX Gemm, so the layer is one node of an exported graph
    (and one layer for ``last_layers``); other ranks as MatMul then Add. Calling it on a tensor
    that does not end in ``in_features`` raises :class:`~sonnx.errors.BadInputError`.

    :param in_features: the size of the input's last axis.
    :param out_features: the size of the output's last axis.
    :param bias: whether to add a trainable bias.
    :raises BadInputError: a size is not a positive int.
    """

    _param_names = ("W", "b")

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.W = _param((in_features, out_features), "W")
        self.W.gaussian(0.0, math.sqrt(2.0 / (in_features + out_features)))
        self.b = _param((out_features,), "b") if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != self.W.shape[:1]:
            raise BadInputError(
                f"Linear: input x must end in {self.W.shape[0]} features, received shape {x.shape}"
            )
        if x.ndim() == 2:
            return gemm(x, self.W, self.b)
        y = MatMul()(x, self.W)
        return y if self.b is None else Add()(y, self.b)


class MaxPool2d(_Layer):
    """2-D max pooling layer; stride defaults to the kernel size (no parameters).

    :param kernel_size: the window: an int or (kh, kw).
    :param stride: the step: an int or (sh, sw); None for the kernel size.
    :param padding: an int, (pad_h, pad_w), or (top, left, bottom, right).
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
    ) -> None:
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def __call__(self, x: Tensor) -> Tensor:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(_Layer):
    """2-D average pooling layer; stride defaults to the kernel size (no parameters).

    :param kernel_size: the window: an int or (kh, kw).
    :param stride: the step: an int or (sh, sw); None for the kernel size.
    :param padding: an int, (pad_h, pad_w), or (top, left, bottom, right).
    :param count_include_pad: True divides by the whole window, padding included.
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        count_include_pad: bool = True,
    ) -> None:
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.count_include_pad = count_include_pad

    def __call__(self, x: Tensor) -> Tensor:
        return avg_pool2d(
            x, self.kernel_size, self.stride, self.padding, count_include_pad=self.count_include_pad
        )


class BatchNorm2d(_Layer):
    """Batch normalization of (N, C, H, W) inputs with trainable scale and bias.

    In training mode (``sonnx.autograd.training``) it normalizes with the batch statistics and
    updates ``running_mean``/``running_var`` as ``momentum * running + (1 - momentum) * batch``;
    otherwise it uses the running statistics. ``get_states`` adds them to the parameters.

    :param num_channels: C, the number of channels.
    :param momentum: the weight of the running statistics in each update.
    :param epsilon: added to the variance before its square root.
    :raises BadInputError: ``num_channels`` is not a positive int.
    """

    _param_names = ("scale", "bias")

    def __init__(self, num_channels: int, momentum: float = 0.9, epsilon: float = 1e-5) -> None:
        _positive("BatchNorm2d", num_channels=num_channels)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.scale = _param((num_channels,), "scale").set_value(1.0)
        self.bias = _param((num_channels,), "bias")
        self.running_mean = Tensor(shape=(num_channels,), requires_grad=False, name="running_mean")
        self.running_var = Tensor(
            shape=(num_channels,), requires_grad=False, name="running_var"
        ).set_value(1.0)

    def __call__(self, x: Tensor) -> Tensor:
        return batchnorm_2d(
            x,
            self.scale,
            self.bias,
            self.running_mean,
            self.running_var,
            self.momentum,
            self.epsilon,
        )

    def get_states(self) -> dict[str, Tensor]:
        """Parameters plus the running statistics (what a checkpoint must hold)."""
        return {
            **self.get_params(),
            "running_mean": self.running_mean,
            "running_var": self.running_var,
        }

    def set_states(self, states: Mapping[str, Any]) -> None:
        _assign("BatchNorm2d", self.get_states(), states)
