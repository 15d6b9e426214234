"""com.microsoft weight-quantized products: MatMulNBits and GatherBlockQuantized.

Both read a weight quantized in blocks along its last axis: unsigned 2-, 4- or 8-bit codes packed
into bytes least significant bits first, one float scale per block and a zero point per block
(absent: the middle of the code range). The weight is dequantized in float32, as onnxruntime's
CPU kernels do, and the product or gather runs in float on torch, so a gradient reaches the
float input (the quantized weight itself is frozen: integers carry no gradient).

A frozen weight dequantized once is kept by the operator (see :class:`KeptWeight`) until one of
the tensors it was computed from is replaced or changed in place, as the importer keeps the
folded results of steps that read only constants (:mod:`sonnx.runtime.folding`).

These operators have no ``onnx.defs`` schema: their attribute defaults, from onnxruntime's
``docs/ContribOperators.md``, are declared on each class (:class:`ContribOperator`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.kept_results import KeptResult
from sonnx.engine.operator import OutputShape
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError
from sonnx.operators.contrib import ContribOperator
from sonnx.operators.elementwise.cast import decode_sub_byte
from sonnx.operators.quantize.ort_kernels import KernelChoice, nbits_spec

__all__ = ["GatherBlockQuantized", "MatMulNBits"]

#: What a :class:`KeptWeight` keeps: a weight, or several made together.
_T = TypeVar("_T")


class ContribQuantOperator(ContribOperator):
    """The products and quantized operators: each output is shaped by the inputs' shapes."""

    output_shape = OutputShape.FROM_SHAPES


def unpack_bits(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """The first ``count`` ``bits``-bit codes of each row of bytes (last axis), low bits first,
    as int32."""
    per_byte = 8 // bits
    shifts = torch.arange(0, 8, bits, dtype=torch.int32, device=packed.device)
    codes = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * per_byte)[..., :count]


def int8_blocks(a: torch.Tensor, block: int) -> torch.Tensor:
    """``a`` with each block of ``block`` values along its last axis rounded to int8 steps, as
    onnxruntime's CPU MatMulNBits quantizes its input at accuracy_level 4: the step is the
    block's largest magnitude / 127, a value is ``round(a * 127 / max)`` (half to even) steps.
    The gradient passes straight through the rounding (it is a step function), so layers
    before a 4-bit product still train."""
    k = a.shape[-1]
    padded = torch.nn.functional.pad(a.detach(), (0, -k % block))
    blocks = padded.reshape(*a.shape[:-1], -1, block)
    largest = blocks.abs().amax(-1, keepdim=True)
    inverse = torch.where(largest > 0, 127.0 / largest, torch.zeros_like(largest))
    rounded = torch.round(blocks * inverse) * (largest / 127.0)
    rounded = rounded.reshape(padded.shape)[..., :k]
    return a + (rounded - a).detach() if a.requires_grad else rounded


class KeptWeight:
    """The operator's dequantized weight, kept while the tensors it was computed from are the
    same tensors, unchanged (:class:`~sonnx.engine.kept_results.KeptResult`).

    Nothing is kept while tracing (the values are placeholders) or when a tensor needs a
    gradient (the result must then stay in torch's graph).
    """

    def __init__(self) -> None:
        self._kept: KeptResult | None = None

    def get(self, inputs: tuple[torch.Tensor | None, ...], compute: Callable[[], _T]) -> _T:
        """The kept result for ``inputs``, else ``compute()`` (kept when it may be)."""
        if not value_checks() or any(t is not None and t.requires_grad for t in inputs):
            return compute()
        if self._kept is None or not self._kept.holds_for(inputs):
            self._kept = KeptResult(inputs, compute())
        return self._kept.result


