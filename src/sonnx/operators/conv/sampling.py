"""Convolutions that move data around rather than slide a dense window: DeformConv and Col2Im."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.errors import BadInputError
from sonnx.operators.conv.windows import (
    CONV_TRANSPOSE,
    effective_kernel,
    explicit_pads,
    require_opset,
    spatial_ints,
    torch_pad,
    user_ints,
    user_pads,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder


def _bilinear(
    x: torch.Tensor, py: torch.Tensor, px: torch.Tensor, height: int, width: int
) -> torch.Tensor:
    """Sample x (N, G, Cg, H*W) at real positions py/px (N, G, P): (N, G, Cg, P).

    Bilinear interpolation where neighbours outside the image count as zero, which is
    GridSample with align_corners=1 and zero padding (ONNX's reference for DeformConv); written
    with gathers so gradients reach both x and the positions (the offsets).
    """
    y0, x0 = torch.floor(py), torch.floor(px)
    wy1, wx1 = py - y0, px - x0
    wy0, wx0 = 1 - wy1, 1 - wx1
    channels = x.shape[2]
    out = None
    for yi, wy in ((y0, wy0), (y0 + 1, wy1)):
        for xi, wx in ((x0, wx0), (x0 + 1, wx1)):
            inside = (yi >= 0) & (yi < height) & (xi >= 0) & (xi < width)
            flat = (yi.clamp(0, height - 1) * width + xi.clamp(0, width - 1)).long()
            index = flat.unsqueeze(2).expand(-1, -1, channels, -1)
            weight = (wy * wx * inside.to(wy.dtype)).unsqueeze(2)
            term = torch.gather(x, 3, index) * weight
            out = term if out is None else out + term
    return out


class DeformConv(Operator):
    """ONNX DeformConv (2-D): a convolution whose taps are displaced by learned offsets.

    Inputs: X (N, C, H, W), W (M, C/group, kh, kw), offset (N, offset_group*2*kh*kw, oh, ow)
    holding (dy, dx) per tap, optional B (M,) and mask (N, offset_group*kh*kw, oh, ow) scaling
    each sampled value. Sampled columns are contracted with W per group.
    """

    op_type = "DeformConv"
    since_versions = (19, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        offset: torch.Tensor,
        b: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if x.dim() != 4 or w.dim() != 4 or offset.dim() != 4:
            raise BadInputError(
                "DeformConv: X, W and offset must be 4-D (only 2-D deformable convolution is "
                f"supported), received shapes {tuple(x.shape)}, {tuple(w.shape)}, "
                f"{tuple(offset.shape)}"
            )
        n, c, height, width = x.shape
        m, cg, kh, kw = w.shape
        group = int(self.attr("group") or 1)
        offset_group = int(self.attr("offset_group") or 1)
        k = kh * kw
        oh, ow = offset.shape[2:]
        if c != cg * group or m % group != 0 or c % offset_group != 0:
            raise BadInputError(
                f"DeformConv: X has {c} channels; W must have shape (M, {c // group}, kh, kw) "
                f"with M divisible by group={group}, and offset_group={offset_group} must divide "
                f"{c}, received W shape {tuple(w.shape)}"
            )
        if offset.shape[:2] != (n, offset_group * 2 * k):
            raise BadInputError(
                f"DeformConv: input offset must have shape ({n}, {offset_group * 2 * k}, oh, ow), "
                f"received {tuple(offset.shape)}"
            )
        if mask is not None and tuple(mask.shape) != (n, offset_group * k, oh, ow):
            raise BadInputError(
                f"DeformConv: input mask must have shape ({n}, {offset_group * k}, {oh}, {ow}), "
                f"received {tuple(mask.shape)}"
            )
        sh, sw = spatial_ints(self, "strides", 2, 1)
        dh, dw = spatial_ints(self, "dilations", 2, 1)
        pads = explicit_pads(self, 2)
        top, left = pads[:2]
        expected = [
            (size + pads[i] + pads[2 + i] - e) // s + 1
            for i, (size, e, s) in enumerate(
                zip((height, width), effective_kernel((kh, kw), (dh, dw)), (sh, sw), strict=True)
            )
        ]
        if [oh, ow] != expected:
            raise BadInputError(
                f"DeformConv: input offset must cover the output positions {tuple(expected)} "
                f"the strides, pads and dilations give, received spatial shape {(oh, ow)}"
            )
        dev, dt = x.device, x.dtype
        # Undisplaced tap positions: output position * stride - pad + tap index * dilation.
        tap_h = (torch.arange(kh, device=dev) * dh).repeat_interleave(kw).to(dt)
        tap_w = (torch.arange(kw, device=dev) * dw).repeat(kh).to(dt)
        base_h = tap_h.view(k, 1, 1) + (torch.arange(oh, device=dev) * sh - top).to(dt).view(oh, 1)
        base_w = tap_w.view(k, 1, 1) + (torch.arange(ow, device=dev) * sw - left).to(dt)
        off = offset.reshape(n, offset_group, k, 2, oh, ow)
        py = (base_h + off[:, :, :, 0]).reshape(n, offset_group, -1)
        px = (base_w + off[:, :, :, 1]).reshape(n, offset_group, -1)
        grouped = x.reshape(n, offset_group, c // offset_group, height * width)
        cols = _bilinear(grouped, py, px, height, width).reshape(n, c, k, oh, ow)
        if mask is not None:
            cols = cols * mask.reshape(n, offset_group, 1, k, oh, ow).repeat_interleave(
                c // offset_group, dim=2
            ).reshape(n, c, k, oh, ow)
        cols = cols.reshape(n, group, cg * k, oh * ow)
        y = torch.einsum("gmk,ngkl->ngml", w.reshape(group, m // group, cg * k), cols)
        y = y.reshape(n, m, oh, ow)
        if b is not None:
            y = y + b.reshape(1, -1, 1, 1)
        return y

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        require_opset(g, self.op_type, 19)
        super().export(g, inputs, outputs)


class Col2Im(Operator):
    """ONNX Col2Im: sum sliding blocks (N, C*prod(block), L) back into images (N, C, image...).

    Col2Im is the adjoint of im2col, i.e. a grouped transposed convolution whose kernel routes
    column ``c*K + k`` to block position ``k`` of channel ``c``; that works for 1 to 3 spatial
    axes and is differentiable. The result is then cropped by the pads.
    """

    op_type = "Col2Im"
    since_versions = (18,)
    output_shape = OutputShape.FROM_SHAPES
    # Strings, which ONNX lets in, are refused: overlapping blocks are summed.
    moves_elements_only = False
    shape_inputs = frozenset({1, 2})
    parameterising_inputs = frozenset({1, 2})

    def forward(
        self, x: torch.Tensor, image_shape: torch.Tensor, block_shape: torch.Tensor
    ) -> torch.Tensor:
        image = host_ints(image_shape)
        block = host_ints(block_shape)
        n = len(image)
        if len(block) != n or n not in (1, 2, 3):
            raise BadInputError(
                "Col2Im: image_shape and block_shape must have the same length, 1 to 3, "
                f"received {image} and {block}"
            )
        if x.dim() != 3:
            raise BadInputError(
                f"Col2Im: input must be 3-D (N, C*prod(block_shape), L), "
                f"received shape {tuple(x.shape)}"
            )
        k = 1
        for v in block:
            k *= v
        strides = spatial_ints(self, "strides", n, 1)
        dilations = spatial_ints(self, "dilations", n, 1)
        pads = explicit_pads(self, n)
        blocks = [
            (i + pads[d] + pads[n + d] - e) // s + 1
            for d, (i, e, s) in enumerate(
                zip(image, effective_kernel(block, dilations), strides, strict=True)
            )
        ]
        count = 1
        for v in blocks:
            count *= v
        if x.shape[1] % k != 0 or x.shape[2] != count:
            raise BadInputError(
                f"Col2Im: input must have shape (N, C*{k}, {count}) for block_shape {block} and "
                f"{blocks} sliding blocks, received {tuple(x.shape)}"
            )
        c = x.shape[1] // k
        route = torch.eye(k, dtype=x.dtype, device=x.device).reshape(k, 1, *block)
        route = route.repeat(c, *[1] * (n + 1))
        cols = x.reshape(x.shape[0], c * k, *blocks)
        y = CONV_TRANSPOSE[n](cols, route, None, strides, 0, 0, c, dilations)
        # The transposed conv covers pad_begin + image + (maybe part of) pad_end: keep the image.
        ends = [i + pads[d] - y.shape[2 + d] for d, i in enumerate(image)]
        return F.pad(y, torch_pad([-p for p in pads[:n]], ends))

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        require_opset(g, self.op_type, 18)
        super().export(g, inputs, outputs)


def deform_conv2d(
    x: Tensor,
    W: Tensor,
    offset: Tensor,
    b: Tensor | None = None,
    mask: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
    offset_group: int = 1,
) -> Tensor:
    """Deformable 2-D convolution (see :class:`DeformConv` for the shapes).

    :param x: the (N, C, H, W) input.
    :param W: the (M, C/group, kh, kw) weights.
    :param offset: the (N, offset_group*2*kh*kw, oh, ow) displacements, (dy, dx) per tap.
    :param b: the (M,) bias, or None.
    :param mask: the (N, offset_group*kh*kw, oh, ow) scales of the sampled values, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups.
    :param offset_group: the number of channel groups sharing one set of offsets.
    :returns: the (N, M, oh, ow) output (ONNX DeformConv).
    :raises BadInputError: the shapes of ``W``, ``offset`` or ``mask`` do not fit ``x``.
    """
    op = DeformConv(
        strides=user_ints("deform_conv2d", "stride", stride, 2),
        pads=user_pads("deform_conv2d", padding, 2),
        dilations=user_ints("deform_conv2d", "dilation", dilation, 2),
        group=group,
        offset_group=offset_group,
    )
    return op(x, W, offset, b, mask)


def col2im(
    x: Tensor,
    image_shape: Sequence[int],
    block_shape: Sequence[int],
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """Rearrange sliding blocks (N, C*prod(block_shape), L) into images (N, C, *image_shape).

    :param x: the (N, C*prod(block_shape), L) blocks, L the number of block positions.
    :param image_shape: the spatial size of the image to rebuild.
    :param block_shape: the spatial size of one block.
    :param stride: the step between blocks: an int or one per spatial axis.
    :param padding: an int, one value per spatial axis, or ONNX-style begins then ends.
    :param dilation: the spacing of a block's elements: an int or one per spatial axis.
    :returns: the (N, C, *image_shape) images, overlapping blocks summed (ONNX Col2Im).
    :raises BadInputError: ``x`` is not 3-D or its shape does not fit the blocks.
    """
    n = len(image_shape)
    op = Col2Im(
        strides=user_ints("col2im", "stride", stride, n),
        pads=user_pads("col2im", padding, n),
        dilations=user_ints("col2im", "dilation", dilation, n),
    )
    device = x.data.device
    shape = torch.tensor([int(v) for v in image_shape], dtype=torch.int64, device=device)
    block = torch.tensor([int(v) for v in block_shape], dtype=torch.int64, device=device)
    return op(x, shape, block)
