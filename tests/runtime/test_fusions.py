"""Node groups run as one torch call (GELU written as Div/Erf/Add/Mul/Mul): same values and
gradients as node by node, and cuts or requests inside a group still see every node."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sonnx
from sonnx import autograd
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.export_check import ort_session
from tests.onnx.imported_families import bert


def test_exported_gelu_is_found_and_matches_node_by_node() -> None:
    family = bert()
    rep = sonnx.prepare(family.model)
    fusions = [f for f in rep.program.fusions.values() if f.name == "Gelu"]
    assert len(fusions) == 1
    feeds = family.make(3, 1)
    fused = to_numpy(rep.run(feeds)[0])
    np.testing.assert_allclose(fused, ort_session(family.model).run(None, feeds)[0], atol=1e-5)
    # all_outputs runs every node; its final output equals the fused run's
    every = rep.run(feeds, all_outputs=True)
    np.testing.assert_allclose(to_numpy(every[rep.outputs[0]]), fused, rtol=1e-5, atol=1e-6)
    inside = next(iter(fusions[0].intermediates))
    assert inside in every


def test_cuts_and_requests_inside_a_group_run_its_nodes() -> None:
    family = bert()
    rep = sonnx.prepare(family.model)
    (fusion,) = [f for f in rep.program.fusions.values() if f.name == "Gelu"]
    feeds = family.make(2, 0)
    every = rep.run(feeds, all_outputs=True)
    for name in fusion.intermediates:
        (value,) = rep.run(feeds, output=name)
        np.testing.assert_allclose(to_numpy(value), to_numpy(every[name]), rtol=1e-6)
    (tail,) = rep.run(feeds, aux_output=[next(iter(fusion.intermediates))])[1:]
    assert tail.shape == every[next(iter(fusion.intermediates))].shape


def test_fused_and_node_by_node_gradients_agree() -> None:
    family = bert()
    feeds = family.make(2, 0)
    grads = []
    for fused in (True, False):
        rep = sonnx.prepare(family.model)
        if not fused:
            rep.program.unfuse()
        autograd.training = True
        ids, mask = (Tensor(data=feeds[n], requires_grad=False) for n in rep.inputs)
        (logits,) = rep.run([ids, mask])
        loss = autograd.reduce_sum(autograd.mul(logits, logits), keepdims=0)
        grads.append({p.name: to_numpy(g) for p, g in autograd.backward(loss)})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 5
    for name, g in grads[0].items():
        np.testing.assert_allclose(g, grads[1][name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert torch.is_grad_enabled()


def test_matmul_plus_bias_runs_as_linear_and_keeps_matmul_errors() -> None:
    from onnx import TensorProto, helper, numpy_helper

    from sonnx.errors import BadInputError

    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
            helper.make_node("Add", ["b", "xw"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rep = sonnx.prepare(model)
    assert [f.name for f in rep.program.fusions.values()] == ["Linear"]
    for shape in [(2, 4), (2, 5, 4), (4,)]:
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(to_numpy(rep.run([x])[0]), x @ w + b, rtol=1e-5, atol=1e-6)
    with pytest.raises(BadInputError, match="MatMul: the last dimension of A"):
        rep.run([np.zeros((2, 5), np.float32)])
