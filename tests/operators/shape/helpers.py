"""What the shape tests share: tensors and random arrays to feed, and one ONNX node run by
sonnx and by onnx.reference."""

from __future__ import annotations

import numpy as np
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import sonnx
from sonnx.tensor import Tensor

RNG = np.random.default_rng(0)


def t(a, requires_grad=False) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=requires_grad)


def ints(values) -> Tensor:
    return Tensor(data=torch.tensor(values, dtype=torch.int64), requires_grad=False)


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape)


def one_node_model(op_type, inputs, opset, n_outputs=1, **attrs):
    """A model of one node whose inputs in0, in1, ... take ``inputs``; also the feeds."""
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    feeds = {n: a for n, a in zip(names, inputs, strict=True) if n}
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, feeds


def run_node(op_type, inputs, opset, n_outputs=1, **attrs):
    """Run one ONNX node through sonnx.prepare and the ONNX reference; return both results."""
    model, feeds = one_node_model(op_type, inputs, opset, n_outputs, **attrs)
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = sonnx.prepare(model).run(feeds)
    return [g.numpy() for g in got], expected


def assert_same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-6)
