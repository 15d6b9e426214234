"""Window geometry shared by the convolution and pooling operators.

ONNX writes padding as ``[x1_begin, x2_begin, …, x1_end, x2_end, …]`` while ``F.pad`` wants
``(last_begin, last_end, …, first_begin, first_end)``; ONNX allows asymmetric, auto (SAME_UPPER,
SAME_LOWER, VALID) and ceil-mode padding that torch's own ``padding=`` arguments cannot express.
So every operator here resolves its pads to explicit begin/end lists, pads the input with
``F.pad`` and runs the torch kernel with ``padding=0``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError, OpsetTooOldError

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

AUTO_PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


#: Up to this many multiply-adds per sample, a 1-D convolution is one matrix product over its
#: unfolded input (see :func:`_conv1d_as_gemm`).
GEMM_CONV1D_MACS = 1 << 20


def _conv1d_as_2d(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int] | int,
    dilation: Sequence[int],
    groups: int = 1,
) -> torch.Tensor:
    """A 1-D convolution as the 2-D one of height 1 (what torch's ``conv1d`` runs anyway), or,
    if it is small, as one matrix product (:func:`_conv1d_as_gemm`).

    Written out so that a compiled graph holds a 2-D convolution: inductor gives those, not
    1-D ones, oneDNN's kernel with the weight packed once (a streaming audio model's
    convolutions at batch 1: the slow reference kernel otherwise).
    """
    pad = padding[0] if isinstance(padding, Sequence) else padding
    if _small_for_a_gemm(x, w, stride[0], pad, dilation[0], groups):
        return _conv1d_as_gemm(x, w, b, stride[0], pad)
    pads = [0, *padding] if isinstance(padding, Sequence) else [0, padding]
    y = F.conv2d(x.unsqueeze(2), w.unsqueeze(2), b, [1, *stride], pads, [1, *dilation], groups)
    return y.squeeze(2)


def _small_for_a_gemm(
    x: torch.Tensor, w: torch.Tensor, stride: int, pad: int, dilation: int, groups: int
) -> bool:
    """Whether a 1-D convolution is one of the small ones :func:`_conv1d_as_gemm` computes
    faster: on the CPU, in float, without groups or dilation, of a length fixed when a graph is
    traced (a symbolic length could be any), at most ``GEMM_CONV1D_MACS`` per sample."""
    length = x.shape[2]
    if not (
        isinstance(length, int)
        and groups == 1
        and dilation == 1
        and x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
    ):
        return False
    out_channels, channels, kernel = w.shape
    steps = (length + 2 * pad - kernel) // stride + 1
    return 0 < steps * channels * kernel * out_channels <= GEMM_CONV1D_MACS


def _conv1d_as_gemm(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: int, pad: int
) -> torch.Tensor:
    """A 1-D convolution as ``unfolded input x weight^T``: one GEMM of (batch x steps) rows, as
    onnxruntime computes convolutions.

    A call into oneDNN costs 50-100 us on the machines we measure, more than the arithmetic of
    a streaming audio model's convolutions (a few frames of 64 channels, an STFT of one
    512-sample chunk as a convolution with a 256-wide kernel): measured one convolution at a
    time, compiled, the product took 0.5-0.7x oneDNN's time up to about a million
    multiply-adds per sample, and 0.9-1.3x beyond; eager, on the VAD-style stand-in, 0.93x
    (batch 1) and 0.76x (batch 8).
    """
    if pad:
        x = F.pad(x, (pad, pad))
    batch = x.shape[0]
    out_channels, channels, kernel = w.shape
    windows = x.unfold(2, kernel, stride)  # (batch, channels, steps, kernel)
    steps = windows.shape[2]
    rows = windows.transpose(1, 2).reshape(batch * steps, channels * kernel)
    weight = w.reshape(out_channels, channels * kernel).t()
    y = rows @ weight if b is None else torch.addmm(b, rows, weight)
    return y.view(batch, steps, out_channels).transpose(1, 2)


CONV: dict[int, Callable[..., torch.Tensor]] = {1: _conv1d_as_2d, 2: F.conv2d, 3: F.conv3d}
CONV_TRANSPOSE: dict[int, Callable[..., torch.Tensor]] = {
    1: F.conv_transpose1d,
    2: F.conv_transpose2d,
    3: F.conv_transpose3d,
}


def one_point(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether a convolution's input and kernel are one point in space (a squeeze-and-
    excitation's 1x1 conv of a pooled image), so that unpadded and ungrouped it is a matrix
    product; sizes that are symbols in a trace are not known to be."""
    return all(type(s) is int and s == 1 for s in (*x.shape[2:], *w.shape[2:]))


