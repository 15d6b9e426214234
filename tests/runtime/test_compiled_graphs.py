"""A loaded graph reads the model's own weights instead of a second copy of them."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.runtime.compiled_graphs import load_library
from sonnx.runtime.store import store_root
from sonnx.tensor import to_numpy


def _two_products() -> onnx.ModelProto:
    """x @ w1 (a model weight the library keeps as it is) then + bias, relu, @ w2."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((48, 16)).astype(np.float32), "w2")
    bias = numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "bias")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "bias"], ["b"]),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_products",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])],
        [w1, w2, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _library() -> str:
    root = store_root()
    assert root is not None
    (library,) = (root / "graphs").glob("*/*/graph.so")
    return str(library)


def test_a_loaded_graph_reads_the_model_weights_it_froze_not_a_copy() -> None:
    rep = sonnx.prepare(_two_products(), use_graph=True)
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    expected = to_numpy(rep.run([x])[0])
    weights = [t.data for t in rep.tensor_map.values()]
    run = load_library(_library(), torch.device("cpu"), weights)
    shared = {w.data_ptr() for w in weights}
    read = {name: t.data_ptr() in shared for name, t in run.constants.items()}
    assert read and any(read.values()), read
    np.testing.assert_array_equal(run(torch.from_numpy(x))[0].numpy(), expected)
    # Given tensors of other values, the library keeps its own copy.
    alone = load_library(_library(), torch.device("cpu"), [torch.zeros(64, 48), torch.ones(48)])
    assert alone.constants == {}
    np.testing.assert_array_equal(alone(torch.from_numpy(x))[0].numpy(), expected)


def test_a_weight_changed_in_place_after_loading_changes_the_results_as_in_eager() -> None:
    model = _two_products()
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    graph, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    graph.run([x])
    for rep in (graph, eager):
        with torch.no_grad():
            rep.tensor_map["w1"].data.mul_(-0.5)
    np.testing.assert_allclose(
        to_numpy(graph.run([x])[0]), to_numpy(eager.run([x])[0]), rtol=1e-5, atol=1e-5
    )
