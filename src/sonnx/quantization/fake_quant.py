"""Fake quantization: a QuantizeLinear -> DequantizeLinear pair that trains.

QuantizeLinear's output is an integer tensor, so torch records no gradient through it, and a
QDQ graph run as its nodes gives its float weights and earlier layers no gradient. A model
made by :func:`~sonnx.quantization.qat.prepare_qat` runs each such pair as one call,
:func:`fake_quantize`, while a run records gradients:

- its value is the pair's, bit for bit: ``(clamp(round(x / s) + z, qmin, qmax) - z) * s``,
  with ONNX's division and half-to-even rounding, so a trained graph computes what
  onnxruntime computes on its export;
- its gradient is the straight-through estimator: the rounding passes the gradient on
  unchanged and the clamp stops it outside ``[qmin, qmax]`` (Bengio et al. 2013);
- with learned scales, the scale's gradient is LSQ's (Esser et al. 2019): torch's autograd of
  the expression above, scaled by ``1 / sqrt(N * qmax)``, with N a weight's values per scale
  or an activation's features per sample.

Runs that record no gradient (inference, export checks, graph mode) run the pair's nodes as
they are. The pairs are :class:`~sonnx.runtime.fusions.Fusion` groups added to the prepared
program, so a cut through a pair, or a request for its integer value, runs the nodes too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from sonnx import dtypes
from sonnx.operators.elementwise.cast import SUB_BYTE, decode_sub_byte, sub_byte_range
from sonnx.operators.quantize.linear import _expand
from sonnx.runtime.fusions import Fusion

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram
    from sonnx.runtime.steps import Step

__all__ = ["FAKE_QUANTIZE", "FakeQuantSpec", "fake_quant_fusions", "fake_quantize"]

#: The name of a fake-quantized pair's group (in ``explain()`` and ``program.fusions``).
FAKE_QUANTIZE = "FakeQuantize"
_DOMAINS = ("", "ai.onnx", "com.microsoft")
_INTEGERS = (torch.int8, torch.uint8, torch.int16, torch.uint16, *SUB_BYTE)


@dataclass(frozen=True)
class FakeQuantSpec:
    """One pair's integer range, granularity, whether its scale learns (LSQ), and whether it
    quantizes an activation (whose first dimension is the batch) rather than a weight."""

    qmin: int
    qmax: int
    axis: int
    block_size: int
    learn_scale: bool
    activation: bool = True


class _RoundThrough(torch.autograd.Function):
    """Half-to-even rounding whose gradient is the identity (the straight-through estimator)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _GradientScale(torch.autograd.Function):
    """The identity, whose gradient is multiplied by ``factor`` (LSQ's gradient scale)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


def fake_quantize(
    x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, spec: FakeQuantSpec
) -> torch.Tensor:
    """``DequantizeLinear(QuantizeLinear(x, scale, zero_point))``, differentiable.

    :param x: the float tensor.
    :param scale: the scale: a scalar, one per slice along ``spec.axis``, or one per block.
    :param zero_point: the zero point, shaped as ``scale`` (None: 0).
    :param spec: the integer range and granularity.
    :returns: ``x`` quantized and dequantized, in the scale's dtype (as DequantizeLinear).
    """
    if spec.learn_scale:
        # LSQ's N: a weight's values per scale; an activation's features per sample, so that
        # the gradient does not depend on the batch (nor on how DistOpt splits it)
        values = (
            x.numel() // x.shape[0] if spec.activation and x.dim() and x.shape[0] else x.numel()
        )
        per_scale = max(values // max(scale.numel(), 1), 1)
        scale = _GradientScale.apply(scale, 1.0 / math.sqrt(per_scale * max(spec.qmax, 1)))
        scale = scale.clamp_min(torch.finfo(scale.dtype).tiny)
    s = _expand("QuantizeLinear", "y_scale", scale, x.shape, spec.axis, spec.block_size)
    work = torch.promote_types(x.dtype, s.dtype)
    q = _RoundThrough.apply(x.to(work) / s.to(work))
    if zero_point is not None:
        z = _expand(
            "QuantizeLinear", "y_zero_point", zero_point, x.shape, spec.axis, spec.block_size
        )
        z = z.to(work)
        q = torch.clamp(q + z, spec.qmin, spec.qmax) - z
    else:
        q = torch.clamp(q, spec.qmin, spec.qmax)
    return (q.to(torch.float32) * s.to(torch.float32)).to(scale.dtype)


def _compute(
    spec: FakeQuantSpec,
    x: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The pair as one differentiable call while a run records gradients through it; None
    (its nodes run) otherwise, or for what the pair's nodes must check (a non-float input)."""
    wanted = x.requires_grad or (spec.learn_scale and scale.requires_grad)
    if not (torch.is_grad_enabled() and wanted and x.is_floating_point()):
        return None
    if not scale.is_floating_point():
        return None
    if zero_point is not None and zero_point.dtype in SUB_BYTE:
        zero_point = decode_sub_byte(zero_point)
    return fake_quantize(x, scale, zero_point, spec)


