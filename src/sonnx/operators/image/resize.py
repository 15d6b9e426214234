"""Spatial resampling: Resize (and Upsample, which imports and exports as Resize).

ONNX Resize is separable: each resized axis is an independent 1-D interpolation. For every
axis we compute, once and in float64 on the host (exactly as the ONNX reference does), which
input positions feed each output position and with which weights; the tensor is then gathered
along that axis and the weights applied with torch ops. The result is linear in ``X``, so torch
autograd gives exact gradients for every mode, coordinate transformation, antialias and
``exclude_outside`` setting, including those ``F.interpolate`` does not offer.

GridSample, AffineGrid and RoiAlign live in :mod:`sonnx.operators.image.grid` and are
re-exported here so that importing this module provides the whole family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import torch

from sonnx import dtypes
from sonnx.engine.host_values import host
from sonnx.engine.memory_guard import check_shape
from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.errors import BadInputError, ExportError, OpsetTooOldError
from sonnx.operators.image.grid import (
    AffineGrid,
    GridSample,
    RoiAlign,
    affine_grid,
    grid_sample,
    roi_align,
)
from sonnx.symbolic_sizes import has_symbols, known_true
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "AffineGrid",
    "GridSample",
    "Resize",
    "RoiAlign",
    "affine_grid",
    "grid_sample",
    "resize",
    "roi_align",
    "upsample",
]

_MODES = ("nearest", "linear", "cubic")
_COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


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


def _plan_axis(
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


def _apply_plan(x: torch.Tensor, axis: int, plan: _AxisPlan, fill: float) -> torch.Tensor:
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


def _interpolated(
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


def _torch_kernel(
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


class Resize(Operator):
    """ONNX Resize (11, 13, 18, 19): nearest / linear / cubic, every coordinate mode.

    Inputs ``(X, roi, scales, sizes)``; exactly one of ``scales`` and ``sizes`` is non-empty.
    """

    op_type = "Resize"
    since_versions = (11, 13, 18, 19)
    output_shape = OutputShape.FROM_SHAPES
    # Strings, which ONNX lets in, are refused: interpolation computes on numbers.
    moves_elements_only = False
    # roi, scales and sizes (Resize-10's and Upsample's scales are input 1).
    shape_inputs = frozenset({1, 2, 3})
    size_inputs = frozenset({3})
    parameterising_inputs = frozenset({1, 2, 3})

    def forward(
        self,
        x: torch.Tensor,
        roi: torch.Tensor | None = None,
        scales: torch.Tensor | None = None,
        sizes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self._check_attrs()
        axes = self._axes(x.dim())
        in_shape = [x.shape[a] for a in axes]
        scale_list, out_shape = self._scales_and_sizes(x, axes, in_shape, scales, sizes)
        full = list(x.shape)
        for axis, n in zip(axes, out_shape, strict=True):
            full[axis] = n
        check_shape("Resize: output", full, x.dtype, x.device)
        rois = self._rois(roi, axes, x.dim())
        given_sizes = sizes is not None and sizes.numel() > 0
        if has_symbols(in_shape) or has_symbols(out_shape):  # a trace with symbolic sizes
            # (not torch's kernels: their decompositions guard on the sizes, one compile each)
            return _interpolated(self, x, axes, in_shape, out_shape, scale_list, given_sizes)
        fast = _torch_kernel(self, x, axes, in_shape, out_shape, scale_list)
        if fast is not None:
            self._shapes = (tuple(x.shape), tuple(fast.shape))
            return fast
        compute = x if dtypes.is_float(x.dtype) or self.attr("mode") == "nearest" else x.double()
        fill = float(self.attr("extrapolation_value"))
        for k, axis in enumerate(axes):
            unchanged = out_shape[k] == in_shape[k] and math.isclose(scale_list[k], 1.0)
            if unchanged and (rois[k] is None or rois[k] == (0.0, 1.0)):
                continue
            plan = _plan_axis(self, in_shape[k], out_shape[k], scale_list[k], rois[k])
            compute = _apply_plan(compute, axis, plan, fill)
        self._shapes = (tuple(x.shape), tuple(compute.shape))
        if compute.dtype != x.dtype:
            info = torch.iinfo(x.dtype)
            compute = compute.round().clamp(info.min, info.max).to(x.dtype)
        return compute

    def _check_attrs(self) -> None:
        checks = (
            ("mode", _MODES),
            ("coordinate_transformation_mode", _COORDINATE_MODES),
            ("nearest_mode", _NEAREST_MODES),
            ("keep_aspect_ratio_policy", ("stretch", "not_larger", "not_smaller", None)),
        )
        for name, allowed in checks:
            if self.attr(name) not in allowed:
                raise BadInputError(
                    f"Resize: attribute {name} must be one of {', '.join(map(str, allowed))}, "
                    f"received {self.attr(name)!r}"
                )
        if self.attr("antialias") and self.attr("mode") == "nearest":
            raise BadInputError("Resize: antialias needs mode linear or cubic, received nearest")

    def _axes(self, rank: int) -> list[int]:
        axes = self.attr("axes")
        if axes is None:
            return list(range(rank))
        normal = [a + rank if a < 0 else a for a in axes]
        if any(not 0 <= a < rank for a in normal) or len(set(normal)) != len(normal):
            raise BadInputError(
                f"Resize: attribute axes must be distinct axes of a {rank}-D input, "
                f"received {list(axes)}"
            )
        return normal

    def _scales_and_sizes(
        self,
        x: torch.Tensor,
        axes: list[int],
        in_shape: list[int],
        scales: torch.Tensor | None,
        sizes: torch.Tensor | None,
    ) -> tuple[list[float], list[int]]:
        have_scales = scales is not None and scales.numel() > 0
        have_sizes = sizes is not None and sizes.numel() > 0
        if have_scales == have_sizes:
            raise BadInputError(
                "Resize: exactly one of the inputs scales and sizes must be non-empty, received "
                f"scales={None if scales is None else list(scales.shape)}, "
                f"sizes={None if sizes is None else list(sizes.shape)}"
            )
        given = scales if have_scales else sizes
        if given.numel() != len(axes):
            name = "scales" if have_scales else "sizes"
            raise BadInputError(
                f"Resize: input {name} must have one entry per resized axis ({len(axes)}), "
                f"received {given.numel()} for input shape {tuple(x.shape)}"
            )
        if have_scales:
            scale_list = [float(s) for s in host(scales).reshape(-1).tolist()]
            if any(s <= 0 for s in scale_list):
                raise BadInputError(f"Resize: scales must be positive, received {scale_list}")
            # A whole scale multiplies: the same sizes, and symbolic sizes stay integers.
            return scale_list, [
                n * int(s) if s.is_integer() else math.floor(s * n)
                for s, n in zip(scale_list, in_shape, strict=True)
            ]
        out = host_ints(sizes)
        scale_list = [o / n for o, n in zip(out, in_shape, strict=True)]
        policy = self.attr("keep_aspect_ratio_policy") or "stretch"
        if policy != "stretch":
            s = min(scale_list) if policy == "not_larger" else max(scale_list)
            scale_list = [s] * len(axes)
            out = [int(s * n + 0.5) for n in in_shape]
        return scale_list, out

    def _rois(
        self, roi: torch.Tensor | None, axes: list[int], rank: int
    ) -> list[tuple[float, float] | None]:
        if self.attr("coordinate_transformation_mode") != "tf_crop_and_resize":
            return [None] * len(axes)
        values = [] if roi is None else [float(v) for v in host(roi).reshape(-1).tolist()]
        n = len(axes)
        if len(values) == 2 * n:
            return [(values[k], values[n + k]) for k in range(n)]
        if len(values) == 2 * rank and n != rank:
            return [(values[a], values[rank + a]) for a in axes]
        raise BadInputError(
            f"Resize: tf_crop_and_resize needs roi with 2 * {n} values (starts then ends), "
            f"received {len(values)}"
        )

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        coordinate = self.attr("coordinate_transformation_mode")
        needs_18 = bool(self.attr("antialias")) or self.attr("keep_aspect_ratio_policy") not in (
            None,
            "stretch",
        )
        if (
            (coordinate == "half_pixel_symmetric" and g.opset < 19)
            or (needs_18 and g.opset < 18)
            or (coordinate == "tf_half_pixel_for_nn" and g.opset >= 13)
        ):
            raise ExportError(
                f"Resize: {self!r} has no ONNX form at opset {g.opset} (half_pixel_symmetric "
                "needs 19, antialias/keep_aspect_ratio_policy need 18, "
                "tf_half_pixel_for_nn ends at 12)"
            )
        ins = list(inputs) + [""] * (4 - len(inputs))
        if self.attr("axes") is not None and g.opset < 18:
            ins = self._full_rank_inputs(g, ins)
        if g.opset < 11:
            self._export_resize10(g, ins, outputs)
            return
        if g.opset < 13:  # roi and scales were required inputs before 13
            ins[1] = ins[1] or g.constant(np.zeros(0, np.float32), "roi")
            ins[2] = ins[2] or g.constant(np.zeros(0, np.float32), "scales")
        g.add_node("Resize", ins, outputs, **self.export_attrs(g))

    def _full_rank_inputs(self, g: GraphBuilder, ins: list[str]) -> list[str]:
        """Before opset 18 there is no ``axes``: write scales or sizes for every axis."""
        if self.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
            raise OpsetTooOldError(
                f"Resize: tf_crop_and_resize with axes needs opset 18, cannot write it at "
                f"opset {g.opset}",
                18,
            )
        in_shape, out_shape = self._shapes
        if ins[2]:
            given = self.inputs[2].data.reshape(-1).tolist()
            full = [1.0] * len(in_shape)
            for axis, value in zip(self._axes(len(in_shape)), given, strict=True):
                full[axis] = value
            return [ins[0], ins[1], g.constant(full, "scales", dtype=np.float32), ""]
        return [ins[0], ins[1], "", g.constant(list(out_shape), "sizes", dtype=np.int64)]

    def export_attrs(self, g: GraphBuilder) -> dict[str, Any]:
        """The set attributes that Resize has at ``g.opset`` (the others were checked neutral)."""
        known = onnx.defs.get_schema("Resize", g.opset).attributes
        return {k: v for k, v in super().export_attrs(g).items() if k in known}

    def _export_resize10(self, g: GraphBuilder, ins: list[str], outputs: list[str]) -> None:
        """Resize-10 knows asymmetric coordinates with floor rounding (nearest) or linear."""
        mode = self.attr("mode")
        ok = self.attr("coordinate_transformation_mode") == "asymmetric" and (
            mode == "linear" or (mode == "nearest" and self.attr("nearest_mode") == "floor")
        )
        if not ok:
            raise ExportError(
                f"Resize: opset {g.opset} only has Resize-10 (asymmetric coordinates, nearest "
                f"with floor or linear), cannot write {self!r}"
            )
        scales = ins[2]
        if not scales:  # sizes become the scales they amounted to in the recorded call
            in_shape, out_shape = self._shapes
            scales = g.constant(
                [o / i for o, i in zip(out_shape, in_shape, strict=True)],
                "scales",
                dtype=np.float32,
            )
        g.add_node("Resize", [ins[0], scales], outputs, mode=mode)


def resize(
    x: Tensor,
    scales: Sequence[float] | None = None,
    sizes: Sequence[int] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    axes: Sequence[int] | None = None,
    antialias: bool = False,
    cubic_coeff_a: float = -0.75,
) -> Tensor:
    """Resize ``x`` by ``scales`` or to ``sizes`` (one per axis in ``axes``, default all axes).

    :param x: the tensor to resize.
    :param scales: the factor per axis; give this or ``sizes``.
    :param sizes: the output size per axis; give this or ``scales``.
    :param mode: ``"nearest"``, ``"linear"`` or ``"cubic"``.
    :param coordinate_transformation_mode: how output coordinates map to input ones (ONNX's
        names: ``"half_pixel"``, ``"align_corners"``, ``"asymmetric"``, ...).
    :param nearest_mode: the rounding of ``"nearest"``: ``"round_prefer_floor"``,
        ``"round_prefer_ceil"``, ``"floor"`` or ``"ceil"``.
    :param axes: the axes ``scales`` or ``sizes`` apply to; None for all.
    :param antialias: True widens the filter when downsampling (linear and cubic).
    :param cubic_coeff_a: the cubic kernel's coefficient.
    :returns: the resized tensor, of ``x``'s dtype (ONNX Resize).
    :raises BadInputError: neither or both of ``scales`` and ``sizes`` are given.
    """
    if (scales is None) == (sizes is None):
        raise BadInputError(
            f"resize: give exactly one of scales and sizes, received scales={scales}, sizes={sizes}"
        )
    op = Resize(
        mode=mode,
        coordinate_transformation_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        axes=None if axes is None else list(axes),
        antialias=int(antialias),
        cubic_coeff_a=cubic_coeff_a,
    )
    if scales is not None:
        return op(x, None, np.asarray(scales, dtype=np.float32))
    return op(x, None, None, np.asarray(sizes, dtype=np.int64))


def upsample(x: Tensor, scale_factor: float | Sequence[float], mode: str = "nearest") -> Tensor:
    """Upsample the spatial axes (all but N and C) by ``scale_factor`` like ONNX Upsample.

    Coordinates are asymmetric with floor rounding, as in Upsample-7/9; recorded as Resize.

    :param x: an (N, C, spatial...) tensor.
    :param scale_factor: one factor for every spatial axis, or one per spatial axis.
    :param mode: ``"nearest"`` or ``"linear"``.
    :returns: the upsampled tensor, of ``x``'s dtype.
    :raises BadInputError: ``x`` has fewer than 3 axes, ``scale_factor`` has the wrong length,
        or ``mode`` is unknown.
    """
    if x.ndim() < 3:
        raise BadInputError(
            f"upsample: input x must be at least 3-D (N, C, spatial...), received shape {x.shape}"
        )
    spatial = x.ndim() - 2
    factors = (
        [float(scale_factor)] * spatial
        if isinstance(scale_factor, (int, float))
        else [float(s) for s in scale_factor]
    )
    if len(factors) != spatial:
        raise BadInputError(
            f"upsample: scale_factor needs {spatial} values for input shape {x.shape}, "
            f"received {factors}"
        )
    if mode not in ("nearest", "linear"):
        raise BadInputError(f"upsample: mode must be nearest or linear, received {mode!r}")
    return resize(
        x,
        scales=[1.0, 1.0, *factors],
        mode=mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
