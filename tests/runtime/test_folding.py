"""Steps that read only weights and constants run once and are kept until an input changes."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd, opt
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.imported_families import int8_weights


def _transposed_weight() -> onnx.ModelProto:
    """``y = x @ Transpose(W)``: a step on a trainable weight alone."""
    w = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["W"], ["Wt"], name="transpose", perm=[1, 0]),
            helper.make_node("MatMul", ["x", "Wt"], ["y"], name="matmul"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_dequantized_weight_is_computed_once_and_again_when_it_changes(monkeypatch) -> None:
    family = int8_weights()
    rep = sonnx.prepare(family.model)
    (deq,) = [s for s in rep.steps if s.info.op_type == "DequantizeLinear"]
    assert deq.foldable and not any(s.foldable for s in rep.steps if s is not deq)
    calls = []
    forward = deq.op.forward
    monkeypatch.setattr(deq.op, "forward", lambda *xs: calls.append(1) or forward(*xs))
    feeds = family.make(3, 0)
    first = to_numpy(rep.run(feeds)[0])
    np.testing.assert_array_equal(to_numpy(rep.run(feeds)[0]), first)
    assert len(calls) == 1
    with torch.no_grad():
        rep.constants["W_q"].data.mul_(-1)  # an in-place change bumps the version counter
    changed = to_numpy(rep.run(feeds)[0])
    assert len(calls) == 2 and not np.array_equal(changed, first)


def test_a_step_on_a_trainable_weight_trains_and_is_refreshed_after_the_update() -> None:
    rep = sonnx.prepare(_transposed_weight())
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    before = to_numpy(rep.run([x])[0])
    autograd.training = True
    (y,) = rep.run([x])
    loss = autograd.reduce_mean(autograd.mul(y, y), keepdims=0)
    grads = dict(autograd.backward(loss))
    assert rep.tensor_map["W"] in grads  # the gradient flows through the Transpose
    opt.SGD(lr=0.1).update(rep.tensor_map["W"], grads[rep.tensor_map["W"]])
    autograd.training = False
    after = to_numpy(rep.run([x])[0])
    w = to_numpy(rep.tensor_map["W"])
    np.testing.assert_allclose(after, x @ w.T, rtol=1e-5)
    assert not np.allclose(after, before)


def test_replaced_weight_tensors_are_not_confused_with_the_kept_ones() -> None:
    rep = sonnx.prepare(_transposed_weight())
    x = np.ones((1, 4), np.float32)
    rep.run([x])
    fresh = np.full((3, 4), 2.0, np.float32)
    rep.tensor_map["W"].data = torch.from_numpy(fresh)  # what load_states may do
    np.testing.assert_allclose(to_numpy(rep.run([Tensor(data=x)])[0]), x @ fresh.T)
