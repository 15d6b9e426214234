"""Several ``MatMulNBits`` nodes reading one input, run by onnxruntime as one session.

An attention layer's q/k/v projections and an MLP's gate and up projections each multiply the
same activation. Bridged one by one (:mod:`sonnx.operators.quantize.ort_kernels`), each is one
onnxruntime ``Run``, whose fixed cost (16-25 us) and sonnx's call into it (the dispatcher, the
session's look-up, the binding: more again) are as large as a product at one row: a decode
step is mostly those costs (``bench/history.md``, 2026-11-29). A group's session holds every member
node, each onnxruntime's own kernel with its own attributes and initializers, so one ``Run``
binds the shared input once and writes every member's output; each node computes exactly what
it computes alone.

:func:`grouped_products` is the call (eagerly the kernel, while graph mode traces the torch
operator ``sonnx::matmul_nbits_group_ort``, one extern call with several results); the program
pass that finds groups is :mod:`sonnx.runtime.product_groups`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sonnx.engine.extern_ops import extern_op
from sonnx.operators.quantize.ort_kernels import nbits_spec
from sonnx.operators.quantize.ort_sessions import NodeSpec, kernel_for

__all__ = ["NBITS_WEIGHTS", "GroupSpec", "group_spec", "grouped_products"]

#: The constant slots of one member (MatMulNBits' B, scales, zero_points, g_idx and bias).
NBITS_WEIGHTS = 5
#: A member's attributes, in the order :func:`~sonnx.operators.quantize.ort_kernels.nbits_spec`
#: takes them: K, N, bits, block_size, accuracy_level.
_ATTRS = 5


@dataclass(frozen=True)
class GroupSpec(NodeSpec):
    """The session of several ``MatMulNBits`` members reading the one bound slot ``A``: the
    slots are ``A`` then each member's weights (``B_j``, ``scales_j``, ``zero_points_j``,
    ``g_idx_j``, ``bias_j``), the outputs ``y_j``.

    :param members: each member's own spec (its attributes).
    """

    members: tuple[NodeSpec, ...] = ()

    def nodes(self, names: Sequence[str]) -> list[Any]:
        """One node per member, each reading ``A`` and its own weights.

        :param names: the input name of each slot, "" where the input is absent.
        :returns: the ``NodeProto`` list, in member order.
        """
        found = []
        for j, member in enumerate(self.members):
            own = names[1 + NBITS_WEIGHTS * j : 1 + NBITS_WEIGHTS * (j + 1)]
            single = NodeSpec(member.op_type, member.attrs, member.slots, member.bound,
                              (self.outputs[j],))  # fmt: skip
            found.extend(single.nodes([names[0], *own]))
        return found


def group_spec(attrs: Sequence[int]) -> GroupSpec:
    """The spec of a group from its members' attributes, five per member (K, N, bits,
    block_size, accuracy_level; one object for equal attributes).

    :param attrs: the attributes, member after member.
    :returns: the spec.
    """
    return _group_spec(tuple(attrs))


@functools.lru_cache(maxsize=256)
def _group_spec(attrs: tuple[int, ...]) -> GroupSpec:
    count = len(attrs) // _ATTRS
    members = tuple(nbits_spec(attrs[_ATTRS * j : _ATTRS * (j + 1)]) for j in range(count))
    weights = ("B", "scales", "zero_points", "g_idx", "bias")
    slots = ("A", *(f"{w}_{j}" for j in range(count) for w in weights))
    outputs = tuple(f"y_{j}" for j in range(count))
    return GroupSpec("MatMulNBits", (), slots, (0,), outputs, members)


def _run(attrs: Sequence[int], a: torch.Tensor, weights: Sequence[Any]) -> list[torch.Tensor]:
    """Every member's product [..., N_j] by one run of the group's session (A run as
    [M, K])."""
    spec = group_spec(attrs)
    flat = a.reshape(-1, a.shape[-1])
    if not flat.is_contiguous():
        flat = flat.contiguous()
    widths = attrs[1::_ATTRS]
    ys = [torch.empty((flat.shape[0], n), dtype=torch.float32, device=flat.device) for n in widths]
    if flat.shape[0]:
        kernel_for(spec, [flat, *weights])([flat], ys)
    return [y.reshape(*a.shape[:-1], n) for y, n in zip(ys, widths, strict=True)]


def _matmul_nbits_group_ort_fake(
    a: torch.Tensor, weights: Any, attrs: list[int]
) -> list[torch.Tensor]:
    return [a.new_empty((*a.shape[:-1], n)) for n in attrs[1::_ATTRS]]


@extern_op(
    "matmul_nbits_group_ort",
    "(Tensor a, Tensor?[] weights, int[] attrs) -> Tensor[]",
    _matmul_nbits_group_ort_fake,
)
def matmul_nbits_group_ort(
    a: torch.Tensor, weights: list[torch.Tensor | None], attrs: list[int]
) -> list[torch.Tensor]:
    """onnxruntime's MatMulNBits kernel for every member of a group in one run, as a torch
    operator (``weights``: five slots per member; ``attrs``: five per member)."""
    return _run(attrs, a, weights)


def grouped_products(
    attrs: Sequence[int], a: torch.Tensor, weights: Sequence[torch.Tensor | None], tracing: bool
) -> list[torch.Tensor] | None:
    """The members' float32 products by one onnxruntime run, or None where onnxruntime cannot
    build or run the group: its nodes then run one by one, and a node onnxruntime refuses
    warns on its own (:func:`~sonnx.operators.quantize.ort_kernels.bridged_product`), once,
    naming itself; a warning for the group would say it twice.

    :param attrs: the members' attributes, five per member.
    :param a: the shared input [..., K], float32, contiguous or not.
    :param weights: the members' constant slots, five per member (None where absent).
    :param tracing: whether graph mode is tracing (the torch operator is recorded).
    :returns: each member's product [..., N_j], or None.
    """
    if tracing:
        return torch.ops.sonnx.matmul_nbits_group_ort(a, list(weights), list(attrs))
    try:
        return _run(attrs, a, weights)
    except Exception:  # onnxruntime's errors have no common base class
        return None