def _integer_range(step: Step, zero_point: torch.Tensor | None) -> tuple[int, int] | None:
    """The quantized type's range, from the zero point or ``output_dtype`` (default uint8);
    None for the float8 and float4 types, which this estimator does not cover."""
    code = step.attrs.get("output_dtype") or 0
    if zero_point is not None:
        target = zero_point.dtype
    else:
        target = dtypes.onnx_to_torch(code) if code else torch.uint8
    if target not in _INTEGERS:
        return None
    if target in SUB_BYTE:
        return sub_byte_range(target)
    info = torch.iinfo(target)
    return info.min, info.max


def _granularity(step: Step) -> tuple[int, int]:
    axis = step.attrs.get("axis")
    return (1 if axis is None else int(axis)), int(step.attrs.get("block_size") or 0)


def fake_quant_fusions(program: GraphProgram, learn_scales: bool) -> dict[int, Fusion]:
    """The program's QuantizeLinear -> DequantizeLinear pairs as fake-quantizing groups, by the
    index of their DequantizeLinear: a QuantizeLinear whose only reader is a DequantizeLinear
    of the same domain, scale, zero point, axis and block size, into an integer type, with
    its integer output not a graph output and in no other group.

    :param program: the prepared program.
    :param learn_scales: whether the scales train (LSQ); they must then be trainable tensors.
    :returns: the groups.
    """
    claimed = {i for f in program.fusions.values() for i in (*f.internal, f.final)}
    found: dict[int, Fusion] = {}
    for i, q in enumerate(program.steps):
        if q.info.op_type != "QuantizeLinear" or q.info.domain not in _DOMAINS or i in claimed:
            continue
        pair = _pair(program, i, learn_scales)
        if pair is not None and pair.final not in claimed:
            found[pair.final] = pair
    return found


def _pair(program: GraphProgram, i: int, learn_scales: bool) -> Fusion | None:
    """The fake-quantizing group of QuantizeLinear step ``i`` and the DequantizeLinear that
    alone reads its output (no subgraph body, no graph output: see the program's index)."""
    steps = program.steps
    q = steps[i]
    reader = program.index.only_reader(q.outputs[0]) if q.outputs else None
    if reader is None or len(q.inputs) < 2:
        return None
    dq = steps[reader]
    if (
        dq.info.op_type != "DequantizeLinear"
        or dq.info.domain != q.info.domain
        or dq.inputs[0] != q.outputs[0]
        or [n for n in dq.inputs[1:] if n] != [n for n in q.inputs[1:] if n]
        or _granularity(q) != _granularity(dq)
        or dq.attrs.get("output_dtype")
    ):
        return None
    zp_name = q.inputs[2] if len(q.inputs) > 2 and q.inputs[2] else None
    if q.inputs[1] not in program.constants or (zp_name and zp_name not in program.constants):
        return None  # computed scales: the pair runs as its nodes
    zero_point = program.constants[zp_name].data if zp_name else None
    bounds = _integer_range(q, zero_point)
    if bounds is None:
        return None
    activation = q.inputs[0] not in program.constants
    spec = FakeQuantSpec(*bounds, *_granularity(q), learn_scales, activation)
    inputs = (q.inputs[0], q.inputs[1], *((zp_name,) if zp_name else ()))
    return Fusion(
        FAKE_QUANTIZE, (i,), reader, inputs, frozenset(q.outputs), partial(_compute, spec)
    )
