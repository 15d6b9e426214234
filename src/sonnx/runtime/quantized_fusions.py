"""Dynamically quantized products fused with the quantization of their input, so that the
float layers before them train.

``quantize_dynamic`` writes each product of a float activation by an int8 weight as a
DynamicQuantizeLinear of the activation feeding either a QAttention, or a MatMulInteger whose
int32 result is cast to float and scaled by the two scales' product::

    x -> DynamicQuantizeLinear -> (codes, scale, zero point) -> QAttention -> y
    x -> DynamicQuantizeLinear -> MatMulInteger(codes, W, zero point, W's zero point)
         -> Cast(float) -> Mul(., Mul(scale, W's scale)) -> y

The codes are integers, so run node by node no gradient reaches ``x``: a loss over such a
model's output reaches only the float parameters after its last product, or none (backward
then reports that the loss carries no gradient graph). A group here computes ``y`` from
``x`` in one call, equal to the nodes bit for bit, whose gradient passes straight through the
rounding (:mod:`sonnx.operators.quantize.straight_through`).

In inference the QAttention group declines (the nodes run as before). The MatMulInteger chain
is what onnxruntime's own optimizer rewrites into one ``DynamicQuantizeMatMul`` (its
DynamicQuantizeMatMul fusion), and what its default session then runs: where the bridge may
run that operator's kernel (:mod:`sonnx.operators.quantize.ort_kernels`: a constant weight,
CPU float32, ``kernels="onnxruntime"``) the group does, one call instead of four nodes; else it
declines too. An int8 weight reaches that kernel as uint8 (``W + 128``, its zero point too):
onnxruntime's uint8 x int8 product saturates pairs of terms in int16 on x86 CPUs without VNNI,
where its uint8 x uint8 one is exact, so the group computes MatMulInteger's exact sums as the
standard's operator must. Export writes the original nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx
import torch

from sonnx.operators.attention.contrib_bert import QAttention
from sonnx.operators.quantize.contrib_integer import (
    DynamicQuantizeMatMul,
    dynamic_quantized_product,
)
from sonnx.operators.quantize.contrib_nbits import KeptWeight
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program import Step
    from sonnx.runtime.program_index import ProgramIndex

__all__ = ["KernelCall", "QuantizedGroup", "find_dynamic_quantization_group"]


@dataclass(frozen=True)
class KernelCall:
    """An operator a group calls that is none of its steps' own, with the names its inputs
    read: :func:`~sonnx.operators.quantize.ort_kernels.choose_kernels` sets its kernels as it
    sets the steps' (it takes anything with an ``op`` and ``inputs``)."""

    op: DynamicQuantizeMatMul
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class QuantizedGroup:
    """A group found: its steps in order (the last computes the group's output), the names it
    reads from outside, the intermediate values it computes, the callable computing its
    output from the tensors of ``inputs`` (None where it declines them), and the operators it
    calls that are not its steps'."""

    name: str
    steps: tuple[int, ...]
    inputs: tuple[str, ...]
    intermediates: frozenset[str]
    compute: Callable[..., torch.Tensor | None]
    calls: tuple[KernelCall, ...] = ()


_FLOAT = onnx.TensorProto.FLOAT
#: What explain() says a chain's MatMulInteger step ran, when the group ran onnxruntime's kernel.
BRIDGED_CHAIN = "onnxruntime's DynamicQuantizeMatMul, for the DynamicQuantizeLinear chain,"

#: QAttention's inputs besides the quantized input, its scale and its zero point: weight,
#: bias, weight_scale, mask_index, weight_zero_point, past.
_QATTENTION_OTHERS = (1, 2, 4, 5, 7, 8)


def find_dynamic_quantization_group(
    dql: int,
    steps: Sequence[Step],
    constants: dict[str, Tensor],
    index: ProgramIndex,
) -> QuantizedGroup | None:
    """The group a DynamicQuantizeLinear step starts, if its outputs feed one QAttention or
    one MatMulInteger chain only (see the module docstring).

    :param dql: the DynamicQuantizeLinear step's index.
    :param steps: the program's steps.
    :param constants: the program's constants (a MatMulInteger's weight must be one).
    :param index: the steps reading each value (subgraph reads included) and the graph's
        outputs (an intermediate the run returns keeps the nodes).
    :returns: the group, or None.
    """
    names = steps[dql].outputs
    if len(names) != 3 or not all(names):
        return None
    first = index.only_reader(names[0])
    if first is None or steps[first].foldable:
        return None
    op_type = steps[first].info.op_type
    if op_type == "QAttention":
        return _qattention(dql, first, steps, index)
    if op_type == "MatMulInteger":
        return _matmul_integer(dql, first, steps, constants, index)
    return None


