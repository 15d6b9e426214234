"""Sampling at given coordinates: GridSample, AffineGrid and RoiAlign.

GridSample and AffineGrid are torch's ``F.grid_sample`` / ``F.affine_grid``, whose semantics
ONNX copied (the ONNX reference cites PyTorch's kernel). RoiAlign has no torch core op: the
sample positions and bilinear weights are computed on the host per region (they depend only on
``rois``, which ONNX does not differentiate) and applied to ``X`` with gathers, so the gradient
with respect to ``X`` comes from torch autograd.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError, ExportError, OpsetTooOldError
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["AffineGrid", "GridSample", "RoiAlign", "affine_grid", "grid_sample", "roi_align"]

# GridSample-16 spelled the modes the way torch does; GridSample-20 renamed them.
_TORCH_MODE = {"bilinear": "bilinear", "linear": "bilinear", "bicubic": "bicubic",
               "cubic": "bicubic", "nearest": "nearest"}  # fmt: skip
_PADDING_MODES = ("zeros", "border", "reflection")


class GridSample(Operator):
    """ONNX GridSample (16, 20, 22): sample ``X`` (N, C, spatial...) at ``grid`` positions.

    ``grid`` is (N, out spatial..., r) with normalized coordinates in [-1, 1], innermost axis
    first (x, y[, z]). 1-D, 2-D and 3-D spatial inputs are supported; cubic needs 1-D or 2-D.
    """

    op_type = "GridSample"
    since_versions = (16, 20, 22)
    output_shape = OutputShape.FROM_SHAPES
    # Strings, which ONNX lets in, are refused: sampling computes on numbers.
    moves_elements_only = False

    singa_functions = (
        SingaFunction(
            "grid_sample",
            "Sample ``x`` at the normalized positions of ``grid`` (ONNX GridSample).",
            inputs=(
                Input("x", "the (N, C, spatial...) input (1-D to 3-D spatial)."),
                Input(
                    "grid",
                    (
                        "the (N, out spatial..., r) positions in [-1, 1], innermost axis first "
                        "(x, y[, z])."
                    ),
                ),
            ),
            returns="the (N, C, out spatial...) samples.",
            keywords=(
                Keyword("mode", '``"linear"``, ``"cubic"`` (1-D and 2-D only) or ``"nearest"``.'),
                Keyword(
                    "padding_mode",
                    ('what positions outside read: ``"zeros"``, ``"border"`` or ``"reflection"``.'),
                ),
                Keyword(
                    "align_corners",
                    "True maps -1 and 1 to the corner pixels' centres, False to their edges.",
                    default=False,
                    annotation="bool",
                    convert="int",
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``mode`` or ``padding_mode`` is unknown, the shapes of ``x`` and "
                        "``grid`` do not fit, or cubic mode meets a 3-D input."
                    ),
                ),
            ),
        ),
    )

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        mode = self.attr("mode")
        padding = self.attr("padding_mode")
        if mode not in _TORCH_MODE:
            raise BadInputError(
                f"GridSample: attribute mode must be linear, cubic or nearest, received {mode!r}"
            )
        if padding not in _PADDING_MODES:
            raise BadInputError(
                "GridSample: attribute padding_mode must be zeros, border or reflection, "
                f"received {padding!r}"
            )
        spatial = x.dim() - 2
        if spatial not in (1, 2, 3) or grid.dim() != x.dim() or grid.shape[-1] != spatial:
            raise BadInputError(
                "GridSample: input X must be 3-D to 5-D (N, C, spatial...) and grid "
                "(N, out spatial..., len(spatial)), received X shape "
                f"{tuple(x.shape)} and grid shape {tuple(grid.shape)}"
            )
        if grid.shape[0] != x.shape[0]:
            raise BadInputError(
                f"GridSample: grid batch {grid.shape[0]} differs from X batch {x.shape[0]}"
            )
        torch_mode = _TORCH_MODE[mode]
        if torch_mode == "bicubic" and spatial == 3:
            raise BadInputError("GridSample: cubic mode supports 1-D and 2-D inputs, received 3-D")
        grid = grid.to(x.dtype)
        if spatial == 1:
            # A 1-D sample is a 2-D sample of a height-1 image at its only row (y = 0 lands on
            # row 0 exactly for both align_corners settings).
            grid = torch.stack([grid[..., 0], torch.zeros_like(grid[..., 0])], -1).unsqueeze(1)
            out = self._sample(x.unsqueeze(2), grid, torch_mode, padding)
            return out.squeeze(2)
        return self._sample(x, grid, torch_mode, padding)

    def _sample(self, x: torch.Tensor, grid: torch.Tensor, mode: str, padding: str) -> torch.Tensor:
        align = bool(self.attr("align_corners"))
        if mode == "bicubic" and padding != "zeros":
            grid = _fold_cubic_grid(grid, x.shape[2:], padding, align)
        return F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset < 16:
            raise OpsetTooOldError(
                f"GridSample: no ONNX GridSample before opset 16 (asked {g.opset})", 16
            )
        attrs = self.export_attrs(g)
        mode = self.attr("mode")
        if g.opset < 20:
            if self.inputs[0].ndim() != 4:
                raise OpsetTooOldError(
                    f"GridSample: opset {g.opset} only has 2-D GridSample (4-D X), received "
                    f"X shape {self.inputs[0].shape}; export at opset 20 or later",
                    20,
                )
            attrs["mode"] = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
        else:
            attrs["mode"] = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
        g.add_node("GridSample", inputs, outputs, **attrs)


def _reflect(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Reflect ``x`` at ``low`` and ``high`` until it lies between them."""
    span = high - low
    below = x < low
    dx = torch.where(below, low - x, x - high)
    n = torch.floor(dx / span)
    r = dx - n * span
    even = torch.remainder(n, 2) == 0
    inside_from_low = torch.where(even, low + r, high - r)
    inside_from_high = torch.where(even, high - r, low + r)
    return torch.where(below, inside_from_low, inside_from_high)


