"""How Resize computes: for every resized axis, the input positions that feed each output
position and their weights (a plan made once, in float64 on the host, exactly as the ONNX
reference does), applied with a gather and a weighted sum; the same taps computed by traced
tensor operations for symbolic sizes; and torch's own upsampling kernels where they compute
exactly what ONNX asks. The operator, its checks and export are in
:mod:`sonnx.operators.image.resize`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.symbolic_sizes import known_true

if TYPE_CHECKING:
    from sonnx.operators.image.resize import Resize

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


class _AxisPlan:
    """How one axis is resampled: ``out[i] = sum_k weights[i, k] * in[index[i, k]]``.

    ``weights`` is None for nearest (one tap). ``outside`` flags output positions that
    tf_crop_and_resize maps outside the input (they take ``extrapolation_value``).
    """

    def __init__(
        self, index: np.ndarray, weights: np.ndarray | None, outside: np.ndarray | None
    ) -> None:
        self.index = index
        self.weights = weights
        self.outside = outside


def _source_coordinates(
    mode: str, out_size: int, in_size: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Input coordinate of each output position (ONNX's ``x_original``), and the extrapolated."""
    y = np.arange(out_size, dtype=np.float64)
    length = scale * in_size  # the un-rounded output length
    if mode == "align_corners":
        x = np.zeros(out_size) if length == 1 else y * (in_size - 1) / (length - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / length)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # tf_crop_and_resize
        assert roi is not None
        start, end = roi
        if length == 1:
            x = np.full(out_size, (end - start) * (in_size - 1) / 2)
        else:
            x = y * (end - start) * (in_size - 1) / (length - 1)
        x = x + start * (in_size - 1)
        return x, (x < 0) | (x > in_size - 1)
    return x, None


