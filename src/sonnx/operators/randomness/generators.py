"""Random generators: RandomUniform(Like), RandomNormal(Like), Bernoulli and Multinomial.

Without a ``seed`` attribute, values come from torch's generator on the output's device (so
``torch.manual_seed`` makes runs repeatable). With one, every call returns the same values:
RandomUniform(Like), RandomNormal(Like) and Bernoulli then draw from NumPy's ``RandomState``
seeded with it (``rand``, ``randn`` and ``binomial``), exactly as ONNX's reference
implementation does; Multinomial, which has no reference implementation, uses a seeded torch
generator. No draw has a gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.device import Device, as_device
from sonnx.engine.memory_guard import check_shape
from sonnx.engine.operator import Operator, OutputShape, Randomness
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

__all__ = [
    "Bernoulli",
    "Multinomial",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "bernoulli",
    "multinomial",
    "random_normal",
    "random_normal_like",
    "random_uniform",
    "random_uniform_like",
]


def _dtype(op: str, code: Any, default: torch.dtype, floats_only: bool) -> torch.dtype:
    """The dtype an attribute ``dtype`` names (``default`` when it is unset)."""
    if code is None:
        dtype = default
    else:
        try:
            dtype = dtypes.onnx_to_torch(int(code))
        except BadInputError:
            dtype = None
    if dtype is None or (floats_only and not dtypes.is_float(dtype)) or dtype.is_complex:
        kind = "a floating" if floats_only else "a numeric or boolean"
        raise BadInputError(f"{op}: attribute dtype must name {kind} type, received {code}")
    return dtype


def _numpy_state(seed: Any) -> np.random.RandomState:
    return np.random.RandomState(int(seed) % 2**32)


class _Distribution(Operator):
    """Uniform or normal draws of a shape; subclasses say where shape and dtype come from."""

    output_shape = OutputShape.FROM_SHAPES
    random = Randomness.ALWAYS

    def draw(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        op = self.op_type
        if any(int(d) < 0 for d in shape):
            raise BadInputError(f"{op}: shape must have non-negative dims, received {list(shape)}")
        shape = tuple(int(d) for d in shape)
        seed = self.attr("seed")
        uniform = "Uniform" in op
        if seed is not None:
            state = _numpy_state(seed)
            draws = np.asarray(state.rand(*shape) if uniform else state.randn(*shape))
            unit = torch.from_numpy(draws).to(device).reshape(shape)
        else:
            work = dtype if dtype in (torch.float32, torch.float64) else torch.float32
            make = torch.rand if uniform else torch.randn
            unit = make(shape, dtype=work, device=device)
        if uniform:
            low, high = float(self.attr("low")), float(self.attr("high"))
            values = unit * (high - low) + low
        else:
            values = unit * float(self.attr("scale")) + float(self.attr("mean"))
        return values.to(dtype)


class _Sized(_Distribution):
    """Shape from the ``shape`` attribute; dtype from ``dtype`` (default float32).

    :param version: the ONNX since-version whose meaning to follow (None: the newest schema).
    :param attrs: the ONNX attributes (``shape``, ``dtype``, ``seed`` and the distribution's).
    """

    def __init__(self, version: int | None = None, **attrs: Any) -> None:
        super().__init__(version, **attrs)
        #: Where the output is created (the op has no input to take a device from); None: the
        #: default device at call time.
        self.target_device: Device | None = None

    def forward(self) -> torch.Tensor:
        shape = self.attr("shape")
        if shape is None:
            raise BadInputError(f"{self.op_type}: attribute shape is required")
        dtype = _dtype(self.op_type, self.attr("dtype"), torch.float32, floats_only=True)
        device = as_device(self.target_device).torch_device
        check_shape(f"{self.op_type}: output", shape, dtype, device)
        return self.draw(list(shape), dtype, device)


class _Like(_Distribution):
    """Shape from the input; dtype from ``dtype``, else the input's."""

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        dtype = _dtype(self.op_type, self.attr("dtype"), x.dtype, floats_only=True)
        return self.draw(list(x.shape), dtype, x.device)


class RandomUniform(_Sized):
    """ONNX RandomUniform: ``shape`` samples from U(low, high)."""

    op_type = "RandomUniform"
    since_versions = (1, 22)


class RandomNormal(_Sized):
    """ONNX RandomNormal: ``shape`` samples from N(mean, scale^2)."""

    op_type = "RandomNormal"
    since_versions = (1, 22)


class RandomUniformLike(_Like):
    """ONNX RandomUniformLike: samples from U(low, high) shaped like the input."""

    op_type = "RandomUniformLike"
    since_versions = (1, 22)


class RandomNormalLike(_Like):
    """ONNX RandomNormalLike: samples from N(mean, scale^2) shaped like the input."""

    op_type = "RandomNormalLike"
    since_versions = (1, 22)


class Bernoulli(Operator):
    """ONNX Bernoulli: 1 with probability ``input`` (elementwise), else 0, of type ``dtype``
    (default: the input's)."""

    op_type = "Bernoulli"
    since_versions = (15, 22)
    output_shape = OutputShape.FROM_SHAPES
    random = Randomness.ALWAYS

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        if not dtypes.is_float(x.dtype):
            raise BadInputError(
                f"{op}: input must hold float probabilities, received {dtypes.dtype_name(x.dtype)}"
            )
        dtype = _dtype(op, self.attr("dtype"), x.dtype, floats_only=False)
        p = x.detach()
        if bool(((p < 0) | (p > 1)).any()):
            raise BadInputError(f"{op}: input probabilities must lie in [0, 1]")
        seed = self.attr("seed")
        if seed is None:
            return torch.bernoulli(p if p.dtype == torch.float64 else p.float()).to(dtype)
        draws = _numpy_state(seed).binomial(1, p=p.cpu().double().numpy())
        return torch.from_numpy(np.asarray(draws)).to(device=x.device, dtype=dtype)


class Multinomial(Operator):
    """ONNX Multinomial: ``sample_size`` class indices per row of ``input`` (batch, classes),
    whose values are unnormalized log-probabilities; drawn with replacement."""

    op_type = "Multinomial"
    since_versions = (7, 22)
    output_shape = OutputShape.FROM_SHAPES
    random = Randomness.ALWAYS

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        if not dtypes.is_float(x.dtype) or x.dim() != 2:
            raise BadInputError(
                f"{op}: input must be a 2-D float tensor (batch, classes), received "
                f"{dtypes.dtype_name(x.dtype)} of shape {tuple(x.shape)}"
            )
        dtype = _dtype(op, self.attr("dtype"), torch.int32, floats_only=False)
        if dtype not in (torch.int32, torch.int64):
            raise BadInputError(
                f"{op}: attribute dtype must be int32 or int64, received {dtypes.dtype_name(dtype)}"
            )
        count = int(self.attr("sample_size"))
        if count < 1:
            raise BadInputError(f"{op}: attribute sample_size must be positive, received {count}")
        probs = torch.softmax(x.detach().to(torch.float64), dim=1)
        generator = None
        if self.attr("seed") is not None:
            generator = torch.Generator(device=x.device).manual_seed(int(self.attr("seed")))
        return torch.multinomial(probs, count, replacement=True, generator=generator).to(dtype)


def _attrs(dtype: Any, seed: int | None, **values: float) -> dict[str, Any]:
    attrs: dict[str, Any] = {k: float(v) for k, v in values.items()}
    if dtype is not None:
        attrs["dtype"] = dtypes.torch_to_onnx(dtypes.as_torch_dtype(dtype))
    if seed is not None:
        attrs["seed"] = float(seed)
    return attrs


def _sized(op: _Sized, device: Device | None) -> Tensor:
    op.target_device = device
    return op()


def random_uniform(
    shape: Sequence[int],
    low: float = 0.0,
    high: float = 1.0,
    dtype: Any = torch.float32,
    seed: int | None = None,
    device: Device | None = None,
) -> Tensor:
    """Samples from U(low, high) of the given shape (ONNX RandomUniform).

    :param shape: the output's dims.
    :param low: the lower bound.
    :param high: the upper bound.
    :param dtype: the float element type (as :func:`cast` accepts it).
    :param seed: a seed for a reproducible draw; None draws from the global generator.
    :param device: where to create it; None for the default device.
    :returns: a new tensor of ``shape``.
    :raises BadInputError: ``dtype`` is not a data type.
    """
    attrs = _attrs(dtype, seed, low=low, high=high)
    return _sized(RandomUniform(shape=[int(d) for d in shape], **attrs), device)


def random_normal(
    shape: Sequence[int],
    mean: float = 0.0,
    scale: float = 1.0,
    dtype: Any = torch.float32,
    seed: int | None = None,
    device: Device | None = None,
) -> Tensor:
    """Samples from N(mean, scale^2) of the given shape (ONNX RandomNormal).

    :param shape: the output's dims.
    :param mean: the mean.
    :param scale: the standard deviation.
    :param dtype: the float element type (as :func:`cast` accepts it).
    :param seed: a seed for a reproducible draw; None draws from the global generator.
    :param device: where to create it; None for the default device.
    :returns: a new tensor of ``shape``.
    :raises BadInputError: ``dtype`` is not a data type.
    """
    attrs = _attrs(dtype, seed, mean=mean, scale=scale)
    return _sized(RandomNormal(shape=[int(d) for d in shape], **attrs), device)


def random_uniform_like(
    x: Tensor, low: float = 0.0, high: float = 1.0, dtype: Any = None, seed: int | None = None
) -> Tensor:
    """Samples from U(low, high) shaped like ``x`` (of ``x``'s type unless ``dtype`` is given).

    :param x: the tensor whose shape (and type) to take; its values are not read.
    :param low: the lower bound.
    :param high: the upper bound.
    :param dtype: the float element type; None for ``x``'s.
    :param seed: a seed for a reproducible draw; None draws from the global generator.
    :returns: a new tensor of ``x``'s shape (ONNX RandomUniformLike).
    :raises BadInputError: ``dtype`` is not a data type.
    """
    return RandomUniformLike(**_attrs(dtype, seed, low=low, high=high))(x)


def random_normal_like(
    x: Tensor, mean: float = 0.0, scale: float = 1.0, dtype: Any = None, seed: int | None = None
) -> Tensor:
    """Samples from N(mean, scale^2) shaped like ``x`` (of ``x``'s type unless ``dtype``).

    :param x: the tensor whose shape (and type) to take; its values are not read.
    :param mean: the mean.
    :param scale: the standard deviation.
    :param dtype: the float element type; None for ``x``'s.
    :param seed: a seed for a reproducible draw; None draws from the global generator.
    :returns: a new tensor of ``x``'s shape (ONNX RandomNormalLike).
    :raises BadInputError: ``dtype`` is not a data type.
    """
    return RandomNormalLike(**_attrs(dtype, seed, mean=mean, scale=scale))(x)


def bernoulli(x: Tensor, dtype: Any = None, seed: int | None = None) -> Tensor:
    """1 with probability ``x`` elementwise, else 0 (ONNX Bernoulli).

    :param x: float probabilities in [0, 1].
    :param dtype: the output's element type; None for ``x``'s.
    :param seed: a seed for a reproducible draw; None draws from the global generator.
    :returns: a tensor of ``x``'s shape.
    :raises BadInputError: ``x`` is not floating-point or holds a value outside [0, 1].
    """
    return Bernoulli(**_attrs(dtype, seed))(x)


def multinomial(
    x: Tensor, sample_size: int = 1, dtype: Any = torch.int32, seed: int | None = None
) -> Tensor:
    """``sample_size`` class indices per row drawn from ``softmax(x)``, with replacement.

    :param x: a 2-D float (batch, classes) tensor of unnormalised log-probabilities.
    :param sample_size: how many indices to draw per row.
    :param dtype: int32 or int64, the indices' type.
    :param seed: a seed for a reproducible draw; None draws from the global generator.
    :returns: a (batch, sample_size) tensor of class indices (ONNX Multinomial).
    :raises BadInputError: ``x`` is not a 2-D float tensor, ``dtype`` is not int32 or int64, or
        ``sample_size`` is not positive.
    """
    attrs = _attrs(dtype, seed)
    attrs["sample_size"] = int(sample_size)
    return Multinomial(**attrs)(x)
