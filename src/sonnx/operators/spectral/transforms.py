"""Signal-processing operators: DFT, STFT, the Hann/Hamming/Blackman windows, MelWeightMatrix.

ONNX stores complex signals as real tensors whose last dimension holds (real, imaginary) — size
2 — or only the real part — size 1. DFT and STFT turn that into a torch complex tensor, call
``torch.fft`` (differentiable) and turn the result back. Half-precision inputs are transformed
in float32 (torch's CPU FFT has no half kernels) and the result is cast back.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.errors import BadInputError
from sonnx.operators.normalization.common import check_float
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = [
    "DFT",
    "STFT",
    "BlackmanWindow",
    "HammingWindow",
    "HannWindow",
    "MelWeightMatrix",
    "blackman_window",
    "dft",
    "hamming_window",
    "hann_window",
    "mel_weight_matrix",
    "stft",
]


def _complex_signal(op: str, name: str, x: torch.Tensor) -> torch.Tensor:
    """The (..., 1) or (..., 2) real form as a real or complex torch tensor (last dim dropped)."""
    check_float(op, name, x)
    if x.dim() < 2 or x.shape[-1] not in (1, 2):
        raise BadInputError(
            f"{op}: input {name} must have rank >= 2 and a last dimension of 1 (real) or 2 "
            f"(real, imaginary), received shape {tuple(x.shape)}"
        )
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if x.shape[-1] == 1:
        return x[..., 0]
    return torch.complex(x[..., 0], x[..., 1])


def _real_form(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A real or complex torch result in ONNX's real form of ``dtype``."""
    out = y.unsqueeze(-1) if not y.is_complex() else torch.view_as_real(y)
    return out.to(dtype)


def _scalar(op: str, name: str, x: torch.Tensor | None) -> int | None:
    values = host_ints(x)
    if values is None:
        return None
    if len(values) != 1:
        raise BadInputError(f"{op}: input {name} must be a scalar, received shape {tuple(x.shape)}")
    return values[0]


