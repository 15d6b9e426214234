"""Normalization and regularisation layers: BatchNorm1d/2d, LayerNorm, Dropout."""

from __future__ import annotations

import sonnx.autograd as autograd
from sonnx.errors import BadInputError
from sonnx.layer.base import Layer, check_input, new_state
from sonnx.opt.checks import in_unit_interval, number
from sonnx.tensor import Tensor

__all__ = ["BatchNorm1d", "BatchNorm2d", "Dropout", "LayerNorm"]


class _BatchNorm(Layer):
    """Batch normalization over axis 1 (channels).

    Parameters ``scale`` (ones) and ``bias`` (zeros); states ``running_mean`` (zeros) and
    ``running_var`` (ones), updated in training mode as
    ``running = momentum * running + (1 - momentum) * batch`` (SINGA's and ONNX's momentum,
    i.e. torch's ``1 - momentum``). Positional arguments (SINGA's legacy ``num_features``) are
    checked against the input's channels.

    :param num_features: optionally, the input's channels (SINGA's legacy argument).
    :param momentum: the running statistics' momentum, in [0, 1].
    :param epsilon: added to the variance, > 0.
    :raises BadInputError: more than one positional argument, a momentum outside [0, 1] or an
        epsilon not > 0; at the first call, an input of the wrong rank or channels.
    """

    ranks: tuple[int, ...] = (4,)
    layout = "(N, C, H, W)"

    def __init__(self, *num_features: int, momentum: float = 0.9, epsilon: float = 1e-5) -> None:
        super().__init__()
        name = type(self).__name__
        if len(num_features) > 1:
            raise BadInputError(
                f"{name}: expected at most one positional argument (num_features), "
                f"received {len(num_features)}"
            )
        self.num_features = num_features[0] if num_features else None
        self.momentum = in_unit_interval(name, "momentum", momentum, closed=True)
        self.epsilon = number(name, "epsilon", epsilon)
        if self.epsilon <= 0:
            raise BadInputError(f"{name}: epsilon must be > 0, received {epsilon!r}")

    def initialize(self, x: Tensor) -> None:
        """Create ``scale`` (ones), ``bias`` (zeros), ``running_mean`` (zeros) and
        ``running_var`` (ones), one value per channel of ``x``.

        :param x: the first input, channels on axis 1.
        :raises BadInputError: ``x`` has another rank, or not ``num_features`` channels.
        """
        check_input(self, x, self.ranks, self.layout)
        channels = x.shape[1]
        if self.num_features is not None and channels != self.num_features:
            raise BadInputError(
                f"{type(self).__name__}: input must have {self.num_features} channels (axis 1), "
                f"received shape {x.shape}"
            )
        self.num_features = channels
        self.scale = new_state((channels,), x, fill=1.0)
        self.bias = new_state((channels,), x)
        self.running_mean = new_state((channels,), x, trainable=False)
        self.running_var = new_state((channels,), x, fill=1.0, trainable=False)

    def forward(self, x: Tensor) -> Tensor:
        """Normalize ``x`` per channel: with the batch's statistics while
        ``sonnx.autograd.training`` is True (updating the running ones), else with the running
        statistics.

        :param x: the input, channels on axis 1.
        :returns: a tensor of ``x``'s shape.
        :raises BadInputError: ``x`` has another rank or channel count, or its dtype or device
            differs from the parameters'.
        """
        check_input(self, x, self.ranks, self.layout, like=self.scale)
        if x.shape[1] != self.num_features:
            raise BadInputError(
                f"{type(self).__name__}: input must have {self.num_features} channels (axis 1), "
                f"received shape {x.shape}"
            )
        return autograd.batch_norm(
            x,
            self.scale,
            self.bias,
            self.running_mean,
            self.running_var,
            self.momentum,
            self.epsilon,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_features}, momentum={self.momentum})"


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) inputs."""

    ranks = (2, 3)
    layout = "(N, C) or (N, C, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) inputs."""


class LayerNorm(Layer):
    """Normalize over the axes from ``axis`` to the last, then scale (ones) and shift (zeros);
    ``scale`` and ``bias`` have the shape of those axes.

    :param axis: the first normalized axis (negative counts from the end).
    :param epsilon: added to the variance, > 0.
    :raises BadInputError: an epsilon not > 0; at a call, an input of too low a rank or whose
        normalized shape differs from the first input's.
    """

    def __init__(self, axis: int = -1, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.axis = int(axis)
        self.epsilon = number("LayerNorm", "epsilon", epsilon)
        if self.epsilon <= 0:
            raise BadInputError(f"LayerNorm: epsilon must be > 0, received {epsilon!r}")

    def initialize(self, x: Tensor) -> None:
        """Create ``scale`` (ones) and ``bias`` (zeros) of the normalized axes' shape.

        :param x: the first input.
        :raises BadInputError: ``x``'s rank is too low for ``axis``.
        """
        rank = self._check(x)
        shape = x.shape[self.axis % rank :]
        self.scale = new_state(shape, x, fill=1.0)
        self.bias = new_state(shape, x)

    def forward(self, x: Tensor) -> Tensor:
        """Normalize ``x`` over the axes from ``axis`` on (ONNX LayerNormalization).

        :param x: the input, ending in the normalized shape of the first input.
        :returns: a tensor of ``x``'s shape.
        :raises BadInputError: ``x`` ends in another shape, or its dtype or device differs from
            the parameters'.
        """
        rank = self._check(x, like=self.scale)
        if x.shape[self.axis % rank :] != self.scale.shape:
            raise BadInputError(
                f"LayerNorm: input must end in the normalized shape {self.scale.shape}, "
                f"received shape {x.shape}"
            )
        return autograd.layer_norm(x, self.scale, self.bias, self.axis, self.epsilon)

    def _check(self, x: Tensor, like: Tensor | None = None) -> int:
        low = max(self.axis + 1 if self.axis >= 0 else -self.axis, 1)
        check_input(self, x, range(low, 17), f"(normalized from axis {self.axis})", like=like)
        return x.data.dim()

    def __repr__(self) -> str:
        return f"LayerNorm(axis={self.axis}, epsilon={self.epsilon})"


class Dropout(Layer):
    """Zero each element with probability ``ratio`` in training mode (scaling the rest by
    ``1 / (1 - ratio)``); the identity in inference mode.

    :param ratio: the probability of zeroing an element, in [0, 1).
    :raises BadInputError: a ratio outside [0, 1).
    """

    def __init__(self, ratio: float = 0.5) -> None:
        super().__init__()
        self.ratio = in_unit_interval("Dropout", "ratio", ratio)

    def forward(self, x: Tensor) -> Tensor:
        """Drop elements while ``sonnx.autograd.training`` is True (ONNX Dropout).

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype (``x``'s values when not training).
        """
        return autograd.dropout(x, self.ratio)

    def __repr__(self) -> str:
        return f"Dropout(ratio={self.ratio})"
