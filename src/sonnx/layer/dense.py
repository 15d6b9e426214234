"""Fully-connected, embedding and reshaping layers: Linear, Embedding, Flatten."""

from __future__ import annotations

from typing import Any

import torch

import sonnx.autograd as autograd
from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.layer.base import Layer, check_input, gaussian_param, new_state, positive_int
from sonnx.tensor import Tensor

__all__ = ["Embedding", "Flatten", "Linear"]

_ANY_RANK = range(2, 17)


class Linear(Layer):
    """``y = x @ W + b`` over the last axis of ``x``; ``W`` has shape (in_features, out_features).

    ``Linear(out_features)`` (SINGA 3) takes ``in_features`` from the first input;
    ``Linear(in_features, out_features)`` fixes it and checks the input against it.

    :param out_features: the output features (or ``in_features``, when two are given).
    :param args: ``out_features``, when the first argument is ``in_features``.
    :param bias: add a bias ``b`` (zeros at first).
    :raises BadInputError: more than two positional arguments, or features that are not
        positive ints; at the first call, an input whose last axis is not ``in_features``.
    """

    def __init__(self, out_features: int, *args: int, bias: bool = True) -> None:
        super().__init__()
        if len(args) > 1:
            raise BadInputError(
                f"Linear: expected Linear(out_features) or Linear(in_features, out_features), "
                f"received {1 + len(args)} positional arguments"
            )
        in_features = None
        if args:
            in_features, out_features = out_features, args[0]
            in_features = positive_int("Linear", "in_features", in_features)
        self.in_features = in_features
        self.out_features = positive_int("Linear", "out_features", out_features)
        self.bias = bool(bias)

    def initialize(self, x: Tensor) -> None:
        """Create ``W``, drawn from N(0, 2 / (in_features + out_features)), and ``b`` (zeros)
        for ``x``'s last axis, in ``x``'s float dtype (float32 otherwise) and on its device.

        :param x: the first input, of shape ``(..., in_features)``.
        :raises BadInputError: ``x`` is not a Tensor, or its last axis is not ``in_features``.
        """
        check_input(self, x, _ANY_RANK, "(..., in_features)")
        n_in = x.shape[-1]
        if self.in_features is not None and n_in != self.in_features:
            raise BadInputError(
                f"Linear: input must have {self.in_features} features in its last axis, "
                f"received shape {x.shape}"
            )
        self.in_features = n_in
        self.W = gaussian_param((n_in, self.out_features), x, n_in + self.out_features)
        if self.bias:
            self.b = new_state((self.out_features,), x)

    def forward(self, x: Tensor) -> Tensor:
        """``x @ W + b`` (ONNX Gemm for a 2-D ``x``, MatMul and Add otherwise).

        :param x: the input, of shape ``(..., in_features)``.
        :returns: the output, of shape ``(..., out_features)``.
        :raises BadInputError: ``x``'s last axis is not ``in_features``, or its dtype or device
            differs from ``W``'s.
        """
        check_input(self, x, _ANY_RANK, "(..., in_features)", like=self.W)
        if x.shape[-1] != self.in_features:
            raise BadInputError(
                f"Linear: input must have {self.in_features} features in its last axis, "
                f"received shape {x.shape}"
            )
        if x.data.dim() == 2:
            return autograd.gemm(x, self.W, self.b if self.bias else None)
        y = autograd.matmul(x, self.W)
        return autograd.add(y, self.b) if self.bias else y

    def __repr__(self) -> str:
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias})"


class Embedding(Layer):
    """Rows of a (num_embeddings, embedding_dim) table ``W`` picked by integer indices.

    ``W`` starts as N(0, 1) samples in float32 on the indices' device (ONNX Gather on axis 0).

    :param num_embeddings: the table's rows (the number of distinct indices).
    :param embedding_dim: the length of each row.
    :raises BadInputError: sizes that are not positive ints; at a call, indices that are not
        integers.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.num_embeddings = positive_int("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = positive_int("Embedding", "embedding_dim", embedding_dim)

    def initialize(self, x: Tensor) -> None:
        """Create the table ``W`` on ``x``'s device.

        :param x: the first indices.
        :raises BadInputError: ``x`` is not a Tensor of integers.
        """
        self._check(x)
        self.W = new_state((self.num_embeddings, self.embedding_dim), x).gaussian(0.0, 1.0)

    def forward(self, x: Tensor) -> Tensor:
        """The rows of ``W`` that ``x`` names.

        :param x: integer indices in ``[0, num_embeddings)``, any shape.
        :returns: a tensor of shape ``x.shape + (embedding_dim,)``.
        :raises BadInputError: ``x`` is not a Tensor of integers.
        """
        self._check(x)
        return autograd.gather(self.W, 0, x)

    def _check(self, x: Any) -> None:
        check_input(self, x, range(17), "(indices of any shape)")
        if dtypes.is_float(x.dtype) or x.dtype == torch.bool:
            raise BadInputError(
                f"Embedding: input must hold integer indices, received dtype "
                f"{dtypes.dtype_name(x.dtype)}"
            )

    def __repr__(self) -> str:
        return f"Embedding({self.num_embeddings}, {self.embedding_dim})"


class Flatten(Layer):
    """Reshape to 2-D: axes before ``axis`` form the rows, the rest the columns.

    :param axis: the first axis of the columns.
    """

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` as a matrix (ONNX Flatten).

        :param x: the input, any shape.
        :returns: a 2-D tensor of the same values: ``(prod(x.shape[:axis]),
            prod(x.shape[axis:]))``.
        """
        return autograd.flatten(x, self.axis)

    def __repr__(self) -> str:
        return f"Flatten(axis={self.axis})"