def _fold_cubic_grid(
    grid: torch.Tensor, sizes: torch.Size, padding: str, align: bool
) -> torch.Tensor:
    """Bring out-of-range cubic sample positions inside the image as ONNX does.

    ONNX clamps (border) or reflects (reflection) a cubic sample's position before taking its
    taps; torch only folds the taps. Positions are folded here, in pixel units, and mapped back.
    """
    axes = []
    for i, size in enumerate(reversed(sizes)):  # grid's last axis lists x (width) first
        g = grid[..., i]
        if align and size == 1:  # every position maps to the only pixel
            axes.append(g)
            continue
        pixel = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        outside = (pixel < low) | (pixel > high)
        border = padding == "border"
        folded = pixel.clamp(0, size - 1) if border else _reflect(pixel, low, high)
        pixel = torch.where(outside, folded, pixel)
        axes.append(pixel * 2 / (size - 1) - 1 if align else (2 * pixel + 1) / size - 1)
    return torch.stack(axes, -1)


class AffineGrid(Operator):
    """ONNX AffineGrid (20): sampling grid for ``theta`` (N, 2, 3) or (N, 3, 4) and ``size``."""

    op_type = "AffineGrid"
    since_versions = (20,)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})

    def forward(self, theta: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
        shape = host_ints(size)
        spatial = len(shape) - 2
        if spatial not in (2, 3) or tuple(theta.shape[1:]) != (spatial, spatial + 1):
            raise BadInputError(
                "AffineGrid: size must be (N, C, H, W) or (N, C, D, H, W) and theta "
                "(N, 2, 3) or (N, 3, 4) to match, received size "
                f"{shape} and theta shape {tuple(theta.shape)}"
            )
        if theta.shape[0] != shape[0]:
            raise BadInputError(
                f"AffineGrid: theta batch {theta.shape[0]} differs from size[0] = {shape[0]}"
            )
        return F.affine_grid(theta, shape, align_corners=bool(self.attr("align_corners")))


def _axis_samples(
    start: float, bin_size: float, bins: int, grid: int, limit: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps of RoiAlign's sample points along one axis.

    Returns (index (S, 2), weight (S, 2), valid (S,)) for the S = bins * grid sample points, in
    the order bin-major, following the ONNX reference (points beyond one pixel outside the map
    contribute nothing; the rest are clamped to the border).
    """
    k = np.arange(bins)[:, None]
    i = np.arange(grid)[None, :]
    pos = (start + k * bin_size + (i + 0.5) * bin_size / grid).reshape(-1)
    valid = (pos >= -1.0) & (pos <= limit)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    at_edge = low >= limit - 1
    low = np.where(at_edge, limit - 1, low)
    high = np.where(at_edge, limit - 1, low + 1)
    pos = np.where(at_edge, low.astype(np.float64), pos)
    frac = pos - low
    return np.stack([low, high], 1), np.stack([1 - frac, frac], 1), valid


class RoiAlign(Operator):
    """ONNX RoiAlign (10, 16, 22): average or max of bilinear samples over regions of ``X``.

    ``rois`` is (R, 4) as (x1, y1, x2, y2) in input scale, ``batch_indices`` (R,). RoiAlign-10
    has no coordinate_transformation_mode: it behaves as ``output_half_pixel``.
    """

    op_type = "RoiAlign"
    since_versions = (10, 16, 22)
    output_shape = OutputShape.FROM_SHAPES
    # The boxes and their batch indices are data.
    parameterising_inputs = frozenset()

    def forward(
        self, x: torch.Tensor, rois: torch.Tensor, batch_indices: torch.Tensor
    ) -> torch.Tensor:
        if x.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 4:
            raise BadInputError(
                "RoiAlign: input X must be 4-D (N, C, H, W) and rois (R, 4), received X shape "
                f"{tuple(x.shape)} and rois shape {tuple(rois.shape)}"
            )
        mode = self.attr("mode")
        if mode not in ("avg", "max"):
            raise BadInputError(f"RoiAlign: attribute mode must be avg or max, received {mode!r}")
        batches = host_ints(batch_indices)
        if len(batches) != rois.shape[0] or any(not 0 <= b < x.shape[0] for b in batches):
            raise BadInputError(
                f"RoiAlign: batch_indices must hold {rois.shape[0]} indices in [0, "
                f"{x.shape[0]}), received {batches}"
            )
        out_h, out_w = int(self.attr("output_height")), int(self.attr("output_width"))
        results = [
            self._one_roi(x[b], roi, out_h, out_w, mode)
            for b, roi in zip(batches, rois.detach().double().cpu().numpy(), strict=True)
        ]
        if not results:
            return x.new_zeros((0, x.shape[1], out_h, out_w))
        return torch.stack(results)

    def _one_roi(
        self, image: torch.Tensor, roi: np.ndarray, out_h: int, out_w: int, mode: str
    ) -> torch.Tensor:
        half_pixel = self.attr("coordinate_transformation_mode") == "half_pixel"
        offset = 0.5 if half_pixel else 0.0
        x1, y1, x2, y2 = (float(v) * float(self.attr("spatial_scale")) - offset for v in roi)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not half_pixel:  # malformed regions become 1x1
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        ratio = int(self.attr("sampling_ratio"))
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / out_h)
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / out_w)
        channels, height, width = image.shape
        if grid_h <= 0 or grid_w <= 0:
            return image.new_zeros((channels, out_h, out_w))
        yi, yw, yv = _axis_samples(y1, roi_h / out_h, out_h, grid_h, height)
        xi, xw, xv = _axis_samples(x1, roi_w / out_w, out_w, grid_w, width)
        device, dtype = image.device, image.dtype
        wy = torch.from_numpy(yw * yv[:, None]).to(device=device, dtype=dtype)
        wx = torch.from_numpy(xw * xv[:, None]).to(device=device, dtype=dtype)
        rows = image.index_select(1, torch.from_numpy(yi.reshape(-1)).to(device))
        taps = rows.index_select(2, torch.from_numpy(xi.reshape(-1)).to(device))
        taps = taps.reshape(channels, len(yi), 2, len(xi), 2)
        weighted = taps * wy[None, :, :, None, None] * wx[None, None, None, :, :]
        if mode == "avg":
            samples = weighted.sum((2, 4))
            bins = samples.reshape(channels, out_h, grid_h, out_w, grid_w)
            return bins.sum((2, 4)) / max(grid_h * grid_w, 1)
        samples = weighted.amax((2, 4))
        bins = samples.reshape(channels, out_h, grid_h, out_w, grid_w)
        return bins.amax((2, 4))

    def export_attrs(self, g: GraphBuilder) -> dict[str, Any]:
        attrs = super().export_attrs(g)
        coordinate = self.attr("coordinate_transformation_mode") or "output_half_pixel"
        if g.opset < 16:
            if coordinate != "output_half_pixel":
                raise ExportError(
                    f"RoiAlign: opset {g.opset} only has output_half_pixel coordinates, "
                    f"received {coordinate}; export at opset 16 or later"
                )
            attrs.pop("coordinate_transformation_mode", None)
        else:
            attrs["coordinate_transformation_mode"] = coordinate
        return attrs


def affine_grid(theta: Tensor, size: list[int], align_corners: bool = False) -> Tensor:
    """The sampling grid of the affine maps ``theta`` for an output of shape ``size``.

    :param theta: the (N, 2, 3) or (N, 3, 4) affine matrices.
    :param size: the output's (N, C, H, W) or (N, C, D, H, W) shape.
    :param align_corners: True maps -1 and 1 to the corner pixels' centres, False to their edges.
    :returns: the (N, H, W, 2) or (N, D, H, W, 3) grid for :func:`grid_sample` (ONNX AffineGrid).
    :raises BadInputError: ``theta``'s shape does not fit ``size``.
    """
    return AffineGrid(align_corners=int(align_corners))(theta, np.asarray(size, dtype=np.int64))


def roi_align(
    x: Tensor,
    rois: Tensor,
    batch_indices: Tensor,
    output_size: tuple[int, int] = (1, 1),
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    mode: str = "avg",
    aligned: bool = True,
) -> Tensor:
    """Pool each region of interest to ``output_size`` (ONNX RoiAlign).

    :param x: the (N, C, H, W) feature map.
    :param rois: the (R, 4) regions as (x1, y1, x2, y2) in input scale.
    :param batch_indices: the (R,) image of each region.
    :param output_size: the (height, width) of each pooled region.
    :param spatial_scale: the factor mapping ``rois`` to ``x``'s coordinates.
    :param sampling_ratio: the samples per bin along each axis; 0 chooses by the region's size.
    :param mode: ``"avg"`` or ``"max"`` of the samples.
    :param aligned: True shifts the regions by half a pixel (``half_pixel``), False not.
    :returns: the (R, C, height, width) pooled regions.
    :raises BadInputError: ``mode`` is unknown, the shapes do not fit, or a batch index is out of
        range.
    """
    return RoiAlign(
        output_height=int(output_size[0]),
        output_width=int(output_size[1]),
        spatial_scale=float(spatial_scale),
        sampling_ratio=int(sampling_ratio),
        mode=mode,
        coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel",
    )(x, rois, batch_indices)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def grid_sample(
    x: Tensor,
    grid: Tensor,
    mode: str = "linear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
) -> Tensor:
    """Sample ``x`` at the normalized positions of ``grid`` (ONNX GridSample).

    :param x: the (N, C, spatial...) input (1-D to 3-D spatial).
    :param grid: the (N, out spatial..., r) positions in [-1, 1], innermost axis first (x, y[, z]).
    :param mode: ``"linear"``, ``"cubic"`` (1-D and 2-D only) or ``"nearest"``.
    :param padding_mode: what positions outside read: ``"zeros"``, ``"border"`` or ``"reflection"``.
    :param align_corners: True maps -1 and 1 to the corner pixels' centres, False to their edges.
    :returns: the (N, C, out spatial...) samples.
    :raises BadInputError: ``mode`` or ``padding_mode`` is unknown, the shapes of ``x`` and ``grid``
        do not fit, or cubic mode meets a 3-D input.
    """
    op = GridSample(mode=mode, padding_mode=padding_mode, align_corners=int(align_corners))
    return op(x, grid)
