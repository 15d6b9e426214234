"""Spatial resampling: Resize (and Upsample, which imports and exports as Resize).

ONNX Resize is separable: each resized axis is an independent 1-D interpolation. For every
axis we compute, once and in float64 on the host (exactly as the ONNX reference does), which
input positions feed each output position and with which weights; the tensor is then gathered
along that axis and the weights applied with torch ops. The result is linear in ``X``, so torch
autograd gives exact gradients for every mode, coordinate transformation, antialias and
``exclude_outside`` setting, including those ``F.interpolate`` does not offer. That computation
lives in :mod:`sonnx.operators.image.interpolation`; this module holds the operator, its input
checks and its export.

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
from sonnx.operators.image.interpolation import (
    COORDINATE_MODES,
    MODES,
    NEAREST_MODES,
    apply_plan,
    interpolated,
    plan_axis,
    torch_kernel,
)
from sonnx.symbolic_sizes import has_symbols
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
            return interpolated(self, x, axes, in_shape, out_shape, scale_list, given_sizes)
        fast = torch_kernel(self, x, axes, in_shape, out_shape, scale_list)
        if fast is not None:
            self._shapes = (tuple(x.shape), tuple(fast.shape))
            return fast
        compute = x if dtypes.is_float(x.dtype) or self.attr("mode") == "nearest" else x.double()
        fill = float(self.attr("extrapolation_value"))
        for k, axis in enumerate(axes):
            unchanged = out_shape[k] == in_shape[k] and math.isclose(scale_list[k], 1.0)
            if unchanged and (rois[k] is None or rois[k] == (0.0, 1.0)):
                continue
            plan = plan_axis(self, in_shape[k], out_shape[k], scale_list[k], rois[k])
            compute = apply_plan(compute, axis, plan, fill)
        self._shapes = (tuple(x.shape), tuple(compute.shape))
        if compute.dtype != x.dtype:
            info = torch.iinfo(x.dtype)
            compute = compute.round().clamp(info.min, info.max).to(x.dtype)
        return compute

    def _check_attrs(self) -> None:
        checks = (
            ("mode", MODES),
            ("coordinate_transformation_mode", COORDINATE_MODES),
            ("nearest_mode", NEAREST_MODES),
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