def _qattention(
    dql: int, attention: int, steps: Sequence[Step], index: ProgramIndex
) -> QuantizedGroup | None:
    """The quantized input, its scale and zero point read by one QAttention only, as its
    inputs 0, 3 and 6, whose only output is its first (no present)."""
    codes, scale, zero_point = steps[dql].outputs
    step, op = steps[attention], steps[attention].op
    inputs = [*step.inputs, *[""] * (9 - len(step.inputs))]
    if (
        not isinstance(op, QAttention)
        or (inputs[0], inputs[3], inputs[6]) != (codes, scale, zero_point)
        or any(index.only_reader(n) != attention for n in (scale, zero_point))
        or any(step.outputs[1:])
    ):
        return None
    others = [inputs[i] for i in _QATTENTION_OTHERS]
    given = [k for k, name in enumerate(others) if name]

    def compute(x: torch.Tensor, *values: torch.Tensor) -> torch.Tensor | None:
        if not (x.requires_grad and torch.is_grad_enabled()):
            return None  # the nodes run: nothing needs the estimator
        args: list[torch.Tensor | None] = [None] * len(_QATTENTION_OTHERS)
        for k, value in zip(given, values, strict=True):
            args[k] = value
        return op.forward_float_input(x, *args)

    x = steps[dql].inputs[0]
    group = frozenset(steps[dql].outputs)
    inputs = (x, *(others[k] for k in given))
    return QuantizedGroup("DynamicQuantizeLinear+QAttention", (dql, attention), inputs, group,
                          compute)  # fmt: skip


def _matmul_integer(
    dql: int,
    matmul: int,
    steps: Sequence[Step],
    constants: dict[str, Tensor],
    index: ProgramIndex,
) -> QuantizedGroup | None:
    """``Mul(Cast(MatMulInteger(codes, W, zero point, W zero point)), Mul(scale, W scale))``
    with W a constant and every intermediate read inside the group only."""
    codes, scale, zero_point = steps[dql].outputs
    step = steps[matmul]
    if (
        len(step.inputs) < 3
        or (step.inputs[0], step.inputs[2]) != (codes, zero_point)
        or step.inputs[1] not in constants
        or index.only_reader(zero_point) != matmul
    ):
        return None
    cast = index.only_reader(step.outputs[0])
    scales = index.only_reader(scale)
    if cast is None or scales is None:
        return None
    to_float = steps[cast].info.op_type == "Cast" and steps[cast].attrs.get("to") == _FLOAT
    final = index.only_reader(steps[cast].outputs[0])
    if not to_float or final is None or steps[scales].info.op_type != "Mul":
        return None
    weight_scale = _other(steps[scales], scale)
    product = steps[scales].outputs[0]
    if (
        weight_scale is None
        or steps[final].info.op_type != "Mul"
        or _other(steps[final], steps[cast].outputs[0]) != product
        or index.only_reader(product) != final
    ):
        return None
    op = step.op
    weight_zero_point = step.inputs[3] if len(step.inputs) > 3 and step.inputs[3] else None
    fused = DynamicQuantizeMatMul()
    fused.name = step.info.name
    unsigned = KeptWeight()  # made once per weight tensor and version in eager runs

    def compute(
        x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, w_zero: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        if w.dim() != 2 or w.dtype not in (torch.int8, torch.uint8):
            return None  # the nodes run and report it
        if x.requires_grad and torch.is_grad_enabled():
            return dynamic_quantized_product(op, x, w, w_scale, w_zero, None)
        b, b_zero = unsigned.get((w, w_zero), lambda: _unsigned(w, w_zero))
        y = fused.bridged((x, b, w_scale, b_zero, None))
        if y is not None:
            op.kernel_used = BRIDGED_CHAIN
        return y  # None: the nodes run

    internal = tuple(sorted((dql, scales, matmul, cast)))
    if max(internal) > final or op is None:
        return None
    intermediates = frozenset((*steps[dql].outputs, product, *step.outputs, steps[cast].outputs[0]))
    inputs = (steps[dql].inputs[0], step.inputs[1], weight_scale)
    inputs += (weight_zero_point,) if weight_zero_point else ()
    call = KernelCall(fused, inputs)
    return QuantizedGroup("DynamicQuantizeLinear+MatMulInteger", (*internal, final), inputs,
                          intermediates, compute, (call,))  # fmt: skip


def _unsigned(
    w: torch.Tensor, zero: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A MatMulInteger weight and zero point (None: 0) as uint8 codes of the same differences:
    int8 codes plus 128 (see the module docstring); a uint8 weight as it is."""
    if w.dtype == torch.uint8:
        return w, zero
    if zero is None:
        zero = torch.zeros((), dtype=torch.int8, device=w.device)
    return (w.to(torch.int16) + 128).to(torch.uint8), (zero.to(torch.int16) + 128).to(torch.uint8)


def _other(step: Step, name: str) -> str | None:
    """The other input of a two-input step reading ``name`` (None if it is no such step)."""
    if len(step.inputs) != 2 or name not in step.inputs:
        return None
    return step.inputs[1] if step.inputs[0] == name else step.inputs[0]
