"""The output shape of a MatMulNBits that replaces a MatMul whose weight had leading 1s.

MatMulNBits reads a 2-D weight ``[K, N]`` and writes ``A.shape[:-1] + [N]``. A MatMul of ``A``
by a weight of shape ``[1, ..., 1, K, N]`` (rank ``r``) broadcasts to rank ``max(rank(A), r)``,
so where ``A``'s rank may be lower, onnxruntime's ``MatMulNBitsQuantizer`` reshapes the
product to ``[1] * max(r - max(rank(A), 2), 0) + A.shape[:-1] + [N]``, computed in the graph
(Shape, Gather, Max, Sub, ConstantOfShape, Slice, Concat: opset 11 operators, whatever
``A``'s rank at run time). This writes the same nodes and initializers, with onnxruntime's
names, so that the quantized model is onnxruntime's.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["output_reshape", "static_rank"]


def static_rank(name: str, stack: list[onnx.GraphProto]) -> int | None:
    """The rank of tensor ``name`` where a graph of ``stack`` (innermost first) declares it
    with a shape (an input, a value_info or an output); None where it is undeclared or its
    declaration has no shape.

    :param name: the tensor.
    :param stack: the graphs, outermost first.
    :returns: its rank, or None.
    """
    for graph in reversed(stack):
        for value in [*graph.input, *graph.value_info, *graph.output]:
            if value.name == name:
                tensor_type = value.type.tensor_type
                return len(tensor_type.shape.dim) if tensor_type.HasField("shape") else None
    return None


def output_reshape(
    a_input: str,
    weight_shape: tuple[int, ...],
    owner: onnx.GraphProto,
    prefix: str,
    product: str,
    output: str,
) -> list[onnx.NodeProto]:
    """The nodes reshaping MatMulNBits's ``product`` to the original MatMul's ``output``; their
    constant initializers are appended to ``owner`` (the graph holding the weight).

    :param a_input: the MatMul's first input.
    :param weight_shape: the weight's original shape (leading 1s, then ``K, N``).
    :param owner: the graph the initializers go to.
    :param prefix: the MatMulNBits node's name (or, unnamed, the weight's name + ``_Q<bits>``).
    :param product: MatMulNBits's output.
    :param output: the MatMul's output, written by the last Reshape.
    :returns: the nodes, in order, to follow the MatMulNBits node.
    """
    p = f"{prefix}_{output}"
    constants = {
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "two": np.array(2, np.int64),
        "one_vec": np.array([1], np.int64),
        "rank_b": np.array(len(weight_shape), np.int64),
        "n_vec": np.array([weight_shape[-1]], np.int64),
        "zero_vec": np.array([0], np.int64),
    }
    owner.initializer.extend(numpy_helper.from_array(v, f"{p}_{k}") for k, v in constants.items())
    one_value = helper.make_tensor(f"{p}_one_value", TensorProto.INT64, [1], [1])

    def node(op: str, inputs: list[str], out: str, name: str, **attrs: object) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [out], name=f"{p}_{name}", **attrs)

    def c(key: str) -> str:
        return f"{p}_{key}"

    return [
        node("Shape", [a_input], c("a_shape"), "shape_a"),
        node("Shape", [c("a_shape")], c("a_shape_of_shape"), "shape_of_a_shape"),
        node("Gather", [c("a_shape_of_shape"), c("zero")], c("a_rank"), "gather_rank"),
        # MatMul treats a 1-D A as a matrix: its effective rank is at least 2.
        node("Max", [c("a_rank"), c("two")], c("a_rank_eff"), "max_rank_eff"),
        node("Sub", [c("rank_b"), c("a_rank_eff")], c("extra_raw"), "sub"),
        node("Max", [c("extra_raw"), c("zero")], c("extra_count"), "max"),
        node("Reshape", [c("extra_count"), c("one_vec")], c("extra_count_vec"), "reshape_extra"),
        node(
            "ConstantOfShape",
            [c("extra_count_vec")],
            c("extra_ones"),
            "const_ones",
            value=one_value,
        ),
        node("Sub", [c("a_rank"), c("one")], c("a_rank_m1"), "sub_one"),
        node("Reshape", [c("a_rank_m1"), c("one_vec")], c("a_rank_m1_vec"), "reshape_rank_m1"),
        node(
            "Slice",
            [c("a_shape"), c("zero_vec"), c("a_rank_m1_vec"), c("zero_vec")],
            c("a_prefix_shape"),
            "slice_a_prefix",
        ),
        node(
            "Concat",
            [c("extra_ones"), c("a_prefix_shape"), c("n_vec")],
            c("target_shape"),
            "concat_target",
            axis=0,
        ),
        helper.make_node(
            "Reshape", [product, c("target_shape")], [output], name=f"{p}_reshape_out"
        ),
    ]
