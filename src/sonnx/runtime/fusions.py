"""Runs of nodes that torch computes in one call: found when a graph is prepared.

Exporters write some functions as several nodes because the target opset lacks them: GELU
before opset 20 is ``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5``. Run node by node,
that is five kernels forward and about fifteen backward; ``torch.nn.functional.gelu`` is one
each way. A :class:`Fusion` records such a run; the program computes it with the one call when
a run goes through the whole group (a cut inside it, or a request for an intermediate value,
runs the nodes as they are). Export is unaffected: it writes the original nodes.

Likewise a ``MatMul`` by a 2-D weight followed by the ``Add`` of a 1-D bias (every exported
``Linear``) runs as ``torch.nn.functional.linear``: one GEMM with the bias fused in, and a
backward that does the same.

Chains of ``Conv`` nodes, each with the BatchNormalization and activation after it, run as
oneDNN calls on channels-last tensors in CPU float32 inference, and as their nodes otherwise:
see :mod:`sonnx.runtime.conv_fusions`.

A DynamicQuantizeLinear with the int8 product it feeds (QAttention, or MatMulInteger and its
scaling) runs as one call where its input needs a gradient, which passes straight through the
rounding: see :mod:`sonnx.runtime.quantized_fusions`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from sonnx import dtypes
from sonnx.runtime.conv_fusions import find_conv_group
from sonnx.runtime.quantized_fusions import KernelCall, find_dynamic_quantization_group
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program_index import ProgramIndex
    from sonnx.runtime.steps import Step


@dataclass(frozen=True)
class Fusion:
    """Steps ``internal`` (skipped) and ``final`` (where the group runs, as ``compute``) of
    one group.

    ``compute`` takes the torch tensors of ``inputs`` and returns the final step's output, or
    None where it declines them (the Conv chain outside CPU float32 inference, a Linear of
    shapes ``F.linear`` does not take): the executor then runs the group's steps one by one
    (the fallback of its :class:`~sonnx.runtime.steps.FusedStep`), as without the fusion.

    A group of independent steps reading one input (:mod:`sonnx.runtime.product_groups`)
    names the values ``compute`` returns, one each, in ``outputs``; it runs at its first step
    (``final``), its later steps ``internal``. Without ``outputs``, ``compute`` returns the
    final step's first output, and ``final`` is the group's last step.

    ``calls`` are operators ``compute`` calls that are none of its steps' own (each with the
    names its inputs read), whose kernels are chosen as the steps' are
    (:class:`~sonnx.runtime.quantized_fusions.KernelCall`)."""

    name: str
    internal: tuple[int, ...]
    final: int
    inputs: tuple[str, ...]
    intermediates: frozenset[str]
    compute: Callable[..., torch.Tensor | tuple[torch.Tensor, ...] | None]
    outputs: tuple[str, ...] = ()
    calls: tuple[KernelCall, ...] = ()

    def made(self, final_outputs: Sequence[str]) -> tuple[str, ...]:
        """The names the group makes: its ``outputs``, else its final step's.

        :param final_outputs: the final step's outputs.
        :returns: the names.
        """
        return self.outputs or tuple(final_outputs)


def _scalar(constants: dict[str, Tensor], name: str) -> float | None:
    t = constants.get(name)
    if t is None or t.data.numel() != 1 or not dtypes.is_float(t.dtype) or t.is_param:
        return None
    if t.data.device.type == "meta":  # no values to read: a graph checked for placement
        return None
    return float(t.data.reshape(()))  # once, when the graph is prepared


def _other(step: Step, name: str) -> str | None:
    """The input of a two-input step that is not ``name`` (None if ``name`` is not one)."""
    if len(step.inputs) != 2 or name not in step.inputs:
        return None
    first, second = step.inputs
    return second if first == name else first


def find_fusions(
    steps: Sequence[Step], constants: dict[str, Tensor], index: ProgramIndex
) -> dict[int, Fusion]:
    """Every fusable group, by the index of its final step.

    :param steps: the program's steps.
    :param constants: the program's constants by name.
    :param index: the producer and readers of each value: a group's intermediate values must
        be read inside the group only (not by a subgraph body, not as a graph output).
    :returns: the groups.
    """
    finders = {
        "Erf": _gelu,
        "MatMul": _linear,
        "Conv": _conv,
        "DynamicQuantizeLinear": _dynamic_quantization,
    }
    found: dict[int, Fusion] = {}
    claimed: set[int] = set()  # the steps of the groups found so far
    for position, step in enumerate(steps):
        finder = finders.get(step.info.op_type)
        fusion = None if finder is None else finder(position, steps, constants, index)
        if fusion is not None and not ({*fusion.internal, fusion.final} & claimed):
            found[fusion.final] = fusion
            claimed.update((*fusion.internal, fusion.final))
    return found


def _conv(
    conv: int, steps: Sequence[Step], constants: dict[str, Tensor], index: ProgramIndex
) -> Fusion | None:
    """A Conv with what follows it (see :mod:`sonnx.runtime.conv_fusions`)."""
    group = find_conv_group(conv, steps, constants, index)
    if group is None:
        return None
    *internal, final = group.steps
    names = frozenset(o for i in internal for o in steps[i].outputs if o)
    return Fusion(group.name, tuple(internal), final, group.inputs, names, group.compute)


def _dynamic_quantization(
    dql: int, steps: Sequence[Step], constants: dict[str, Tensor], index: ProgramIndex
) -> Fusion | None:
    """A DynamicQuantizeLinear with its product (see :mod:`sonnx.runtime.quantized_fusions`)."""
    group = find_dynamic_quantization_group(dql, steps, constants, index)
    if group is None:
        return None
    *internal, final = group.steps
    return Fusion(group.name, tuple(internal), final, group.inputs, group.intermediates,
                  group.compute, calls=group.calls)  # fmt: skip


def _linear(
    matmul: int, steps: Sequence[Step], constants: dict[str, Tensor], index: ProgramIndex
) -> Fusion | None:
    """``Add(MatMul(x, W), b)`` with W a 2-D float weight and b a 1-D one of W's width."""
    if len(steps[matmul].inputs) != 2:
        return None
    x, w = steps[matmul].inputs
    product = steps[matmul].outputs[0]
    add = index.only_reader(product)
    weight = constants.get(w)
    if add is None or weight is None or weight.data.dim() != 2:
        return None
    bias = constants.get(_other(steps[add], product) or "")
    if (
        steps[add].info.op_type != "Add"
        or bias is None
        or bias.data.dim() != 1
        or bias.data.shape[0] != weight.data.shape[1]
        or not dtypes.is_float(weight.dtype)
        or bias.dtype != weight.dtype
        or steps[matmul].foldable
    ):
        return None
    b = _other(steps[add], product)
    return Fusion("Linear", (matmul,), add, (x, w, b), frozenset({product}), _linear_call)