class DFT(Operator):
    """ONNX DFT: version 17 takes ``axis`` as an attribute (default 1), version 20 as an input
    (default -2). ``onesided`` keeps the first ``n // 2 + 1`` frequencies; with ``inverse`` it
    reads such a half spectrum and returns the real signal (an inverse real FFT)."""

    op_type = "DFT"
    since_versions = (17, 20)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({1, 2})
    parameterising_inputs = frozenset({1, 2})

    def forward(self, x, dft_length=None, axis=None) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        signal = _complex_signal(op, "input", x)
        rank = x.dim()
        a = self._axis(axis)
        if not (-rank <= a <= -2 or 0 <= a <= rank - 2):
            raise BadInputError(
                f"{op}: axis must be in [{-rank}, -2] or [0, {rank - 2}] for an input of rank "
                f"{rank} (the last dimension holds real/imaginary), received {a}"
            )
        a %= rank
        inverse, onesided = bool(self.attr("inverse")), bool(self.attr("onesided"))
        n = _scalar(op, "dft_length", dft_length)
        if n is None:
            n = 2 * (x.shape[a] - 1) if inverse and onesided else x.shape[a]
        if n < 1:
            raise BadInputError(f"{op}: dft_length must be positive, received {n}")
        if inverse and onesided:
            y = torch.fft.irfft(signal, n=n, dim=a)
        elif inverse:
            y = torch.fft.ifft(signal, n=n, dim=a)
        else:
            y = torch.fft.fft(signal, n=n, dim=a)
            if onesided:
                y = y.narrow(a, 0, n // 2 + 1)
        return _real_form(y, x.dtype)

    def _axis(self, axis: torch.Tensor | None) -> int:
        if self.version is not None and self.version < 20:
            return int(self.attr("axis"))
        value = _scalar(self.op_type, "axis", axis)
        return -2 if value is None else value

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Opset 20 on: axis as an input; 17 to 19: as an attribute (the recorded value)."""
        attrs = {k: v for k, v in self.export_attrs(g).items() if k != "axis"}
        axis = self._axis(
            None if len(self.inputs) < 3 or self.inputs[2] is None else self.inputs[2].data
        )
        ins = [*inputs, "", ""][:2]
        if g.opset >= 20:
            if len(inputs) > 2 and inputs[2]:
                ins.append(inputs[2])
            else:
                ins.append(g.constant(np.int64(axis), "dft_axis"))
        else:
            attrs["axis"] = axis % self.inputs[0].ndim()
        g.add_node(self.op_type, ins, outputs, **attrs)


class STFT(Operator):
    """ONNX STFT: frames of ``frame_length`` every ``frame_step`` samples (no padding), each
    multiplied by ``window`` and transformed; output (batch, frames, bins, 2)."""

    op_type = "STFT"
    since_versions = (17,)
    output_shape = OutputShape.FROM_SHAPES
    # frame_step, window and frame_length.
    shape_inputs = frozenset({1, 2, 3})
    parameterising_inputs = frozenset({1, 2, 3})

    def forward(self, signal, frame_step, window=None, frame_length=None) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        sig = _complex_signal(op, "signal", signal)
        if signal.dim() != 3:
            raise BadInputError(
                f"{op}: input signal must be 3-D (batch, length, 1 or 2), received shape "
                f"{tuple(signal.shape)}"
            )
        step = _scalar(op, "frame_step", frame_step)
        length = _scalar(op, "frame_length", frame_length)
        if length is None:
            length = signal.shape[1] if window is None else window.shape[0]
        if window is not None and tuple(window.shape) != (length,):
            raise BadInputError(
                f"{op}: input window must have shape ({length},) (the frame length), received "
                f"{tuple(window.shape)}"
            )
        if step is None or step < 1 or not 1 <= length <= signal.shape[1]:
            raise BadInputError(
                f"{op}: frame_step must be positive and frame_length in [1, {signal.shape[1]}] "
                f"(the signal length), received frame_step={step}, frame_length={length}"
            )
        frames = sig.unfold(1, length, step)
        if window is not None:
            frames = frames * window.to(frames.real.dtype)
        y = torch.fft.fft(frames, n=length, dim=-1)
        if self.attr("onesided"):
            y = y[..., : length // 2 + 1]
        return _real_form(y, signal.dtype)


class _Window(Operator):
    """A generalized cosine window ``sum_k (-1)^k a_k cos(2 pi k n / N)``; ``N`` is the size
    when ``periodic`` (the default), else size - 1. A symmetric window of size 1 is ``[1]``."""

    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({0})
    parameterising_inputs = frozenset({0})

    coefficients: ClassVar[tuple[float, ...]] = ()

    def forward(self, size) -> torch.Tensor:  # type: ignore[override]
        n = _scalar(self.op_type, "size", size)
        if n is None or n < 0:
            raise BadInputError(
                f"{self.op_type}: input size must be a non-negative integer scalar, received {n}"
            )
        dtype = _output_dtype(self.op_type, self.attr("output_datatype"))
        period = n if self.attr("periodic") else n - 1
        k = torch.arange(n, dtype=torch.float64, device=size.device)
        if period <= 0:
            return torch.ones(n, dtype=dtype, device=size.device)
        w = torch.zeros_like(k)
        for j, a in enumerate(self.coefficients):
            w = w + (-1) ** j * a * torch.cos(2 * math.pi * j * k / period)
        return w.to(dtype)


class HannWindow(_Window):
    """ONNX HannWindow: ``0.5 - 0.5 cos(2 pi n / N)``."""

    op_type = "HannWindow"
    since_versions = (17,)
    coefficients = (0.5, 0.5)


class HammingWindow(_Window):
    """ONNX HammingWindow: ``25/46 - 21/46 cos(2 pi n / N)``."""

    op_type = "HammingWindow"
    since_versions = (17,)
    coefficients = (25 / 46, 21 / 46)


class BlackmanWindow(_Window):
    """ONNX BlackmanWindow: ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""

    op_type = "BlackmanWindow"
    since_versions = (17,)
    coefficients = (0.42, 0.5, 0.08)


def _output_dtype(op: str, code: Any) -> torch.dtype:
    dtype = dtypes.onnx_to_torch(int(code))
    if dtype == torch.bool or dtype.is_complex:
        raise BadInputError(
            f"{op}: attribute output_datatype must name a numeric type, received {code}"
        )
    return dtype


class MelWeightMatrix(Operator):
    """ONNX MelWeightMatrix: (dft_length // 2 + 1, num_mel_bins) triangular filters that map a
    one-sided magnitude spectrum to the mel scale.

    Band edges are spaced evenly in mel (``2595 log10(1 + f / 700)``) over ``num_mel_bins + 2``
    steps and snapped to spectrum bins with ``floor((dft_length + 1) f / sample_rate)``, exactly
    as ONNX's reference implementation does.
    """

    op_type = "MelWeightMatrix"
    since_versions = (17,)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({0, 1, 2, 3, 4})
    parameterising_inputs = frozenset({0, 1, 2, 3, 4})

    def forward(  # type: ignore[override]
        self, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz
    ) -> torch.Tensor:
        op = self.op_type
        mels = _scalar(op, "num_mel_bins", num_mel_bins)
        length = _scalar(op, "dft_length", dft_length)
        rate = _scalar(op, "sample_rate", sample_rate)
        low = float(lower_edge_hertz.reshape(-1)[0])
        high = float(upper_edge_hertz.reshape(-1)[0])
        if not (mels and mels > 0 and length and length > 0 and rate and rate > 0):
            raise BadInputError(
                f"{op}: num_mel_bins, dft_length and sample_rate must be positive, received "
                f"{mels}, {length}, {rate}"
            )
        if not 0 <= low < high <= rate / 2:
            raise BadInputError(
                f"{op}: expected 0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2 "
                f"({rate / 2}), received {low} and {high}"
            )
        bins = length // 2 + 1
        low_mel, high_mel = (2595 * math.log10(1 + f / 700) for f in (low, high))
        step = (high_mel - low_mel) / (mels + 2)
        mel = np.arange(mels + 2) * step + low_mel
        edges = ((length + 1) * (700 * (10 ** (mel / 2595) - 1)) // rate).astype(np.int64)
        # Two spare rows absorb edges that round past the last bin; they are dropped below.
        weights = np.zeros((bins + 2, mels))
        for i in range(mels):
            left, center, right = (int(e) for e in edges[i : i + 3])
            if center == left:
                weights[center, i] = 1
            else:
                j = np.arange(left, center + 1)
                weights[j, i] = (j - left) / (center - left)
            if right > center:
                j = np.arange(center, right)
                weights[j, i] = (right - j) / (right - center)
        dtype = _output_dtype(op, self.attr("output_datatype"))
        return torch.from_numpy(weights[:bins]).to(dtype=dtype, device=num_mel_bins.device)


def dft(
    x: Tensor,
    axis: int = -2,
    inverse: bool = False,
    onesided: bool = False,
    dft_length: int | None = None,
) -> Tensor:
    """The discrete Fourier transform of ``x`` (last dimension 1: real, 2: real/imaginary).

    :param x: a (..., n, 1) real or (..., n, 2) complex signal.
    :param axis: the axis to transform (not the last one).
    :param inverse: True for the inverse transform.
    :param onesided: True keeps only the first ``n // 2 + 1`` frequencies; with ``inverse``,
        reads such a half spectrum and returns the real signal.
    :param dft_length: the transform's length (the signal is padded or cut); None for its size.
    :returns: the (..., length, 2) transform, real and imaginary parts (ONNX DFT).
    :raises BadInputError: ``axis`` is out of range or ``dft_length`` is not positive.
    """
    attrs = {"inverse": int(inverse), "onesided": int(onesided)}
    length = None if dft_length is None else np.int64(dft_length)
    return DFT(**attrs)(x, length, np.int64(axis))


def stft(
    signal: Tensor,
    frame_step: int,
    window: Tensor | None = None,
    frame_length: int | None = None,
    onesided: bool = True,
) -> Tensor:
    """The short-time Fourier transform of ``signal`` (batch, length, 1 or 2) (ONNX STFT).

    :param signal: a (batch, length, 1) real or (batch, length, 2) complex signal.
    :param frame_step: the hop between frames.
    :param window: a (frame_length,) window applied to each frame, or None.
    :param frame_length: the frame's length; None for the window's.
    :param onesided: True keeps only the non-negative frequencies.
    :returns: a (batch, frames, bins, 2) tensor of real and imaginary parts.
    :raises BadInputError: ``signal`` is not 3-D, the window's length differs, or
        ``frame_step`` or ``frame_length`` is out of range.
    """
    length = None if frame_length is None else np.int64(frame_length)
    return STFT(onesided=int(onesided))(signal, np.int64(frame_step), window, length)


def _window(cls: type[_Window], size: int, periodic: bool, dtype: Any) -> Tensor:
    code = dtypes.torch_to_onnx(dtypes.as_torch_dtype(dtype))
    return cls(periodic=int(periodic), output_datatype=code)(np.int64(size))


def hann_window(size: int, periodic: bool = True, dtype: Any = torch.float32) -> Tensor:
    """A Hann window ``0.5 - 0.5 cos(2 pi n / N)`` (ONNX HannWindow).

    :param size: the number of values.
    :param periodic: True for N = size (a periodic window), False for N = size - 1.
    :param dtype: the element type (as :func:`cast` accepts it).
    :returns: a 1-D tensor of ``size`` values.
    :raises BadInputError: ``dtype`` is not a data type.
    """
    return _window(HannWindow, size, periodic, dtype)


def hamming_window(size: int, periodic: bool = True, dtype: Any = torch.float32) -> Tensor:
    """A Hamming window (ONNX HammingWindow).

    :param size: the number of values.
    :param periodic: True for N = size (a periodic window), False for N = size - 1.
    :param dtype: the element type (as :func:`cast` accepts it).
    :returns: a 1-D tensor of ``size`` values.
    :raises BadInputError: ``dtype`` is not a data type.
    """
    return _window(HammingWindow, size, periodic, dtype)


def blackman_window(size: int, periodic: bool = True, dtype: Any = torch.float32) -> Tensor:
    """A Blackman window (ONNX BlackmanWindow).

    :param size: the number of values.
    :param periodic: True for N = size (a periodic window), False for N = size - 1.
    :param dtype: the element type (as :func:`cast` accepts it).
    :returns: a 1-D tensor of ``size`` values.
    :raises BadInputError: ``dtype`` is not a data type.
    """
    return _window(BlackmanWindow, size, periodic, dtype)


def mel_weight_matrix(
    num_mel_bins: int,
    dft_length: int,
    sample_rate: int,
    lower_edge_hertz: float,
    upper_edge_hertz: float,
    dtype: Any = torch.float32,
) -> Tensor:
    """The (dft_length // 2 + 1, num_mel_bins) mel filter bank (ONNX MelWeightMatrix).

    :param num_mel_bins: the number of mel bands.
    :param dft_length: the length of the DFT whose bins it weighs.
    :param sample_rate: the signal's samples per second.
    :param lower_edge_hertz: the lowest frequency of the bank.
    :param upper_edge_hertz: the highest frequency, at most ``sample_rate / 2``.
    :param dtype: the element type (as :func:`cast` accepts it).
    :returns: the weight matrix.
    :raises BadInputError: a count or rate is not positive, or the edges are out of order or
        range.
    """
    code = dtypes.torch_to_onnx(dtypes.as_torch_dtype(dtype))
    return MelWeightMatrix(output_datatype=code)(
        np.int64(num_mel_bins),
        np.int64(dft_length),
        np.int64(sample_rate),
        np.float32(lower_edge_hertz),
        np.float32(upper_edge_hertz),
    )