def _nearest_index(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    floor = np.floor(x)
    frac = x - floor
    if nearest_mode == "floor":
        up = np.zeros_like(x, dtype=bool)
    elif nearest_mode == "ceil":
        up = frac > 0
    elif nearest_mode == "round_prefer_ceil":
        up = frac >= 0.5
    else:  # round_prefer_floor
        up = frac > 0.5
    return (floor + up).astype(np.int64)


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a`` at distances ``d``."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def plan_axis(
    op: Resize, in_size: int, out_size: int, scale: float, roi: tuple[float, float] | None
) -> _AxisPlan:
    """Taps and weights of one axis, following the ONNX reference implementation exactly."""
    x, outside = _source_coordinates(
        op.attr("coordinate_transformation_mode"), out_size, in_size, scale, roi
    )
    mode = op.attr("mode")
    if mode == "nearest":
        index = np.clip(_nearest_index(x, op.attr("nearest_mode")), 0, in_size - 1)
        return _AxisPlan(index[:, None], None, outside)
    # The reference takes the taps left of x: at an integer x the fraction counts as 1.
    floor = np.floor(x)
    integer = x == floor
    ratio = np.where(integer, 1.0, x - floor)
    base = np.where(integer, floor - 1, floor).astype(np.int64)
    antialias = bool(op.attr("antialias")) and scale < 1
    kernel_scale = min(scale, 1.0) if antialias else 1.0
    radius = 1.0 if mode == "linear" else 2.0
    first = int(np.floor(-radius / kernel_scale) + 1)  # offset of the first tap from base
    offsets = np.arange(first, 2 - first)
    distance = (offsets[None, :] - ratio[:, None]) * kernel_scale
    if mode == "linear":
        weights = np.clip(1 - np.abs(distance), 0, 1)
    else:
        weights = _cubic_kernel(distance, float(op.attr("cubic_coeff_a")))
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    index = base[:, None] + offsets[None, :]
    if op.attr("exclude_outside"):
        weights = np.where((index < 0) | (index >= in_size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return _AxisPlan(np.clip(index, 0, in_size - 1), weights, outside)


def apply_plan(x: torch.Tensor, axis: int, plan: _AxisPlan, fill: float) -> torch.Tensor:
    out_size, taps = plan.index.shape
    index = torch.from_numpy(plan.index.reshape(-1)).to(x.device)
    gathered = x.index_select(axis, index)
    if plan.weights is not None:
        shape = list(x.shape)
        shape[axis : axis + 1] = [out_size, taps]
        weight_shape = [1] * len(shape)
        weight_shape[axis : axis + 2] = [out_size, taps]
        w = torch.from_numpy(plan.weights).to(device=x.device, dtype=x.dtype)
        gathered = (gathered.reshape(shape) * w.reshape(weight_shape)).sum(axis + 1)
    if plan.outside is not None and plan.outside.any():
        mask_shape = [1] * x.dim()
        mask_shape[axis] = out_size
        mask = torch.from_numpy(plan.outside).to(x.device).reshape(mask_shape)
        gathered = torch.where(mask, torch.full((), fill, dtype=x.dtype, device=x.device), gathered)
    return gathered


def interpolated(
    op: Resize,
    x: torch.Tensor,
    axes: list[int],
    in_shape: list[Any],
    out_shape: list[Any],
    scales: list[Any],
    given_sizes: bool,
) -> torch.Tensor:
    """Resize to symbolic sizes, for a graph traced with symbolic sizes.

    The plan of taps above is computed on the host for known sizes; here the taps are
    computed by traced tensor operations whose only symbolic operands are integers (a float
    symbol would not survive inductor), for the modes exporters write: nearest
    ``asymmetric``/``floor`` at a whole scale or to given sizes, and linear ``half_pixel`` /
    ``pytorch_half_pixel``. Any other resize raises, and graph mode compiles that part for
    each shape instead.
    """
    mode, coordinates = op.attr("mode"), op.attr("coordinate_transformation_mode")
    rounding = op.attr("nearest_mode")
    nearest = mode == "nearest" and (coordinates, rounding) == ("asymmetric", "floor")
    linear = mode == "linear" and coordinates in ("half_pixel", "pytorch_half_pixel")
    if (
        not (nearest or linear)
        or op.attr("antialias")
        or (linear and not dtypes.is_float(x.dtype))
        or not (given_sizes or all(isinstance(s, float) and s.is_integer() for s in scales))
    ):
        raise NotImplementedError(
            f"Resize: mode {mode!r} with {coordinates!r} and scales {scales} on a "
            f"{dtypes.dtype_name(x.dtype)} input has no form for symbolic sizes"
        )
    for axis, n, o in zip(axes, in_shape, out_shape, strict=True):
        if known_true(o == n):
            continue
        if nearest:  # floor(y / (o / n)), exactly, in integers
            x = x.index_select(axis, torch.arange(o, device=x.device) * n // o)
            continue
        # The tap left of each output position and the weight of the one right of it.
        at = ((torch.arange(o, device=x.device, dtype=torch.float32) + 0.5) * n / o - 0.5).clamp(
            min=0
        )
        left = at.floor().long().clamp(max=n - 1)
        right = (left + 1).clamp(max=n - 1)
        shape = [1] * x.dim()
        shape[axis] = o
        weight = (at - left).to(x.dtype).reshape(shape)
        low = x.index_select(axis, left)
        x = low + (x.index_select(axis, right) - low) * weight
    return x


_TORCH_LINEAR = {
    3: torch.ops.aten.upsample_linear1d,
    4: torch.ops.aten.upsample_bilinear2d,
    5: torch.ops.aten.upsample_trilinear3d,
}
_TORCH_NEAREST = {
    3: torch.ops.aten.upsample_nearest1d,
    4: torch.ops.aten.upsample_nearest2d,
    5: torch.ops.aten.upsample_nearest3d,
}
_TORCH_NEAREST_EXACT = {
    3: torch.ops.aten._upsample_nearest_exact1d,
    4: torch.ops.aten._upsample_nearest_exact2d,
    5: torch.ops.aten._upsample_nearest_exact3d,
}


def torch_kernel(
    op: Resize,
    x: torch.Tensor,
    axes: list[int],
    in_shape: list[int],
    out_shape: list[int],
    scales: list[float],
) -> torch.Tensor | None:
    """The resize by torch's own upsampling kernel where that computes exactly what ONNX
    asks, else None. ``scales`` are ONNX's per-axis scales (out / in for given sizes).

    Exporters resize image maps (an FPN's upsampling) in the modes torch offers, and torch's
    kernels are several times faster than the separable gathers above, and keep a
    channels-last input channels-last for the convolution after. They apply to the spatial
    axes of a 3- to 5-D float map (N and C unchanged), without antialias or a crop, when:
    linear with ``half_pixel``, ``pytorch_half_pixel`` (outputs longer than 1) or
    ``align_corners`` (where the scaled length is the output size: ONNX divides by the
    former, torch by the latter), the coordinates of torch's ``align_corners`` False / True,
    edges clamped alike; nearest at a power-of-two whole scale (exact in floats) with
    ``asymmetric``/``floor`` (torch's ``nearest``) or ``half_pixel`` and either round-half
    mode (``nearest-exact``: at a whole scale a source coordinate is never a tie).
    """
    rank = x.dim()
    if rank not in _TORCH_LINEAR or op.attr("antialias") or op.attr("exclude_outside"):
        return None
    if not dtypes.is_float(x.dtype) or (
        x.device.type == "cpu" and x.dtype not in (torch.float32, torch.float64)
    ):
        return None
    size, factors = list(x.shape[2:]), [1.0] * (rank - 2)
    for axis, n, o, s in zip(axes, in_shape, out_shape, scales, strict=True):
        if axis < 2 and o != n:
            return None
        if axis >= 2:
            size[axis - 2], factors[axis - 2] = o, s
    lengths = [n * s for n, s in zip(x.shape[2:], factors, strict=True)]
    coordinates, mode = op.attr("coordinate_transformation_mode"), op.attr("mode")
    if mode == "linear":
        if coordinates == "align_corners" and lengths != size:
            return None  # ONNX divides by the unrounded length
        if coordinates == "pytorch_half_pixel" and min(size) <= 1:
            return None
        if coordinates not in ("half_pixel", "pytorch_half_pixel", "align_corners"):
            return None
        return _TORCH_LINEAR[rank](x, size, coordinates == "align_corners", *factors)
    if mode != "nearest" or lengths != size:
        return None
    if any(not s.is_integer() or int(s) & (int(s) - 1) for s in factors):
        return None
    rounding = op.attr("nearest_mode")
    if (coordinates, rounding) == ("asymmetric", "floor"):
        return _TORCH_NEAREST[rank](x, size, *factors)
    if coordinates == "half_pixel" and rounding in ("round_prefer_floor", "round_prefer_ceil"):
        return _TORCH_NEAREST_EXACT[rank](x, size, *factors)
    return None