def _linear_call(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """ONNX MatMul keeps W as [in, out]; ``F.linear`` takes [out, in] (a view, no copy).
    Declines what F.linear does not take: the nodes then run, with their checks and errors."""
    if x.dim() < 2 or x.dtype != w.dtype or x.shape[-1] != w.shape[0]:
        return None
    return F.linear(x, w.t(), b)


def _gelu(
    erf: int, steps: Sequence[Step], constants: dict[str, Tensor], index: ProgramIndex
) -> Fusion | None:
    """``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)``, operands in either order."""

    def only_reader(name: str, op_type: str) -> int | None:
        found = index.only_reader(name)
        return None if found is None or steps[found].info.op_type != op_type else found

    div = index.producer.get(steps[erf].inputs[0])
    if div is None or steps[div].info.op_type != "Div" or len(steps[div].inputs) != 2:
        return None
    x, root = steps[div].inputs
    if not math.isclose(_scalar(constants, root) or 0.0, math.sqrt(2.0), rel_tol=1e-6):
        return None
    add = only_reader(steps[erf].outputs[0], "Add")
    if add is None or _scalar(constants, _other(steps[add], steps[erf].outputs[0]) or "") != 1.0:
        return None
    times_x = only_reader(steps[add].outputs[0], "Mul")
    if times_x is None or _other(steps[times_x], steps[add].outputs[0]) != x:
        return None
    half = only_reader(steps[times_x].outputs[0], "Mul")
    if (
        half is None
        or _scalar(constants, _other(steps[half], steps[times_x].outputs[0]) or "") != 0.5
    ):
        return None
    if only_reader(steps[div].outputs[0], "Erf") != erf:
        return None
    group = (div, erf, add, times_x)
    if any(steps[i].foldable for i in (*group, half)):
        return None
    names = frozenset(steps[i].outputs[0] for i in group)
    return Fusion("Gelu", group, half, (x,), names, F.gelu)
