"""com.microsoft RelativePositionBias against T5's bucketed relative bias.

onnxruntime has no CPU kernel for this operator, so the reference is what the transformer
optimizer's fusion replaces: T5's bias (the bucket formula of Hugging Face's
``T5Attention._relative_position_bucket``, rewritten here in NumPy) gathered from the
(num_buckets, num_heads) embedding, with the table passed to the operator as the optimizer
writes it (the transposed values under the original dims).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

import sonnx
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.attention.contrib_bias import RelativePositionBias
from sonnx.tensor import Tensor, to_numpy
from tests.helpers import check_grad

RNG = np.random.default_rng(0)


def t5_buckets(length: int, num_buckets: int, max_distance: int, bidirectional: bool):
    context = np.arange(length)[:, None]
    memory = np.arange(length)[None, :]
    relative = memory - context
    buckets = np.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0) * num_buckets
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)
    max_exact = num_buckets // 2
    large = max_exact + (
        np.log(np.maximum(relative, 1).astype(np.float32) / max_exact)
        / np.float32(math.log(max_distance / max_exact))
        * (num_buckets - max_exact)
    ).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(relative < max_exact, relative, large)


def _model(table: np.ndarray, **attrs) -> onnx.ModelProto:
    node = helper.make_node("RelativePositionBias", ["table", "q", "k"], ["bias"],
                            domain="com.microsoft", **attrs)  # fmt: skip
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.INT64, [1]) for n in ("q", "k")],
        [helper.make_tensor_value_info("bias", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(table, "table")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


@pytest.mark.parametrize("bidirectional", [0, 1])
@pytest.mark.parametrize("length", [7, 150])
def test_relative_position_bias_is_t5s(bidirectional: int, length: int) -> None:
    embedding = RNG.standard_normal((32, 4)).astype(np.float32)  # (num_buckets, num_heads)
    written = np.ascontiguousarray(embedding.T).reshape(embedding.shape)
    model = _model(written, max_distance=128, is_bidirectional=bidirectional)
    lengths = [np.array([length], np.int64)] * 2
    (got,) = sonnx.prepare(model).run(lengths)
    buckets = t5_buckets(length, 32, 128, bool(bidirectional))
    expected = embedding[buckets].transpose(2, 0, 1)[None]
    np.testing.assert_array_equal(to_numpy(got), expected)


def test_relative_position_bias_names_unequal_lengths() -> None:
    model = _model(np.zeros((32, 4), np.float32), max_distance=128)
    with pytest.raises(sonnx.errors.SonnxError, match="equal query_length and key_length"):
        sonnx.prepare(model).run([np.array([3], np.int64), np.array([4], np.int64)])


def test_relative_position_bias_table_gradient() -> None:
    lengths = Tensor(data=np.array([5], np.int64), requires_grad=False)

    def bias(table):
        return RelativePositionBias(max_distance=16, is_bidirectional=1)(table, lengths, lengths)

    check_grad(bias, [RNG.standard_normal((8, 2))])


def test_relative_position_bias_exports_as_it_came() -> None:
    """onnxruntime has no CPU kernel to run the export, so the exported model is checked and
    imported again: the same node, and the same bias."""
    table = Tensor(data=RNG.standard_normal((8, 2)).astype(np.float32), requires_grad=False)
    length = Tensor(data=np.array([5], np.int64), requires_grad=False)
    op = RelativePositionBias(max_distance=16, is_bidirectional=1)
    bias = op(table, length, length)
    model = to_onnx([table, length], [bias])
    onnx.checker.check_model(model)
    (node,) = model.graph.node
    assert (node.op_type, node.domain) == ("RelativePositionBias", "com.microsoft")
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute} == op.attrs
    (again,) = sonnx.prepare(model).run([to_numpy(table), np.array([5], np.int64)])
    np.testing.assert_array_equal(to_numpy(again), to_numpy(bias))
