"""Activation functions and losses as layers (no parameters)."""

from __future__ import annotations

import sonnx.autograd as autograd
from sonnx.errors import BadInputError
from sonnx.layer.base import Layer
from sonnx.operators.activation.gated import GELU_APPROXIMATIONS
from sonnx.tensor import Tensor

__all__ = [
    "ELU",
    "GELU",
    "BinaryCrossEntropy",
    "CrossEntropy",
    "HardSigmoid",
    "LeakyReLU",
    "LogSoftMax",
    "MeanSquareError",
    "ReLU",
    "SeLU",
    "Sigmoid",
    "SoftMax",
    "SoftMaxCrossEntropy",
    "SoftPlus",
    "SoftSign",
    "Tanh",
]


class ReLU(Layer):
    """``max(x, 0)``."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.relu(x)


class Sigmoid(Layer):
    """``1 / (1 + exp(-x))``."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.sigmoid(x)


class Tanh(Layer):
    """``tanh(x)``."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.tanh(x)


class SoftPlus(Layer):
    """``log(1 + exp(x))``."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.softplus(x)


class SoftSign(Layer):
    """``x / (1 + |x|)``."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.softsign(x)


class SeLU(Layer):
    """Scaled exponential linear unit with ONNX's default alpha and gamma."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.selu(x)


class SoftMax(Layer):
    """Softmax along ``axis`` (SINGA's default axis 1).

    :param axis: the axis the probabilities sum to one along.
    """

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, x: Tensor) -> Tensor:
        """The softmax of ``x`` along ``axis``.

        :param x: the input, e.g. logits of shape ``(N, C)``.
        :returns: probabilities of ``x``'s shape.
        """
        return autograd.softmax(x, self.axis)


class LogSoftMax(SoftMax):
    """Log of the softmax along ``axis``."""

    def forward(self, x: Tensor) -> Tensor:
        """The log of the softmax of ``x`` along ``axis``.

        :param x: the input, e.g. logits of shape ``(N, C)``.
        :returns: log-probabilities of ``x``'s shape.
        """
        return autograd.log_softmax(x, self.axis)


class GELU(Layer):
    """Gaussian error linear unit; ``approximate="tanh"`` uses the tanh approximation.

    :param approximate: ``"none"`` (the exact erf form) or ``"tanh"``, ONNX Gelu's values.
    :raises BadInputError: any other ``approximate``.
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in GELU_APPROXIMATIONS:
            raise BadInputError(
                f"GELU: approximate must be one of {GELU_APPROXIMATIONS} (ONNX Gelu's values), "
                f"received {approximate!r}"
            )
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.gelu(x, self.approximate)


class LeakyReLU(Layer):
    """``x`` for positive ``x``, ``a * x`` otherwise.

    :param a: the slope for negative ``x``.
    """

    def __init__(self, a: float = 0.01) -> None:
        super().__init__()
        self.a = float(a)

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.leakyrelu(x, self.a)


class ELU(Layer):
    """``x`` for positive ``x``, ``alpha * (exp(x) - 1)`` otherwise.

    :param alpha: the scale of the negative part.
    """

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.elu(x, self.alpha)


class HardSigmoid(Layer):
    """``max(0, min(1, alpha * x + gamma))``.

    :param alpha: the slope.
    :param gamma: the offset.
    """

    def __init__(self, alpha: float = 0.2, gamma: float = 0.5) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.gamma = float(gamma)

    def forward(self, x: Tensor) -> Tensor:
        """Apply it element-wise.

        :param x: the input, any shape.
        :returns: a tensor of ``x``'s shape and dtype.
        """
        return autograd.hardsigmoid(x, self.alpha, self.gamma)


class SoftMaxCrossEntropy(Layer):
    """Mean cross-entropy of ``softmax(x)`` against targets ``t`` (class indices or one-hot)."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """The loss of logits ``x`` against targets ``t``.

        :param x: logits of shape ``(N, C)``.
        :param t: class indices of shape ``(N,)``, or one-hot or soft targets of ``x``'s shape
            (a Tensor or an array).
        :returns: the mean over the batch, shape ``(1,)``.
        :raises BadInputError: ``x`` is 0-D.
        """
        return autograd.softmax_cross_entropy(x, t)


class CrossEntropy(Layer):
    """Mean cross-entropy of probabilities ``y`` against targets ``t``."""

    def forward(self, y: Tensor, t: Tensor) -> Tensor:
        """The loss of probabilities ``y`` against targets ``t``.

        :param y: probabilities of shape ``(N, C)`` (a softmax's output).
        :param t: the targets, of ``y``'s shape (a Tensor or an array).
        :returns: ``-sum(t * log(y)) / N``, shape ``(1,)``.
        :raises BadInputError: ``y`` is 0-D or ``t``'s shape differs from ``y``'s.
        """
        return autograd.cross_entropy(y, t)


class BinaryCrossEntropy(Layer):
    """Mean binary cross-entropy of probabilities ``x`` against 0/1 targets ``t``."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """The loss of probabilities ``x`` against 0/1 targets ``t``.

        :param x: probabilities in (0, 1) of shape ``(N, ...)`` (a sigmoid's output).
        :param t: the 0/1 (or soft) targets, of ``x``'s shape (a Tensor or an array).
        :returns: the loss summed and divided by N, shape ``(1,)``.
        :raises BadInputError: ``x`` is 0-D or ``t``'s shape differs from ``x``'s.
        """
        return autograd.binary_cross_entropy(x, t)


class MeanSquareError(Layer):
    """SINGA's mean squared error of ``x`` against ``t``."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """The loss of ``x`` against ``t``.

        :param x: the predictions, of shape ``(N, ...)``.
        :param t: the targets, of ``x``'s shape (a Tensor or an array).
        :returns: ``sum((x - t)^2) / (2 N)``, shape ``(1,)``.
        :raises BadInputError: ``x`` is 0-D or ``t``'s shape differs from ``x``'s.
        """
        return autograd.mse_loss(x, t)