class _DequantizedProduct(torch.autograd.Function):
    """``a @ dequantize().T`` whose backward dequantizes the weight again instead of saving
    the float copy, as QLoRA does: between a step's forward and backward only the packed
    weight is held, whatever the number of layers."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, dequantize: Callable[[], torch.Tensor]) -> torch.Tensor:
        ctx.dequantize = dequantize
        return torch.matmul(a, dequantize().to(a.dtype).t())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return torch.matmul(grad, ctx.dequantize().to(grad.dtype)), None


def _check_bits(op: ContribOperator, bits: int) -> None:
    if bits not in (2, 4, 8):
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: attribute bits must be 2, 4 or 8, received {bits}"
        )


class MatMulNBits(KernelChoice, ContribQuantOperator):
    """``Y = A @ dequantize(B).T + bias`` with B an [N, K] weight quantized in blocks along K.

    Inputs: A (float, [..., K]); B (uint8 [N, n_blocks, blob_size], blob_size = block_size *
    bits / 8); scales (A's type, N * n_blocks values); zero_points (optional: uint8 codes packed
    like B, ceil(n_blocks * bits / 8) bytes per row, or float values shaped like scales);
    g_idx (optional int32 [K]: the block of each row of K, for act-order weights); bias
    (optional [N]). At ``accuracy_level`` 4 (and above) onnxruntime's CPU kernel rounds A to
    int8 in blocks of K before the product, for 4- and 8-bit weights (2-bit ones: blocks of 32
    to 128) without g_idx or float zero points; sonnx rounds A the same way
    (:func:`int8_blocks`), so the two agree to float rounding where a float product would
    differ by the int8 step. Other levels compute in float, as onnxruntime's CPU kernel does.

    On the CPU, a float32 product that needs no gradient runs onnxruntime's own kernel where
    onnxruntime is importable (:mod:`sonnx.operators.quantize.ort_kernels`): its results,
    bit for bit, at a fraction of the float product's memory traffic.
    """

    op_type = "MatMulNBits"
    since_versions = (1,)
    parameterising_inputs = frozenset({2, 3, 4})
    defaults: ClassVar[dict[str, Any]] = {"bits": 4, "accuracy_level": 0}
    required_attributes = frozenset({"K", "N", "block_size"})

    #: Its packed weight, scales, zero points and g_idx are initializers in every model.
    weights_always_constant = True

    def __init__(self, version: int | None = None, **attrs: Any) -> None:
        super().__init__(version, **attrs)
        self._weight = KeptWeight()

    def forward(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        scales: torch.Tensor,
        zero_points: torch.Tensor | None = None,
        g_idx: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        k, n = int(self.attr("K")), int(self.attr("N"))
        if not a.dtype.is_floating_point or a.shape[-1:] != (k,):
            raise BadInputError(
                f"MatMulNBits node {self.name!r}: input A must be a float tensor whose last "
                f"dimension is K={k}, received dtype {dtype_name(a.dtype)} and shape "
                f"{tuple(a.shape)}"
            )
        weights = (b, scales, zero_points, g_idx)
        spec = self.__dict__.get("_spec")
        if spec is None:
            names = ("K", "N", "bits", "block_size", "accuracy_level")
            spec = self._spec = nbits_spec([int(self.attr(x)) for x in names])
        y = self.onnxruntime_product(spec, n, (a, *weights, bias))
        if y is not None:
            self.kernel_used = "onnxruntime's MatMulNBits"
            return y
        self.kernel_used = "torch's (dequantized float32 weight)"
        if self._rounds_a_to_int8(a, zero_points, g_idx):
            a = int8_blocks(a, int(self.attr("block_size")))
        if torch.is_grad_enabled() and a.requires_grad:
            # Training through a 4-bit weight (QLoRA): no float copy outlives the step.
            y = _DequantizedProduct.apply(a, lambda: self.dequantize(*weights, k=k, n=n))
        else:
            w = self._weight.get(weights, lambda: self.dequantize(*weights, k=k, n=n))
            y = torch.matmul(a, w.to(a.dtype).t())
        return y if bias is None else y + bias

    def _rounds_a_to_int8(
        self, a: torch.Tensor, zero_points: torch.Tensor | None, g_idx: torch.Tensor | None
    ) -> bool:
        """Whether onnxruntime's CPU kernel computes this node with A rounded to int8 (its
        CompInt8 kernels: float32 A, accuracy_level 4 or more, no g_idx, no float zero points,
        4- or 8-bit weights, or 2-bit ones in blocks of 32 to 128)."""
        bits, block = int(self.attr("bits")), int(self.attr("block_size"))
        return (
            a.dtype == torch.float32
            and int(self.attr("accuracy_level")) >= 4
            and g_idx is None
            and (zero_points is None or not zero_points.dtype.is_floating_point)
            and (bits != 2 or 32 <= block <= 128)
        )

    def dequantize(
        self,
        b: torch.Tensor,
        scales: torch.Tensor,
        zero_points: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        k: int,
        n: int,
    ) -> torch.Tensor:
        """The float32 weight [N, K]."""
        bits, block = int(self.attr("bits")), int(self.attr("block_size"))
        _check_bits(self, bits)
        if block < 16 or block & (block - 1):
            raise BadInputError(
                f"MatMulNBits node {self.name!r}: attribute block_size must be a power of 2 "
                f"and at least 16, received {block}"
            )
        blocks = -(-k // block)
        expected = (n, blocks, block * bits // 8)
        if b.dtype != torch.uint8 or tuple(b.shape) != expected:
            raise BadInputError(
                f"MatMulNBits node {self.name!r}: input B must be uint8 of shape {expected} "
                f"(N, n_blocks, blob_size), received {dtype_name(b.dtype)} {tuple(b.shape)}"
            )
        if scales.numel() != n * blocks:
            raise BadInputError(
                f"MatMulNBits node {self.name!r}: input scales must hold N * n_blocks = "
                f"{n * blocks} values, received shape {tuple(scales.shape)}"
            )
        zp = self._zero_points(zero_points, bits, n, blocks, b.device)
        if g_idx is None:
            # Blocks in order: scale and zero point broadcast over each block (no gather).
            codes = unpack_bits(b, bits, block).float()
            w = (codes - zp.unsqueeze(-1)) * scales.reshape(n, blocks, 1).float()
            return w.reshape(n, blocks * block)[:, :k]
        if g_idx.shape != (k,):
            raise BadInputError(
                f"MatMulNBits node {self.name!r}: input g_idx must have shape ({k},) (K), "
                f"received {tuple(g_idx.shape)}"
            )
        codes = unpack_bits(b, bits, block).reshape(n, blocks * block)[:, :k].float()
        rows = g_idx.long()
        scale = scales.reshape(n, blocks).float()[:, rows]
        return (codes - zp[:, rows]) * scale

    def _zero_points(
        self,
        zero_points: torch.Tensor | None,
        bits: int,
        n: int,
        blocks: int,
        device: torch.device,
    ) -> torch.Tensor:
        """Zero points as float32 [N, n_blocks]: the middle code when absent."""
        if zero_points is None:
            return torch.full((n, blocks), float(1 << (bits - 1)), device=device)
        if zero_points.dtype.is_floating_point:
            if zero_points.numel() != n * blocks:
                raise BadInputError(
                    f"MatMulNBits node {self.name!r}: float input zero_points must hold N * "
                    f"n_blocks = {n * blocks} values, received shape {tuple(zero_points.shape)}"
                )
            return zero_points.reshape(n, blocks).float()
        row_bytes = -(-blocks * bits // 8)
        if zero_points.dtype != torch.uint8 or zero_points.numel() != n * row_bytes:
            raise BadInputError(
                f"MatMulNBits node {self.name!r}: packed input zero_points must be uint8 with "
                f"N * ceil(n_blocks * bits / 8) = {n * row_bytes} bytes, received "
                f"{dtype_name(zero_points.dtype)} {tuple(zero_points.shape)}"
            )
        return unpack_bits(zero_points.reshape(n, row_bytes), bits, blocks).float()


class GatherBlockQuantized(ContribQuantOperator):
    """Gather of a block-quantized table: ``Gather(dequantize(data), indices, gather_axis)``.

    ``data`` is uint8 holding 8 / ``bits`` codes per byte along its last axis (then
    ``gather_axis`` is 0 and ``quantize_axis`` the last axis; a missing zero point is the middle
    code), or int4/uint4 (any two distinct axes; a missing zero point is 0). ``scales`` has
    data's shape with the quantized axis divided into blocks of ``block_size``; ``zero_points``
    is like scales, packed like data when data is uint8. The output has scales' float type.
    """

    op_type = "GatherBlockQuantized"
    since_versions = (1,)
    parameterising_inputs = frozenset({2, 3})
    defaults: ClassVar[dict[str, Any]] = {
        "gather_axis": 0,
        "quantize_axis": 1,
        "block_size": 128,
        "bits": 4,
    }

    def __init__(self, version: int | None = None, **attrs: Any) -> None:
        super().__init__(version, **attrs)
        self._table = KeptWeight()

    def forward(
        self,
        data: torch.Tensor,
        indices: torch.Tensor,
        scales: torch.Tensor,
        zero_points: torch.Tensor | None = None,
    ) -> torch.Tensor:
        rank = data.dim()
        axis = int(self.attr("gather_axis")) % rank
        table = self._table.get(
            (data, scales, zero_points), lambda: self.dequantize(data, scales, zero_points)
        )
        size = table.shape[axis]
        if (
            value_checks()
            and indices.numel()
            and not (-size <= int(indices.min()) and int(indices.max()) < size)
        ):
            raise BadInputError(
                f"GatherBlockQuantized node {self.name!r}: indices must lie in [{-size}, "
                f"{size - 1}] (data's gather_axis {axis}), received values in "
                f"[{int(indices.min())}, {int(indices.max())}]"
            )
        flat = torch.where(indices < 0, indices + size, indices).reshape(-1).long()
        picked = table.index_select(axis, flat)
        return picked.reshape(*table.shape[:axis], *indices.shape, *table.shape[axis + 1 :])

    def dequantize(
        self, data: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor | None
    ) -> torch.Tensor:
        """The float table, in scales' type, with data's logical shape."""
        rank = data.dim()
        q_axis = int(self.attr("quantize_axis")) % rank
        block = int(self.attr("block_size"))
        if block < 16 or block & (block - 1):
            raise BadInputError(
                f"GatherBlockQuantized node {self.name!r}: attribute block_size must be a power "
                f"of 2 and at least 16, received {block}"
            )
        if data.dtype == torch.uint8:
            bits = int(self.attr("bits"))
            _check_bits(self, bits)
            if int(self.attr("gather_axis")) % rank != 0 or q_axis != rank - 1:
                raise BadInputError(
                    f"GatherBlockQuantized node {self.name!r}: uint8 data needs gather_axis 0 "
                    f"and quantize_axis the last axis ({rank - 1})"
                )
            codes = unpack_bits(data, bits, data.shape[-1] * (8 // bits))
            blocks = -(-codes.shape[-1] // block)
            if zero_points is None:
                zp = torch.full((), float(1 << (bits - 1)), device=data.device)
            else:
                zp = unpack_bits(zero_points, bits, blocks).float()
        elif data.dtype in (torch.int4, torch.uint4):
            codes = decode_sub_byte(data)
            zp = (
                torch.zeros((), device=data.device)
                if zero_points is None
                else decode_sub_byte(zero_points).float()
            )
        else:
            raise BadInputError(
                f"GatherBlockQuantized node {self.name!r}: input data must be uint8, int4 or "
                f"uint4, received {dtype_name(data.dtype)}"
            )
        length = codes.shape[q_axis]
        expected = list(codes.shape)
        expected[q_axis] = -(-length // block)
        if list(scales.shape) != expected or (zp.dim() and list(zp.shape) != expected):
            raise BadInputError(
                f"GatherBlockQuantized node {self.name!r}: scales (and zero_points, unpacked) "
                f"must have shape {tuple(expected)}, received scales {tuple(scales.shape)}"
            )

        def per_element(p: torch.Tensor) -> torch.Tensor:
            if not p.dim():
                return p
            return p.repeat_interleave(block, dim=q_axis).narrow(q_axis, 0, length)

        values = (codes.float() - per_element(zp)) * per_element(scales.float())
        return values.to(scales.dtype)