def check_spatial_rank(op_type: str, name: str, x: torch.Tensor) -> int:
    """The number of spatial axes of an (N, C, spatial...) input; torch kernels take 1 to 3."""
    if x.dim() not in (3, 4, 5):
        raise BadInputError(
            f"{op_type}: input {name} must be 3-D to 5-D (N, C, spatial...), "
            f"received shape {tuple(x.shape)}"
        )
    return x.dim() - 2


def spatial_ints(op: Operator, name: str, n: int, default: int) -> list[int]:
    """A per-spatial-axis integer attribute (strides, dilations, …); absent means ``default``."""
    value = op.attr(name)
    if value is None or len(value) == 0:
        return [default] * n
    ints = [int(v) for v in value]
    if len(ints) != n:
        raise BadInputError(
            f"{op.op_type}: attribute {name} must have {n} values (one per spatial axis), "
            f"received {ints}"
        )
    return ints


def auto_pad_mode(op: Operator) -> str:
    value = op.attr("auto_pad")
    if value is None:
        return "NOTSET"
    mode = value.decode() if isinstance(value, bytes) else str(value)
    if mode not in AUTO_PAD_MODES:
        raise BadInputError(
            f"{op.op_type}: attribute auto_pad must be one of {', '.join(AUTO_PAD_MODES)}, "
            f"received {mode!r}"
        )
    return mode


def explicit_pads(op: Operator, n: int) -> list[int]:
    value = op.attr("pads")
    if value is None or len(value) == 0:
        return [0] * (2 * n)
    pads = [int(v) for v in value]
    if len(pads) != 2 * n:
        raise BadInputError(
            f"{op.op_type}: attribute pads must have {2 * n} values (begins then ends of the "
            f"{n} spatial axes), received {pads}"
        )
    return pads


def effective_kernel(kernel: Sequence[int], dilations: Sequence[int]) -> list[int]:
    """The extent a dilated kernel covers: ``(k - 1) * d + 1``."""
    return [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]


def split_total(total: int, mode: str) -> tuple[int, int]:
    """Begin and end padding for a total: SAME_UPPER puts the odd element at the end."""
    small, big = total // 2, total - total // 2
    return (small, big) if mode == "SAME_UPPER" else (big, small)


def forward_pads(
    op: Operator,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """The ONNX-layout pads of a forward window op (Conv, pooling) after resolving auto_pad.

    SAME_* keeps ``ceil(in / stride)`` outputs, padding the total ``max(0, (out - 1) * stride +
    dilated_kernel - in)`` split as :func:`split_total` says.
    """
    n = len(sizes)
    mode = auto_pad_mode(op)
    if mode == "NOTSET":
        return explicit_pads(op, n)
    if mode == "VALID":
        return [0] * (2 * n)
    begins, ends = [], []
    for size, k, s in zip(sizes, effective_kernel(kernel, dilations), strides, strict=True):
        out = -(-size // s)
        begin, end = split_total(max(0, (out - 1) * s + k - size), mode)
        begins.append(begin)
        ends.append(end)
    return begins + ends


def torch_pad(begins: Sequence[int], ends: Sequence[int]) -> list[int]:
    """ONNX begin/end lists in ``F.pad`` order (last axis first; negative values crop)."""
    out: list[int] = []
    for b, e in zip(reversed(begins), reversed(ends), strict=True):
        out += [int(b), int(e)]
    return out


def check_window(op_type: str, out_sizes: Sequence[int], sizes: Sequence[int]) -> None:
    if any(o < 1 for o in out_sizes):
        raise BadInputError(
            f"{op_type}: the (dilated) kernel does not fit in the padded input: spatial shape "
            f"{tuple(sizes)} gives output spatial shape {tuple(out_sizes)}"
        )


def require_opset(g: GraphBuilder, op_type: str, since: int) -> None:
    """Raise ExportError when the export opset predates the operator."""
    if g.opset < since:
        raise OpsetTooOldError(
            f"{op_type} does not exist before opset {since}; export opset is {g.opset}", since
        )


def user_pads(op_type: str, padding: int | Sequence[int], n: int) -> list[int]:
    """A user padding argument as ONNX pads: an int, one value per axis, or begins then ends."""
    if isinstance(padding, int):
        return [padding] * (2 * n)
    values = [int(p) for p in padding]
    if len(values) == 2 * n:
        return values
    if len(values) == n:
        return values + values
    raise BadInputError(
        f"{op_type}: padding must be an int, {n} values (one per spatial axis) or {2 * n} "
        f"values (begins then ends), received {list(padding)}"
    )


def user_ints(op_type: str, name: str, value: int | Sequence[int], n: int) -> list[int]:
    """A user int-or-tuple argument (stride, dilation, kernel size) as one value per axis."""
    if isinstance(value, int):
        return [value] * n
    values = [int(v) for v in value]
    if len(values) != n:
        raise BadInputError(
            f"{op_type}: {name} must be an int or {n} values (one per spatial axis), "
            f"received {list(value)}"
        )
    return values
