"""onnxruntime's own CPU kernels for the single-output ``com.microsoft`` integer nodes torch is
slow at: the u8 x s8 products DynamicQuantizeMatMul and MatMulIntegerToFloat, and the
QOperator-form QGemm, QAttention and the elementwise QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearSoftmax and QLinearConcat.

sonnx's torch paths compute these in float32 or float64 around the integer codes (exact, but
through several full-size temporaries); onnxruntime runs them as integer or table kernels,
1.7x (QLinearSoftmax) to 50x (QGemm at one row) faster at the sizes a quantized CNN or BERT
layer runs (``bench/quantized_ops.py``, ``bench/history.md``). QLinearAveragePool (within 1.5x)
stays on torch, and QLinearWhere (not measured); the standard-domain QLinearConv,
QLinearMatMul and MatMulInteger as well, though onnxruntime is 5-12x faster there (the bridge
is for ``com.microsoft`` operators only).

Each node runs in a single-node session (:mod:`sonnx.operators.quantize.ort_sessions`); a
QGemm's or QAttention's holds its weight, bias and their scales and zero points, and a call
binds the activations and an output of the node's type, made here from the inputs' shapes;
an elementwise node's binds every input (one session serves its kind). In graph mode
the call is the torch custom op ``sonnx::qlinear_ort`` (one extern call; its first argument
names the node's spec, so a graph loaded in a new process rebuilds the session). The
operators' own rules (:class:`QLinearKernel`) decide when a node may be bridged; the bridge's
(:class:`~sonnx.operators.quantize.ort_kernels.KernelChoice`) decide the rest.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from sonnx.engine.extern_ops import extern_op
from sonnx.operators.quantize.ort_kernels import (
    BridgedNode,
    KernelChoice,
    _vectors,
    register_bridge,
)
from sonnx.operators.quantize.ort_sessions import NodeSpec, kernel_for

__all__ = ["QLINEAR_BRIDGED", "QLinearKernel"]

_BINARY = ("A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale",
           "C_zero_point")  # fmt: skip
_UNARY = ("X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point")
_QGEMM = ("A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C", "y_scale",
          "y_zero_point")  # fmt: skip
_DQMM = ("A", "B", "b_scale", "b_zero_point", "bias")
_MITF = ("A", "B", "a_scale", "b_scale", "a_zero_point", "b_zero_point", "bias")
_QATTENTION = ("input", "weight", "bias", "input_scale", "weight_scale", "mask_index",
               "input_zero_point", "weight_zero_point", "past")  # fmt: skip

#: Each bridged operator's input slots and the positions a call binds: the activations, and
#: QAttention's input scale, zero point and mask (a DynamicQuantizeLinear and the model's feed
#: make them at run time); QGemm's A scale and zero point likewise. The elementwise operators
#: bind every input: onnxruntime takes only 0-d scales and zero points there, which a compiled
#: graph hands over as [1] (a call binds them as 0-d views), and one session serves every node
#: of the same attributes and types.
_SLOTS: Mapping[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "DynamicQuantizeMatMul": (_DQMM, (0,)),
    "MatMulIntegerToFloat": (_MITF, (0, 2, 4)),
    "QGemm": (_QGEMM, (0, 1, 2)),
    "QAttention": (_QATTENTION, (0, 3, 5, 6)),
    "QLinearAdd": (_BINARY, tuple(range(8))),
    "QLinearMul": (_BINARY, tuple(range(8))),
    "QLinearSigmoid": (_UNARY, tuple(range(5))),
    "QLinearLeakyRelu": (_UNARY, tuple(range(5))),
    "QLinearGlobalAveragePool": (_UNARY, tuple(range(5))),
    "QLinearSoftmax": (_UNARY, tuple(range(5))),
}
#: The elementwise operators' scale and zero point slots (QGemm and QAttention take [1] too).
_SCALARS: Mapping[str, frozenset[int]] = {
    op: frozenset(range(len(slots))) - ({0, 3} if slots is _BINARY else {0})
    for op, (slots, _) in _SLOTS.items()
    if slots in (_BINARY, _UNARY)
}
#: The operators bridged (QLinearConcat's slots: Y's scale and zero point, then one
#: (tensor, scale, zero point) triple per input, all bound).
QLINEAR_BRIDGED = frozenset(_SLOTS) | {"QLinearConcat"}


def qlinear_spec(op_type: str, attrs: Mapping[str, Any], count: int) -> NodeSpec:
    """The spec of a bridged node: its attributes as the model gives them.

    :param op_type: one of :data:`QLINEAR_BRIDGED`.
    :param attrs: the node's attributes (a list is held as a tuple).
    :param count: how many inputs the node has (QLinearConcat's slots depend on it).
    :returns: the spec (one object for equal attributes and count).
    """
    pairs = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))
    return _spec(op_type, pairs, count if op_type == "QLinearConcat" else 0)


@functools.lru_cache(maxsize=1024)
def _spec(op_type: str, attrs: tuple[tuple[str, Any], ...], count: int) -> NodeSpec:
    if op_type == "QLinearConcat":
        triples = [f"{n}{i}" for i in range((count - 2) // 3) for n in ("X", "X_scale", "X_zp")]
        slots = ("Y_scale", "Y_zero_point", *triples)
        return NodeSpec(op_type, attrs, slots, tuple(range(len(slots))))
    slots, bound = _SLOTS[op_type]
    return NodeSpec(op_type, attrs, slots, bound)


@functools.lru_cache(maxsize=1024)
def _spec_from_key(key: str) -> NodeSpec:
    return _spec(*ast.literal_eval(key))


def _key(spec: NodeSpec) -> str:
    """The custom op's name for ``spec`` (its op type, attributes and input count, as Python
    literals)."""
    count = len(spec.slots) if spec.op_type == "QLinearConcat" else 0
    return repr((spec.op_type, spec.attrs, count))


def _scalar_slots(spec: NodeSpec) -> frozenset[int]:
    """The slots a call binds as 0-d (see :data:`_SCALARS`)."""
    if spec.op_type == "QLinearConcat":
        return frozenset(i for i in range(len(spec.slots)) if i < 2 or (i - 2) % 3)
    return _SCALARS.get(spec.op_type, frozenset())


# ---- each operator's output, from its inputs' shapes and types ------------------------------


def _product_output(attrs: Mapping[str, Any], x: Sequence[Any]) -> tuple[list[Any], torch.dtype]:
    return [*x[0].shape[:-1], x[1].shape[1]], torch.float32


def _qgemm_output(attrs: Mapping[str, Any], x: Sequence[Any]) -> tuple[list[Any], torch.dtype]:
    a, b, y_zp = x[0], x[3], x[8]
    rows = a.shape[1] if attrs.get("transA", 0) else a.shape[0]
    cols = b.shape[0] if attrs.get("transB", 0) else b.shape[1]
    return [rows, cols], torch.float32 if x[7] is None else y_zp.dtype


def _qattention_output(attrs: Mapping[str, Any], x: Sequence[Any]) -> tuple[list[Any], torch.dtype]:
    return [x[0].shape[0], x[0].shape[1], x[1].shape[1] // 3], torch.float32


def _binary_output(attrs: Mapping[str, Any], x: Sequence[Any]) -> tuple[list[Any], torch.dtype]:
    a, b = x[0].shape, x[3].shape
    # torch.broadcast_shapes costs more than onnxruntime's kernel on equal shapes.
    return list(a if a == b else torch.broadcast_shapes(a, b)), x[0].dtype


def _unary_output(attrs: Mapping[str, Any], x: Sequence[Any]) -> tuple[list[Any], torch.dtype]:
    return list(x[0].shape), x[0].dtype


def _concat_output(attrs: Mapping[str, Any], x: Sequence[Any]) -> tuple[list[Any], torch.dtype]:
    parts = [t.shape for t in x[2::3]]
    axis = attrs["axis"] % len(parts[0])
    shape = list(parts[0])
    shape[axis] = sum(p[axis] for p in parts)
    return shape, x[1].dtype


def _pooled_output(attrs: Mapping[str, Any], x: Sequence[Any]) -> tuple[list[Any], torch.dtype]:
    shape = list(x[0].shape)
    spatial = range(1, len(shape) - 1) if attrs.get("channels_last", 0) else range(2, len(shape))
    return [1 if i in spatial else d for i, d in enumerate(shape)], x[0].dtype


_OUTPUT: Mapping[str, Callable[[Mapping[str, Any], Sequence[Any]], tuple[list[Any], torch.dtype]]]
_OUTPUT = {
    "DynamicQuantizeMatMul": _product_output,
    "MatMulIntegerToFloat": _product_output,
    "QGemm": _qgemm_output,
    "QAttention": _qattention_output,
    "QLinearAdd": _binary_output,
    "QLinearMul": _binary_output,
    "QLinearSigmoid": _unary_output,
    "QLinearLeakyRelu": _unary_output,
    "QLinearGlobalAveragePool": _pooled_output,
    "QLinearSoftmax": _unary_output,
    "QLinearConcat": _concat_output,
}


def _call(spec: NodeSpec, inputs: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """The node's output by onnxruntime's kernel, written into a new tensor of its shape and
    type."""
    shape, dtype = _OUTPUT[spec.op_type](dict(spec.attrs), inputs)
    y = torch.empty(shape, dtype=dtype, device=inputs[0].device)
    scalars = _scalar_slots(spec)
    if scalars:
        inputs = [
            x.reshape(()) if i in scalars and x is not None else x for i, x in enumerate(inputs)
        ]
    if y.numel():
        bound = [x if x is None else x.contiguous() for x in (inputs[i] for i in spec.bound)]
        kernel_for(spec, inputs)(bound, y)
    return y


def _qlinear_ort_fake(spec: str, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    found = _spec_from_key(spec)
    shape, dtype = _OUTPUT[found.op_type](dict(found.attrs), inputs)
    return inputs[0].new_empty(shape, dtype=dtype)


@extern_op("qlinear_ort", "(str spec, Tensor?[] inputs) -> Tensor", _qlinear_ort_fake)
def qlinear_ort(spec: str, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    """onnxruntime's kernel for a bridged node as a torch operator (``spec``: the op type and
    attributes, as :func:`_key` writes them; ``inputs``: one per slot)."""
    return _call(_spec_from_key(spec), inputs)


def _eager(node: BridgedNode, inputs: Sequence[Any]) -> torch.Tensor:
    return _call(node.spec, inputs)


def _traced(node: BridgedNode, inputs: Sequence[Any]) -> torch.Tensor:
    return torch.ops.sonnx.qlinear_ort(_key(node.spec), _vectors(inputs))


for _op_type in QLINEAR_BRIDGED:
    register_bridge(_op_type, _eager, _traced)


class QLinearKernel(KernelChoice):
    """A QOperator-form operator whose CPU forward may run onnxruntime's kernel for its node
    (:data:`QLINEAR_BRIDGED`)."""

    def onnxruntime_node(
        self, inputs: Sequence[torch.Tensor | None], fits: bool = True
    ) -> torch.Tensor | None:
        """The node's output by onnxruntime's kernel, or None where the torch path runs: the
        operator's own rule refuses the inputs (``fits`` false: a form onnxruntime computes
        otherwise, or one it rejects), or the bridge's do (:class:`KernelChoice`).

        :param inputs: the node's inputs, one per slot (None where absent).
        :param fits: whether the operator's rule accepts these inputs.
        :returns: the output, or None.
        """
        y = None
        if fits:
            spec = qlinear_spec(self.op_type, getattr(self, "attrs", {}), len(inputs))
            y = self.onnxruntime_outputs(spec, inputs)
        self.kernel_used = f"onnxruntime's {self.op_type}" if y is not None else "torch's"
        return y
