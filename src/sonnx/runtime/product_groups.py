"""Products reading one input, run by onnxruntime as one session: a program pass.

A transformer's layers multiply one activation by several weights: an MLP's gate and up
projections (and q, k and v where they are separate nodes). Each bridged ``MatMulNBits`` is
one onnxruntime ``Run`` (:mod:`sonnx.operators.quantize.ort_kernels`), and at one row (a decode
step) a run's fixed cost is as large as its product. This pass groups the ``MatMulNBits``
steps that read the same input, with every other input a constant, into one
:class:`~sonnx.runtime.fusions.Fusion` naming its several outputs; the group runs where its
first member runs, as one session holding every member's node
(:mod:`sonnx.operators.quantize.ort_groups`), so each output is what the node computes alone.

The group declines (its steps run one by one, each bridged or not as it decides) where any
member would not run onnxruntime's kernel: a gradient is needed, ``kernels="torch"``, the
input is not float32 on the CPU, onnxruntime is not importable, or it refused the group.
Export writes the original nodes; ``explain()`` names the grouped steps' kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from sonnx.engine.tracing import value_checks
from sonnx.operators.quantize.contrib_nbits import MatMulNBits
from sonnx.operators.quantize.ort_groups import NBITS_WEIGHTS, grouped_products
from sonnx.operators.quantize.ort_kernels import nbits_spec
from sonnx.operators.quantize.ort_sessions import NodeSpec
from sonnx.runtime.fusions import Fusion
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program import Step

__all__ = ["GROUPED_KERNEL", "PRODUCT_GROUP", "find_product_groups"]

#: The name of a group (in ``explain()`` and ``program.fusions``).
PRODUCT_GROUP = "MatMulNBits reading one input"
#: What a grouped member's ``kernel_used`` says (``explain()``'s kernel lines).
GROUPED_KERNEL = "onnxruntime's MatMulNBits (one session per group of products reading one input)"
_ATTRS = ("K", "N", "bits", "block_size", "accuracy_level")


@dataclass(frozen=True)
class _Member:
    """One grouped step: its operator and spec, and where its weight slots (B, scales,
    zero_points, g_idx) and bias are among the group's inputs after A (None: absent)."""

    op: MatMulNBits
    spec: NodeSpec
    attrs: tuple[int, ...]
    slots: tuple[int | None, ...]


def find_product_groups(
    steps: Sequence[Step], constants: dict[str, Tensor], claimed: set[int]
) -> dict[int, Fusion]:
    """The groups of two or more ``MatMulNBits`` steps reading one input as their A, every
    other input of theirs a constant, by the index of their first step.

    :param steps: the program's steps.
    :param constants: the program's constants.
    :param claimed: the steps already in a group (left out).
    :returns: each group, as a fusion naming its members' outputs.
    """
    by_input: dict[str, list[int]] = {}
    for index, step in enumerate(steps):
        if index in claimed or step.foldable or not isinstance(step.op, MatMulNBits):
            continue
        weights = [n for n in step.inputs[1:] if n]
        if step.inputs[0] and step.outputs[0] and all(n in constants for n in weights):
            by_input.setdefault(step.inputs[0], []).append(index)
    return {
        members[0]: _group(a, members, steps) for a, members in by_input.items() if len(members) > 1
    }


def _group(a: str, members: list[int], steps: Sequence[Step]) -> Fusion:
    """The fusion of ``members`` (in step order) reading ``a``."""
    inputs: list[str] = [a]
    found: list[_Member] = []
    for index in members:
        step = steps[index]
        names = [*step.inputs[1:], *[""] * (NBITS_WEIGHTS + 1 - len(step.inputs))]
        slots = []
        for name in names:
            slots.append(len(inputs) - 1 if name else None)
            if name:
                inputs.append(name)
        op = step.op
        attrs = tuple(int(op.attr(x)) for x in _ATTRS)
        found.append(_Member(op, nbits_spec(attrs), attrs, tuple(slots)))
    compute = _group_call(found)
    outputs = tuple(steps[i].outputs[0] for i in members)
    return Fusion(PRODUCT_GROUP, tuple(members[1:]), members[0], tuple(inputs), frozenset(),
                  compute, outputs)  # fmt: skip


def _group_call(members: list[_Member]) -> Callable[..., tuple[torch.Tensor, ...] | None]:
    """The group's call: every member's output (its bias added inside onnxruntime's kernel, as
    the node alone adds it), or None where a member would not run onnxruntime's kernel or
    onnxruntime refused the group."""
    attrs = [v for member in members for v in member.attrs]
    refused: list[bool] = []

    def compute(a: torch.Tensor, *values: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
        if refused or a.dtype != torch.float32:
            return None  # the nodes run (and report a wrong A themselves)
        weights: list[torch.Tensor | None] = []
        for member in members:
            own = [None if p is None else values[p] for p in member.slots]
            if a.shape[-1] != member.attrs[0] or not member.op.bridgeable(member.spec, [a, *own]):
                return None
            weights.extend(own)
        ys = grouped_products(attrs, a, weights, tracing=not value_checks())
        if ys is None:
            refused.append(True)
            return None
        for member in members:
            member.op.kernel_used = GROUPED_KERNEL
        return tuple(ys)

    return compute
